//! Rings that hold only the `b` tiles of a loop's `dot`s: products chained in
//! one loop, as attention's `qk = dot(q, k.T)` then `acc = dot(p, v, acc)`,
//! whose `a` is no load of the loop (loop-invariant and staged once, or
//! computed in the loop and read from the registers where it already is
//! `wgmma`'s A, else staged every iteration). The prefetch pass carries the
//! loads of the `b`s (`k`, `v`) `depth` iterations ahead as it does a GEMM's
//! operands (`prefetch::RingOperands`); one ring per loop holds all of them in
//! each stage, filled by tensor copies where the launch allows, else by the
//! threads' copies, on the GEMM ring's memory barriers (`ring_barriers.rs`).
//!
//! An iteration waits for its stage once, before its first `dot`, and runs
//! each `dot` to completion (`wgmma.wait_group 0`: its result feeds what
//! follows in the iteration, the softmax or the next product). Every product
//! of the previous iteration is then done, so right after issuing its first
//! `dot` the iteration releases the stage the previous one multiplied and
//! refills it with the tiles `depth` iterations ahead (the prefetch pass's
//! `if`, held back until then), which load while the rest of the iteration
//! computes. Only 16-bit
//! `wgmma` plans (sm_90), whose atoms read `b` from threadgroup memory
//! whichever way `a` comes. Two such loops one after the other (attention's
//! unmasked and masked key loops) share the stages' memory.

use super::async_ring::{Chain, Ring, RingTile};
use super::ring_barriers::RingBarriers;
use super::wgmma::OperandA;
use super::{Home, Lowering};
use crate::dot_tiling::{b_alone_stage, k_major_b, reads_k_major_b, wgmma_staging, AtomTiling, Staged};
use crate::error::CompileResult;
use metile_ir::gpu_ir::*;
use metile_ir::{Block, DType, Op, OpKind, ValueId};

/// A `dot` of the loop whose `b` the prefetch pass carries alone.
struct Member {
    /// Index of the `dot` in the loop body.
    at: usize,
    plan: AtomTiling,
    chain: Chain,
    /// `b = x.T` with `x` carried: the stage holds `x`, `b` K-major.
    k_major: bool,
}

impl<'f> Lowering<'f> {
    /// Sets up the `b` ring of the loop at `block.ops[li]` where the prefetch
    /// pass carried `b` tiles alone. `true` when the loop has one (it then
    /// takes no GEMM ring).
    pub(super) fn b_ring_for(&mut self, block: &'f Block, li: usize) -> CompileResult<bool> {
        let lp = &block.ops[li];
        let Some(body) = lp.regions.first() else {
            return Ok(false);
        };
        let mut members: Vec<Member> = vec![];
        for (at, dot) in body.ops.iter().enumerate() {
            if dot.kind != OpKind::Dot {
                continue;
            }
            // A carried `a` makes a GEMM ring (`async_ring.rs`).
            if self.chain(block, li, dot.operands[0]).is_some() {
                return Ok(false);
            }
            let Some(plan) = self.ring_plan(dot).filter(reads_k_major_b) else {
                continue;
            };
            let source = self.ring_b_source(dot, &plan);
            let Some(chain) = self.chain(block, li, source.unwrap_or(dot.operands[1])) else {
                continue;
            };
            members.push(Member {
                at,
                plan,
                chain,
                k_major: source.is_some(),
            });
        }
        let Some(first) = members.first() else {
            return Ok(false);
        };
        // One refill `if` and one depth for every tile; the `if` is held back
        // until the first member's release, so no other `dot` (which would
        // lower it sooner) comes between.
        let ahead = first.chain.ahead.0;
        let same_ifs = members.iter().all(|m| m.chain.same_ifs(&first.chain));
        let only_members = body.ops[ahead + 1..=first.at]
            .iter()
            .enumerate()
            .all(|(i, o)| o.kind != OpKind::Dot || ahead + 1 + i == first.at);
        let dtype = self.elem_dtype(body.ops[first.at].operands[1]);
        let one_dtype = members
            .iter()
            .all(|m| self.elem_dtype(body.ops[m.at].operands[1]) == dtype);
        if !same_ifs || !only_members || !one_dtype || !self.feeds_next_iteration_only(body, ahead) {
            return Ok(false);
        }
        let mut tiles = vec![];
        let mut stage_len = 0;
        for m in &members {
            let (Some((sa, _, _)), Some((sb, len))) =
                (wgmma_staging(&m.plan, dtype), b_alone_stage(&m.plan, dtype))
            else {
                return Ok(false);
            };
            let place = if m.k_major {
                k_major_b(sa, sb, m.plan.shape)
            } else {
                sb
            };
            tiles.push(RingTile {
                place: Staged {
                    base: stage_len,
                    ..place
                },
                k_major: m.k_major,
            });
            stage_len += len;
        }
        let stages = first.chain.positions.len() + 1;
        let tensor_copies = members.iter().all(|m| self.tensor_copies_pay(&m.plan));
        let barrier_bytes = RingBarriers::bytes(stages, tensor_copies);
        let ring_bytes = stages * stage_len * dtype.size_bytes();
        // The `a`s the `dot`s do not read from registers are staged beside
        // the ring (before the loop or every iteration): without room for
        // them the loop keeps its carried tiles in registers instead.
        let mut beside = 0;
        for m in &members {
            let a = body.ops[m.at].operands[0];
            let la = self.natural_layout(a)?;
            if !self.reads_a_from_registers(&m.plan, la) {
                let (rows, _, k) = m.plan.shape;
                beside += (rows * k * self.elem_dtype(a).size_bytes()).div_ceil(1024) * 1024 + 1024;
            }
        }
        let used: usize = self.b.func().threadgroup.iter().map(|t| t.footprint()).sum();
        let earlier = self.earlier_ring_memory(block, li, ring_bytes);
        let new_bytes = if earlier.is_some() { 0 } else { ring_bytes };
        if used + new_bytes + barrier_bytes + beside > self.a.target.max_threadgroup_bytes {
            return Ok(false);
        }
        let purpose = match earlier {
            Some(earlier) => TgPurpose::Alias(earlier),
            None => TgPurpose::Scratch,
        };
        let root = self.b.add_threadgroup(dtype, stages * stage_len, purpose);
        let barriers = self.new_ring_barriers(stages, tiles.len() as u32, tensor_copies);
        let ring = self.rings.len();
        self.rings.push(Ring {
            root,
            stage_len,
            stages,
            tiles,
            dots: members.iter().map(|m| body.ops[m.at].results[0]).collect(),
            b_only: true,
            carried: first.chain.positions.iter().map(|&c| body.args[c + 1]).collect(),
            previous: Some(self.b.add_reg(DType::I32, 1)),
            barriers: Some(barriers),
            refill: None,
            loop_result: lp.results[first.chain.positions[0]],
            site: (block as *const Block as usize, li),
        });
        for (tile, m) in members.iter().enumerate() {
            self.mark_chain(block, li, &m.chain, (ring, tile));
        }
        Ok(true)
    }

    /// The memory of a ring of a loop that runs before the loop at
    /// `block.ops[li]` in the same block, at least `bytes` long: free again
    /// once that loop is done.
    fn earlier_ring_memory(&self, block: &Block, li: usize, bytes: usize) -> Option<GpuValue> {
        let here = block as *const Block as usize;
        let allocations = &self.b.func().threadgroup;
        self.rings
            .iter()
            .filter(|r| r.site.0 == here && r.site.1 < li)
            .filter_map(|r| allocations.iter().find(|a| a.value == r.root))
            .find(|a| !matches!(a.purpose, TgPurpose::Alias(_)) && a.bytes() >= bytes)
            .map(|a| a.value)
    }

    /// The `b` ring whose `dot`s include `op`.
    pub(super) fn b_ring_of(&self, op: &Op) -> Option<usize> {
        let r = op.results[0];
        self.rings
            .iter()
            .position(|ring| ring.b_only && ring.dots.contains(&r))
    }

    /// A `dot` of a `b` ring: each multiplies its `b` tile with its `a`
    /// (staged before the loop, in registers, or staged now) and waits for
    /// the product. The first of an iteration waits for the stage first and,
    /// once its `wgmma`s are issued, releases the stage the previous
    /// iteration multiplied (done with: every product waits) and lowers the
    /// held-back refill into it, so the tiles `depth` iterations ahead load
    /// while this iteration computes.
    pub(super) fn b_ring_dot(
        &mut self,
        op: &'f Op,
        plan: &AtomTiling,
        ring: usize,
        reg: RegId,
    ) -> CompileResult<()> {
        let ring = self.rings[ring].clone();
        let (Some(bars), Some(previous)) = (ring.barriers, ring.previous) else {
            return Err(self.internal("a b ring without memory barriers"));
        };
        let first = ring.dots.first() == Some(&op.results[0]);
        let Some(Home::Staged { tile, base, .. }) = self.homes[op.operands[1].index()].clone() else {
            return Err(self.internal("a b-ring dot whose b is not in the ring"));
        };
        if first {
            // The threads' copies of this stage (where no tensor copy could).
            let pending = (ring.carried.len() - 1) as u8;
            self.emit(GpuOpKind::AsyncWait { pending }, ValueList::new(), vec![]);
            self.wait_ring_stage(bars, base, ring.stage_len);
        }
        let sync = self.filled_by_threads(bars, base, ring.stage_len);
        let dtype = self.elem_dtype(op.operands[0]);
        let Some((sa, _, _)) = wgmma_staging(plan, dtype) else {
            return Err(self.internal("a b-ring dot without a wgmma staging"));
        };
        let a = self.b_ring_a(plan, op.operands[0], sa)?;
        let t = ring.tiles[tile];
        let stage = Some((None, Some(base), sync));
        let issued = self.wgmma_issue_with(plan, (a, ring.root), (sa, t.place), t.k_major, stage, reg)?;
        if first {
            let released = self.reg_read(previous, 0, DType::I32);
            self.release_stage(bars, released, ring.stage_len)?;
            self.flush_deferred()?;
            self.reg_write(previous, 0, base);
        }
        self.wgmma_finish(&issued, reg, 0);
        Ok(())
    }

    /// Where a `b`-ring `dot` reads its `a`: threadgroup memory it was staged
    /// into before the loop, the registers that already hold its A fragments,
    /// or threadgroup memory it is staged into now (published to the tensor
    /// cores here).
    fn b_ring_a(&mut self, plan: &AtomTiling, a: ValueId, sa: Staged) -> CompileResult<OperandA> {
        if let Some(root) = self.staged_once(a) {
            return Ok(OperandA::Staged(root));
        }
        let la = self.natural_layout(a)?;
        let av = self.elems(a, la)?;
        if let Some(regs) = self.a_in_registers(plan, la, &av) {
            return Ok(OperandA::Registers(regs));
        }
        let dtype = self.elem_dtype(a);
        let (m, _, k) = plan.shape;
        let root = self.dot_scratch(dtype, m * k)?;
        self.barrier()?;
        self.stage(root, sa, la, &av, None, None)?;
        self.emit(GpuOpKind::ProxyFence, ValueList::new(), vec![]);
        self.barrier()?;
        Ok(OperandA::Staged(root))
    }
}
