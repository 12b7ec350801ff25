//! Loop-carried values advanced by a loop-invariant amount each iteration
//! (`a_ptrs += BLOCK_K * stride_ak`), rewritten as functions of the
//! induction variable so that the prefetch pass can compute them any number
//! of iterations ahead.
//!
//! A carried `p` whose yielded value is `p + inc` (`add_ptr` or an integer
//! `add`), with `inc` computed only from values defined outside the loop,
//! equals `init + t * inc` in trip `t = (iv - start) / step`: the rewrite
//! computes that at the top of the body and replaces the body's uses of `p`
//! with it. Integer arithmetic wraps, so the sum of `t` increments and the
//! product agree bit for bit, and so do the element offsets of pointers.
//! Where nothing after the loop reads `p`, the carried value goes (its
//! increment is then dead code); otherwise it stays and only the body's
//! reads change.

use super::Emitter;
use metile_ir::{BinaryOp, Block, DType, Elem, Literal, Op, OpKind, Type, ValueId};
use rustc_hash::{FxHashMap, FxHashSet};

/// One carried value advanced by a loop-invariant increment.
struct Induction {
    /// Carried position (0-based, without the induction variable).
    position: usize,
    /// The body op computing the yielded value.
    update: usize,
    /// The increment and whether the carried value is the update's first operand.
    increment: ValueId,
    carried_first: bool,
}

/// True when `v` is computed, inside `body`, only from values defined
/// outside the loop, by ops that read nothing and have no effects.
fn invariant(v: ValueId, body: &Block, defs: &FxHashMap<ValueId, usize>) -> bool {
    let args: FxHashSet<ValueId> = body.args.iter().copied().collect();
    let mut stack = vec![v];
    let mut seen = FxHashSet::default();
    while let Some(x) = stack.pop() {
        if args.contains(&x) {
            return false;
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
                | OpKind::Cast
                | OpKind::Unary(_)
                | OpKind::Binary(_)
                | OpKind::Fma
                | OpKind::Compare(_)
                | OpKind::Select
                | OpKind::AddPtr
        );
        if !pure || !op.regions.is_empty() {
            return false;
        }
        stack.extend(op.operands.iter().copied());
    }
    true
}

/// The body ops (indices, in program order) that an invariant `v` is computed from.
fn invariant_slice(v: ValueId, body: &Block, defs: &FxHashMap<ValueId, usize>) -> Vec<usize> {
    let mut stack = vec![v];
    let mut seen = FxHashSet::default();
    while let Some(x) = stack.pop() {
        if let Some(&i) = defs.get(&x) {
            if seen.insert(i) {
                stack.extend(body.ops[i].operands.iter().copied());
            }
        }
    }
    let mut slice: Vec<usize> = seen.into_iter().collect();
    slice.sort_unstable();
    slice
}

/// True when `op` or anything in its regions reads `v`.
fn reads(op: &Op, v: ValueId) -> bool {
    op.operands.contains(&v) || op.regions.iter().any(|r| r.ops.iter().any(|o| reads(o, v)))
}

fn find(body: &Block, defs: &FxHashMap<ValueId, usize>, values: &[Type]) -> Vec<Induction> {
    let Some(yields) = body.ops.last().filter(|y| matches!(y.kind, OpKind::Yield)) else {
        return vec![];
    };
    let mut found = vec![];
    for (position, (&arg, &y)) in body.args[1..].iter().zip(&yields.operands).enumerate() {
        let Some(&update) = defs.get(&y) else { continue };
        let op = &body.ops[update];
        let integer = values[arg.index()].dtype().is_some_and(DType::is_int);
        let (increment, carried_first) = match (&op.kind, op.operands.as_slice()) {
            (OpKind::AddPtr, &[p, inc]) if p == arg => (inc, true),
            (OpKind::Binary(BinaryOp::Add), &[p, inc]) if p == arg && inc != arg && integer => (inc, true),
            (OpKind::Binary(BinaryOp::Add), &[inc, p]) if p == arg && inc != arg && integer => (inc, false),
            _ => continue,
        };
        // A value only its own update reads gains nothing from the rewrite.
        let read_elsewhere = body
            .ops
            .iter()
            .enumerate()
            .any(|(i, o)| i != update && reads(o, arg));
        if read_elsewhere && invariant(increment, body, defs) {
            found.push(Induction {
                position,
                update,
                increment,
                carried_first,
            });
        }
    }
    found
}

fn body_defs(body: &Block) -> FxHashMap<ValueId, usize> {
    let mut defs = FxHashMap::default();
    for (i, o) in body.ops.iter().enumerate() {
        for &r in &o.results {
            defs.insert(r, i);
        }
    }
    defs
}

/// True when the `for` op `lp` carries a value that [`rewrite`] would rewrite.
pub(super) fn any(lp: &Op, values: &[Type]) -> bool {
    lp.regions
        .first()
        .is_some_and(|body| body.args.len() > 1 && !find(body, &body_defs(body), values).is_empty())
}

/// Rewrites the carried inductions of the `for` op `lp`; true if any changed.
/// `used` holds every value read anywhere in the function.
pub(super) fn rewrite(
    lp: &mut Op,
    values: &mut Vec<Type>,
    consts: &FxHashMap<ValueId, Literal>,
    used: &FxHashSet<ValueId>,
) -> bool {
    let (start, step) = (lp.operands[0], lp.operands[2]);
    let Some(body) = lp.regions.first() else {
        return false;
    };
    let Some(&iv) = body.args.first() else {
        return false;
    };
    let defs = body_defs(body);
    let inductions = find(body, &defs, values);
    if inductions.is_empty() {
        return false;
    }
    let iv_type = values[iv.index()].clone();
    let Some(iv_dtype) = iv_type.dtype() else {
        return false;
    };
    let mut e = Emitter {
        values,
        loc: lp.loc.clone(),
    };
    let mut head: Vec<Op> = vec![];
    // The trip count so far: `(iv - start) / step`, or `iv` from 0 by 1.
    let from_zero = matches!(consts.get(&start), Some(Literal::Int(0)));
    let mut trip = iv;
    if !from_zero {
        trip = e.op(
            &mut head,
            OpKind::Binary(BinaryOp::Sub),
            vec![iv, start],
            vec![iv_type.clone()],
        )[0];
    }
    match consts.get(&step) {
        Some(Literal::Int(1)) => {}
        _ => {
            trip = e.op(
                &mut head,
                OpKind::Binary(BinaryOp::FloorDiv),
                vec![trip, step],
                vec![iv_type.clone()],
            )[0]
        }
    }
    let mut replaced: FxHashMap<ValueId, ValueId> = FxHashMap::default();
    let mut removed = vec![];
    for ind in &inductions {
        let body = &lp.regions[0];
        // The increment, cloned to the top of the body; a broadcast scalar
        // is multiplied before it is broadcast.
        let mut map: FxHashMap<ValueId, ValueId> = FxHashMap::default();
        for i in invariant_slice(ind.increment, body, &defs) {
            let op = &body.ops[i];
            let operands = op.operands.iter().map(|o| *map.get(o).unwrap_or(o)).collect();
            let types = op.results.iter().map(|r| e.values[r.index()].clone()).collect();
            let results = e.op(&mut head, op.kind.clone(), operands, types);
            map.extend(op.results.iter().copied().zip(results));
        }
        let increment = *map.get(&ind.increment).unwrap_or(&ind.increment);
        let inc_type = e.values[increment.index()].clone();
        let scalar_source = defs
            .get(&ind.increment)
            .map(|&i| &body.ops[i])
            .filter(|d| matches!(d.kind, OpKind::Broadcast))
            .map(|d| *map.get(&d.operands[0]).unwrap_or(&d.operands[0]))
            .filter(|s| e.values[s.index()].shape.is_empty());
        let (factor, broadcast_after) = match scalar_source {
            Some(s) => (s, true),
            None => (increment, false),
        };
        let factor_type = e.values[factor.index()].clone();
        let Elem::Scalar(factor_dtype) = factor_type.elem else {
            continue;
        };
        let mut t = trip;
        if factor_dtype != iv_dtype {
            t = e.op(&mut head, OpKind::Cast, vec![t], vec![Type::scalar(factor_dtype)])[0];
        }
        if !factor_type.shape.is_empty() {
            t = e.op(&mut head, OpKind::Broadcast, vec![t], vec![factor_type.clone()])[0];
        }
        let mut offset = e.op(
            &mut head,
            OpKind::Binary(BinaryOp::Mul),
            vec![t, factor],
            vec![factor_type],
        )[0];
        if broadcast_after {
            offset = e.op(&mut head, OpKind::Broadcast, vec![offset], vec![inc_type])[0];
        }
        let update = &body.ops[ind.update];
        let init = lp.operands[3 + ind.position];
        let operands = if ind.carried_first {
            vec![init, offset]
        } else {
            vec![offset, init]
        };
        let ty = e.values[update.results[0].index()].clone();
        let now = e.op(&mut head, update.kind.clone(), operands, vec![ty])[0];
        replaced.insert(body.args[ind.position + 1], now);
        if !used.contains(&lp.results[ind.position]) {
            removed.push(ind.position);
        }
    }
    let body = &mut lp.regions[0];
    let kept_updates: FxHashSet<usize> = inductions
        .iter()
        .filter(|i| !removed.contains(&i.position))
        .map(|i| i.update)
        .collect();
    for (i, op) in body.ops.iter_mut().enumerate() {
        if kept_updates.contains(&i) {
            continue;
        }
        super::rename_operands(op, &replaced);
    }
    let n = head.len();
    body.ops.splice(0..0, head);
    removed.sort_unstable();
    for &c in removed.iter().rev() {
        body.args.remove(c + 1);
        if let Some(y) = body.ops.last_mut().filter(|y| matches!(y.kind, OpKind::Yield)) {
            y.operands.remove(c);
        }
        lp.operands.remove(3 + c);
        lp.results.remove(c);
    }
    n > 0
}

#[cfg(test)]
mod tests {
    use super::super::{prefetch_dot_operands, Carry};
    use metile_ir::{verify, BinaryOp, Builder, DType, Function, Op, OpKind, Operand, ParamKind};

    /// `acc += dot(load(p), load(q))` with `p += 16 * stride` and `q += 16`
    /// carried by the loop, and a counter only its update reads; with
    /// `count_after`, the final `p` is read after the loop.
    fn pointer_gemm(count_after: bool) -> Function {
        let mut b = Builder::new("k");
        let a = b.add_param("A", ParamKind::Pointer(DType::F16));
        let x = b.add_param("B", ParamKind::Pointer(DType::F16));
        let c = b.add_param("C", ParamKind::Pointer(DType::F32));
        let k = b.add_param("K", ParamKind::Scalar(DType::I32));
        let stride = b.add_param("S", ParamKind::Scalar(DType::I32));
        let rows = b.arange(0, 16).unwrap();
        let rows = b.expand_dims(rows, 1).unwrap();
        let cols = b.arange(0, 16).unwrap();
        let cols = b.expand_dims(cols, 0).unwrap();
        let offs = b
            .binary(BinaryOp::Mul, Operand::Value(rows), Operand::Int(16))
            .unwrap();
        let offs = b
            .binary(BinaryOp::Add, Operand::Value(offs), Operand::Value(cols))
            .unwrap();
        let p0 = b
            .binary(BinaryOp::Add, Operand::Value(a), Operand::Value(offs))
            .unwrap();
        let q0 = b
            .binary(BinaryOp::Add, Operand::Value(x), Operand::Value(offs))
            .unwrap();
        let acc0 = b.full(&[16, 16], Operand::Float(0.0), DType::F32).unwrap();
        let n0 = b.constant(metile_ir::Literal::Int(0), DType::I32);
        let out = b
            .build_for(
                (Operand::Int(0), Operand::Value(k), Operand::Int(1)),
                &[acc0, p0, q0, n0],
                |b, _, carried| {
                    let ta = b.load(Operand::Value(carried[1]), None, None)?;
                    let tb = b.load(Operand::Value(carried[2]), None, None)?;
                    let d = b.dot(
                        Operand::Value(ta),
                        Operand::Value(tb),
                        Some(Operand::Value(carried[0])),
                    )?;
                    let step = b.binary(BinaryOp::Mul, Operand::Int(16), Operand::Value(stride))?;
                    let p = b.binary(BinaryOp::Add, Operand::Value(carried[1]), Operand::Value(step))?;
                    let q = b.binary(BinaryOp::Add, Operand::Value(carried[2]), Operand::Int(16))?;
                    let n = b.binary(BinaryOp::Add, Operand::Value(carried[3]), Operand::Int(1))?;
                    Ok(vec![d, p, q, n])
                },
            )
            .unwrap();
        let result = if count_after {
            // The final A pointer is read after the loop.
            let last = b.load(Operand::Value(out[1]), None, None).unwrap();
            let last = b.cast(last, DType::F32).unwrap();
            b.binary(BinaryOp::Add, Operand::Value(out[0]), Operand::Value(last))
                .unwrap()
        } else {
            out[0]
        };
        let pc = b
            .binary(BinaryOp::Add, Operand::Value(c), Operand::Value(offs))
            .unwrap();
        b.store(Operand::Value(pc), Operand::Value(result), None).unwrap();
        b.finish().unwrap()
    }

    fn the_loop(f: &Function) -> &Op {
        f.body
            .ops
            .iter()
            .find(|o| matches!(o.kind, OpKind::For { .. }))
            .expect("a loop")
    }

    #[test]
    fn advanced_pointers_become_functions_of_the_counter_and_are_prefetched() {
        let mut f = pointer_gemm(false);
        let carried_before = the_loop(&f).results.len();
        assert!(prefetch_dot_operands(
            &mut f,
            &Carry::Registers {
                keep_transposes: false
            }
        ));
        verify(&f).unwrap();
        let lp = the_loop(&f);
        // The two pointers are no longer carried (the counter, read by
        // nothing but its update, stays); the two prefetched tiles are.
        assert_eq!(lp.results.len(), carried_before - 2 + 2);
        let text = metile_ir::print_function(&f);
        assert!(text.contains(" mul "), "{text}");
    }

    #[test]
    fn a_pointer_read_after_the_loop_stays_carried() {
        let mut f = pointer_gemm(true);
        let carried_before = the_loop(&f).results.len();
        assert!(prefetch_dot_operands(
            &mut f,
            &Carry::Registers {
                keep_transposes: false
            }
        ));
        verify(&f).unwrap();
        // Only `q` goes; `p` stays for the read after the loop.
        assert_eq!(the_loop(&f).results.len(), carried_before - 1 + 2);
    }

    #[test]
    fn loops_that_prefetch_nothing_are_left_as_they_were() {
        let mut f = pointer_gemm(false);
        let before = metile_ir::print_function(&f);
        // Async needs matrix-atom plans; none here, so nothing is selected.
        let no_plan = |_: (usize, usize, usize), _: DType, _: crate::prefetch::RingOperands| None;
        let carry = Carry::Async {
            stage_bytes: &no_plan,
            budget: 1 << 16,
            max_stages: 4,
        };
        assert!(!prefetch_dot_operands(&mut f, &carry));
        assert_eq!(metile_ir::print_function(&f), before);
    }
}
