//! Distributed layouts: which thread holds which element of a tile.
//!
//! A [`DistLayout`] is a CuTe layout (from `metile-layout`) of rank 2,
//! `(thread mode, value mode)`, mapping a thread index `t` and a per-thread value
//! index `v` to the tile's row-major linear element index. Because a CuTe layout is
//! linear in its coordinates, `element(t, v) = thread_offset(t) + value_offset(v)`:
//! the thread part is computed once per thread at run time, the value part is a
//! compile-time constant per register. Several `(t, v)` may name the same element
//! (a *replicated* layout, from a stride-0 thread leaf); every element is held by
//! at least one `(t, v)`.
//!
//! Layouts built here are *axis-separable*: every leaf (extent, stride) lies inside
//! one tile axis, so an element's coordinate along an axis is also a thread part
//! plus a constant. That is what lets a reduction drop an axis (a *slice* layout:
//! the axis' value leaves vanish, its thread leaves become replication) and a
//! broadcast add one without moving data.

mod shape;

use metile_layout::{IntTuple, Layout, LayoutError};
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;

/// Blocked layouts already built, by (shape, threads, max_vector): every
/// compilation asks for the default layouts of its few tile shapes, and the
/// layout algebra that builds one costs far more than a copy.
type BlockedKey = (Vec<usize>, usize, usize);

/// Bounds the cache (a process compiles few distinct shapes; this only stops a
/// pathological one from growing it without end).
const BLOCKED_CACHE_LIMIT: usize = 256;

thread_local! {
    static BLOCKED: RefCell<HashMap<BlockedKey, DistLayout>> = RefCell::new(HashMap::new());
}

/// One leaf of a mode: `extent` positions, `stride` apart in the element index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Leaf {
    pub extent: i64,
    pub stride: i64,
}

/// A thread leaf with its position in the thread index: it contributes
/// `((t / position) % extent) * stride`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadTerm {
    pub position: i64,
    pub extent: i64,
    pub stride: i64,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DistLayout {
    shape: Vec<usize>,
    layout: Layout,
    thread: Vec<Leaf>,
    value: Vec<Leaf>,
    value_offsets: Vec<i64>,
    /// The first thread of the layout's threads: `t` in the layout is thread
    /// `thread_base + t` of the threadgroup (non-zero inside `simdgroup_role`).
    thread_base: usize,
}

/// Row-major strides of a shape (the last axis is contiguous).
pub fn row_major_strides(shape: &[usize]) -> Vec<i64> {
    let mut strides = vec![1i64; shape.len()];
    for a in (0..shape.len().saturating_sub(1)).rev() {
        strides[a] = strides[a + 1] * shape[a + 1] as i64;
    }
    strides
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn largest_pow2_divisor(n: usize) -> usize {
    if n == 0 {
        1
    } else {
        1 << n.trailing_zeros()
    }
}

fn mode_layout(leaves: &[Leaf]) -> Result<Layout, LayoutError> {
    if leaves.is_empty() {
        return Layout::vector(1, 0);
    }
    Layout::new(
        IntTuple::tuple(leaves.iter().map(|l| IntTuple::Int(l.extent))),
        IntTuple::tuple(leaves.iter().map(|l| IntTuple::Int(l.stride))),
    )
}

fn leaves_of(mode: &Layout) -> Vec<Leaf> {
    mode.shape()
        .leaves()
        .into_iter()
        .zip(mode.stride().leaves())
        .filter(|&(extent, _)| extent > 1)
        .map(|(extent, stride)| Leaf { extent, stride })
        .collect()
}

impl DistLayout {
    /// A layout from its thread and value leaves (first leaf fastest).
    pub fn from_leaves(shape: &[usize], thread: &[Leaf], value: &[Leaf]) -> Result<DistLayout, LayoutError> {
        let layout = Layout::concat(&[mode_layout(thread)?, mode_layout(value)?])?;
        let value_mode = layout.mode(1)?;
        let value_offsets = (0..value_mode.size())
            .map(|v| value_mode.eval(v))
            .collect::<Result<Vec<i64>, LayoutError>>()?;
        Ok(DistLayout {
            shape: shape.to_vec(),
            thread: leaves_of(&layout.mode(0)?),
            value: leaves_of(&value_mode),
            layout,
            value_offsets,
            thread_base: 0,
        })
    }

    /// The same layout over threads `base .. base + threads()` of the threadgroup.
    pub fn with_thread_base(&self, base: usize) -> DistLayout {
        DistLayout {
            thread_base: base,
            ..self.clone()
        }
    }

    pub fn thread_base(&self) -> usize {
        self.thread_base
    }

    /// The same layout over `threads * copies` threads, the extra ones replicating it.
    pub fn replicated(&self, copies: usize) -> Result<DistLayout, LayoutError> {
        let mut thread = self.thread.clone();
        if copies > 1 {
            thread.push(Leaf {
                extent: copies as i64,
                stride: 0,
            });
        }
        Ok(DistLayout::from_leaves(&self.shape, &thread, &self.value)?.with_thread_base(self.thread_base))
    }

    /// The default layout of a tile: each thread holds runs of up to
    /// `max_vector` contiguous elements of the last axis (a vector access);
    /// consecutive threads take consecutive runs (coalesced), the last axis
    /// first, then earlier axes; what the threads do not cover repeats in the
    /// value mode. Threads beyond the tile's size replicate it. Only sizes that
    /// divide the tile are used, so every shape works without padding.
    pub fn blocked(shape: &[usize], threads: usize, max_vector: usize) -> Result<DistLayout, LayoutError> {
        let key = (shape.to_vec(), threads, max_vector);
        if let Some(l) = BLOCKED.with(|c| c.borrow().get(&key).cloned()) {
            return Ok(l);
        }
        let l = DistLayout::build_blocked(shape, threads, max_vector)?;
        BLOCKED.with(|c| {
            let mut c = c.borrow_mut();
            if c.len() >= BLOCKED_CACHE_LIMIT {
                c.clear();
            }
            c.insert(key, l.clone());
        });
        Ok(l)
    }

    fn build_blocked(shape: &[usize], threads: usize, max_vector: usize) -> Result<DistLayout, LayoutError> {
        let rank = shape.len();
        let numel: usize = shape.iter().product();
        let strides = row_major_strides(shape);
        let last = shape.last().copied().unwrap_or(1);
        let mut vector = largest_pow2_divisor(last).min(max_vector.max(1));
        while vector > 1 && numel / vector < threads {
            vector /= 2;
        }
        let mut remaining = threads.max(1);
        let mut per_axis = vec![1usize; rank];
        let mut thread_leaves = vec![];
        for a in (0..rank).rev() {
            let unit = if a + 1 == rank { vector } else { 1 };
            let t = gcd(shape[a] / unit, remaining);
            per_axis[a] = t;
            remaining /= t;
            if t > 1 {
                thread_leaves.push(Leaf {
                    extent: t as i64,
                    stride: unit as i64 * strides[a],
                });
            }
        }
        if remaining > 1 {
            thread_leaves.push(Leaf {
                extent: remaining as i64,
                stride: 0,
            });
        }
        let mut value_leaves = vec![];
        if vector > 1 {
            value_leaves.push(Leaf {
                extent: vector as i64,
                stride: 1,
            });
        }
        for a in (0..rank).rev() {
            let unit = if a + 1 == rank { vector } else { 1 };
            let covered = unit * per_axis[a];
            let repeats = shape[a] / covered;
            if repeats > 1 {
                value_leaves.push(Leaf {
                    extent: repeats as i64,
                    stride: covered as i64 * strides[a],
                });
            }
        }
        DistLayout::from_leaves(shape, &thread_leaves, &value_leaves)
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn cute(&self) -> &Layout {
        &self.layout
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn threads(&self) -> usize {
        self.thread.iter().map(|l| l.extent as usize).product()
    }

    /// Values (registers) per thread.
    pub fn values(&self) -> usize {
        self.value_offsets.len()
    }

    pub fn value_leaves(&self) -> &[Leaf] {
        &self.value
    }

    /// `value_offset(v)` for every register `v`.
    pub fn value_offsets(&self) -> &[i64] {
        &self.value_offsets
    }

    /// The thread leaves with their positions in the thread index.
    pub fn thread_terms(&self) -> Vec<ThreadTerm> {
        let mut position = 1;
        self.thread
            .iter()
            .map(|l| {
                let term = ThreadTerm {
                    position,
                    extent: l.extent,
                    stride: l.stride,
                };
                position *= l.extent;
                term
            })
            .collect()
    }

    pub fn thread_offset(&self, t: usize) -> i64 {
        self.thread_terms()
            .iter()
            .map(|term| ((t as i64 / term.position) % term.extent) * term.stride)
            .sum()
    }

    pub fn element(&self, t: usize, v: usize) -> i64 {
        self.thread_offset(t) + self.value_offsets[v]
    }

    /// The axis a nonzero stride belongs to, if it lies inside one axis.
    pub fn axis_of(&self, leaf: Leaf) -> Option<usize> {
        let strides = row_major_strides(&self.shape);
        (0..self.shape.len()).find(|&a| {
            let (r, d) = (strides[a], self.shape[a] as i64);
            d > 1
                && leaf.stride >= r
                && leaf.stride < r * d
                && leaf.stride % r == 0
                && leaf.stride * (leaf.extent - 1) < r * d
        })
    }

    /// True when every leaf with a nonzero stride lies inside one axis and the
    /// leaves of each axis together stay inside it (their largest offsets sum
    /// to less than the axis' span), so an element's coordinate along an axis
    /// is the sum of its axis' leaves' parts.
    pub fn is_separable(&self) -> bool {
        let strides = row_major_strides(&self.shape);
        let mut reach = vec![0i64; self.shape.len()];
        for &l in self.thread.iter().chain(&self.value) {
            if l.stride == 0 {
                continue;
            }
            match self.axis_of(l) {
                Some(a) => reach[a] += l.stride * (l.extent - 1),
                None => return false,
            }
        }
        (0..self.shape.len()).all(|a| reach[a] < strides[a] * self.shape[a] as i64)
    }

    /// The same distribution for a shape with the same row-major order (size-1
    /// axes inserted or removed).
    pub fn with_shape(&self, shape: &[usize]) -> DistLayout {
        DistLayout {
            shape: shape.to_vec(),
            ..self.clone()
        }
    }

    /// Re-expresses a leaf of this layout in `new_shape`, where the listed axes
    /// collapse to size 1 (their leaves are dropped by the caller).
    fn restride(&self, leaf: Leaf, new_strides: &[i64]) -> Option<Leaf> {
        if leaf.stride == 0 {
            return Some(leaf);
        }
        let a = self.axis_of(leaf)?;
        let r = row_major_strides(&self.shape)[a];
        Some(Leaf {
            extent: leaf.extent,
            stride: leaf.stride / r * new_strides[a],
        })
    }

    /// The layout of this tile with `axes` collapsed to size 1 (keeping the rank):
    /// their value leaves vanish and their thread leaves replicate. It is both a
    /// reduction's result layout (before the axis is dropped) and the layout a
    /// broadcast source needs for the broadcast to this layout to be free.
    pub fn collapse(&self, axes: &[usize]) -> Result<DistLayout, LayoutError> {
        let mut shape = self.shape.clone();
        for &a in axes {
            shape[a] = 1;
        }
        let new_strides = row_major_strides(&shape);
        let on_axes = |l: &Leaf| l.stride != 0 && self.axis_of(*l).is_some_and(|a| axes.contains(&a));
        let bad = || LayoutError::EmptyTuple {
            context: "a layout that is not axis-separable",
        };
        let thread: Vec<Leaf> = self
            .thread
            .iter()
            .map(|l| {
                if on_axes(l) {
                    Ok(Leaf {
                        extent: l.extent,
                        stride: 0,
                    })
                } else {
                    self.restride(*l, &new_strides).ok_or_else(bad)
                }
            })
            .collect::<Result<_, _>>()?;
        let value: Vec<Leaf> = self
            .value
            .iter()
            .filter(|l| !on_axes(l))
            .map(|l| self.restride(*l, &new_strides).ok_or_else(bad))
            .collect::<Result<_, _>>()?;
        Ok(DistLayout::from_leaves(&shape, &thread, &value)?.with_thread_base(self.thread_base))
    }

    /// A reduction's result layout over `axis` (the axis removed from the shape).
    pub fn slice(&self, axis: usize) -> Result<DistLayout, LayoutError> {
        let collapsed = self.collapse(&[axis])?;
        let mut shape = self.shape.clone();
        shape.remove(axis);
        Ok(collapsed.with_shape(&shape))
    }

    /// This layout broadcast to `shape` (same rank; size-1 axes grow) by giving
    /// every thread all copies along the grown axes: the broadcast is free.
    pub fn extend_to(&self, shape: &[usize]) -> Result<DistLayout, LayoutError> {
        let new_strides = row_major_strides(shape);
        let bad = || LayoutError::EmptyTuple {
            context: "a layout that is not axis-separable",
        };
        let thread: Vec<Leaf> = self
            .thread
            .iter()
            .map(|l| self.restride(*l, &new_strides).ok_or_else(bad))
            .collect::<Result<_, _>>()?;
        let mut value: Vec<Leaf> = self
            .value
            .iter()
            .map(|l| self.restride(*l, &new_strides).ok_or_else(bad))
            .collect::<Result<_, _>>()?;
        for a in (0..shape.len()).rev() {
            if self.shape[a] == 1 && shape[a] > 1 {
                value.push(Leaf {
                    extent: shape[a] as i64,
                    stride: new_strides[a],
                });
            }
        }
        Ok(DistLayout::from_leaves(shape, &thread, &value)?.with_thread_base(self.thread_base))
    }

    /// Per axis, the terms of the thread part of the element's coordinate:
    /// `coord_a(t, v) = sum((t / position) % extent * stride) + value_coords(v)[a]`.
    /// Only for separable layouts.
    pub fn thread_coord_terms(&self, axis: usize) -> Vec<ThreadTerm> {
        let r = row_major_strides(&self.shape)[axis];
        self.thread_terms()
            .into_iter()
            .filter(|t| {
                t.stride != 0
                    && self
                        .axis_of(Leaf {
                            extent: t.extent,
                            stride: t.stride,
                        })
                        .is_some_and(|a| a == axis)
            })
            .map(|t| ThreadTerm {
                stride: t.stride / r,
                ..t
            })
            .collect()
    }

    /// The coordinates of `value_offset(v)` (the value part of every coordinate).
    pub fn value_coords(&self, v: usize) -> Vec<i64> {
        let strides = row_major_strides(&self.shape);
        let mut rest = self.value_offsets[v];
        strides
            .iter()
            .map(|&r| {
                let c = rest / r;
                rest %= r;
                c
            })
            .collect()
    }

    /// Thread leaves with stride 0: threads that differ only there hold the same
    /// elements. A thread whose coordinate is 0 on each of them is the element's
    /// canonical owner (the one that writes it to memory).
    pub fn replication_terms(&self) -> Vec<ThreadTerm> {
        self.thread_terms()
            .into_iter()
            .filter(|t| t.stride == 0)
            .collect()
    }

    /// For every register `v` of `dst`, the register of `src` that holds element
    /// `map(dst element)` in the same thread, when that register index is the
    /// same for every thread: the conversion is then a register copy. `None`
    /// when some thread lacks an element or the register differs by thread.
    pub fn register_map(src: &DistLayout, dst: &DistLayout, map: impl Fn(i64) -> i64) -> Option<Vec<usize>> {
        if src.threads() != dst.threads() || src.thread_base != dst.thread_base {
            return None;
        }
        let mut choice: Vec<Option<usize>> = vec![None; dst.values()];
        let mut held: HashMap<i64, usize> = HashMap::new();
        for t in 0..src.threads() {
            let (sb, db) = (src.thread_offset(t), dst.thread_offset(t));
            held.clear();
            for (u, &o) in src.value_offsets.iter().enumerate() {
                held.entry(sb + o).or_insert(u);
            }
            for (v, &o) in dst.value_offsets.iter().enumerate() {
                let u = *held.get(&map(db + o))?;
                match choice[v] {
                    None => choice[v] = Some(u),
                    Some(c) if c == u => {}
                    Some(_) => return None,
                }
            }
        }
        choice.into_iter().collect()
    }
}

impl fmt::Display for DistLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shape: Vec<String> = self.shape.iter().map(|d| d.to_string()).collect();
        write!(f, "[{}] {}", shape.join(","), self.layout)?;
        if self.thread_base != 0 {
            write!(f, " from thread {}", self.thread_base)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn covers_every_element(l: &DistLayout) -> bool {
        let mut seen = vec![false; l.numel()];
        for t in 0..l.threads() {
            for v in 0..l.values() {
                let e = l.element(t, v);
                if e < 0 || e as usize >= seen.len() {
                    return false;
                }
                seen[e as usize] = true;
            }
        }
        seen.into_iter().all(|s| s)
    }

    #[test]
    fn blocked_1d_gives_each_thread_a_vector_run() {
        let l = DistLayout::blocked(&[256], 64, 4).unwrap();
        assert_eq!(l.cute().to_string(), "((64),(4)):((4),(1))");
        assert_eq!(l.values(), 4);
        assert_eq!(l.element(3, 2), 14);
        assert!(covers_every_element(&l));
    }

    #[test]
    fn blocked_layouts_cover_odd_shapes_and_replicate_small_tiles() {
        for (shape, threads) in [
            (vec![100usize], 128usize),
            (vec![6], 64),
            (vec![3, 256], 96),
            (vec![64, 64], 256),
            (vec![1, 8], 32),
            (vec![5, 7, 3], 64),
            (vec![2048], 128),
        ] {
            let l = DistLayout::blocked(&shape, threads, 4).unwrap();
            assert_eq!(l.threads(), threads, "{l}");
            assert!(covers_every_element(&l), "{l}");
            assert!(l.is_separable(), "{l}");
        }
        let l = DistLayout::blocked(&[8], 32, 4).unwrap();
        assert_eq!(l.replication_terms().len(), 1);
        assert_eq!(l.element(3, 0), l.element(11, 0));
    }

    #[test]
    fn slice_then_broadcast_back_is_a_register_copy() {
        let l = DistLayout::blocked(&[64, 64], 256, 4).unwrap();
        let s = l.collapse(&[1]).unwrap();
        assert_eq!(s.shape(), &[64, 1]);
        assert!(covers_every_element(&s));
        // Broadcast [64,1] -> [64,64]: element (r, c) reads (r, 0) = r.
        let map = DistLayout::register_map(&s, &l, |e| e / 64).unwrap();
        assert_eq!(map.len(), l.values());
        // A row-sliced layout is not a free source for a column-blocked one.
        let rows = DistLayout::blocked(&[64, 1], 256, 4).unwrap();
        assert!(DistLayout::register_map(&rows, &l, |e| e / 64).is_none());
        let extended = rows.extend_to(&[64, 64]).unwrap();
        assert!(covers_every_element(&extended));
        assert!(DistLayout::register_map(&rows, &extended, |e| e / 64).is_some());
    }

    #[test]
    fn coordinates_split_into_thread_and_value_parts() {
        let l = DistLayout::blocked(&[64, 64], 256, 4).unwrap();
        for t in [0usize, 5, 17, 255] {
            for v in 0..l.values() {
                let e = l.element(t, v);
                for (axis, want) in [(0usize, e / 64), (1, e % 64)] {
                    let thread_part: i64 = l
                        .thread_coord_terms(axis)
                        .iter()
                        .map(|term| (t as i64 / term.position) % term.extent * term.stride)
                        .sum();
                    assert_eq!(thread_part + l.value_coords(v)[axis], want);
                }
            }
        }
    }
}
