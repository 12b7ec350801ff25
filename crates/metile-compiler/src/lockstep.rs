//! Counters carried through a `for` loop in lockstep with its induction
//! variable are that variable: Triton's persistent matmul counts its tiles
//! twice, `tile_id` (the loop's) and `tile_id_c` (started a step before the
//! loop and advanced by a step in the body, for the epilogue), and computes
//! the tile's coordinates from each:
//!
//! ```text
//! tile_id_c = start_pid - NUM_SMS
//! for tile_id in range(start_pid, num_tiles, NUM_SMS):
//!     ... pid_m from tile_id ...
//!     tile_id_c += NUM_SMS
//!     ... pid_m from tile_id_c ...
//! ```
//!
//! In every iteration the advanced counter equals `tile_id` (both are
//! `start + i * step`, wrapping alike), so its uses in the body read the
//! induction variable instead, and common-subexpression elimination then
//! makes the epilogue's coordinates the main loop's: what the analyses of
//! the loads learn about the tile (which rows a store observes, for one)
//! holds for the store too. The same holds for a counter that starts at the
//! loop's start and advances at the end of the body (its value in the body is
//! the induction variable).

use metile_ir::{BinaryOp, Block, Function, Literal, Op, OpKind, Type, ValueId};
use rustc_hash::FxHashMap;

/// What defines a value: an integer constant, or a sum or difference.
#[derive(Clone, Copy)]
enum Def {
    Int(i64),
    Binary(BinaryOp, ValueId, ValueId),
}

/// Replaces, in each `for` body, the uses of a counter that moves in lockstep
/// with the induction variable by the induction variable. True when a use was
/// replaced.
pub fn lockstep_counters(f: &mut Function) -> bool {
    // Most kernels carry no integer beside a loop's variable: they pay one walk.
    if !carries_a_counter(&f.body, &f.values) {
        return false;
    }
    let mut defs = FxHashMap::default();
    collect_defs(&f.body, &mut defs);
    let values = &f.values;
    let mut changed = false;
    walk_fors(&mut f.body, &mut |op| {
        let [start, _, step, ref inits @ ..] = op.operands[..] else {
            return;
        };
        let Some(body) = op.regions.first_mut() else {
            return;
        };
        let Some((&iv, carried)) = body.args.split_first() else {
            return;
        };
        let Some(yielded) = body
            .ops
            .last()
            .filter(|o| o.kind == OpKind::Yield)
            .map(|o| o.operands.clone())
        else {
            return;
        };
        let same = |a: ValueId, b: ValueId| {
            a == b || matches!((defs.get(&a), defs.get(&b)), (Some(Def::Int(x)), Some(Def::Int(y))) if x == y)
        };
        let mut replace: FxHashMap<ValueId, ValueId> = FxHashMap::default();
        for ((&arg, &init), &next) in carried.iter().zip(inits).zip(&yielded) {
            if values[arg.index()] != values[iv.index()] {
                continue;
            }
            // The body advances the counter by the loop's step.
            let advanced = match defs.get(&next) {
                Some(&Def::Binary(BinaryOp::Add, x, y)) => {
                    (x == arg && same(y, step)) || (y == arg && same(x, step))
                }
                _ => false,
            };
            if !advanced {
                continue;
            }
            // A step before the start: `start - step`, or that constant.
            let step_early = match (defs.get(&init), defs.get(&start), defs.get(&step)) {
                (Some(&Def::Binary(BinaryOp::Sub, s, d)), ..) => s == start && same(d, step),
                (Some(&Def::Int(i)), Some(&Def::Int(s)), Some(&Def::Int(d))) => s.checked_sub(d) == Some(i),
                _ => false,
            };
            if init == start {
                replace.insert(arg, iv);
            } else if step_early {
                replace.insert(next, iv);
            }
        }
        if !replace.is_empty() {
            changed |= substitute(body, &replace);
        }
    });
    changed
}

/// Whether some `for` in `block` carries a value of its induction variable's type.
fn carries_a_counter(block: &Block, values: &[Type]) -> bool {
    block.ops.iter().any(|op| {
        let counts = matches!(op.kind, OpKind::For { .. })
            && op
                .regions
                .first()
                .is_some_and(|body| match body.args.split_first() {
                    Some((iv, carried)) => carried.iter().any(|a| values[a.index()] == values[iv.index()]),
                    None => false,
                });
        counts || op.regions.iter().any(|r| carries_a_counter(r, values))
    })
}

fn collect_defs(block: &Block, defs: &mut FxHashMap<ValueId, Def>) {
    for op in &block.ops {
        match (&op.kind, &op.results[..], &op.operands[..]) {
            (OpKind::Constant(Literal::Int(c)), [r], _) => {
                defs.insert(*r, Def::Int(*c));
            }
            (OpKind::Binary(b @ (BinaryOp::Add | BinaryOp::Sub)), [r], &[x, y]) => {
                defs.insert(*r, Def::Binary(*b, x, y));
            }
            _ => {}
        }
        for region in &op.regions {
            collect_defs(region, defs);
        }
    }
}

/// Calls `visit` on every `for` op, inner loops after the loop holding them.
fn walk_fors(block: &mut Block, visit: &mut impl FnMut(&mut Op)) {
    for op in &mut block.ops {
        if matches!(op.kind, OpKind::For { .. }) {
            visit(op);
        }
        for region in &mut op.regions {
            walk_fors(region, visit);
        }
    }
}

/// Rewrites the operands of `block`'s ops (regions included) by `replace`.
fn substitute(block: &mut Block, replace: &FxHashMap<ValueId, ValueId>) -> bool {
    let mut changed = false;
    for op in &mut block.ops {
        for v in &mut op.operands {
            if let Some(&to) = replace.get(v) {
                *v = to;
                changed = true;
            }
        }
        for region in &mut op.regions {
            changed |= substitute(region, replace);
        }
    }
    changed
}
