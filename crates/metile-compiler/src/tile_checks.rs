//! Checks of meaning, not structure, that every backend relies on, run once after
//! tracing: what a kernel may do that one backend would execute differently from
//! another is refused here, with the op's source line, before any backend sees it.
//!
//! Thread-level values (derived from `thread_id`, `simd_lane_id` or the simdgroup
//! exchanges) have one element per thread. Inside `simdgroup_role` only the role's
//! threads run, so a load, store or reduction of such a value would touch only the
//! role's elements on a GPU but every element in the interpreter, which runs each
//! role body once as whole tiles. Those ops are refused inside roles; tile values
//! (from `arange`) work there on every backend.

use crate::error::{CompileError, CompileResult};
use metile_ir::{Block, Function, OpKind};

/// Which values are thread-level: produced by a thread op, or computed from one
/// by element-wise ops, pointer arithmetic or loads; loop- and if-carried values
/// are thread-level when any value flowing into them is.
pub fn thread_level_values(f: &Function) -> Vec<bool> {
    let mut level = vec![false; f.values.len()];
    // Carried values can become thread-level on a later iteration of this walk.
    loop {
        let before = level.iter().filter(|&&b| b).count();
        mark_block(f, &f.body, &mut level);
        if level.iter().filter(|&&b| b).count() == before {
            return level;
        }
    }
}

fn mark_block(f: &Function, block: &Block, level: &mut [bool]) {
    for op in &block.ops {
        for r in &op.regions {
            mark_block(f, r, level);
        }
        let any_in = op.operands.iter().any(|v| level[v.index()]);
        match op.kind {
            OpKind::ThreadId | OpKind::SimdLaneId | OpKind::SimdShuffleXor | OpKind::SimdBroadcast => {
                level[op.results[0].index()] = true;
            }
            OpKind::Broadcast
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
            | OpKind::Load { .. }
            | OpKind::Assume { .. }
                if any_in =>
            {
                for r in &op.results {
                    level[r.index()] = !f.ty(*r).is_scalar();
                }
            }
            OpKind::For { .. } => {
                let body = &op.regions[0];
                let yields = body.ops.last().map(|y| y.operands.as_slice()).unwrap_or(&[]);
                for (i, r) in op.results.iter().enumerate() {
                    let carried =
                        level[op.operands[3 + i].index()] || yields.get(i).is_some_and(|y| level[y.index()]);
                    if carried {
                        level[r.index()] = true;
                        if let Some(arg) = body.args.get(i + 1) {
                            level[arg.index()] = true;
                        }
                    }
                }
            }
            OpKind::While => {
                let body = &op.regions[1];
                let yields = body.ops.last().map(|y| y.operands.as_slice()).unwrap_or(&[]);
                for (i, r) in op.results.iter().enumerate() {
                    if level[op.operands[i].index()] || yields.get(i).is_some_and(|y| level[y.index()]) {
                        level[r.index()] = true;
                        for region in &op.regions {
                            if let Some(arg) = region.args.get(i) {
                                level[arg.index()] = true;
                            }
                        }
                    }
                }
            }
            OpKind::If => {
                for (i, r) in op.results.iter().enumerate() {
                    let from_branch = op.regions.iter().any(|b| {
                        b.ops
                            .last()
                            .and_then(|y| y.operands.get(i))
                            .is_some_and(|y| level[y.index()])
                    });
                    level[r.index()] |= from_branch;
                }
            }
            _ => {}
        }
    }
}

/// Refuses what backends would disagree on (see the module comment).
pub fn check_kernel(f: &Function) -> CompileResult<()> {
    if !f.uses_thread_ops() {
        return Ok(());
    }
    let level = thread_level_values(f);
    check_block(&f.body, &level, false)
}

fn check_block(block: &Block, level: &[bool], in_role: bool) -> CompileResult<()> {
    for op in &block.ops {
        let touches_thread_values = op.operands.iter().any(|v| level[v.index()]);
        let per_element = matches!(
            op.kind,
            OpKind::Load { .. }
                | OpKind::Store { .. }
                | OpKind::TileStore { .. }
                | OpKind::Atomic { .. }
                | OpKind::Reduce { .. }
                | OpKind::Scan { .. }
                | OpKind::Sort { .. }
                | OpKind::Dot
        );
        if in_role && touches_thread_values && per_element {
            return Err(CompileError::new(
                op.kind.name(),
                "inside simdgroup_role, loads, stores and reductions of thread-level values (from \
                 thread_id, simd_lane_id or simdgroup exchanges) are not supported: only the role's \
                 threads run there, while the body's tiles are computed whole; index with \
                 metile.arange inside the role instead",
                op.loc.clone(),
            ));
        }
        let inner_role = in_role || matches!(op.kind, OpKind::SimdgroupRole { .. });
        for r in &op.regions {
            check_block(r, level, inner_role)?;
        }
    }
    Ok(())
}
