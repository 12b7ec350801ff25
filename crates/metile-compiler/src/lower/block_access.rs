//! Which loads read a block of a row-major matrix: the shape the tensor
//! memory accelerator copies (`tma.rs`).
//!
//! A load qualifies when it reads a block of a row-major matrix the runtime
//! can describe at launch: a `tile_load`, or a load through
//! `ptr + (r0 + arange(R))[:, None] * stride + (c0 + arange(C))[None, :]`
//! masked by `row < rows` and `col < cols` (a bounded `tile_load`, or the
//! Triton spelling; block pointers and tensor descriptors add `row >= 0` and
//! `col >= 0`, which the tensor copy honours too: it fills the elements at
//! negative coordinates with zeros) with zeros masked off, where `ptr` is a buffer argument
//! and `stride`, `rows` and `cols` are scalar arguments or constants (the
//! runtime reads them to build the matrix's tensor map). Matching looks
//! through broadcasts, the order of sums and products, and pointer sums in
//! several steps.

use super::Lowering;
use metile_ir::gpu_ir::LaunchValue;
use metile_ir::{BinaryOp, CmpOp, DType, Op, OpKind, ParamKind, ValueId};

/// A tile's origin along one axis: a scalar Tile IR value (or none) plus a constant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Coord {
    pub(super) value: Option<ValueId>,
    pub(super) offset: i64,
}

/// A load of a block of a row-major matrix.
#[derive(Clone, Copy, Debug)]
pub(super) struct BlockLoad {
    /// Tile IR parameter index of the buffer.
    pub(super) buffer: usize,
    pub(super) row: Coord,
    pub(super) col: Coord,
    pub(super) stride: LaunchValue,
    /// `None`: the load has no bound on that axis.
    pub(super) rows: Option<LaunchValue>,
    pub(super) cols: Option<LaunchValue>,
}

impl<'f> Lowering<'f> {
    fn def(&self, v: ValueId) -> Option<&'f Op> {
        self.def_op[v.index()]
    }

    /// `v` without the broadcasts around it.
    fn unbroadcast(&self, mut v: ValueId) -> ValueId {
        while let Some(op) = self.def(v).filter(|o| matches!(o.kind, OpKind::Broadcast)) {
            v = op.operands[0];
        }
        v
    }

    /// A scalar the runtime knows at launch: an integer argument or constant.
    fn launch_value(&self, v: ValueId) -> Option<LaunchValue> {
        let v = self.unbroadcast(v);
        if let Some(i) = self.f.params.iter().position(|p| p.value == v) {
            let int = matches!(
                self.f.params[i].kind,
                ParamKind::Scalar(DType::I32 | DType::U32 | DType::I64)
            );
            return int.then_some(LaunchValue::Arg(i));
        }
        self.constant(v).map(LaunchValue::Const)
    }

    /// A uniform scalar as a coordinate.
    fn scalar_coord(&self, v: ValueId) -> Option<Coord> {
        if !self.f.ty(v).shape.is_empty() {
            return None;
        }
        Some(match self.constant(v) {
            Some(offset) => Coord { value: None, offset },
            None => Coord {
                value: Some(v),
                offset: 0,
            },
        })
    }

    /// `c0 + arange(a, a + n)`: the coordinate `c0 + a` and `n`.
    fn index_vector(&self, v: ValueId) -> Option<(Coord, i64)> {
        let op = self.def(v)?;
        match op.kind {
            OpKind::Arange { start, end } => Some((
                Coord {
                    value: None,
                    offset: start,
                },
                end - start,
            )),
            OpKind::Binary(BinaryOp::Add) => {
                let (x, y) = (op.operands[0], op.operands[1]);
                let (range, scalar) = match self.def(x)?.kind {
                    OpKind::Arange { .. } => (x, y),
                    _ => (y, x),
                };
                let OpKind::Arange { start, end } = self.def(range)?.kind else {
                    return None;
                };
                let c = self.scalar_coord(self.unbroadcast(scalar))?;
                Some((
                    Coord {
                        offset: c.offset + start,
                        ..c
                    },
                    end - start,
                ))
            }
            _ => None,
        }
    }

    /// An index vector laid along `axis` of a 2-D tile (`x[:, None]` for rows).
    fn axis_index(&self, v: ValueId, axis: usize) -> Option<(Coord, i64)> {
        let op = self.def(self.unbroadcast(v))?;
        match op.kind {
            OpKind::ExpandDims { axis: new } if new == 1 - axis => self.index_vector(op.operands[0]),
            _ => None,
        }
    }

    /// Splits a sum of offsets into its terms, through broadcasts.
    fn offset_terms(&self, v: ValueId, terms: &mut Vec<ValueId>) {
        let v = self.unbroadcast(v);
        match self.def(v) {
            Some(op) if matches!(op.kind, OpKind::Binary(BinaryOp::Add)) => {
                self.offset_terms(op.operands[0], terms);
                self.offset_terms(op.operands[1], terms);
            }
            _ => terms.push(v),
        }
    }

    /// The row and column of one element `(row, col)` compare of a bounds mask.
    fn bound(&self, v: ValueId) -> Option<(usize, Coord, LaunchValue)> {
        let op = self.def(self.unbroadcast(v))?;
        if !matches!(op.kind, OpKind::Compare(CmpOp::Lt)) {
            return None;
        }
        let bound = self.launch_value(op.operands[1])?;
        (0..2).find_map(|axis| {
            let (c, _) = self.axis_index(op.operands[0], axis)?;
            Some((axis, c, bound))
        })
    }

    /// The parts of a mask that is a conjunction (`a & b & ...`), through broadcasts.
    fn conjuncts(&self, v: ValueId, parts: &mut Vec<ValueId>) {
        let v = self.unbroadcast(v);
        match self.def(v) {
            Some(op) if matches!(op.kind, OpKind::Binary(BinaryOp::And)) => {
                self.conjuncts(op.operands[0], parts);
                self.conjuncts(op.operands[1], parts);
            }
            _ => parts.push(v),
        }
    }

    /// The axis and origin of a `(row or col index) >= 0` part of a mask.
    fn lower_bound(&self, v: ValueId) -> Option<(usize, Coord)> {
        let op = self.def(self.unbroadcast(v))?;
        if !matches!(op.kind, OpKind::Compare(CmpOp::Ge))
            || self.constant(self.unbroadcast(op.operands[1])) != Some(0)
        {
            return None;
        }
        (0..2).find_map(|axis| Some((axis, self.axis_index(op.operands[0], axis)?.0)))
    }

    /// The block a load in a ring reads, when the tensor memory accelerator
    /// can copy it (see the module header).
    pub(super) fn block_load(&self, op: &Op, shape: (usize, usize)) -> Option<BlockLoad> {
        let param = |v: ValueId| {
            let v = self.unbroadcast(v);
            let i = self.f.params.iter().position(|p| p.value == v)?;
            matches!(self.f.params[i].kind, ParamKind::Pointer(_)).then_some(i)
        };
        if let OpKind::TileLoad { .. } = op.kind {
            return Some(BlockLoad {
                buffer: param(op.operands[0])?,
                row: self.scalar_coord(op.operands[1])?,
                col: self.scalar_coord(op.operands[2])?,
                stride: self.launch_value(op.operands[3])?,
                rows: None,
                cols: None,
            });
        }
        let OpKind::Load { has_mask, .. } = op.kind else {
            return None;
        };
        if has_mask && !self.masked_off_value_is_zero(op) {
            return None;
        }
        // The pointer: a buffer argument plus offsets, possibly in steps.
        let mut terms = vec![];
        let mut ptr = self.unbroadcast(op.operands[0]);
        while let Some(add) = self.def(ptr).filter(|o| matches!(o.kind, OpKind::AddPtr)) {
            self.offset_terms(add.operands[1], &mut terms);
            ptr = self.unbroadcast(add.operands[0]);
        }
        let buffer = param(ptr)?;
        let (mut row, mut col, mut stride) = (None, None, None);
        for t in terms {
            let def = self.def(t)?;
            if let Some((c, n)) = self.axis_index(t, 1) {
                (col.is_none() && n == shape.1 as i64).then_some(())?;
                col = Some(c);
            } else if matches!(def.kind, OpKind::Binary(BinaryOp::Mul)) {
                let (x, s) = (def.operands[0], def.operands[1]);
                let ((c, n), s) = match self.axis_index(x, 0) {
                    Some(r) => (r, s),
                    None => (self.axis_index(s, 0)?, x),
                };
                (row.is_none() && n == shape.0 as i64).then_some(())?;
                row = Some(c);
                stride = Some(self.launch_value(s)?);
            } else {
                return None;
            }
        }
        let mut load = BlockLoad {
            buffer,
            row: row?,
            col: col?,
            stride: stride?,
            rows: None,
            cols: None,
        };
        if has_mask {
            let mut parts = vec![];
            self.conjuncts(op.operands[1], &mut parts);
            for part in parts {
                if let Some((axis, c)) = self.lower_bound(part) {
                    let origin = if axis == 0 { load.row } else { load.col };
                    (c == origin).then_some(())?;
                    continue;
                }
                let (axis, c, bound) = self.bound(part)?;
                let slot = if axis == 0 { &mut load.rows } else { &mut load.cols };
                let origin = if axis == 0 { load.row } else { load.col };
                (slot.is_none() && c == origin).then_some(())?;
                *slot = Some(bound);
            }
        }
        Some(load)
    }
}
