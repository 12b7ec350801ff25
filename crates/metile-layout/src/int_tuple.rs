//! Integer tuples: an integer, or a tuple of integer tuples.
//!
//! Shapes, strides and coordinates are all integer tuples. This module also
//! holds the two coordinate maps every layout is built from: `idx2crd`
//! (colexicographic unranking of a coordinate within a shape) and `crd2idx`
//! (inner product of a coordinate with strides).

use crate::error::LayoutError;

/// A CuTe `IntTuple`: either a single integer or a tuple of integer tuples.
///
/// A bare integer has rank 1 and depth 0; `(a,b)` has rank 2 and depth 1;
/// `((a,b),c)` has rank 2 and depth 2.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum IntTuple {
    Int(i64),
    Tuple(Vec<IntTuple>),
}

impl From<i64> for IntTuple {
    fn from(value: i64) -> Self {
        IntTuple::Int(value)
    }
}

impl From<Vec<IntTuple>> for IntTuple {
    fn from(elements: Vec<IntTuple>) -> Self {
        IntTuple::Tuple(elements)
    }
}

impl<const N: usize> From<[i64; N]> for IntTuple {
    /// A flat tuple, e.g. `IntTuple::from([4, 8])` is `(4,8)`.
    fn from(values: [i64; N]) -> Self {
        IntTuple::Tuple(values.iter().copied().map(IntTuple::Int).collect())
    }
}

impl IntTuple {
    /// A tuple built from its elements.
    pub fn tuple(elements: impl IntoIterator<Item = IntTuple>) -> Self {
        IntTuple::Tuple(elements.into_iter().collect())
    }

    /// Number of top-level elements; an integer counts as rank 1.
    pub fn rank(&self) -> usize {
        match self {
            IntTuple::Int(_) => 1,
            IntTuple::Tuple(elements) => elements.len(),
        }
    }

    /// Nesting depth: 0 for an integer, 1 + the deepest element for a tuple.
    pub fn depth(&self) -> usize {
        match self {
            IntTuple::Int(_) => 0,
            IntTuple::Tuple(elements) => 1 + elements.iter().map(IntTuple::depth).max().unwrap_or(0),
        }
    }

    pub fn is_int(&self) -> bool {
        matches!(self, IntTuple::Int(_))
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            IntTuple::Int(value) => Some(*value),
            IntTuple::Tuple(_) => None,
        }
    }

    /// Top-level elements. An integer is its own single element, matching
    /// CuTe's `get<0>(x) == x` for integral `x`.
    pub fn elements(&self) -> &[IntTuple] {
        match self {
            IntTuple::Int(_) => std::slice::from_ref(self),
            IntTuple::Tuple(elements) => elements,
        }
    }

    /// The `i`-th top-level element, if it exists.
    pub fn get(&self, i: usize) -> Option<&IntTuple> {
        self.elements().get(i)
    }

    /// All integers in depth-first order.
    pub fn leaves(&self) -> Vec<i64> {
        let mut out = Vec::new();
        self.collect_leaves(&mut out);
        out
    }

    fn collect_leaves(&self, out: &mut Vec<i64>) {
        match self {
            IntTuple::Int(value) => out.push(*value),
            IntTuple::Tuple(elements) => elements.iter().for_each(|e| e.collect_leaves(out)),
        }
    }

    /// Product of all integers, or `None` when it overflows `i64`.
    pub fn product(&self) -> Option<i64> {
        self.leaves()
            .into_iter()
            .try_fold(1i64, |acc, v| acc.checked_mul(v))
    }

    /// True when `other` has exactly the same nesting profile.
    pub fn is_congruent(&self, other: &IntTuple) -> bool {
        match (self, other) {
            (IntTuple::Int(_), IntTuple::Int(_)) => true,
            (IntTuple::Tuple(a), IntTuple::Tuple(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.is_congruent(y))
            }
            _ => false,
        }
    }

    /// CuTe's shape compatibility: `self` is compatible with `other` when they
    /// have the same size and every coordinate of `self` is a valid
    /// coordinate of `other`. An integer is compatible with any shape of the
    /// same size; a tuple only with a tuple of the same rank whose elements
    /// it is element-wise compatible with.
    ///
    /// ```
    /// use metile_layout::IntTuple;
    /// let shape = |s: &str| s.parse::<IntTuple>().unwrap();
    /// assert!(shape("24").is_compatible_with(&shape("((2,2),(3,2))")));
    /// assert!(!shape("(24)").is_compatible_with(&shape("24")));
    /// ```
    pub fn is_compatible_with(&self, other: &IntTuple) -> bool {
        match (self, other) {
            (IntTuple::Int(size), _) => other.product() == Some(*size),
            (IntTuple::Tuple(a), IntTuple::Tuple(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.is_compatible_with(y))
            }
            (IntTuple::Tuple(_), IntTuple::Int(_)) => false,
        }
    }

    /// True when some tuple (at any depth) has no elements.
    pub(crate) fn has_empty_tuple(&self) -> bool {
        match self {
            IntTuple::Int(_) => false,
            IntTuple::Tuple(elements) => {
                elements.is_empty() || elements.iter().any(IntTuple::has_empty_tuple)
            }
        }
    }

    /// Same profile as `self`, with each leaf replaced by `f(leaf)`.
    pub(crate) fn map_leaves(&self, f: &mut impl FnMut(i64) -> i64) -> IntTuple {
        match self {
            IntTuple::Int(value) => IntTuple::Int(f(*value)),
            IntTuple::Tuple(elements) => IntTuple::Tuple(elements.iter().map(|e| e.map_leaves(f)).collect()),
        }
    }
}

/// Compact strides for `shape` with the first leaf fastest (CuTe's
/// `LayoutLeft`): the exclusive prefix product of the leaves, left to right.
/// An extent-1 leaf gets stride 0, as CuTe gives a static extent 1; its
/// coordinate is always 0, so the stride never matters.
pub(crate) fn compact_col_major(shape: &IntTuple) -> IntTuple {
    let mut running = 1i64;
    shape.map_leaves(&mut |extent| {
        let stride = if extent == 1 { 0 } else { running };
        // Saturation is unobservable: the caller validates the layout extent.
        running = running.saturating_mul(extent);
        stride
    })
}

/// Compact strides for `shape` with the last leaf fastest (CuTe's
/// `LayoutRight`): the exclusive prefix product of the leaves, right to left,
/// again with stride 0 for extent-1 leaves.
pub(crate) fn compact_row_major(shape: &IntTuple) -> IntTuple {
    let leaves = shape.leaves();
    let mut strides = vec![0i64; leaves.len()];
    let mut running = 1i64;
    for (slot, extent) in strides.iter_mut().zip(&leaves).rev() {
        *slot = if *extent == 1 { 0 } else { running };
        running = running.saturating_mul(*extent);
    }
    let mut next = strides.into_iter();
    shape.map_leaves(&mut |_| next.next().unwrap_or(0))
}

fn coordinate_mismatch(coord: &IntTuple, shape: &IntTuple) -> LayoutError {
    LayoutError::CoordinateMismatch {
        coord: coord.to_string(),
        shape: shape.to_string(),
    }
}

fn shape_size(shape: &IntTuple) -> Result<i64, LayoutError> {
    if shape.has_empty_tuple() {
        return Err(LayoutError::EmptyTuple { context: "shape" });
    }
    if shape.leaves().iter().any(|&extent| extent < 1) {
        return Err(LayoutError::NonPositiveShape {
            shape: shape.to_string(),
        });
    }
    shape.product().ok_or_else(|| LayoutError::Overflow {
        operation: "size",
        operands: shape.to_string(),
    })
}

/// Converts any coordinate compatible with `shape` into the natural
/// (fully hierarchical) coordinate, congruent with `shape`.
///
/// An integer coordinate is unranked colexicographically: the first mode
/// varies fastest. A tuple coordinate must match the rank of `shape` at that
/// level, and each of its entries is converted within its own mode.
///
/// ```
/// use metile_layout::{idx2crd, IntTuple};
/// let shape: IntTuple = "(3,(2,3))".parse().unwrap();
/// assert_eq!(idx2crd(&IntTuple::Int(16), &shape).unwrap().to_string(), "(1,(1,2))");
/// assert_eq!(idx2crd(&IntTuple::from([1, 5]), &shape).unwrap().to_string(), "(1,(1,2))");
/// ```
pub fn idx2crd(coord: &IntTuple, shape: &IntTuple) -> Result<IntTuple, LayoutError> {
    shape_size(shape)?;
    natural_coord(coord, shape).ok_or_else(|| coordinate_mismatch(coord, shape))
}

/// `idx2crd` on a validated shape; `None` when the coordinate does not fit.
fn natural_coord(coord: &IntTuple, shape: &IntTuple) -> Option<IntTuple> {
    match (coord, shape) {
        (IntTuple::Tuple(parts), IntTuple::Tuple(modes)) => {
            if parts.len() != modes.len() {
                return None;
            }
            parts
                .iter()
                .zip(modes)
                .map(|(c, s)| natural_coord(c, s))
                .collect::<Option<Vec<_>>>()
                .map(IntTuple::Tuple)
        }
        (IntTuple::Tuple(_), IntTuple::Int(_)) => None,
        (IntTuple::Int(index), _) => {
            let size = shape.product()?;
            (0..size).contains(index).then(|| unrank_colex(*index, shape))
        }
    }
}

/// Natural coordinate of an in-range linear index (caller checks the range).
fn unrank_colex(index: i64, shape: &IntTuple) -> IntTuple {
    match shape {
        IntTuple::Int(_) => IntTuple::Int(index),
        IntTuple::Tuple(modes) => {
            let mut rest = index;
            let last = modes.len().saturating_sub(1);
            let parts = modes
                .iter()
                .enumerate()
                .map(|(i, mode)| {
                    // The last mode absorbs the remaining quotient, as in CuTe.
                    let extent = if i == last {
                        i64::MAX
                    } else {
                        mode.product().unwrap_or(i64::MAX)
                    };
                    let part = rest % extent;
                    rest /= extent;
                    unrank_colex(part, mode)
                })
                .collect();
            IntTuple::Tuple(parts)
        }
    }
}

/// Maps a coordinate (any form compatible with `shape`) to an offset: the
/// inner product of its natural coordinate with `stride`.
///
/// ```
/// use metile_layout::{crd2idx, IntTuple};
/// let shape: IntTuple = "(3,(2,3))".parse().unwrap();
/// let stride: IntTuple = "(3,(12,1))".parse().unwrap();
/// assert_eq!(crd2idx(&IntTuple::Int(16), &shape, &stride).unwrap(), 17);
/// ```
pub fn crd2idx(coord: &IntTuple, shape: &IntTuple, stride: &IntTuple) -> Result<i64, LayoutError> {
    if !shape.is_congruent(stride) {
        return Err(LayoutError::NotCongruent {
            shape: shape.to_string(),
            stride: stride.to_string(),
        });
    }
    let natural = idx2crd(coord, shape)?;
    inner_product(&natural, stride).ok_or_else(|| LayoutError::Overflow {
        operation: "crd2idx",
        operands: format!("{coord} in {shape}:{stride}"),
    })
}

/// Colexicographic rank of a coordinate within `shape`: the inverse of
/// `idx2crd`, i.e. `crd2idx` with compact column-major strides.
pub fn colex_index(coord: &IntTuple, shape: &IntTuple) -> Result<i64, LayoutError> {
    crd2idx(coord, shape, &compact_col_major(shape))
}

fn inner_product(natural: &IntTuple, stride: &IntTuple) -> Option<i64> {
    match (natural, stride) {
        (IntTuple::Int(c), IntTuple::Int(d)) => c.checked_mul(*d),
        (IntTuple::Tuple(cs), IntTuple::Tuple(ds)) => cs
            .iter()
            .zip(ds)
            .try_fold(0i64, |acc, (c, d)| acc.checked_add(inner_product(c, d)?)),
        _ => None,
    }
}
