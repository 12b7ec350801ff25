//! Absent lanes, made explicit in the Tile IR.
//!
//! A masked load without `other=` yields a tile whose masked-off lanes are
//! *absent*. This pass tracks, for every value, a bool tile of its shape that
//! says which lanes are present (its *presence*), and rewrites the function so
//! that every place the language gives absent lanes a meaning is an ordinary op:
//!
//! - element-wise ops, casts and broadcasts propagate absence: a lane is absent
//!   if an operand's lane is; `where(c, a, b)` is absent where `c` is or where
//!   the operand it picks is (so `where(mask, x, other)` over `x = load(.., mask)`
//!   is fully present, as in Triton);
//! - reductions skip absent lanes: the operand becomes `select(presence, x,
//!   identity)` (0, -inf/lowest, +inf/highest), so a reduction over nothing gives
//!   the identity; scans likewise (0 for `cumsum`, 1 for `cumprod`), and their
//!   results are fully present (each lane is the scan of the present lanes up
//!   to it);
//! - `sort` moves absent lanes to the end of their line: they take a value that
//!   sorts last, and the result's first `count` lanes of each line are present
//!   (`count` = the line's present lanes), the rest absent, so a ragged row
//!   loaded with a mask and stored with the same mask comes out sorted;
//! - a carried variable keeps its previous value where its new value is absent:
//!   a `for` yield becomes `select(presence, new, block_arg)`, and the frontend's
//!   `carry_merge(new, old)` (unrolled iterations and `if` joins) becomes
//!   `select(presence, new, old)`; carried values have no absent lanes;
//! - `device_assert` checks present lanes only: its condition becomes
//!   `select(presence, cond, true)`;
//! - everywhere else a value is observed (stored, printed, `dot` operands, loop
//!   bounds and inits, conditions, shuffles, ...) its absent lanes read 0: `select(presence,
//!   x, 0)`. A masked load's value already reads 0 where it is absent, and a
//!   store whose mask is the value's presence skips those lanes, so neither
//!   needs a select.
//!
//! Masks of loads and stores are observed too (an absent mask lane is false), so
//! a mask computed from absent data never enables an access. Pointers have no
//! absent lanes of their own in carried positions; the addresses a kernel
//! computes are left as it computed them.
//!
//! After this pass no `carry_merge` remains and no later stage knows about
//! absence: the interpreter and every backend run the selects it inserted.

use metile_ir::{
    BinaryOp, Block, CmpOp, DType, Function, Literal, Loc, Op, OpKind, ReduceOp, ScanOp, Type, ValueId,
};

/// Which lanes of a value are present.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Presence {
    /// A bool value of the value's shape, true where the lane is present.
    mask: ValueId,
    /// The value is 0 in every absent lane (a masked load without `other=`, and
    /// what is broadcast or cast from one), so observing it needs no select.
    zero_where_absent: bool,
}

/// Rewrites `f` so that absent lanes are handled by explicit ops; returns
/// whether anything changed.
pub fn resolve_absent_lanes(f: &mut Function) -> bool {
    let n = f.values.len();
    let mut pass = Pass {
        values: std::mem::take(&mut f.values),
        presence: vec![None; n],
        replaced: vec![None; n],
        changed: false,
    };
    let body = std::mem::take(&mut f.body);
    f.body = pass.block(body, None);
    f.values = pass.values;
    pass.changed
}

struct Pass {
    values: Vec<Type>,
    presence: Vec<Option<Presence>>,
    /// `carry_merge` results that turned out to be their `new` operand.
    replaced: Vec<Option<ValueId>>,
    changed: bool,
}

fn zero_literal(d: DType) -> Literal {
    match d {
        DType::Bool => Literal::Bool(false),
        d if d.is_float() => Literal::Float(0.0),
        _ => Literal::Int(0),
    }
}

/// The value a reduction over no lanes gives.
fn identity(op: ReduceOp, d: DType) -> Literal {
    let float = d.is_float();
    match op {
        ReduceOp::Sum | ReduceOp::Xor => zero_literal(d),
        ReduceOp::Max => match d {
            DType::Bool => Literal::Bool(false),
            _ if float => Literal::Float(f64::NEG_INFINITY),
            // The type's lowest value.
            _ => sorts_last(d, true),
        },
        ReduceOp::Min => match d {
            DType::Bool => Literal::Bool(true),
            _ if float => Literal::Float(f64::INFINITY),
            // The type's highest value.
            _ => sorts_last(d, false),
        },
    }
}

/// The value a scan treats an absent lane as.
fn scan_identity(op: ScanOp, d: DType) -> Literal {
    match op {
        ScanOp::Sum => zero_literal(d),
        ScanOp::Prod if d.is_float() => Literal::Float(1.0),
        ScanOp::Prod => Literal::Int(1),
    }
}

/// A value that sorts at the end of a line (at or after every other value):
/// absent lanes take it, so the present values come first, in order. For
/// integers, the type's highest (ascending) or lowest (descending) value, from
/// its width and signedness (a 64-bit unsigned maximum is the literal -1, whose
/// bits it has).
fn sorts_last(d: DType, descending: bool) -> Literal {
    if d.is_float() {
        return Literal::Float(if descending { f64::NEG_INFINITY } else { f64::NAN });
    }
    let bits = 8 * d.size_bytes() as u32;
    let signed = d.is_signed_int();
    Literal::Int(match (descending, signed) {
        (true, false) => 0,
        (true, true) => i64::MIN >> (64 - bits),
        (false, true) => i64::MAX >> (64 - bits),
        (false, false) if bits == 64 => -1,
        (false, false) => (1i64 << bits) - 1,
    })
}

impl Pass {
    /// The lanes of a sort's result that hold present values: along `axis`,
    /// the first `count` lanes of each line, where `count` is the number of
    /// present lanes in that line of `mask`.
    fn leading_lanes(
        &mut self,
        out: &mut Vec<Op>,
        mask: ValueId,
        shape: &[usize],
        axis: usize,
        loc: &Loc,
    ) -> ValueId {
        let i32s = |s: &[usize]| Type::tile(DType::I32, s);
        let counts = self.emit(out, OpKind::Cast, vec![mask], i32s(shape), loc);
        let mut line_shape = shape.to_vec();
        line_shape.remove(axis);
        let reduce_axis = (shape.len() > 1).then_some(axis);
        let reduce = OpKind::Reduce {
            op: ReduceOp::Sum,
            axis: reduce_axis,
        };
        let count = self.emit(out, reduce, vec![counts], i32s(&line_shape), loc);
        let mut kept = shape.to_vec();
        kept[axis] = 1;
        let count = self.emit(out, OpKind::ExpandDims { axis }, vec![count], i32s(&kept), loc);
        let count = self.emit(out, OpKind::Broadcast, vec![count], i32s(shape), loc);
        let len = shape[axis];
        let mut position = self.emit(
            out,
            OpKind::Arange {
                start: 0,
                end: len as i64,
            },
            vec![],
            i32s(&[len]),
            loc,
        );
        for a in 0..shape.len() {
            if a != axis {
                let mut s = self.ty(position).shape.clone();
                s.insert(a, 1);
                position = self.emit(out, OpKind::ExpandDims { axis: a }, vec![position], i32s(&s), loc);
            }
        }
        let position = self.emit(out, OpKind::Broadcast, vec![position], i32s(shape), loc);
        let bools = Type::tile(DType::Bool, shape);
        self.emit(out, OpKind::Compare(CmpOp::Lt), vec![position, count], bools, loc)
    }

    fn ty(&self, v: ValueId) -> &Type {
        &self.values[v.index()]
    }

    fn presence(&self, v: ValueId) -> Option<Presence> {
        self.presence[v.index()]
    }

    fn set(&mut self, v: ValueId, mask: Option<ValueId>, zero_where_absent: bool) {
        self.presence[v.index()] = mask.map(|mask| Presence {
            mask,
            zero_where_absent,
        });
    }

    fn emit(
        &mut self,
        out: &mut Vec<Op>,
        kind: OpKind,
        operands: Vec<ValueId>,
        ty: Type,
        loc: &Loc,
    ) -> ValueId {
        let r = ValueId(self.values.len() as u32);
        self.values.push(ty);
        self.presence.push(None);
        self.replaced.push(None);
        out.push(Op {
            kind,
            operands,
            results: vec![r],
            regions: vec![],
            loc: loc.clone(),
        });
        self.changed = true;
        r
    }

    /// A tile of `ty`'s shape (or a scalar) filled with `lit`.
    fn splat(&mut self, out: &mut Vec<Op>, lit: Literal, ty: &Type, loc: &Loc) -> ValueId {
        let d = ty.dtype().unwrap_or(DType::Bool);
        let c = self.emit(out, OpKind::Constant(lit), vec![], Type::scalar(d), loc);
        if ty.is_scalar() {
            c
        } else {
            self.emit(out, OpKind::Broadcast, vec![c], Type::tile(d, &ty.shape), loc)
        }
    }

    fn select(&mut self, out: &mut Vec<Op>, mask: ValueId, a: ValueId, b: ValueId, loc: &Loc) -> ValueId {
        let ty = self.ty(a).clone();
        self.emit(out, OpKind::Select, vec![mask, a, b], ty, loc)
    }

    /// Lanes present in both masks.
    fn both(
        &mut self,
        out: &mut Vec<Op>,
        a: Option<ValueId>,
        b: Option<ValueId>,
        loc: &Loc,
    ) -> Option<ValueId> {
        match (a, b) {
            (None, m) | (m, None) => m,
            (Some(x), Some(y)) if x == y => Some(x),
            (Some(x), Some(y)) => {
                let ty = self.ty(x).clone();
                Some(self.emit(out, OpKind::Binary(BinaryOp::And), vec![x, y], ty, loc))
            }
        }
    }

    fn mask_of(&self, v: ValueId) -> Option<ValueId> {
        self.presence(v).map(|p| p.mask)
    }

    /// `v` as observed where absence has no meaning: its absent lanes read 0.
    fn observe(&mut self, out: &mut Vec<Op>, v: ValueId, loc: &Loc) -> ValueId {
        match self.presence(v) {
            Some(p) if !p.zero_where_absent && !self.ty(v).is_ptr() => {
                let ty = self.ty(v).clone();
                let zero = self.splat(out, zero_literal(ty.dtype().unwrap_or(DType::Bool)), &ty, loc);
                self.select(out, p.mask, v, zero, loc)
            }
            _ => v,
        }
    }

    fn block(&mut self, block: Block, carried: Option<&[ValueId]>) -> Block {
        let mut out = Vec::with_capacity(block.ops.len());
        for mut op in block.ops {
            for v in &mut op.operands {
                if let Some(r) = self.replaced[v.index()] {
                    *v = r;
                }
            }
            self.op(&mut out, op, carried);
        }
        Block {
            args: block.args,
            ops: out,
        }
    }

    fn observe_operands(&mut self, out: &mut Vec<Op>, op: &mut Op, range: std::ops::Range<usize>) {
        for i in range {
            op.operands[i] = self.observe(out, op.operands[i], &op.loc);
        }
    }

    /// Rewrites one op into `out`. `carried` holds the block arguments a `yield`
    /// of this block feeds back (a loop body), if any.
    fn op(&mut self, out: &mut Vec<Op>, mut op: Op, carried: Option<&[ValueId]>) {
        let loc = op.loc.clone();
        let all = 0..op.operands.len();
        match op.kind {
            OpKind::Load { has_mask, has_other } => {
                if has_mask {
                    self.observe_operands(out, &mut op, 1..2);
                }
                if has_other {
                    self.observe_operands(out, &mut op, 2..3);
                } else {
                    let ptrs = self.mask_of(op.operands[0]);
                    let mask = has_mask.then(|| op.operands[1]);
                    let present = self.both(out, ptrs, mask, &loc);
                    self.set(op.results[0], present, has_mask && ptrs.is_none());
                }
            }
            OpKind::Store { has_mask } => {
                let mask = if has_mask {
                    self.observe_operands(out, &mut op, 2..3);
                    Some(op.operands[2])
                } else {
                    None
                };
                let v = op.operands[1];
                if self.mask_of(v).is_some_and(|m| Some(m) != mask) {
                    op.operands[1] = self.observe(out, v, &loc);
                }
            }
            OpKind::Reduce { op: red, .. } => {
                let x = op.operands[0];
                if let Some(p) = self.presence(x) {
                    if !(red == ReduceOp::Sum && p.zero_where_absent) {
                        let ty = self.ty(x).clone();
                        let id = self.splat(out, identity(red, ty.dtype().unwrap_or(DType::F32)), &ty, &loc);
                        op.operands[0] = self.select(out, p.mask, x, id, &loc);
                    }
                }
            }
            OpKind::Scan { op: scan, .. } => {
                let x = op.operands[0];
                if let Some(p) = self.presence(x) {
                    let zero_is_identity = scan == ScanOp::Sum && p.zero_where_absent;
                    if !zero_is_identity {
                        let ty = self.ty(x).clone();
                        let d = ty.dtype().unwrap_or(DType::F32);
                        let id = self.splat(out, scan_identity(scan, d), &ty, &loc);
                        op.operands[0] = self.select(out, p.mask, x, id, &loc);
                    }
                }
            }
            OpKind::Sort { axis, descending } => {
                let x = op.operands[0];
                if let Some(p) = self.presence(x) {
                    let ty = self.ty(x).clone();
                    let d = ty.dtype().unwrap_or(DType::F32);
                    let last = self.splat(out, sorts_last(d, descending), &ty, &loc);
                    op.operands[0] = self.select(out, p.mask, x, last, &loc);
                    let present = self.leading_lanes(out, p.mask, &ty.shape, axis, &loc);
                    self.set(op.results[0], Some(present), false);
                }
            }
            OpKind::Broadcast
            | OpKind::ExpandDims { .. }
            | OpKind::Permute { .. }
            | OpKind::Reshape
            | OpKind::Take { .. }
            | OpKind::Cast => {
                if let Some(p) = self.presence(op.operands[0]) {
                    let r = op.results[0];
                    let mask = match op.kind {
                        OpKind::Cast => p.mask,
                        ref kind => {
                            let ty = Type::tile(DType::Bool, &self.ty(r).shape);
                            self.emit(out, kind.clone(), vec![p.mask], ty, &loc)
                        }
                    };
                    self.set(r, Some(mask), p.zero_where_absent);
                }
            }
            OpKind::Unary(_)
            | OpKind::Binary(_)
            | OpKind::Compare(_)
            | OpKind::AddPtr
            | OpKind::Fma
            | OpKind::Assume { .. } => {
                let mut present = None;
                for i in all {
                    let m = self.mask_of(op.operands[i]);
                    present = self.both(out, present, m, &loc);
                }
                self.set(op.results[0], present, false);
            }
            OpKind::Select => {
                let (c, a, b) = (op.operands[0], op.operands[1], op.operands[2]);
                let (pa, pb) = (self.mask_of(a), self.mask_of(b));
                let picked = match (pa, pb) {
                    _ if pa == pb => pa,
                    // `where(m, x, y)` with x absent exactly where m is false.
                    (Some(m), None) if m == c => None,
                    (Some(_), None) | (None, Some(_)) | (Some(_), Some(_)) => {
                        let ty = Type::tile(DType::Bool, &self.ty(c).shape);
                        let yes = self.splat(out, Literal::Bool(true), &ty, &loc);
                        let (ma, mb) = (pa.unwrap_or(yes), pb.unwrap_or(yes));
                        Some(self.select(out, c, ma, mb, &loc))
                    }
                    (None, None) => None,
                };
                let pc = self.mask_of(c);
                let present = self.both(out, pc, picked, &loc);
                self.set(op.results[0], present, false);
            }
            OpKind::CarryMerge => {
                let (new, old, r) = (op.operands[0], op.operands[1], op.results[0]);
                self.changed = true;
                match self.presence(new) {
                    Some(p) if !self.ty(new).is_ptr() => {
                        let old = self.observe(out, old, &loc);
                        op.kind = OpKind::Select;
                        op.operands = vec![p.mask, new, old];
                    }
                    _ => {
                        self.replaced[r.index()] = Some(new);
                        return;
                    }
                }
            }
            OpKind::Yield => {
                for i in all {
                    let v = op.operands[i];
                    let Some(p) = self.presence(v) else { continue };
                    op.operands[i] = match carried.and_then(|args| args.get(i)) {
                        Some(&old) if !self.ty(v).is_ptr() => self.select(out, p.mask, v, old, &loc),
                        _ => self.observe(out, v, &loc),
                    };
                }
            }
            OpKind::For { .. } => {
                self.observe_operands(out, &mut op, all);
                let body = std::mem::take(&mut op.regions[0]);
                let args = body.args.get(1..).unwrap_or(&[]).to_vec();
                op.regions[0] = self.block(body, Some(&args));
            }
            OpKind::While => {
                self.observe_operands(out, &mut op, all);
                let cond = std::mem::take(&mut op.regions[0]);
                op.regions[0] = self.block(cond, None);
                let body = std::mem::take(&mut op.regions[1]);
                let args = body.args.clone();
                op.regions[1] = self.block(body, Some(&args));
            }
            // An assert checks the present lanes only (absent ones pass).
            OpKind::Assert { .. } => {
                let c = op.operands[0];
                if let Some(p) = self.presence(c) {
                    let ty = self.ty(c).clone();
                    let yes = self.splat(out, Literal::Bool(true), &ty, &loc);
                    op.operands[0] = self.select(out, p.mask, c, yes, &loc);
                }
            }
            OpKind::If | OpKind::SimdgroupRole { .. } => {
                self.observe_operands(out, &mut op, all);
                for r in &mut op.regions {
                    let region = std::mem::take(r);
                    *r = self.block(region, None);
                }
            }
            // The rest observes its operands and yields fully present results:
            // dot (absent lanes count as 0), tile loads and stores, swizzles,
            // simdgroup exchanges; ops without operands.
            _ => self.observe_operands(out, &mut op, all),
        }
        out.push(op);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_lanes_of_a_sort_take_the_type_extreme() {
        assert_eq!(sorts_last(DType::I32, false), Literal::Int(i64::from(i32::MAX)));
        assert_eq!(sorts_last(DType::I32, true), Literal::Int(i64::from(i32::MIN)));
        assert_eq!(sorts_last(DType::U32, false), Literal::Int(i64::from(u32::MAX)));
        assert_eq!(sorts_last(DType::U32, true), Literal::Int(0));
        assert_eq!(sorts_last(DType::I64, false), Literal::Int(i64::MAX));
        assert_eq!(sorts_last(DType::I64, true), Literal::Int(i64::MIN));
        assert!(matches!(sorts_last(DType::F16, false), Literal::Float(x) if x.is_nan()));
        assert_eq!(sorts_last(DType::BF16, true), Literal::Float(f64::NEG_INFINITY));
    }
}
