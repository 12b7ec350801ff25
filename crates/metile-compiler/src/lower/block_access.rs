//! Which loads read a block of a row-major matrix: the shape the tensor
//! memory accelerator copies (`tma.rs`).
//!
//! A load qualifies when it reads a block of a row-major matrix the runtime
//! can describe at launch: a `tile_load`, or a load through a buffer argument
//! plus offsets whose affine form (`affine_index.rs`) is
//! `stride·i + j + stride·r0 + c0`, `i` and `j` the tile's row and column
//! indices, where `stride` is a scalar argument or a constant (the runtime
//! reads it to build the matrix's tensor map). The pointer may be built in
//! several steps and carried through a loop, the offsets written in any
//! order, wrapped by `% M`, clamped by `where` or `min` (each the identity
//! under a uniform test the copy makes first).
//!
//! Its mask, if any, is a conjunction of bounds on the row and column
//! indices, `r0 + i < rows` (`Triton`'s `offs_k[None, :] < K - k * BLOCK_K`
//! is `k * BLOCK_K + j < K`) and `r0 + i >= 0`, with zeros masked off: the
//! tensor copy's zeros outside the matrix stand for them. A bound says which
//! part of the offsets is the row's and which the column's; without one, the
//! terms with the stride as a factor are the row's. An axis without a
//! `>= 0` bound needs its origin to be non-negative, and an axis without an
//! upper bound a tile that does not leave the matrix, tested at run time
//! (`tma.rs`).
//!
//! Offsets that pass the block's own matrix by a whole number of matrices of
//! the mask's rows (`K + head * N * D` read with rows below `N`: attention's
//! per-head K, a batch of a `bmm`) name matrix `head` of a buffer holding
//! them one after another: under the `stacked_tma` switch, a stacked map
//! (a third dimension) copies it, each matrix ending at its own rows.

use super::affine_index::{Affine, RunTest, Term};
use super::Lowering;
use metile_ir::gpu_ir::LaunchValue;
use metile_ir::{BinaryOp, CmpOp, DType, Op, OpKind, ParamKind, ValueId};

/// A load of a block of a row-major matrix.
#[derive(Clone, Debug)]
pub(super) struct BlockLoad {
    /// Tile IR parameter index of the buffer.
    pub(super) buffer: usize,
    /// The block's first row and column (forms without lane indices).
    pub(super) row: Affine,
    pub(super) col: Affine,
    pub(super) stride: LaunchValue,
    /// `None`: the load has no bound on that axis.
    pub(super) rows: Option<LaunchValue>,
    pub(super) cols: Option<LaunchValue>,
    /// Per axis, whether the mask tests `index >= 0` there.
    pub(super) from_zero: [bool; 2],
    /// Which matrix of a buffer holding matrices of `rows` rows one after
    /// another the block lies in (a form without lane indices), where the
    /// offsets go past the block's own matrix by a whole number of them.
    pub(super) depth: Option<Affine>,
    /// What the offsets' form relies on, tested before the copy.
    pub(super) tests: Vec<RunTest>,
}

/// One part of a load's mask: a bound on the row (axis 0) or column index.
pub(super) enum MaskBound {
    /// `origin + index < bound`.
    Below(usize, Affine, LaunchValue),
    /// `origin + index >= 0`.
    FromZero(usize, Affine),
}

/// Where one axis's origin comes from, read off the mask.
#[derive(Default)]
struct AxisBounds {
    origin: Option<Affine>,
    bound: Option<LaunchValue>,
    from_zero: bool,
}

impl AxisBounds {
    /// Takes `origin` as the axis's; a second bound must agree with the first.
    fn agree(&mut self, origin: Affine) -> Option<()> {
        match &self.origin {
            Some(o) => (*o == origin).then_some(()),
            None => {
                self.origin = Some(origin);
                Some(())
            }
        }
    }
}

impl<'f> Lowering<'f> {
    fn def(&self, v: ValueId) -> Option<&'f Op> {
        self.def_op[v.index()]
    }

    /// `v` without the broadcasts around it.
    pub(super) fn unbroadcast(&self, mut v: ValueId) -> ValueId {
        while let Some(op) = self.def(v).filter(|o| matches!(o.kind, OpKind::Broadcast)) {
            v = op.operands[0];
        }
        v
    }

    /// A scalar the runtime knows at launch: an integer argument or constant.
    pub(super) fn launch_value(&self, v: ValueId) -> Option<LaunchValue> {
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

    /// A uniform scalar as a form.
    fn scalar_form(&self, v: ValueId) -> Option<Affine> {
        if !self.f.ty(v).shape.is_empty() {
            return None;
        }
        Some(match self.constant(v) {
            Some(c) => Affine::constant(c),
            None => Affine::scalar(v),
        })
    }

    /// The distinct parts of a mask that is a conjunction (`a & b & ...`),
    /// through broadcasts; a part read twice (`m & m`) is walked once.
    pub(super) fn conjuncts(&self, v: ValueId, parts: &mut Vec<ValueId>) {
        let mut stack = vec![v];
        let mut seen = std::collections::HashSet::new();
        while let Some(v) = stack.pop() {
            let v = self.unbroadcast(v);
            if !seen.insert(v) {
                continue;
            }
            match self.def(v) {
                Some(op) if matches!(op.kind, OpKind::Binary(BinaryOp::And)) => {
                    stack.push(op.operands[1]);
                    stack.push(op.operands[0]);
                }
                _ => parts.push(v),
            }
        }
    }

    /// A mask part that bounds one index of a 2-D tile: a comparison whose
    /// sides differ by that index plus uniform terms.
    pub(super) fn mask_bound(&self, part: ValueId, tests: &mut Vec<RunTest>) -> Option<MaskBound> {
        let op = self.def(part)?;
        let OpKind::Compare(cmp) = op.kind else {
            return None;
        };
        let x = self.affine_at_rank(op.operands[0], 2, tests)?;
        let y = self.affine_at_rank(op.operands[1], 2, tests)?;
        // As `d < 0`.
        let d = match cmp {
            CmpOp::Lt => x.sub(&y)?,
            CmpOp::Le => x.sub(&y)?.sub(&Affine::constant(1))?,
            CmpOp::Gt => y.sub(&x)?,
            CmpOp::Ge => y.sub(&x)?.sub(&Affine::constant(1))?,
            _ => return None,
        };
        let mut lanes = d.lane_terms();
        let lane = lanes.next()?;
        let axis = lane.lane?;
        if lanes.next().is_some() || !lane.factors.is_empty() {
            return None;
        }
        match lane.coeff {
            // `origin + index - bound < 0`: the bound is the one argument
            // subtracted, or else the constant.
            1 => {
                let free = d.origin();
                let mut args = free.terms().iter().filter(|t| {
                    let [f] = t.factors[..] else { return false };
                    t.coeff == -1 && matches!(self.launch_value(f), Some(LaunchValue::Arg(_)))
                });
                let (bound, bound_form) = match (args.next(), args.next()) {
                    (Some(t), None) => (self.launch_value(t.factors[0])?, Affine::scalar(t.factors[0])),
                    (None, _) => {
                        let c = free.constant_term().checked_neg()?;
                        (c > 0).then_some(())?;
                        (LaunchValue::Const(c), Affine::constant(c))
                    }
                    _ => return None,
                };
                Some(MaskBound::Below(axis, free.add(&bound_form)?, bound))
            }
            // `-(origin + index) - 1 < 0`, that is `origin + index >= 0`.
            -1 => Some(MaskBound::FromZero(
                axis,
                d.scale(-1)?.sub(&Affine::constant(1))?.origin(),
            )),
            _ => None,
        }
    }

    /// `form / stride`, where every term divides.
    fn divide(form: &Affine, stride: &StrideForm) -> Option<Affine> {
        let mut out = Affine::default();
        for t in form.terms() {
            let term = match *stride {
                StrideForm::Arg(p) => {
                    let at = t.factors.iter().position(|&f| f == p)?;
                    let mut factors = t.factors.clone();
                    factors.remove(at);
                    Term { factors, ..t.clone() }
                }
                StrideForm::Const(c) => (t.coeff % c == 0).then(|| Term {
                    coeff: t.coeff / c,
                    ..t.clone()
                })?,
            };
            out = out.add(&Affine::from_term(term))?;
        }
        Some(out)
    }

    /// The axis of a block (whose first row and column are `origins`) along
    /// which `t` tests every index: its vector is that axis's
    /// `origin + arange(len)`, as a vector or as a column (row) of the block.
    pub(super) fn tested_axis(
        &self,
        t: &RunTest,
        origins: [&Affine; 2],
        shape: (usize, usize),
    ) -> Option<usize> {
        let form = &t.form;
        let [lane] = form.lane_terms().collect::<Vec<_>>()[..] else {
            return None;
        };
        if lane.coeff != 1 || !lane.factors.is_empty() {
            return None;
        }
        let extents = [shape.0, shape.1];
        let on_axis = |a: usize, len: usize| extents[a] == len && form.origin() == *origins[a];
        match self.f.ty(t.value).shape[..] {
            [len] => (0..2).find(|&a| on_axis(a, len)),
            // A column or row of the tile itself (`offs_m[:, None] % M`):
            // its lane names the axis, and the other axis has one element.
            [rows, cols] => {
                let a = lane.lane?;
                let (len, other) = if a == 0 { (rows, cols) } else { (cols, rows) };
                (other == 1 && on_axis(a, len)).then_some(a)
            }
            _ => None,
        }
    }

    /// The argument or constant that one of `tests` keeps every index along
    /// `axis` below (the `M` of `(r0 + arange(R)) % M`): the copy runs only
    /// where the test holds (or where what lies past it is never observed,
    /// `unobserved_lanes.rs`), so the matrix may be taken to end there (which
    /// gives a repack step its extent).
    fn tested_extent(
        &self,
        tests: &[RunTest],
        axis: usize,
        origins: [&Affine; 2],
        shape: (usize, usize),
    ) -> Option<LaunchValue> {
        tests.iter().find_map(|t| {
            let on_axis = t.cmp == CmpOp::Lt && self.tested_axis(t, origins, shape) == Some(axis);
            on_axis.then(|| self.launch_value(t.bound?)).flatten()
        })
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
                row: self.scalar_form(op.operands[1])?,
                col: self.scalar_form(op.operands[2])?,
                stride: self.launch_value(op.operands[3])?,
                rows: None,
                cols: None,
                from_zero: [false; 2],
                depth: None,
                tests: vec![],
            });
        }
        let OpKind::Load { has_mask, .. } = op.kind else {
            return None;
        };
        if has_mask && !self.masked_off_value_is_zero(op) {
            return None;
        }
        if self.f.ty(op.results[0]).shape[..] != [shape.0, shape.1] {
            return None;
        }
        // The pointer: a buffer argument plus offsets, possibly in steps.
        let mut tests = vec![];
        let mut offsets = Affine::default();
        let mut ptr = self.unbroadcast(op.operands[0]);
        while let Some(add) = self.def(ptr).filter(|o| matches!(o.kind, OpKind::AddPtr)) {
            offsets = offsets.add(&self.affine_at_rank(add.operands[1], 2, &mut tests)?)?;
            ptr = self.unbroadcast(add.operands[0]);
        }
        let buffer = param(ptr)?;
        // Lanes: `stride·i + j`.
        let lane = |axis| {
            let mut terms = offsets.lane_terms().filter(move |t| t.lane == Some(axis));
            let t = terms.next()?;
            terms.next().is_none().then_some(t)
        };
        let (row_lane, col_lane) = (lane(0)?, lane(1)?);
        if offsets.lane_terms().count() != 2 || col_lane.coeff != 1 || !col_lane.factors.is_empty() {
            return None;
        }
        let (stride, stride_form) = match row_lane.factors[..] {
            [] if row_lane.coeff > 0 => (
                LaunchValue::Const(row_lane.coeff),
                StrideForm::Const(row_lane.coeff),
            ),
            [p] if row_lane.coeff == 1 => match self.launch_value(p)? {
                LaunchValue::Arg(i) => (LaunchValue::Arg(i), StrideForm::Arg(p)),
                LaunchValue::Const(_) => return None,
            },
            _ => return None,
        };
        let stride_affine = match stride_form {
            StrideForm::Arg(p) => Affine::scalar(p),
            StrideForm::Const(c) => Affine::constant(c),
        };
        // The mask's bounds.
        let mut axes: [AxisBounds; 2] = Default::default();
        if has_mask {
            let mut parts = vec![];
            self.conjuncts(op.operands[1], &mut parts);
            for part in parts {
                match self.mask_bound(part, &mut tests)? {
                    MaskBound::Below(axis, origin, bound) => {
                        let a = &mut axes[axis];
                        (a.bound.is_none()).then_some(())?;
                        a.agree(origin)?;
                        a.bound = Some(bound);
                    }
                    MaskBound::FromZero(axis, origin) => {
                        axes[axis].agree(origin)?;
                        axes[axis].from_zero = true;
                    }
                }
            }
        }
        // The origins: from the mask where it bounds an axis, else the
        // offsets' terms with the stride as a factor are the row's.
        let free = offsets.origin();
        let (row, col) = match (axes[0].origin.clone(), axes[1].origin.clone()) {
            (Some(row), Some(col)) => (row, col),
            (None, Some(col)) => (Self::divide(&free.sub(&col)?, &stride_form)?, col),
            (Some(row), None) => {
                let col = free.sub(&row.mul(&stride_affine)?)?;
                (row, col)
            }
            (None, None) => {
                let (mut row, mut col) = (Affine::default(), Affine::default());
                for t in free.terms() {
                    let one = Affine::from_term(t.clone());
                    match Self::divide(&one, &stride_form) {
                        Some(r) => row = row.add(&r)?,
                        None => col = col.add(&one)?,
                    }
                }
                (row, col)
            }
        };
        // Every offset accounted for: `stride·row + col` is the free part, or
        // that plus whole matrices of the mask's rows (`stacked_tma`).
        let beyond = free.sub(&row.mul(&stride_affine)?.add(&col)?)?;
        let depth = match beyond.terms() {
            [] => None,
            _ => Some(self.stacked_depth(&beyond, &stride_form, axes[0].bound?)?),
        };
        let extent = |axis: usize| {
            axes[axis]
                .bound
                .or_else(|| self.tested_extent(&tests, axis, [&row, &col], shape))
        };
        Some(BlockLoad {
            rows: extent(0),
            cols: extent(1),
            buffer,
            row,
            col,
            stride,
            from_zero: [axes[0].from_zero, axes[1].from_zero],
            depth,
            tests,
        })
    }

    /// `beyond / (rows · stride)`, the matrix a block lies in where the
    /// offsets pass its own by whole matrices of `rows` rows (`rows` an
    /// argument or a positive constant), while the `stacked_tma` switch is on.
    fn stacked_depth(&self, beyond: &Affine, stride: &StrideForm, rows: LaunchValue) -> Option<Affine> {
        self.a.switches.stacked_tma.then_some(())?;
        let rows = match rows {
            LaunchValue::Arg(i) => StrideForm::Arg(self.f.params.get(i)?.value),
            LaunchValue::Const(c) if c > 0 => StrideForm::Const(c),
            LaunchValue::Const(_) => return None,
        };
        Self::divide(&Self::divide(beyond, stride)?, &rows)
    }
}

/// A matrix's row stride as a factor of the offsets' terms.
enum StrideForm {
    /// A scalar argument (the Tile IR value).
    Arg(ValueId),
    Const(i64),
}
