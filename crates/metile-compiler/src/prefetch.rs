//! Prefetching `dot` operands one or more loop iterations ahead (a Tile IR
//! pass that runs for GPU targets only).
//!
//! In the usual GEMM loop every iteration loads its tiles and then multiplies
//! them, so each iteration waits for memory before its matrix work starts. The
//! pass turns
//!
//! ```text
//! for k in range(start, end, step):  a = <loads of k>; acc = dot(a, b, acc)
//! ```
//!
//! into
//!
//! ```text
//! a0 = <loads of start> if start < end else 0
//! for k in range(start, end, step), carrying a_cur = a0:
//!     a_next = <loads of k + step> if k + step < end else 0
//!     acc = dot(a_cur, b, acc)
//!     yield a_next
//! ```
//!
//! A GPU issues the loads of `a_next` and goes on to the multiply; they are
//! waited for only when the next iteration stages them, so memory latency
//! hides behind the matrix work (register double buffering). The guards keep
//! every access one the original loop makes, so the kernel reads no address it
//! would not have read (and the `else` value is never observed).
//!
//! What is prefetched is a whole `dot` operand: the value and everything it is
//! computed from inside the loop body, when that slice is pure arithmetic and
//! loads (no carried value, no other loop, nothing with effects) and contains
//! a load.
//!
//! With [`Carry::Async`] the pass carries operands `stages - 1` iterations
//! ahead (`a0, a1, ..` from guarded prologue loads, the loop loading `k + (stages - 1) * step`
//! and yielding `a1, .., a_next`), but only where both operands of a `dot`
//! are each one load with a matrix-atom plan: the lowering then keeps those
//! tiles in a ring of threadgroup buffers filled by asynchronous copies
//! (`lower/async_ring.rs`), never in registers, so the depth costs no
//! registers. The depth is the most stages (up to the target's limit) whose
//! buffers fit half the threadgroup memory, so two threadgroups share a core
//! (when at most 64 accumulators a thread leave registers for two), or
//! failing that three quarters of it (seven eighths for one threadgroup).
//!
//! A loop's `num_stages` hint (`tile_range(..., num_stages=n)`) sets the depth
//! instead: `n` stages where they fit in seven eighths of the threadgroup
//! memory (the most that fit otherwise), and `num_stages=1` turns the pass off
//! for that loop (registers included).
//!
//! Loops are left alone unless their step is a positive constant and
//! their body (nested regions included) has no stores, barriers, shared memory
//! or thread-level ops, so no write can change what a load ahead of time reads.

use metile_ir::{Block, CmpOp, DType, Elem, Function, Literal, Loc, Op, OpKind, Type, ValueId};
use rustc_hash::{FxHashMap, FxHashSet};

mod inductions;

/// Threadgroup bytes of a `dot`'s tiles in one ring stage (`(m, n, k)`,
/// operand dtype, which operands the ring holds) and its accumulators per
/// thread, or `None` without a matrix-atom plan whose ring can hold them.
pub type StageBytes<'a> = dyn Fn((usize, usize, usize), DType, RingOperands) -> Option<(usize, usize)> + 'a;

/// Which tiles of a `dot` a ring stage holds: `b` always (the transpose of a
/// loaded tile where `b_transposed`), `a` too where it is a load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingOperands {
    pub a: bool,
    pub b_transposed: bool,
}

/// How far ahead, and which operands, the pass carries.
pub enum Carry<'a> {
    /// One iteration ahead, in registers: every operand computed from loads.
    /// With `keep_transposes`, a `b = x.T` stays in the loop and `x` is
    /// carried, so that the lowering still sees `x.T` and stages `x` K-major
    /// (Apple's matrix atoms with the `k_major_b` switch).
    Registers { keep_transposes: bool },
    /// `stages - 1` iterations ahead, for the lowering's asynchronous ring:
    /// only `dot`s whose two operands are each one load.
    Async {
        stage_bytes: &'a StageBytes<'a>,
        /// Threadgroup memory of the target, in bytes.
        budget: usize,
        max_stages: usize,
    },
}

/// Prefetches the `dot` operands of every eligible loop; true if any changed.
pub fn prefetch_dot_operands(f: &mut Function, carry: &Carry<'_>) -> bool {
    let mut consts = FxHashMap::default();
    let mut used = FxHashSet::default();
    f.walk(&mut |op| {
        if let OpKind::Constant(lit) = op.kind {
            consts.insert(op.results[0], lit);
        }
        used.extend(op.operands.iter().copied());
    });
    let mut values = std::mem::take(&mut f.values);
    let facts = Facts {
        consts: &consts,
        used: &used,
    };
    let changed = block(&mut f.body, &mut values, &facts, carry);
    f.values = values;
    changed
}

/// What the pass knows of the whole function before it starts.
struct Facts<'a> {
    consts: &'a FxHashMap<ValueId, Literal>,
    /// Every value some op reads.
    used: &'a FxHashSet<ValueId>,
}

fn block(b: &mut Block, values: &mut Vec<Type>, facts: &Facts<'_>, carry: &Carry<'_>) -> bool {
    let mut changed = false;
    let mut i = 0;
    while i < b.ops.len() {
        for r in &mut b.ops[i].regions {
            changed |= block(r, values, facts, carry);
        }
        if matches!(b.ops[i].kind, OpKind::For { .. }) {
            if let Some(prologue) = pipeline(&mut b.ops[i], values, facts, carry) {
                let n = prologue.len();
                b.ops.splice(i..i, prologue);
                i += n;
                changed = true;
            }
        }
        i += 1;
    }
    changed
}

fn is_slice_op(kind: &OpKind) -> bool {
    matches!(
        kind,
        OpKind::Constant(_)
            | OpKind::Arange { .. }
            | OpKind::Broadcast
            | OpKind::ExpandDims { .. }
            | OpKind::Permute { .. }
            | OpKind::Reshape
            | OpKind::Take { .. }
            | OpKind::Cast
            | OpKind::Unary(_)
            | OpKind::Binary(_)
            | OpKind::Fma
            | OpKind::Compare(_)
            | OpKind::Select
            | OpKind::AddPtr
            | OpKind::ProgramId { .. }
            | OpKind::NumPrograms { .. }
            | OpKind::Load { .. }
            | OpKind::TileLoad { .. }
            | OpKind::Assume { .. }
    )
}

/// True for ops that neither write memory nor synchronise (nested regions included).
pub(crate) fn writes_nothing(op: &Op) -> bool {
    match op.kind {
        OpKind::Store { .. }
        | OpKind::TileStore { .. }
        | OpKind::Atomic { .. }
        | OpKind::Barrier
        | OpKind::Shared { .. }
        | OpKind::SimdgroupRole { .. } => false,
        _ => op.regions.iter().all(|r| r.ops.iter().all(writes_nothing)),
    }
}

fn forbids_prefetch(b: &Block) -> bool {
    b.ops.iter().any(|op| {
        !writes_nothing(op)
            || matches!(
                op.kind,
                OpKind::ThreadId | OpKind::SimdLaneId | OpKind::SimdShuffleXor | OpKind::SimdBroadcast
            )
            || op.regions.iter().any(forbids_prefetch)
    })
}

/// The body ops (indices, in program order) that `v` is computed from, or
/// `None` when that slice is not prefetchable.
fn slice_of(v: ValueId, body: &Block, defs: &FxHashMap<ValueId, usize>, iv: ValueId) -> Option<Vec<usize>> {
    let carried: FxHashSet<ValueId> = body.args[1..].iter().copied().collect();
    let mut seen = FxHashSet::default();
    let mut stack = vec![v];
    let mut has_load = false;
    while let Some(x) = stack.pop() {
        if carried.contains(&x) {
            return None;
        }
        let Some(&i) = defs.get(&x) else {
            continue; // iv, or defined outside the loop
        };
        if !seen.insert(i) {
            continue;
        }
        let op = &body.ops[i];
        if !is_slice_op(&op.kind) {
            return None;
        }
        has_load |= op.kind.reads_memory();
        stack.extend(op.operands.iter().copied().filter(|&o| o != iv));
    }
    let mut slice: Vec<usize> = seen.into_iter().collect();
    slice.sort_unstable();
    has_load.then_some(slice)
}

/// `x` where `v = x.T` (a 2-D permute) is computed in the loop body from a
/// value `x` that nothing else in the body reads.
fn transposed_load(v: ValueId, body: &Block, defs: &FxHashMap<ValueId, usize>) -> Option<ValueId> {
    let op = &body.ops[*defs.get(&v)?];
    if !op.kind.is_transpose() {
        return None;
    }
    let x = op.operands[0];
    let read_elsewhere = body
        .ops
        .iter()
        .filter(|o| o.operands.contains(&x) || o.regions.iter().any(|r| reads(r, x)))
        .count()
        > 1;
    (!read_elsewhere).then_some(x)
}

/// True when an op of `b` (nested regions included) reads `v`.
fn reads(b: &Block, v: ValueId) -> bool {
    b.ops
        .iter()
        .any(|o| o.operands.contains(&v) || o.regions.iter().any(|r| reads(r, v)))
}

struct Emitter<'a> {
    values: &'a mut Vec<Type>,
    loc: Loc,
}

impl Emitter<'_> {
    fn value(&mut self, ty: Type) -> ValueId {
        self.values.push(ty);
        ValueId(self.values.len() as u32 - 1)
    }

    fn op(
        &mut self,
        out: &mut Vec<Op>,
        kind: OpKind,
        operands: Vec<ValueId>,
        types: Vec<Type>,
    ) -> Vec<ValueId> {
        let results: Vec<ValueId> = types.into_iter().map(|t| self.value(t)).collect();
        out.push(Op {
            kind,
            operands,
            results: results.clone(),
            regions: vec![],
            loc: self.loc.clone(),
        });
        results
    }

    fn scalar(&mut self, out: &mut Vec<Op>, lit: Literal, d: DType) -> ValueId {
        self.op(out, OpKind::Constant(lit), vec![], vec![Type::scalar(d)])[0]
    }

    /// `if cond { slice at iv = at; yield prefetched } else { yield zeros }`.
    fn guarded(
        &mut self,
        out: &mut Vec<Op>,
        cond: ValueId,
        (body, slice, iv, at): (&Block, &[usize], ValueId, ValueId),
        prefetched: &[ValueId],
    ) -> Vec<ValueId> {
        let mut then_ops = vec![];
        let mut map: FxHashMap<ValueId, ValueId> = FxHashMap::default();
        map.insert(iv, at);
        for &i in slice {
            let op = &body.ops[i];
            let operands = op.operands.iter().map(|o| *map.get(o).unwrap_or(o)).collect();
            let types = op
                .results
                .iter()
                .map(|r| self.values[r.index()].clone())
                .collect();
            let results = self.op(&mut then_ops, op.kind.clone(), operands, types);
            map.extend(op.results.iter().copied().zip(results));
        }
        let yielded: Vec<ValueId> = prefetched.iter().map(|v| *map.get(v).unwrap_or(v)).collect();
        self.op(&mut then_ops, OpKind::Yield, yielded, vec![]);
        let mut else_ops = vec![];
        let mut zeros = vec![];
        for &v in prefetched {
            let ty = self.values[v.index()].clone();
            let Elem::Scalar(d) = ty.elem else { continue };
            let zero = if d.is_float() {
                Literal::Float(0.0)
            } else {
                Literal::Int(0)
            };
            let zero = if d == DType::Bool {
                Literal::Bool(false)
            } else {
                zero
            };
            let z = self.scalar(&mut else_ops, zero, d);
            let z = if ty.shape.is_empty() {
                z
            } else {
                self.op(&mut else_ops, OpKind::Broadcast, vec![z], vec![ty.clone()])[0]
            };
            zeros.push(z);
        }
        self.op(&mut else_ops, OpKind::Yield, zeros, vec![]);
        let types = prefetched
            .iter()
            .map(|v| self.values[v.index()].clone())
            .collect();
        let results = self.op(out, OpKind::If, vec![cond], types);
        if let Some(last) = out.last_mut() {
            last.regions = vec![
                Block {
                    args: vec![],
                    ops: then_ops,
                },
                Block {
                    args: vec![],
                    ops: else_ops,
                },
            ];
        }
        results
    }
}

/// `lo + step < hi` (or `lo < hi` without a step), compared in i64 so that
/// `iv + step` cannot wrap.
fn in_range(e: &mut Emitter<'_>, out: &mut Vec<Op>, lo: ValueId, step: Option<i64>, hi: ValueId) -> ValueId {
    let i64s = Type::scalar(DType::I64);
    let lo = e.op(out, OpKind::Cast, vec![lo], vec![i64s.clone()])[0];
    let lo = match step {
        Some(s) => {
            let s = e.scalar(out, Literal::Int(s), DType::I64);
            e.op(
                out,
                OpKind::Binary(metile_ir::BinaryOp::Add),
                vec![lo, s],
                vec![i64s.clone()],
            )[0]
        }
        None => lo,
    };
    let hi = e.op(out, OpKind::Cast, vec![hi], vec![i64s])[0];
    e.op(
        out,
        OpKind::Compare(CmpOp::Lt),
        vec![lo, hi],
        vec![Type::scalar(DType::Bool)],
    )[0]
}

/// The values a loop carries ahead and how many iterations ahead, with the
/// body ops (indices, sorted) they are computed from.
struct Selection {
    prefetched: Vec<ValueId>,
    slice: Vec<usize>,
    depth: usize,
}

fn select(
    body: &Block,
    defs: &FxHashMap<ValueId, usize>,
    iv: ValueId,
    values: &[Type],
    carry: &Carry<'_>,
    num_stages: Option<u32>,
) -> Option<Selection> {
    let mut prefetched: Vec<ValueId> = vec![];
    let mut slice: Vec<usize> = vec![];
    let mut stage_total = 0;
    // Threadgroup bytes the ring must leave for operands staged outside it:
    // a loop-invariant `a` of a `dot` whose ring holds `b` alone.
    let mut reserved = 0;
    let mut max_accumulators = 0;
    let mut held_pairs: Option<bool> = None;
    let def = |v: &ValueId| defs.get(v).map(|&i| &body.ops[i]);
    // The fp8 tile an f16 `dot` operand converts (`fp8_dot`), if it does.
    let fp8_source = |v: ValueId| def(&v).and_then(|op| crate::fp8_dot::cast_source(op, values));
    for o in body.ops.iter().filter(|o| matches!(o.kind, OpKind::Dot)) {
        let operands = &o.operands[..2];
        match carry {
            Carry::Registers { keep_transposes } => {
                for &v in operands {
                    // An fp8 operand's conversion to f16 stays in the loop:
                    // the fp8 tile takes half the registers, and a target
                    // with an fp8 atom multiplies it as it is (`fp8_dot`).
                    // So does a transpose under it (`dot(a, x.T)`), so that
                    // the lowering still sees `x.T` and stages `x` K-major.
                    let v = match fp8_source(v) {
                        Some(x) => match def(&x) {
                            Some(t) if t.kind.is_transpose() => t.operands[0],
                            _ => x,
                        },
                        None => match def(&v) {
                            Some(t) if *keep_transposes && t.kind.is_transpose() => t.operands[0],
                            _ => v,
                        },
                    };
                    if prefetched.contains(&v) || !defs.contains_key(&v) {
                        continue;
                    }
                    if let Some(s) = slice_of(v, body, defs, iv) {
                        prefetched.push(v);
                        slice.extend(s);
                    }
                }
            }
            Carry::Async { stage_bytes, .. } => {
                // An fp8 `dot` multiplies conversions of fp8 tiles to f16:
                // the ring holds the fp8 tiles, where the plan multiplies
                // them as they are (`stage_bytes` says whether).
                let operands = match (fp8_source(operands[0]), fp8_source(operands[1])) {
                    (Some(a), Some(b)) => [a, b],
                    _ => [operands[0], operands[1]],
                };
                let one_load = |v: ValueId| {
                    defs.get(&v).is_some_and(|&i| {
                        matches!(body.ops[i].kind, OpKind::Load { .. } | OpKind::TileLoad { .. })
                    })
                };
                // `b = x.T` of a loaded `x` (`dot(x, w.T)` of a linear layer,
                // attention's `dot(q, k.T)`): `x` is carried, the transpose
                // stays in the body, and the ring holds `x`'s tile as a
                // K-major `b` where the plan's atom reads one.
                let transposed = transposed_load(operands[1], body, defs);
                let b = transposed.unwrap_or(operands[1]);
                // An `a` that is no load (loop-invariant, or computed in the
                // loop: attention's `p`) stays where it is and the ring holds
                // `b` alone, where the plan's atom reads `a` from elsewhere.
                let loaded: Vec<ValueId> = match one_load(operands[0]) {
                    true => vec![operands[0], b],
                    false => vec![b],
                };
                if loaded.first() == loaded.get(1)
                    || !loaded.iter().all(|&v| one_load(v))
                    || loaded.iter().any(|v| prefetched.contains(v))
                {
                    continue;
                }
                let held = RingOperands {
                    a: loaded.len() == 2,
                    b_transposed: transposed.is_some(),
                };
                // A loop's ring holds either GEMM operand pairs or `b`s alone
                // (`lower/b_ring.rs`), never both.
                if held_pairs.is_some_and(|pairs| pairs != held.a) {
                    continue;
                }
                let (ta, tb) = (&values[operands[0].index()], &values[operands[1].index()]);
                let (Elem::Scalar(da), Elem::Scalar(db)) = (ta.elem, tb.elem) else {
                    continue;
                };
                let shape = (ta.shape[0], tb.shape[1], ta.shape[1]);
                let Some((bytes, accumulators)) = stage_bytes(shape, da, held).filter(|_| da == db) else {
                    continue;
                };
                let Some(slices) = loaded
                    .iter()
                    .map(|&v| slice_of(v, body, defs, iv))
                    .collect::<Option<Vec<_>>>()
                else {
                    continue;
                };
                max_accumulators = max_accumulators.max(accumulators);
                prefetched.extend_from_slice(&loaded);
                slice.extend(slices.into_iter().flatten());
                stage_total += bytes;
                held_pairs = Some(held.a);
                if !held.a && !defs.contains_key(&operands[0]) {
                    let staged = ta.shape.iter().product::<usize>() * da.size_bytes();
                    reserved += staged.div_ceil(1024) * 1024 + 1024;
                }
            }
        }
    }
    if prefetched.is_empty() {
        return None;
    }
    let depth = match carry {
        Carry::Registers { .. } => 1,
        Carry::Async {
            budget, max_stages, ..
        } => {
            let fit = |bytes: usize| bytes.saturating_sub(reserved) / stage_total.max(1);
            let stages = |bytes: usize| fit(bytes).min(*max_stages);
            // More than 64 accumulators a thread leave registers for one
            // block only, which may take seven eighths (a fourth stage of
            // 128x256x64 f16 tiles: +3% on the H100, benchmarks/gemm.py);
            // else leave a quarter for the kernel's other threadgroup memory.
            // The kernel's `num_stages` hint replaces the choice, as far as
            // seven eighths of the memory hold its stages.
            let s = if let Some(n) = num_stages {
                fit(budget * 7 / 8).min(n as usize)
            } else if max_accumulators > 64 {
                stages(budget * 7 / 8)
            } else if stages(budget / 2) >= 2 {
                stages(budget / 2)
            } else {
                stages(budget * 3 / 4)
            };
            if s < 2 {
                return None;
            }
            s - 1
        }
    };
    slice.sort_unstable();
    slice.dedup();
    Some(Selection {
        prefetched,
        slice,
        depth,
    })
}

/// `iv + offset` in i32 (only evaluated under a guard that it stays below the end).
fn offset_iv(e: &mut Emitter<'_>, out: &mut Vec<Op>, iv: ValueId, offset: i64) -> ValueId {
    if offset == 0 {
        return iv;
    }
    let c = e.scalar(out, Literal::Int(offset), DType::I32);
    e.op(
        out,
        OpKind::Binary(metile_ir::BinaryOp::Add),
        vec![iv, c],
        vec![Type::scalar(DType::I32)],
    )[0]
}

/// Rewrites one `for` op; returns the ops to insert before it, or `None`
/// (nothing changed) when it has nothing to prefetch.
fn pipeline(op: &mut Op, values: &mut Vec<Type>, facts: &Facts<'_>, carry: &Carry<'_>) -> Option<Vec<Op>> {
    let consts = facts.consts;
    let (start, end, step) = (op.operands[0], op.operands[1], op.operands[2]);
    let OpKind::For { num_stages } = op.kind else {
        return None;
    };
    // `num_stages=1`: the kernel asks for no operands in flight ahead.
    if num_stages == Some(1) {
        return None;
    }
    let step = match consts.get(&step) {
        Some(Literal::Int(s)) if *s > 0 => *s,
        _ => return None,
    };
    if forbids_prefetch(op.regions.first()?) {
        return None;
    }
    // Carried values advanced by a fixed amount become functions of the
    // induction variable, which the loads ahead need; kept only where
    // something is then prefetched.
    let original = inductions::any(op, values).then(|| (op.clone(), values.len()));
    let rewritten = original.is_some() && inductions::rewrite(op, values, consts, facts.used);
    let body = op.regions.first()?;
    let iv = *body.args.first()?;
    let mut defs = FxHashMap::default();
    for (i, o) in body.ops.iter().enumerate() {
        for &r in &o.results {
            defs.insert(r, i);
        }
    }
    let Some(Selection {
        prefetched,
        slice,
        depth,
    }) = select(body, &defs, iv, values, carry, num_stages)
    else {
        if let Some((op_before, values_before)) = original.filter(|_| rewritten) {
            *op = op_before;
            values.truncate(values_before);
        }
        return None;
    };

    let loc = op.loc.clone();
    let mut e = Emitter { values, loc };
    let mut prologue = vec![];
    let mut initial = vec![];
    for j in 0..depth as i64 {
        let ahead = (j > 0).then_some(j * step);
        let cond = in_range(&mut e, &mut prologue, start, ahead, end);
        let at = offset_iv(&mut e, &mut prologue, start, j * step);
        initial.extend(e.guarded(&mut prologue, cond, (body, &slice, iv, at), &prefetched));
    }

    let mut ahead = vec![];
    let distance = depth as i64 * step;
    let more = in_range(&mut e, &mut ahead, iv, Some(distance), end);
    let next_iv = offset_iv(&mut e, &mut ahead, iv, distance);
    let next = e.guarded(&mut ahead, more, (body, &slice, iv, next_iv), &prefetched);
    // Carried sets, nearest iteration first: `current[0]` is this iteration's.
    let fresh = |e: &mut Emitter<'_>| -> Vec<ValueId> {
        prefetched
            .iter()
            .map(|v| {
                let ty = e.values[v.index()].clone();
                e.value(ty)
            })
            .collect()
    };
    let current: Vec<Vec<ValueId>> = (0..depth).map(|_| fresh(&mut e)).collect();
    let loop_results: Vec<ValueId> = (0..depth).flat_map(|_| fresh(&mut e)).collect();

    let body = op.regions.first_mut()?;
    let renamed: FxHashMap<ValueId, ValueId> = prefetched
        .iter()
        .copied()
        .zip(current[0].iter().copied())
        .collect();
    rename_uses(body, &renamed);
    if let Some(y) = body.ops.last_mut().filter(|y| matches!(y.kind, OpKind::Yield)) {
        for set in &current[1..] {
            y.operands.extend(set.iter().copied());
        }
        y.operands.extend(next.iter().copied());
    }
    body.args.extend(current.into_iter().flatten());
    body.ops.splice(0..0, ahead);
    op.operands.extend(initial);
    op.results.extend(loop_results);
    Some(prologue)
}

fn rename_uses(b: &mut Block, renamed: &FxHashMap<ValueId, ValueId>) {
    for op in &mut b.ops {
        rename_operands(op, renamed);
    }
}

/// Renames the operands of `op` and of everything in its regions.
fn rename_operands(op: &mut Op, renamed: &FxHashMap<ValueId, ValueId>) {
    for o in &mut op.operands {
        if let Some(&n) = renamed.get(o) {
            *o = n;
        }
    }
    for r in &mut op.regions {
        rename_uses(r, renamed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metile_ir::{verify, Builder, Operand, ParamKind};

    /// The seed GEMM's loop; with `store_inside`, the body also writes memory.
    fn gemm(store_inside: bool) -> Function {
        let mut b = Builder::new("gemm");
        let a = b.add_param("A", ParamKind::Pointer(DType::F16));
        let x = b.add_param("B", ParamKind::Pointer(DType::F16));
        let c = b.add_param("C", ParamKind::Pointer(DType::F32));
        let k = b.add_param("K", ParamKind::Scalar(DType::I32));
        let acc0 = b.full(&[16, 16], Operand::Float(0.0), DType::F32).unwrap();
        let acc = b
            .build_for(
                (Operand::Int(0), Operand::Value(k), Operand::Int(16)),
                &[acc0],
                |b, kk, carried| {
                    let at = (
                        Operand::Value(a),
                        Operand::Int(0),
                        Operand::Value(kk),
                        Operand::Value(k),
                    );
                    let ta = b.tile_load(at.0, at.1, at.2, at.3, (16, 16))?;
                    let tb = b.tile_load(
                        Operand::Value(x),
                        Operand::Value(kk),
                        Operand::Int(0),
                        Operand::Int(16),
                        (16, 16),
                    )?;
                    let d = b.dot(
                        Operand::Value(ta),
                        Operand::Value(tb),
                        Some(Operand::Value(carried[0])),
                    )?;
                    if store_inside {
                        b.tile_store(
                            Operand::Value(c),
                            Operand::Int(0),
                            Operand::Int(0),
                            Operand::Int(16),
                            Operand::Value(d),
                            (16, 16),
                        )?;
                    }
                    Ok(vec![d])
                },
            )
            .unwrap()[0];
        b.tile_store(
            Operand::Value(c),
            Operand::Int(0),
            Operand::Int(0),
            Operand::Int(16),
            Operand::Value(acc),
            (16, 16),
        )
        .unwrap();
        b.finish().unwrap()
    }

    #[test]
    fn dot_operands_are_carried_one_iteration_ahead() {
        let mut f = gemm(false);
        assert!(prefetch_dot_operands(
            &mut f,
            &Carry::Registers {
                keep_transposes: false
            }
        ));
        verify(&f).unwrap();
        let mut top_ifs = 0;
        let mut for_carried = 0;
        for op in &f.body.ops {
            match op.kind {
                OpKind::If => top_ifs += 1,
                OpKind::For { .. } => {
                    for_carried = op.results.len();
                    // The loads for the next iteration come first, under a guard.
                    assert!(matches!(
                        op.regions[0]
                            .ops
                            .iter()
                            .find(|o| matches!(o.kind, OpKind::If | OpKind::Dot))
                            .map(|o| &o.kind),
                        Some(OpKind::If)
                    ));
                }
                _ => {}
            }
        }
        assert_eq!(
            (top_ifs, for_carried),
            (1, 3),
            "a guarded prologue; acc plus two prefetched tiles"
        );
    }

    #[test]
    fn loops_that_write_memory_are_left_alone() {
        let mut f = gemm(true);
        assert!(!prefetch_dot_operands(
            &mut f,
            &Carry::Registers {
                keep_transposes: false
            }
        ));
    }
}
