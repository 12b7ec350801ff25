//! Shape ops on distributed layouts: the layout a permuted or reshaped tile has
//! when every element stays in the thread and register that held it, so the
//! op moves no data. A transpose permutes the axes each leaf lies in (a CuTe
//! composition with the axis permutation); a reshape keeps every element's
//! row-major index and only re-expresses the leaves in the new shape, split
//! where a leaf crosses an axis boundary of the new shape.

use super::{row_major_strides, DistLayout, Leaf};

impl DistLayout {
    /// The layout of this tile permuted by `dims` (axis `i` of the result is
    /// axis `dims[i]` of this tile) with every element in its place: leaves
    /// in the same order, each moved to its axis' new position. `None` when
    /// the layout is not axis-separable.
    pub fn permuted(&self, dims: &[usize]) -> Option<DistLayout> {
        let shape: Vec<usize> = dims
            .iter()
            .map(|&d| self.shape.get(d).copied())
            .collect::<Option<_>>()?;
        let (old, new) = (row_major_strides(&self.shape), row_major_strides(&shape));
        let moved = |leaf: &Leaf| -> Option<Leaf> {
            if leaf.stride == 0 {
                return Some(*leaf);
            }
            let a = self.axis_of(*leaf)?;
            let to = dims.iter().position(|&d| d == a)?;
            Some(Leaf {
                extent: leaf.extent,
                stride: leaf.stride / old[a] * new[to],
            })
        };
        let thread: Vec<Leaf> = self.thread.iter().map(moved).collect::<Option<_>>()?;
        let value: Vec<Leaf> = self.value.iter().map(moved).collect::<Option<_>>()?;
        let l = DistLayout::from_leaves(&shape, &thread, &value).ok()?;
        l.is_separable().then(|| l.with_thread_base(self.thread_base))
    }

    /// The layout of this tile reshaped to `shape` (same element count) with
    /// every element in its place, when it is axis-separable in `shape`:
    /// each leaf that runs over the end of an axis is split there (a leaf of
    /// extent `e` and stride `s` is the leaves `(f, s)` and `(e / f, s * f)`
    /// with `s * f` the axis' span, which name the same elements in the same
    /// order). `None` when a leaf cannot be split so.
    pub fn reshaped(&self, shape: &[usize]) -> Option<DistLayout> {
        if shape.iter().product::<usize>() != self.numel() {
            return None;
        }
        let strides = row_major_strides(shape);
        let split = |leaf: &Leaf, out: &mut Vec<Leaf>| -> Option<()> {
            let (mut extent, mut stride) = (leaf.extent, leaf.stride);
            if stride == 0 {
                out.push(*leaf);
                return Some(());
            }
            while extent > 1 {
                let a = (0..shape.len()).find(|&a| {
                    let span = strides[a] * shape[a] as i64;
                    stride >= strides[a] && stride < span && stride % strides[a] == 0
                })?;
                let span = strides[a] * shape[a] as i64;
                if stride * (extent - 1) < span {
                    out.push(Leaf { extent, stride });
                    break;
                }
                if span % stride != 0 || extent % (span / stride) != 0 {
                    return None;
                }
                let inside = span / stride;
                out.push(Leaf {
                    extent: inside,
                    stride,
                });
                extent /= inside;
                stride = span;
            }
            Some(())
        };
        let (mut thread, mut value) = (vec![], vec![]);
        for leaf in &self.thread {
            split(leaf, &mut thread)?;
        }
        for leaf in &self.value {
            split(leaf, &mut value)?;
        }
        // Leaves that each fit an axis may still together run past it (runs of 4
        // two apart in rows of 6): then the coordinates are not per-axis sums.
        let l = DistLayout::from_leaves(shape, &thread, &value).ok()?;
        l.is_separable().then(|| l.with_thread_base(self.thread_base))
    }

    /// True when no thread leaf lies along `axis`: every thread holds whole
    /// lines along it, so taking one position of the axis moves no data.
    pub fn axis_in_registers(&self, axis: usize) -> bool {
        self.thread_coord_terms(axis).is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `(thread, register)` of `a` and `b` names the same element, with
    /// `map` taking `b`'s element index to `a`'s.
    fn same_places(a: &DistLayout, b: &DistLayout, map: impl Fn(i64) -> i64) -> bool {
        a.threads() == b.threads()
            && a.values() == b.values()
            && (0..a.threads()).all(|t| (0..a.values()).all(|v| a.element(t, v) == map(b.element(t, v))))
    }

    fn transpose_index(rows: i64, cols: i64) -> impl Fn(i64) -> i64 {
        // An element (c, r) of the [cols, rows] transpose is (r, c) of the original.
        move |e| (e % rows) * cols + e / rows
    }

    #[test]
    fn a_transpose_keeps_every_element_in_its_register() {
        for (shape, threads) in [
            ([64usize, 32usize], 128usize),
            ([8, 8], 32),
            ([3, 40], 64),
            ([16, 1], 32),
        ] {
            let l = DistLayout::blocked(&shape, threads, 4).unwrap();
            let t = l.permuted(&[1, 0]).unwrap();
            assert_eq!(t.shape(), &[shape[1], shape[0]]);
            assert!(t.is_separable(), "{t}");
            let (r, c) = (shape[0] as i64, shape[1] as i64);
            assert!(same_places(&l, &t, transpose_index(r, c)), "{l} -> {t}");
            assert_eq!(t.permuted(&[1, 0]).unwrap(), l);
        }
    }

    #[test]
    fn a_transpose_restrides_each_leaf_on_its_new_axis() {
        let l = DistLayout::blocked(&[64, 32], 128, 4).unwrap();
        assert_eq!(l.cute().to_string(), "((8,16),(4,4)):((4,32),(1,512))");
        let t = l.permuted(&[1, 0]).unwrap();
        assert_eq!(t.cute().to_string(), "((8,16),(4,4)):((256,1),(64,16))");
    }

    #[test]
    fn a_3d_permutation_moves_leaves_between_axes() {
        let l = DistLayout::blocked(&[4, 6, 8], 64, 4).unwrap();
        let p = l.permuted(&[2, 0, 1]).unwrap();
        assert_eq!(p.shape(), &[8, 4, 6]);
        // Element (k, i, j) of p is (i, j, k) of l.
        let map = |e: i64| {
            let (k, i, j) = (e / 24, (e / 6) % 4, e % 6);
            (i * 6 + j) * 8 + k
        };
        assert!(same_places(&l, &p, map));
    }

    #[test]
    fn reshapes_split_leaves_at_axis_boundaries() {
        for (from, to, threads) in [
            (vec![1024usize], vec![32usize, 32usize], 128usize),
            (vec![32, 32], vec![1024], 128),
            (vec![256], vec![4, 8, 8], 64),
            (vec![128], vec![4, 32], 128),
            (vec![8, 16], vec![2, 64], 32),
        ] {
            let l = DistLayout::blocked(&from, threads, 4).unwrap();
            let r = l.reshaped(&to).unwrap_or_else(|| panic!("{l} to {to:?}"));
            assert!(r.is_separable(), "{r}");
            assert!(same_places(&l, &r, |e| e), "{l} -> {r}");
        }
        // A run of 4 cannot stay whole across rows of 3.
        let l = DistLayout::blocked(&[12], 3, 4).unwrap();
        assert!(l.reshaped(&[4, 3]).is_none());
        // Each leaf fits a row of 6, but threads 4 apart with 4 columns each run past it.
        let l = DistLayout::blocked(&[6, 4], 32, 4).unwrap();
        assert_eq!(l.cute().to_string(), "((4,2,4),(3)):((1,4,0),(8))");
        assert!(l.reshaped(&[4, 6]).is_none());
    }

    #[test]
    fn a_register_axis_is_free_to_take_from() {
        let l = DistLayout::blocked(&[64, 2], 64, 4).unwrap();
        assert!(l.axis_in_registers(1));
        assert!(!l.axis_in_registers(0));
    }
}
