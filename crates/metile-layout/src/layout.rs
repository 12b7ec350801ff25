//! The `Layout` type: a shape and a congruent stride, read as a function
//! from coordinates to offsets.

use crate::error::LayoutError;
use crate::int_tuple::{compact_col_major, compact_row_major, crd2idx, IntTuple};

/// A CuTe layout `shape:stride`.
///
/// Invariants, checked by every constructor so that evaluation and the
/// algebra never overflow or divide by zero on a value that got this far:
/// shape and stride are congruent, no tuple is empty, every extent is at least
/// 1, the size fits in `i64`, and so does the largest offset magnitude
/// `sum((extent - 1) * |stride|)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Layout {
    shape: IntTuple,
    stride: IntTuple,
}

impl Layout {
    /// A layout from an explicit shape and stride.
    ///
    /// ```
    /// use metile_layout::{IntTuple, Layout};
    /// let layout = Layout::new(IntTuple::from([2, 4]), IntTuple::from([12, 1])).unwrap();
    /// assert_eq!(layout.to_string(), "(2,4):(12,1)");
    /// ```
    pub fn new(shape: IntTuple, stride: IntTuple) -> Result<Layout, LayoutError> {
        if shape.has_empty_tuple() {
            return Err(LayoutError::EmptyTuple { context: "shape" });
        }
        if stride.has_empty_tuple() {
            return Err(LayoutError::EmptyTuple { context: "stride" });
        }
        if !shape.is_congruent(&stride) {
            return Err(LayoutError::NotCongruent {
                shape: shape.to_string(),
                stride: stride.to_string(),
            });
        }
        let extents = shape.leaves();
        if extents.iter().any(|&extent| extent < 1) {
            return Err(LayoutError::NonPositiveShape {
                shape: shape.to_string(),
            });
        }
        let overflow = || LayoutError::Overflow {
            operation: "layout",
            operands: format!("{shape}:{stride}"),
        };
        shape.product().ok_or_else(overflow)?;
        let max_offset: i128 = extents
            .iter()
            .zip(stride.leaves())
            .map(|(&extent, step)| i128::from(extent - 1) * i128::from(step).abs())
            .sum();
        if max_offset > i128::from(i64::MAX) {
            return Err(overflow());
        }
        Ok(Layout { shape, stride })
    }

    /// The compact layout with CuTe's default strides: the first leaf is
    /// fastest (generalized column-major, `LayoutLeft`). Extent-1 leaves get
    /// stride 0, as in CuTe with static extents.
    ///
    /// ```
    /// use metile_layout::Layout;
    /// let layout = Layout::column_major("(2,(2,2))".parse().unwrap()).unwrap();
    /// assert_eq!(layout.to_string(), "(2,(2,2)):(1,(2,4))");
    /// assert_eq!(Layout::parse("(1,4)").unwrap().to_string(), "(1,4):(0,1)");
    /// ```
    pub fn column_major(shape: IntTuple) -> Result<Layout, LayoutError> {
        let stride = compact_col_major(&shape);
        Layout::new(shape, stride)
    }

    /// The compact layout with the last leaf fastest (`LayoutRight`). For
    /// flat shapes this is row-major; hierarchy is ignored, as in CuTe.
    ///
    /// ```
    /// use metile_layout::Layout;
    /// let layout = Layout::row_major("(2,(2,2))".parse().unwrap()).unwrap();
    /// assert_eq!(layout.to_string(), "(2,(2,2)):(4,(2,1))");
    /// ```
    pub fn row_major(shape: IntTuple) -> Result<Layout, LayoutError> {
        let stride = compact_row_major(&shape);
        Layout::new(shape, stride)
    }

    /// The rank-1 layout `extent:stride`.
    pub fn vector(extent: i64, stride: i64) -> Result<Layout, LayoutError> {
        Layout::new(IntTuple::Int(extent), IntTuple::Int(stride))
    }

    /// Concatenation `(a, b, ...)`: a layout whose modes are the given
    /// layouts (CuTe's `make_layout(a, b, ...)`).
    pub fn concat(parts: &[Layout]) -> Result<Layout, LayoutError> {
        if parts.is_empty() {
            return Err(LayoutError::EmptyTuple {
                context: "layout concatenation",
            });
        }
        let shape = IntTuple::tuple(parts.iter().map(|p| p.shape.clone()));
        let stride = IntTuple::tuple(parts.iter().map(|p| p.stride.clone()));
        Layout::new(shape, stride)
    }

    /// A flat layout from `(extent, stride)` pairs: `1:0` for none, a scalar
    /// layout for one, a flat tuple otherwise.
    pub(crate) fn from_flat_modes(modes: &[(i64, i64)]) -> Result<Layout, LayoutError> {
        match modes {
            [] => Layout::vector(1, 0),
            [(extent, stride)] => Layout::vector(*extent, *stride),
            _ => Layout::new(
                IntTuple::tuple(modes.iter().map(|m| IntTuple::Int(m.0))),
                IntTuple::tuple(modes.iter().map(|m| IntTuple::Int(m.1))),
            ),
        }
    }

    pub fn shape(&self) -> &IntTuple {
        &self.shape
    }

    pub fn stride(&self) -> &IntTuple {
        &self.stride
    }

    /// Number of coordinates in the domain.
    pub fn size(&self) -> i64 {
        // Validated on construction to fit.
        self.shape.product().unwrap_or(i64::MAX)
    }

    /// One past the largest offset magnitude: `L(size-1) + 1` when all strides
    /// are non-negative (CuTe takes absolute strides otherwise).
    pub fn cosize(&self) -> i64 {
        let max_offset: i64 = self
            .flat_modes()
            .iter()
            .map(|&(extent, stride)| (extent - 1).saturating_mul(stride.saturating_abs()))
            .fold(0i64, i64::saturating_add);
        max_offset.saturating_add(1)
    }

    /// Number of top-level modes (1 for a scalar layout).
    pub fn rank(&self) -> usize {
        self.shape.rank()
    }

    /// Nesting depth of the shape (0 for a scalar layout).
    pub fn depth(&self) -> usize {
        self.shape.depth()
    }

    /// True when the shape is a single integer.
    pub fn is_scalar(&self) -> bool {
        self.shape.is_int()
    }

    /// The `i`-th top-level mode as a layout. A scalar layout is its own
    /// mode 0, as in CuTe.
    pub fn mode(&self, i: usize) -> Result<Layout, LayoutError> {
        match (self.shape.get(i), self.stride.get(i)) {
            (Some(shape), Some(stride)) => Ok(Layout {
                shape: shape.clone(),
                stride: stride.clone(),
            }),
            _ => Err(LayoutError::ModeOutOfRange {
                mode: i,
                rank: self.rank(),
                layout: self.to_string(),
            }),
        }
    }

    /// All top-level modes.
    pub fn modes(&self) -> Vec<Layout> {
        self.shape
            .elements()
            .iter()
            .zip(self.stride.elements())
            .map(|(shape, stride)| Layout {
                shape: shape.clone(),
                stride: stride.clone(),
            })
            .collect()
    }

    /// The sub-layout at a hierarchical mode path: `sub_layout(&[1, 0])` is
    /// CuTe's `layout<1,0>(self)`. The empty path is the layout itself.
    pub fn sub_layout(&self, path: &[usize]) -> Result<Layout, LayoutError> {
        path.iter().try_fold(self.clone(), |layout, &i| layout.mode(i))
    }

    /// The layout with the given top-level modes, in that order (CuTe's
    /// `select<I...>`).
    pub fn select(&self, modes: &[usize]) -> Result<Layout, LayoutError> {
        let parts = modes
            .iter()
            .map(|&i| self.mode(i))
            .collect::<Result<Vec<_>, _>>()?;
        Layout::concat(&parts)
    }

    /// Top-level modes `begin..end` (CuTe's `take<B,E>`); the range must be
    /// non-empty.
    pub fn take(&self, begin: usize, end: usize) -> Result<Layout, LayoutError> {
        let modes: Vec<usize> = (begin..end).collect();
        self.select(&modes)
    }

    /// The layout with top-level modes `begin..end` grouped into one nested
    /// mode (CuTe's `group<B,E>`).
    pub fn group(&self, begin: usize, end: usize) -> Result<Layout, LayoutError> {
        let modes = self.modes();
        if begin >= end || end > modes.len() {
            return Err(LayoutError::ModeOutOfRange {
                mode: end.max(begin),
                rank: modes.len(),
                layout: self.to_string(),
            });
        }
        let mut grouped = modes[..begin].to_vec();
        grouped.push(Layout::concat(&modes[begin..end])?);
        grouped.extend_from_slice(&modes[end..]);
        Layout::concat(&grouped)
    }

    /// All leaves as one flat tuple of modes (CuTe's `flatten`); a scalar
    /// layout is returned unchanged.
    pub fn flatten(&self) -> Layout {
        if self.is_scalar() {
            return self.clone();
        }
        let shape = IntTuple::tuple(self.shape.leaves().into_iter().map(IntTuple::Int));
        let stride = IntTuple::tuple(self.stride.leaves().into_iter().map(IntTuple::Int));
        Layout { shape, stride }
    }

    /// Leaves as `(extent, stride)` pairs in colexicographic order.
    pub(crate) fn flat_modes(&self) -> Vec<(i64, i64)> {
        self.shape
            .leaves()
            .into_iter()
            .zip(self.stride.leaves())
            .collect()
    }

    /// Evaluates the layout at a linear index in `[0, size)`: the index is
    /// unranked colexicographically (first mode fastest) into a natural
    /// coordinate, whose inner product with the strides is the result.
    ///
    /// ```
    /// use metile_layout::Layout;
    /// let layout: Layout = "(2,(2,2)):(4,(2,1))".parse().unwrap();
    /// let offsets: Vec<i64> = (0..8).map(|i| layout.eval(i).unwrap()).collect();
    /// assert_eq!(offsets, [0, 4, 2, 6, 1, 5, 3, 7]);
    /// ```
    pub fn eval(&self, index: i64) -> Result<i64, LayoutError> {
        let size = self.size();
        if index < 0 || index >= size {
            return Err(LayoutError::IndexOutOfRange { index, size });
        }
        crd2idx(&IntTuple::Int(index), &self.shape, &self.stride)
    }

    /// Evaluates the layout at a coordinate of any form compatible with its
    /// shape: a linear index, a coordinate per top-level mode, or a fully
    /// hierarchical (natural) coordinate.
    ///
    /// ```
    /// use metile_layout::{IntTuple, Layout};
    /// let layout: Layout = "(3,(2,3)):(3,(12,1))".parse().unwrap();
    /// assert_eq!(layout.eval_coord(&IntTuple::from([1, 5])).unwrap(), 17);
    /// assert_eq!(layout.eval_coord(&"(1,(1,2))".parse().unwrap()).unwrap(), 17);
    /// ```
    pub fn eval_coord(&self, coord: &IntTuple) -> Result<i64, LayoutError> {
        crd2idx(coord, &self.shape, &self.stride)
    }
}
