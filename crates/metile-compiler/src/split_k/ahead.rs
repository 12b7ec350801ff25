//! The values a split K loop's other carried values (Triton-style pointer
//! increments) take at the split's first iteration `lo`.
//!
//! The common case, `ptrs += inc` or `i += inc` with `inc` the same in every
//! iteration, has a closed form, `init + lo * inc`, computed once. Pointer
//! offsets are multiplied in i64 (the iterated adds move a 64-bit address and
//! never wrap); integers in their own type, whose wrapping product equals the
//! wrapping sum of `lo` increments. Floats are left to the loop, since their
//! sum rounds at every step. Anything else runs the loop over `[0, lo)` with
//! the accumulator's `dot`s removed; dead-code elimination then leaves only
//! the arithmetic those values need, never the operand loads.

use crate::ir_emit::{clone_fresh, Emit};
use metile_ir::{BinaryOp, Block, DType, Op, OpKind, ValueId};
use rustc_hash::{FxHashMap, FxHashSet};

/// The carried values at iteration `lo` (an i64 iteration index) in closed
/// form, the accumulator's initial value in its place; `None` when a carried
/// value does not advance by a loop-invariant integer step.
pub(super) fn affine_at(e: &mut Emit<'_>, kloop: &Op, acc: usize, lo: ValueId) -> Option<Vec<ValueId>> {
    let body = kloop.regions.first()?;
    let yielded = &body.ops.last()?.operands;
    let defs: FxHashMap<ValueId, usize> = body
        .ops
        .iter()
        .enumerate()
        .flat_map(|(i, op)| op.results.iter().map(move |&r| (r, i)))
        .collect();
    let mut hoisted = FxHashMap::default();
    let mut out = Vec::new();
    for (j, &arg) in body.args.get(1..)?.iter().enumerate() {
        let init = *kloop.operands.get(3 + j)?;
        let next = *yielded.get(j)?;
        if j == acc || next == arg {
            out.push(init);
            continue;
        }
        let op = &body.ops[*defs.get(&next)?];
        let (inc, is_ptr) = match (&op.kind, op.operands.as_slice()) {
            (OpKind::AddPtr, &[p, inc]) if p == arg => (inc, true),
            (OpKind::Binary(BinaryOp::Add), &[a, b]) if a == arg && b != arg => (b, false),
            (OpKind::Binary(BinaryOp::Add), &[a, b]) if b == arg && a != arg => (a, false),
            _ => return None,
        };
        // A splat step is multiplied as a scalar and splat after.
        let shape = e.ty(inc).shape.clone();
        let inc = match defs.get(&inc).map(|&i| &body.ops[i]) {
            Some(op) if matches!(op.kind, OpKind::Broadcast) && e.ty(op.operands[0]).shape.is_empty() => {
                op.operands[0]
            }
            _ => inc,
        };
        let inc = hoist(e, body, &defs, inc, &mut hoisted)?;
        let wide = if is_ptr { DType::I64 } else { e.ty(inc).dtype()? };
        if !wide.is_int() {
            return None;
        }
        let inc = e.cast(inc, wide);
        let lo = e.cast(lo, wide);
        let lo = if e.ty(inc).shape.is_empty() {
            lo
        } else {
            e.broadcast(lo, &shape)
        };
        let offset = e.bin(BinaryOp::Mul, lo, inc);
        let offset = if e.ty(offset).shape == shape {
            offset
        } else {
            e.broadcast(offset, &shape)
        };
        out.push(if is_ptr {
            let ty = e.ty(init).clone();
            e.op(OpKind::AddPtr, vec![init, offset], Some(ty))
        } else {
            e.bin(BinaryOp::Add, init, offset)
        });
    }
    Some(out)
}

/// `v` outside the loop: itself when defined there, else a copy of the body
/// ops computing it, when they are pure and read neither the induction
/// variable nor a carried value (so every iteration computes the same `v`).
fn hoist(
    e: &mut Emit<'_>,
    body: &Block,
    defs: &FxHashMap<ValueId, usize>,
    v: ValueId,
    hoisted: &mut FxHashMap<ValueId, ValueId>,
) -> Option<ValueId> {
    let args: FxHashSet<ValueId> = body.args.iter().copied().collect();
    let mut slice = Vec::new();
    let mut stack = vec![v];
    let mut seen = FxHashSet::default();
    while let Some(x) = stack.pop() {
        if args.contains(&x) {
            return None;
        }
        let Some(&i) = defs.get(&x) else { continue };
        if !seen.insert(i) {
            continue;
        }
        let op = &body.ops[i];
        let pure = matches!(
            op.kind,
            OpKind::Constant(_)
                | OpKind::Broadcast
                | OpKind::ExpandDims { .. }
                | OpKind::Permute { .. }
                | OpKind::Reshape
                | OpKind::Take { .. }
                | OpKind::Cast
                | OpKind::Binary(_)
                | OpKind::Unary(_)
                | OpKind::Fma
                | OpKind::Compare(_)
                | OpKind::Select
                | OpKind::Arange { .. }
                | OpKind::ProgramId { .. }
                | OpKind::NumPrograms { .. }
        );
        if !pure || !op.regions.is_empty() {
            return None;
        }
        slice.push(i);
        stack.extend(op.operands.iter().copied());
    }
    slice.sort_unstable();
    for i in slice {
        let op = &body.ops[i];
        if op.results.iter().all(|r| hoisted.contains_key(r)) {
            continue;
        }
        let operands = op.operands.iter().map(|o| *hoisted.get(o).unwrap_or(o)).collect();
        let ty = op.results.first().map(|&r| e.ty(r).clone());
        let new = e.op(op.kind.clone(), operands, ty);
        if let Some(&r) = op.results.first() {
            hoisted.insert(r, new);
        }
    }
    Some(*hoisted.get(&v).unwrap_or(&v))
}

/// The carried values at iteration `lo` by running the loop up to `lo_end`
/// (the bound of iteration `lo`) without the accumulator's `dot`s (`chain`).
pub(super) fn run_ahead(
    e: &mut Emit<'_>,
    kloop: &Op,
    (acc, chain): (usize, &[usize]),
    lo_end: ValueId,
) -> Vec<ValueId> {
    let mut ahead = clone_fresh(kloop, e.values);
    if let Some(body) = ahead.regions.first_mut() {
        for &i in chain.iter().rev() {
            body.ops.remove(i);
        }
        if let Some(y) = body.ops.last_mut() {
            y.operands.remove(acc);
        }
        body.args.remove(1 + acc);
    }
    ahead.operands.remove(3 + acc);
    ahead.results.remove(acc);
    ahead.operands[1] = lo_end;
    let mut at_lo = ahead.results.clone();
    e.ops.push(ahead);
    at_lo.insert(acc, kloop.operands[3 + acc]);
    at_lo
}
