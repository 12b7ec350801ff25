//! Split-K: a GEMM's K loop divided over `S` programs per output tile, as two
//! kernels derived from the user's one (Tile IR → Tile IR; the runtime launches
//! both, in order, with a workspace of partial tiles).
//!
//! There are no atomics in the Tile IR, and a sum whose order depends on which
//! program finishes first would make results vary from run to run, so the
//! partial sums go through memory and are added in a fixed order:
//!
//! * the **partial** kernel runs over the grid `(GX, GY, GZ * S)`. Program
//!   `raw` along axis 2 is the user's program `raw / S` (so `program_id(2)`
//!   and `num_programs(2)` read what the user launched) and split
//!   `s = raw mod S`. It runs the iterations `[s * T / S, (s + 1) * T / S)` of
//!   the loop's `T` (counted at run time from the loop's bounds), from the
//!   accumulator's initial value for `s = 0` and from zeros otherwise, and
//!   stores the f32 accumulator to its slot of the workspace
//!   `[programs, S, BM, BN]`. The shares differ by at most one iteration;
//!   when `T < S` some are empty and store zeros. What follows the loop is
//!   not run.
//! * the **finish** kernel is the user's kernel with the loop replaced by the
//!   sum of the `S` partial tiles, `((P0 + P1) + P2) + ...`, then everything
//!   after the loop (epilogue, casts, stores) as written.
//!
//! Carried values other than the accumulator (Triton-style pointer
//! increments) must be unused after the loop. A split that starts at
//! iteration `lo` needs their value there (`ahead`): `init + lo * inc` when
//! each advances by a loop-invariant `inc`, else a first loop over `[0, lo)`
//! without the accumulator's `dot`s.
//!
//! What is split is the one top-level loop whose body adds `dot` products to a
//! loop-carried f32 value (`acc = dot(a, b, acc)`, possibly several `dot`s in a
//! chain) and uses it for nothing else. The loop and the code before it must
//! not write memory or synchronise (each split runs them), and the loop may
//! not use thread-level ops. Anything else is refused with the reason and the
//! kernel line: a split loop that computed something else would be wrong.

use crate::error::{CompileError, CompileResult};
mod ahead;

use crate::ir_emit::{rename_uses, walk, Emit};
use crate::tile_passes::clean_up;
use metile_ir::{
    verify, AddrSpace, BinaryOp, Block, CmpOp, DType, Elem, Function, Literal, Loc, Op, OpKind, Param,
    ParamKind, Type, ValueId,
};
use rustc_hash::FxHashMap;

/// The name of the workspace parameter both kernels take last.
pub const WORKSPACE_PARAM: &str = "split_k_workspace";

/// The two kernels of a split launch.
#[derive(Clone, Debug, PartialEq)]
pub struct SplitK {
    /// Launched first, over the grid with axis 2 multiplied by `splits`.
    pub partial: Function,
    /// Launched second, over the user's grid.
    pub finish: Function,
    pub splits: u32,
    /// f32 elements of one partial tile (`BM * BN`); the workspace holds
    /// `programs * splits` of them.
    pub tile_elems: usize,
}

/// The loop split-K divides.
struct KLoop {
    /// Its position among the kernel's top-level ops.
    index: usize,
    /// The accumulator's position among the carried values.
    acc: usize,
    /// The body positions of the `dot`s that add to the accumulator.
    chain: Vec<usize>,
    /// The accumulator's shape `[BM, BN]`.
    tile: [usize; 2],
}

fn refuse(reason: impl Into<String>, loc: &Loc) -> CompileError {
    CompileError::new("split_k", reason, loc.clone())
}

fn is_effect(kind: &OpKind) -> bool {
    matches!(
        kind,
        OpKind::Store { .. }
            | OpKind::TileStore { .. }
            | OpKind::Atomic { .. }
            | OpKind::Barrier
            | OpKind::Shared { .. }
            | OpKind::SimdgroupRole { .. }
    )
}

fn is_thread_op(kind: &OpKind) -> bool {
    matches!(
        kind,
        OpKind::ThreadId | OpKind::SimdLaneId | OpKind::SimdShuffleXor | OpKind::SimdBroadcast
    )
}

/// The ops of `ops` (nested regions included) that use `v`.
fn users(ops: &[Op], v: ValueId) -> Vec<&Op> {
    let mut out = Vec::new();
    walk(ops, &mut |op| {
        if op.operands.contains(&v) {
            out.push(op);
        }
    });
    out
}

/// Splits `f`'s K loop over `splits` (at least 2) programs per output tile.
pub fn split_k(f: &Function, splits: u32) -> CompileResult<SplitK> {
    if splits < 2 {
        return Err(refuse(
            format!("split_k={splits} does not split; the kernel runs unchanged below 2"),
            &Loc::unknown(),
        ));
    }
    let k = find_k_loop(f)?;
    let partial = partial_kernel(f, &k, splits)?;
    let finish = finish_kernel(f, &k, splits)?;
    Ok(SplitK {
        partial,
        finish,
        splits,
        tile_elems: k.tile[0] * k.tile[1],
    })
}

/// The loop to split, checked; every refusal names what does not fit.
fn find_k_loop(f: &Function) -> CompileResult<KLoop> {
    let mut found: Option<KLoop> = None;
    for (index, op) in f.body.ops.iter().enumerate() {
        let Some(k) = accumulating_loop(f, index, op)? else {
            continue;
        };
        if found.is_some() {
            return Err(refuse(
                "the kernel has more than one top-level loop that accumulates a dot; split_k splits \
                 exactly one",
                &op.loc,
            ));
        }
        found = Some(k);
    }
    let Some(k) = found else {
        let mut dot = None;
        walk(&f.body.ops, &mut |op| {
            if matches!(op.kind, OpKind::Dot) && dot.is_none() {
                dot = Some(op.loc.clone());
            }
        });
        return Err(match dot {
            Some(loc) => refuse(
                "this dot does not accumulate into a loop-carried value of a top-level loop \
                 (`acc = metile.dot(a, b, acc)` in a `for` at the kernel's top level), so there is \
                 no K loop to split",
                &loc,
            ),
            None => refuse(
                "no top-level loop accumulates `metile.dot` products, so there is no K loop to split",
                &f.body.ops.first().map_or_else(Loc::unknown, |o| o.loc.clone()),
            ),
        });
    };
    let mut bad = None;
    walk(&f.body.ops[..k.index], &mut |o| {
        if is_effect(&o.kind) && bad.is_none() {
            bad = Some((o.kind.name(), o.loc.clone()));
        }
    });
    if let Some((name, loc)) = bad {
        return Err(refuse(
            format!(
                "`{name}` runs before the K loop; each split runs the code before the loop, so it must \
                 not write memory or synchronise"
            ),
            &loc,
        ));
    }
    Ok(k)
}

/// `Some` when `op` (top-level op `index` of `f`) is a `for` adding `dot`s to a
/// carried value, checked to be splittable; errors for such a loop that is not.
fn accumulating_loop(f: &Function, index: usize, op: &Op) -> CompileResult<Option<KLoop>> {
    if !matches!(op.kind, OpKind::For { .. }) {
        return Ok(None);
    }
    let Some(body) = op.regions.first() else {
        return Ok(None);
    };
    let carried = body.args.get(1..).unwrap_or(&[]);
    let fed: Vec<usize> = (0..carried.len())
        .filter(|&j| {
            body.ops
                .iter()
                .any(|o| matches!(o.kind, OpKind::Dot) && o.operands.get(2) == Some(&carried[j]))
        })
        .collect();
    let acc = match fed.as_slice() {
        [] => return Ok(None),
        [j] => *j,
        _ => {
            return Err(refuse(
                "this loop accumulates into more than one loop-carried value; split_k splits a loop \
                 with one accumulator",
                &op.loc,
            ))
        }
    };
    let mut bad = None;
    walk(&body.ops, &mut |o| {
        if (is_effect(&o.kind) || is_thread_op(&o.kind)) && bad.is_none() {
            bad = Some((o.kind.name(), o.loc.clone()));
        }
    });
    if let Some((name, loc)) = bad {
        return Err(refuse(
            format!(
                "the K loop contains `{name}`; split_k runs the loop's iterations in different programs, \
                 so the loop may only read memory and compute"
            ),
            &loc,
        ));
    }
    let chain = accumulation_chain(body, acc)?;
    let ty = &f.values[carried[acc].index()];
    if ty.dtype() != Some(DType::F32) || ty.shape.len() != 2 {
        return Err(refuse(
            format!(
                "the accumulator is {ty}; split_k adds partial tiles in f32, so it splits loops whose \
                 accumulator is a 2-D f32 tile"
            ),
            &op.loc,
        ));
    }
    let after = &f.body.ops[index + 1..];
    for (i, &r) in op.results.iter().enumerate() {
        if i != acc {
            if let Some(user) = users(after, r).first() {
                return Err(refuse(
                    "a value the K loop carries besides the accumulator is used after the loop; \
                     split_k's finishing kernel has only the accumulator's sum",
                    &user.loc,
                ));
            }
        }
    }
    Ok(Some(KLoop {
        index,
        acc,
        chain,
        tile: [ty.shape[0], ty.shape[1]],
    }))
}

/// The body positions of the `dot`s through which carried value `acc` flows
/// to its yield, checked to be its only uses.
fn accumulation_chain(body: &Block, acc: usize) -> CompileResult<Vec<usize>> {
    let mut chain = Vec::new();
    let mut cur = body.args[1 + acc];
    loop {
        let used_by = users(&body.ops, cur);
        let [user] = used_by.as_slice() else {
            let other = used_by
                .iter()
                .find(|o| !matches!(o.kind, OpKind::Dot | OpKind::Yield))
                .or(used_by.get(1));
            let loc = other.map_or_else(Loc::unknown, |o| o.loc.clone());
            return Err(refuse(
                "the accumulator is used in the K loop other than as the dot's accumulator; split_k \
                 needs a loop that only adds dot products to it",
                &loc,
            ));
        };
        let pos = body.ops.iter().position(|o| std::ptr::eq(o, *user));
        match (&user.kind, pos) {
            (OpKind::Yield, Some(_))
                if user.operands.iter().position(|&v| v == cur) == Some(acc)
                    && user.operands.iter().filter(|&&v| v == cur).count() == 1 =>
            {
                return Ok(chain);
            }
            (OpKind::Dot, Some(p))
                if user.operands.get(2) == Some(&cur) && !user.operands[..2].contains(&cur) =>
            {
                chain.push(p);
                cur = user.results[0];
            }
            _ => {
                return Err(refuse(
                    format!(
                        "the accumulator flows into `{}` in the K loop; split_k needs a loop that only \
                         adds dot products to it (`acc = metile.dot(a, b, acc)`)",
                        user.kind.name()
                    ),
                    &user.loc,
                ))
            }
        }
    }
}

fn add_workspace(f: &mut Function) -> ValueId {
    f.values.push(Type {
        elem: Elem::Ptr(DType::F32, AddrSpace::Global),
        shape: vec![],
    });
    let value = ValueId(f.values.len() as u32 - 1);
    f.params.push(Param {
        name: WORKSPACE_PARAM.to_string(),
        kind: ParamKind::Pointer(DType::F32),
        value,
        divisibility: 1,
    });
    value
}

/// Whether `v` is a zero constant or a splat of one (so every split may start
/// from it).
fn is_zero(v: ValueId, ops: &[Op]) -> bool {
    let Some(def) = ops.iter().find(|o| o.results.first() == Some(&v)) else {
        return false;
    };
    match def.kind {
        OpKind::Constant(Literal::Float(x)) => x.to_bits() == 0,
        OpKind::Constant(Literal::Int(0)) => true,
        OpKind::Broadcast => is_zero(def.operands[0], ops),
        _ => false,
    }
}

/// `start + x * step` as the loop bound type `d`, or `end` itself once `x`
/// reaches the trip count (which also keeps the bound from passing `end`).
fn bound(
    e: &mut Emit<'_>,
    x: ValueId,
    (trip, s64, st64, e64): (ValueId, ValueId, ValueId, ValueId),
    d: DType,
) -> ValueId {
    let stepped = e.bin(BinaryOp::Mul, x, st64);
    let at = e.bin(BinaryOp::Add, s64, stepped);
    let last = e.cmp(CmpOp::Eq, x, trip);
    let b = e.select(last, e64, at);
    e.cast(b, d)
}

/// The loop's trip count, in i64, as Python's `range` (and every backend) runs it.
fn trip_count(e: &mut Emit<'_>, s64: ValueId, e64: ValueId, st64: ValueId, step: Option<i64>) -> ValueId {
    let zero = e.int(0, DType::I64);
    let up = e.bin(BinaryOp::Sub, e64, s64);
    let up = e.bin(BinaryOp::Max, up, zero);
    let down = e.bin(BinaryOp::Sub, s64, e64);
    let down = e.bin(BinaryOp::Max, down, zero);
    let ceil_div = |e: &mut Emit<'_>, span, mag| {
        let one = e.int(1, DType::I64);
        let m1 = e.bin(BinaryOp::Sub, mag, one);
        let n = e.bin(BinaryOp::Add, span, m1);
        e.bin(BinaryOp::FloorDiv, n, mag)
    };
    match step {
        Some(c) if c > 0 => {
            let mag = e.int(c, DType::I64);
            ceil_div(e, up, mag)
        }
        Some(c) if c < 0 => {
            let mag = e.int(-c, DType::I64);
            ceil_div(e, down, mag)
        }
        Some(_) => zero,
        None => {
            // A zero step runs no iterations on the GPUs; no split runs any either.
            let pos = e.cmp(CmpOp::Gt, st64, zero);
            let span = e.select(pos, up, down);
            let neg = e.bin(BinaryOp::Sub, zero, st64);
            let mag = e.select(pos, st64, neg);
            let one = e.int(1, DType::I64);
            let safe = e.bin(BinaryOp::Max, mag, one);
            let n = ceil_div(e, span, safe);
            let moves = e.cmp(CmpOp::Gt, mag, zero);
            e.select(moves, n, zero)
        }
    }
}

/// The constant value of `v` in `f`, if it is one.
fn constant_of(f: &Function, v: ValueId) -> Option<i64> {
    let mut out = None;
    f.walk(&mut |op| {
        if op.results.first() == Some(&v) {
            if let OpKind::Constant(Literal::Int(c)) = op.kind {
                out = Some(c);
            }
        }
    });
    out
}

/// `pid0 + GX * (pid1 + GY * pid2)`: the program's slot in the workspace.
fn program_index(e: &mut Emit<'_>, pid2: ValueId) -> ValueId {
    let (pid0, pid1) = (e.program_id(0), e.program_id(1));
    let (n0, n1) = (e.num_programs(0), e.num_programs(1));
    let p = e.bin(BinaryOp::Mul, n1, pid2);
    let p = e.bin(BinaryOp::Add, pid1, p);
    let p = e.bin(BinaryOp::Mul, n0, p);
    e.bin(BinaryOp::Add, pid0, p)
}

/// The first row of partial tile `split` of `program` in the workspace seen
/// as a `[programs * S * BM, BN]` matrix.
fn workspace_row(e: &mut Emit<'_>, program: ValueId, split: ValueId, splits: u32, bm: usize) -> ValueId {
    let s = e.int(i64::from(splits), DType::I32);
    let slot = e.bin(BinaryOp::Mul, program, s);
    let slot = e.bin(BinaryOp::Add, slot, split);
    let bm = e.int(bm as i64, DType::I32);
    e.bin(BinaryOp::Mul, slot, bm)
}

fn finish_function(mut f: Function, stage: &str) -> CompileResult<Function> {
    let internal = |e| CompileError::internal(stage, e);
    verify(&f).map_err(internal)?;
    clean_up(&mut f).map_err(internal)?;
    Ok(f)
}

fn partial_kernel(f: &Function, k: &KLoop, splits: u32) -> CompileResult<Function> {
    let mut p = f.clone();
    p.name = format!("{}_split_k_partial", f.name);
    p.constexprs.push(("split_k".into(), splits.to_string()));
    let ws = add_workspace(&mut p);
    let step_const = constant_of(f, f.body.ops[k.index].operands[2]);
    let mut body = std::mem::take(&mut p.body);
    body.ops.truncate(k.index + 1);
    let loc = body.ops[k.index].loc.clone();

    // The user's ids along axis 2 are the raw ones divided by S.
    let mut old = FxHashMap::default();
    let mut e = Emit::new(&mut p.values, loc.clone());
    let s_i32 = e.int(i64::from(splits), DType::I32);
    let raw = e.program_id(2);
    let pid2 = e.bin(BinaryOp::FloorDiv, raw, s_i32);
    let split = e.bin(BinaryOp::Rem, raw, s_i32);
    let raw_n = e.num_programs(2);
    let n2 = e.bin(BinaryOp::FloorDiv, raw_n, s_i32);
    walk(&body.ops, &mut |op| match op.kind {
        OpKind::ProgramId { axis: 2 } => {
            old.insert(op.results[0], pid2);
        }
        OpKind::NumPrograms { axis: 2 } => {
            old.insert(op.results[0], n2);
        }
        _ => {}
    });
    rename_uses(&mut body, &old);
    let header = std::mem::take(&mut e.ops);
    let Some(mut kloop) = body.ops.pop() else {
        return Err(refuse("internal: the K loop vanished", &loc));
    };

    // This split's share of the iterations.
    let (start, end, step) = (kloop.operands[0], kloop.operands[1], kloop.operands[2]);
    let (sd, ed) = (dtype_of(&e, start), dtype_of(&e, end));
    let s64 = e.cast(start, DType::I64);
    let e64 = e.cast(end, DType::I64);
    let st64 = e.cast(step, DType::I64);
    let trip = trip_count(&mut e, s64, e64, st64, step_const);
    let split64 = e.cast(split, DType::I64);
    let n64 = e.int(i64::from(splits), DType::I64);
    let one = e.int(1, DType::I64);
    let lo = e.bin(BinaryOp::Mul, split64, trip);
    let lo = e.bin(BinaryOp::FloorDiv, lo, n64);
    let next = e.bin(BinaryOp::Add, split64, one);
    let hi = e.bin(BinaryOp::Mul, next, trip);
    let hi = e.bin(BinaryOp::FloorDiv, hi, n64);
    let loop_vals = (trip, s64, st64, e64);
    let lo_start = bound(&mut e, lo, loop_vals, sd);
    let lo_end = bound(&mut e, lo, loop_vals, ed);
    let hi_end = bound(&mut e, hi, loop_vals, ed);

    // The other carried values at iteration `lo`.
    if kloop.results.len() > 1 {
        let at_lo = match ahead::affine_at(&mut e, &kloop, k.acc, lo) {
            Some(values) => values,
            None => ahead::run_ahead(&mut e, &kloop, (k.acc, &k.chain), lo_end),
        };
        kloop.operands.splice(3.., at_lo);
    }
    let init = kloop.operands[3 + k.acc];
    if !is_zero(init, &body.ops) {
        let zero = e.int(0, DType::I32);
        let first = e.cmp(CmpOp::Eq, split, zero);
        let zeros = e.zeros(DType::F32, &k.tile);
        kloop.operands[3 + k.acc] = e.select(first, init, zeros);
    }
    kloop.operands[0] = lo_start;
    kloop.operands[1] = hi_end;
    let middle = std::mem::take(&mut e.ops);

    let acc = kloop.results[k.acc];
    let program = program_index(&mut e, pid2);
    let row = workspace_row(&mut e, program, split, splits, k.tile[0]);
    let zero = e.int(0, DType::I32);
    let stride = e.int(k.tile[1] as i64, DType::I32);
    let (rows, cols) = (k.tile[0], k.tile[1]);
    e.op(
        OpKind::TileStore { rows, cols },
        vec![ws, row, zero, stride, acc],
        None,
    );
    let tail = std::mem::take(&mut e.ops);

    let mut ops = header;
    ops.append(&mut body.ops);
    ops.extend(middle);
    ops.push(kloop);
    ops.extend(tail);
    p.body = Block { args: vec![], ops };
    finish_function(p, "splitting the K loop (partial kernel)")
}

fn dtype_of(e: &Emit<'_>, v: ValueId) -> DType {
    e.ty(v).dtype().unwrap_or(DType::I32)
}

fn finish_kernel(f: &Function, k: &KLoop, splits: u32) -> CompileResult<Function> {
    let mut g = f.clone();
    g.name = format!("{}_split_k_finish", f.name);
    g.constexprs.push(("split_k".into(), splits.to_string()));
    let ws = add_workspace(&mut g);
    let mut body = std::mem::take(&mut g.body);
    let post = body.ops.split_off(k.index + 1);
    let Some(kloop) = body.ops.pop() else {
        return Err(refuse("internal: the K loop vanished", &Loc::unknown()));
    };
    let (rows, cols) = (k.tile[0], k.tile[1]);
    let tile = Type::tile(DType::F32, &k.tile);
    let mut e = Emit::new(&mut g.values, kloop.loc.clone());
    let pid2 = e.program_id(2);
    let program = program_index(&mut e, pid2);
    let zero = e.int(0, DType::I32);
    let stride = e.int(cols as i64, DType::I32);
    let row = workspace_row(&mut e, program, zero, splits, rows);
    let first = e.op(
        OpKind::TileLoad { rows, cols },
        vec![ws, row, zero, stride],
        Some(tile.clone()),
    );

    // for s in range(1, S): sum = sum + partial[s]
    let outer = std::mem::take(&mut e.ops);
    let iv = e.value(Type::scalar(DType::I32));
    let sum = e.value(tile.clone());
    let row = workspace_row(&mut e, program, iv, splits, rows);
    let part = e.op(
        OpKind::TileLoad { rows, cols },
        vec![ws, row, zero, stride],
        Some(tile.clone()),
    );
    let next = e.bin(BinaryOp::Add, sum, part);
    e.op(OpKind::Yield, vec![next], None);
    let loop_body = std::mem::replace(&mut e.ops, outer);
    let one = e.int(1, DType::I32);
    let end = e.int(i64::from(splits), DType::I32);
    let total = e.value(tile);
    e.ops.push(Op {
        kind: OpKind::For { num_stages: None },
        operands: vec![one, end, one, first],
        results: vec![total],
        regions: vec![Block {
            args: vec![iv, sum],
            ops: loop_body,
        }],
        loc: kloop.loc.clone(),
    });
    let summed = std::mem::take(&mut e.ops);

    let mut ops = body.ops;
    ops.extend(summed);
    ops.extend(post);
    let mut body = Block { args: vec![], ops };
    let renamed = FxHashMap::from_iter([(kloop.results[k.acc], total)]);
    rename_uses(&mut body, &renamed);
    g.body = body;
    finish_function(g, "splitting the K loop (finishing kernel)")
}
