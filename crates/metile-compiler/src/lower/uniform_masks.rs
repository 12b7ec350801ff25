//! Uniform tests for whole masks: a mask built from bounds checks on index
//! tiles (`rows < M`, `(k + cols) < K`, and their `&`) is true on every lane
//! exactly when a few scalar comparisons hold, e.g. `row0 + BLOCK - 1 < M`. A
//! masked access then branches once, uniformly, between the unmasked (vector)
//! path and the per-lane path, so interior tiles pay nothing for masks.
//!
//! An index tile is described as `base + offset` where `base` is a uniform
//! `i32` and every lane's `offset` is a compile-time integer in `[lo, hi]`
//! (aranges, broadcasts, sums, products by constants). The kernel computes
//! lanes with wrapping `i32` arithmetic, which equals the exact value modulo
//! 2^32; the test therefore also checks, in `i64`, that `base + lo` and
//! `base + hi` lie in `i32` range, so no lane wrapped and every lane's exact
//! value lies between them. A test that cannot be built is `None`: the
//! per-lane path alone is emitted, as before. A test walks each value once
//! (`Memo`), so masks and indices that read a value several times (`m & m`,
//! `x + x` repeated) cost time linear in their size.

use super::{Home, Lowering};
use metile_ir::gpu_ir::*;
use metile_ir::{BinaryOp, CmpOp, DType, Elem, Literal, OpKind, ValueId};
use std::collections::HashMap;

/// What one test's walk has found, so that a value read several times is
/// walked once: the GPU values it made lie at the same place in the code.
#[derive(Default)]
struct Memo {
    masks: HashMap<ValueId, Option<GpuValue>>,
    spans: HashMap<ValueId, Option<Span>>,
}

/// `base + offset`, `offset` in `[lo, hi]` on every lane.
#[derive(Clone, Copy)]
struct Span {
    base: GpuValue,
    lo: i64,
    hi: i64,
}

impl<'f> Lowering<'f> {
    /// A uniform bool that holds only when every lane of `mask` is true.
    pub(super) fn mask_all_true(&mut self, mask: ValueId) -> Option<GpuValue> {
        self.mask_all_true_in(mask, &mut Memo::default())
    }

    /// `walk(v)`, or what it gave when `memo`'s `table` last met `v`: each
    /// value is walked once (`m & m`, `x + x` repeated would otherwise cost
    /// twice per level).
    fn memoized<T: Copy>(
        &mut self,
        v: ValueId,
        memo: &mut Memo,
        table: fn(&mut Memo) -> &mut HashMap<ValueId, Option<T>>,
        walk: fn(&mut Self, ValueId, &mut Memo) -> Option<T>,
    ) -> Option<T> {
        if let Some(&known) = table(memo).get(&v) {
            return known;
        }
        let found = walk(self, v, memo);
        table(memo).insert(v, found);
        found
    }

    /// [`Lowering::mask_all_true`], each value of the mask walked once.
    fn mask_all_true_in(&mut self, mask: ValueId, memo: &mut Memo) -> Option<GpuValue> {
        self.memoized(mask, memo, |m| &mut m.masks, Self::mask_all_true_uncached)
    }

    fn mask_all_true_uncached(&mut self, mask: ValueId, memo: &mut Memo) -> Option<GpuValue> {
        if let Some(Home::Uniform(x)) = self.homes[mask.index()] {
            return Some(x);
        }
        let op = self.def_op[mask.index()]?;
        match op.kind {
            // A lane of these is a lane of the operand: all true when all of it is.
            OpKind::Broadcast
            | OpKind::ExpandDims { .. }
            | OpKind::Permute { .. }
            | OpKind::Reshape
            | OpKind::Take { .. } => self.mask_all_true_in(op.operands[0], memo),
            OpKind::Binary(BinaryOp::And) => {
                let a = self.mask_all_true_in(op.operands[0], memo)?;
                let b = self.mask_all_true_in(op.operands[1], memo)?;
                Some(self.binary(BinaryOp::And, a, b))
            }
            OpKind::Compare(cmp) => {
                let (x, y) = (op.operands[0], op.operands[1]);
                let (x, y, cmp) = if self.is_uniform(y) {
                    (x, y, cmp)
                } else {
                    (y, x, swapped(cmp)?)
                };
                let bound = self.uniform_i32(y)?;
                let span = self.span(x, memo)?;
                self.span_compare(span, cmp, bound)
            }
            _ => None,
        }
    }

    /// A uniform bool that holds only when every lane of the `i32` tile `v`
    /// compares `cmp` to the uniform `bound`.
    pub(super) fn every_lane_compares(
        &mut self,
        v: ValueId,
        cmp: CmpOp,
        bound: GpuValue,
    ) -> Option<GpuValue> {
        let span = self.span(v, &mut Memo::default())?;
        self.span_compare(span, cmp, bound)
    }

    fn uniform_i32(&self, v: ValueId) -> Option<GpuValue> {
        match (self.homes[v.index()].as_ref()?, self.f.ty(v).elem) {
            (Home::Uniform(x), Elem::Scalar(DType::I32)) => Some(*x),
            _ => None,
        }
    }

    /// `v` as a span, each value walked once per `memo`.
    fn span(&mut self, v: ValueId, memo: &mut Memo) -> Option<Span> {
        self.memoized(v, memo, |m| &mut m.spans, Self::span_uncached)
    }

    fn span_uncached(&mut self, v: ValueId, memo: &mut Memo) -> Option<Span> {
        if let Some(base) = self.uniform_i32(v) {
            return Some(Span { base, lo: 0, hi: 0 });
        }
        if self.f.ty(v).elem != Elem::Scalar(DType::I32) {
            return None;
        }
        let op = self.def_op[v.index()]?;
        match op.kind {
            OpKind::Arange { start, end } => Some(Span {
                base: self.const_i32(0),
                lo: start,
                hi: end - 1,
            }),
            OpKind::Broadcast
            | OpKind::ExpandDims { .. }
            | OpKind::Permute { .. }
            | OpKind::Reshape
            | OpKind::Take { .. } => self.span(op.operands[0], memo),
            OpKind::Binary(b @ (BinaryOp::Add | BinaryOp::Sub)) => {
                let x = self.span(op.operands[0], memo)?;
                let y = self.span(op.operands[1], memo)?;
                let base = self.binary(b, x.base, y.base);
                let (lo, hi) = match b {
                    BinaryOp::Add => (x.lo.checked_add(y.lo)?, x.hi.checked_add(y.hi)?),
                    _ => (x.lo.checked_sub(y.hi)?, x.hi.checked_sub(y.lo)?),
                };
                Some(Span { base, lo, hi })
            }
            OpKind::Binary(BinaryOp::Mul) => {
                let (x, c) = match (self.constant(op.operands[1]), self.constant(op.operands[0])) {
                    (Some(c), _) => (op.operands[0], c),
                    (None, Some(c)) => (op.operands[1], c),
                    _ => return None,
                };
                let s = self.span(x, memo)?;
                let cv = self.const_i32(i32::try_from(c).ok()?);
                let base = self.binary(BinaryOp::Mul, s.base, cv);
                let (a, b) = (s.lo.checked_mul(c)?, s.hi.checked_mul(c)?);
                Some(Span {
                    base,
                    lo: a.min(b),
                    hi: a.max(b),
                })
            }
            _ => None,
        }
    }

    /// The integer constant a uniform Tile IR value is, if it is one.
    pub(super) fn constant(&self, v: ValueId) -> Option<i64> {
        let op = self.def_op[v.index()]?;
        match op.kind {
            OpKind::Constant(Literal::Int(c)) => Some(c),
            OpKind::Broadcast => self.constant(op.operands[0]),
            _ => None,
        }
    }

    /// `cmp(base + offset, bound)` on every offset in `[lo, hi]`, with no lane
    /// outside `i32` range; computed in `i64`.
    fn span_compare(&mut self, s: Span, cmp: CmpOp, bound: GpuValue) -> Option<GpuValue> {
        let wide =
            |this: &mut Self, v: GpuValue| this.emit1(GpuOpKind::Cast, [v], GpuType::Scalar(DType::I64));
        let base = wide(self, s.base);
        let bound = wide(self, bound);
        let at = |this: &mut Self, off: i64| {
            let c = this.konst(Literal::Int(off), DType::I64);
            this.binary(BinaryOp::Add, base, c)
        };
        let (lo, hi) = (at(self, s.lo), at(self, s.hi));
        let min = self.konst(Literal::Int(i64::from(i32::MIN)), DType::I64);
        let max = self.konst(Literal::Int(i64::from(i32::MAX)), DType::I64);
        let no_wrap_lo = self.compare(CmpOp::Ge, lo, min);
        let no_wrap_hi = self.compare(CmpOp::Le, hi, max);
        let holds = match cmp {
            CmpOp::Lt | CmpOp::Le => self.compare(cmp, hi, bound),
            CmpOp::Gt | CmpOp::Ge => self.compare(cmp, lo, bound),
            _ => return None,
        };
        let ok = self.binary(BinaryOp::And, no_wrap_lo, no_wrap_hi);
        Some(self.binary(BinaryOp::And, ok, holds))
    }
}

/// `cmp` with its operands swapped (`a < b` is `b > a`).
fn swapped(cmp: CmpOp) -> Option<CmpOp> {
    Some(match cmp {
        CmpOp::Lt => CmpOp::Gt,
        CmpOp::Le => CmpOp::Ge,
        CmpOp::Gt => CmpOp::Lt,
        CmpOp::Ge => CmpOp::Le,
        _ => return None,
    })
}
