//! Rows and columns of a ring `dot`'s operand that no store observes.
//!
//! Triton's matmul tutorial wraps its operands' rows by `% M` and columns by
//! `% N`, so the last tiles of a ragged product read rows (columns) from the
//! matrix's start, and masks them off only when it stores `C`. A tensor copy
//! of such a tile would read zeros there instead (`block_access.rs` tests
//! that the wrap is the identity, and the threads copy the last tiles). Row
//! `i` of a product depends on row `i` of `a` alone, and column `j` on column
//! `j` of `b`; where the accumulator reaches memory only through elementwise
//! operations and stores whose mask is false at output rows (columns) at or
//! past the wrap's bound, what the copy puts there is never seen, and the
//! wrap needs no test.
//!
//! The accumulator must be the `dot`'s own (carried by its loop, read by
//! nothing else in it), and every use of the loop's result, through casts,
//! unary and binary operations and selects, a masked store of the value whose
//! mask bounds that axis at the operand's origin by the same bound.

use super::affine_index::{Affine, RunTest};
use super::block_access::MaskBound;
use super::Lowering;
use crate::ir_emit::walk;
use metile_ir::gpu_ir::LaunchValue;
use metile_ir::{OpKind, ValueId};
use std::collections::HashSet;

impl<'f> Lowering<'f> {
    /// Whether the tiles of ring `ring`'s tile `tile` are unobserved wherever
    /// their index along `axis` (of the loaded tile) starts at `origin` and
    /// reaches `test`'s bound: `test` (`x < bound` of that index vector) may
    /// then fail without changing the kernel's results.
    pub(super) fn unobserved_past(
        &self,
        (ring, tile): (usize, usize),
        axis: usize,
        origin: &Affine,
        test: &RunTest,
    ) -> bool {
        self.observed_axis(ring, tile, axis)
            .zip(test.bound.and_then(|b| self.launch_value(b)))
            .is_some_and(|(out_axis, bound)| self.accumulator_masked(ring, out_axis, origin, bound))
    }

    /// The axis of the `dot`'s result that the tile's `axis` runs along, or
    /// `None` for the reduced axis.
    fn observed_axis(&self, ring: usize, tile: usize, axis: usize) -> Option<usize> {
        let r = &self.rings[ring];
        if r.b_only || r.dots.len() != 1 {
            return None;
        }
        match (tile, r.tiles.get(tile)?.k_major, axis) {
            (0, _, 0) => Some(0),
            (1, false, 1) | (1, true, 0) => Some(1),
            _ => None,
        }
    }

    /// Whether the accumulator of ring `ring`'s `dot` reaches memory only
    /// through stores masked by `origin + index < bound` along `out_axis`.
    fn accumulator_masked(&self, ring: usize, out_axis: usize, origin: &Affine, bound: LaunchValue) -> bool {
        let r = &self.rings[ring];
        let (dot_result, loop_result) = (r.dots[0], r.loop_result);
        let mut found = None;
        walk(&self.f.body.ops, &mut |o| {
            if found.is_none() && o.results.contains(&loop_result) {
                found = Some(o);
            }
        });
        let Some(lp) = found else {
            return false;
        };
        let body = &lp.regions[0];
        let Some(dot) = body.ops.iter().find(|o| o.results.first() == Some(&dot_result)) else {
            return false;
        };
        let (Some(&acc), Some(yield_op)) = (dot.operands.get(2), body.ops.last()) else {
            return false;
        };
        // Carried: the body's argument `p + 1` is the accumulator, and the
        // yield's operand `p` the product, each read once.
        let Some(p) = body.args.iter().skip(1).position(|&a| a == acc) else {
            return false;
        };
        let carried = yield_op.operands.get(p) == Some(&dot_result)
            && self.uses[dot_result.index()] == 1
            && self.uses[acc.index()] == 1;
        carried && self.reaches_memory_masked(lp.results[p], out_axis, origin, bound, &mut HashSet::new())
    }

    /// Whether every use of `v` (a tile of the accumulator's shape), through
    /// elementwise operations, is a store of it masked as
    /// [`Lowering::accumulator_masked`] requires.
    /// (`seen`: the values already found to pass, each walked once.)
    fn reaches_memory_masked(
        &self,
        v: ValueId,
        out_axis: usize,
        origin: &Affine,
        bound: LaunchValue,
        seen: &mut HashSet<ValueId>,
    ) -> bool {
        if !seen.insert(v) {
            return true;
        }
        let shape = &self.f.ty(v).shape;
        let mut users = vec![];
        walk(&self.f.body.ops, &mut |o| {
            users.extend(o.operands.iter().filter(|&&x| x == v).map(|_| o));
        });
        users.len() == self.uses[v.index()] as usize
            && users.iter().all(|user| match user.kind {
                OpKind::Store { has_mask: true } if user.operands[1] == v && user.operands[0] != v => {
                    self.store_masked(user.operands[2], out_axis, origin, bound)
                }
                OpKind::Cast | OpKind::Unary(_) | OpKind::Binary(_) | OpKind::Select => {
                    let r = user.results[0];
                    &self.f.ty(r).shape == shape
                        && self.reaches_memory_masked(r, out_axis, origin, bound, seen)
                }
                _ => false,
            })
    }

    /// Whether `mask` has a conjunct `origin + index < bound` along `axis`.
    fn store_masked(&self, mask: ValueId, axis: usize, origin: &Affine, bound: LaunchValue) -> bool {
        let mut parts = vec![];
        self.conjuncts(mask, &mut parts);
        parts.into_iter().any(|part| {
            let mut tests = vec![];
            matches!(self.mask_bound(part, &mut tests),
                     Some(MaskBound::Below(a, o, b)) if a == axis && o == *origin && b == bound && tests.is_empty())
        })
    }
}
