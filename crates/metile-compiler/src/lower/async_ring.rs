//! `dot` operands in a ring of threadgroup buffers filled by asynchronous
//! copies (`cp.async`), the lowering side of `prefetch.rs`'s `Carry::Async`.
//!
//! The pass leaves a loop whose `dot` multiplies tiles loaded `d` iterations
//! earlier: `d` guarded prologue `if`s load iterations `0 .. d`, and each
//! iteration's guarded `if` loads iteration `i + d`, the tiles travelling
//! through `d` carried values. Here those tiles never reach registers: each
//! is a *slot* of a ring of `d + 1` stages (each stage holds the `dot`'s whole
//! `a` and `b`, placed and padded like ordinary staging), and a carried tile
//! is just its stage's offset, one uniform `i32`. Prologue `if` `j` fills
//! stage `j`; the loop's `if` fills the one stage no carried value names (the
//! one the previous iteration multiplied), found as the sum of all stage
//! offsets minus the carried ones. Each such `if` is followed by one commit,
//! so every thread commits one group per iteration, copies or not.
//!
//! An iteration then runs: wait until at most `d - 1` groups are in flight
//! (this iteration's tiles have landed), barrier (everyone's copies are
//! visible and everyone has finished reading the stage about to be
//! refilled), issue the copies of iteration `i + d` (the `if` is held back
//! until here, see `Lowering::block`), and walk the atom steps over this
//! iteration's stage. One barrier per iteration, loads `d` iterations ahead.
//!
//! A load copies its vector runs directly (4, 8 or 16 bytes each) when they
//! are aligned and, for a masked load, when a uniform test (`uniform_masks`)
//! finds the whole tile in bounds; edge tiles and unaligned tiles load into
//! registers as usual and store into the slot, which the same barrier
//! publishes.
//!
//! A ring `wgmma` reads runs differently (`ring_barriers.rs`): memory barriers per
//! stage instead of the barrier per iteration, the previous iteration's
//! `wgmma`s still running while the next is issued, and the refill (after
//! them) taking the stage they release; its tiles come from tensor copies
//! where the launch allows.

use super::ring_barriers::RingBarriers;
use super::wgmma::staged_delta;
use super::{Home, Lowering};
use crate::axis_info::Guard;
use crate::dist_layout::DistLayout;
use crate::dot_tiling::{k_major_b, reads_k_major_b, ring_stage, AtomTiling, Staged};
use crate::error::CompileResult;
use crate::layout_assign::{Class, LayoutId};
use metile_ir::gpu_ir::*;
use metile_ir::{BinaryOp, Block, CmpOp, DType, Literal, Op, OpKind, ValueId};

/// Where a ring load's tile goes: the ring's memory, the slot's placement and
/// offset, and the device buffer the tile comes from.
struct Slot {
    root: GpuValue,
    at: Staged,
    base: GpuValue,
    src_root: GpuValue,
}

/// How the threads copy a ring tile: the layout and width of their runs, each
/// run's source index, a uniform test that the tile is aligned (block
/// pointers), whether runs of that width can be copied at all, and whether
/// masked-off runs can be zero-filled copies.
struct CopyPlan {
    layout: LayoutId,
    width: usize,
    index: Vec<GpuValue>,
    aligned: Option<GpuValue>,
    copyable: bool,
    zero_filled: bool,
    mask: Option<ValueId>,
}

/// One ring: its threadgroup memory and where the tiles sit in a stage.
#[derive(Clone, Debug)]
pub(super) struct Ring {
    pub root: GpuValue,
    pub stage_len: usize,
    pub stages: usize,
    /// The tiles of a stage: a GEMM ring's `a` and `b` of one `dot`, or the
    /// `b`s of the `dot`s of a chained product (`b_ring.rs`).
    pub tiles: Vec<RingTile>,
    /// The `dot`s (results) that multiply the ring's tiles, in program order.
    pub dots: Vec<ValueId>,
    /// The stages hold only `b` tiles (`b_ring.rs`).
    pub b_only: bool,
    /// The loop body's carried values of the first tile (their stage offsets).
    pub carried: Vec<ValueId>,
    /// With `wgmma`, whose reads of an iteration's stage still run during the
    /// next iteration: the stage the previous iteration multiplied (its
    /// offset), which that iteration releases once they are done.
    pub previous: Option<RegId>,
    /// With `wgmma`, the stages' memory barriers (`tma.rs`).
    pub barriers: Option<RingBarriers>,
    /// While the loop's refill is lowered: the empty barrier's parity to wait for.
    pub refill: Option<GpuValue>,
    /// A result of the ring's loop: once it has a home, the loop has been
    /// lowered and the code that follows may take the ring's memory.
    pub loop_result: ValueId,
    /// The block (its address) and index of the ring's loop.
    pub site: (usize, usize),
}

/// One tile of a ring stage.
#[derive(Clone, Copy, Debug)]
pub(super) struct RingTile {
    /// Where it sits within a stage.
    pub place: Staged,
    /// The tile is the transpose of its `dot`'s `b` (`dot(x, w.T)`): the
    /// stage holds `w`'s tile as it is, which is `b` K-major.
    pub k_major: bool,
}

/// Which stage a ring value's tile is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RingSlot {
    /// Carried through a loop: a register holds its stage offset.
    Carried,
    /// A prologue `if` result: this stage.
    Fixed(usize),
    /// The loop's `if` result: the stage no carried value names.
    Free,
}

/// A Tile IR value that lives in a ring.
#[derive(Clone, Copy, Debug)]
pub(super) struct RingValue {
    pub ring: usize,
    /// Which of the ring's tiles (`Ring::tiles`).
    pub tile: usize,
    pub slot: RingSlot,
}

/// The chain of one `dot` operand through a pipelined loop.
pub(super) struct Chain {
    /// Carried positions (0-based, without the induction variable), this
    /// iteration's first.
    pub positions: Vec<usize>,
    /// The loop body's `if` (op index) and its result index.
    pub ahead: (usize, usize),
    /// Per prologue stage: the `if` before the loop (op index) and result index.
    pub prologue: Vec<(usize, usize)>,
}

impl Chain {
    /// Whether `other` is loaded by the same `if`s (the loop's and the
    /// prologue's) at the same depth.
    pub(super) fn same_ifs(&self, other: &Chain) -> bool {
        self.ahead.0 == other.ahead.0
            && self.positions.len() == other.positions.len()
            && self.prologue.iter().zip(&other.prologue).all(|(x, y)| x.0 == y.0)
    }
}

/// The value an `if`'s then-region yields at `index`, when it is the result
/// of a load in that region used nowhere else.
fn loaded_in_then(op: &Op, index: usize, uses: &[u32]) -> Option<ValueId> {
    let then = op.regions.first()?;
    let v = *then.ops.last()?.operands.get(index)?;
    let load = then.ops.iter().find(|o| o.results.contains(&v))?;
    let is_load = matches!(load.kind, OpKind::Load { .. } | OpKind::TileLoad { .. });
    (is_load && uses[v.index()] == 1).then_some(v)
}

/// The `if` op (index) in `ops` with result `v`, and the result's index.
fn if_result(ops: &[Op], v: ValueId) -> Option<(usize, usize)> {
    ops.iter().enumerate().find_map(|(i, o)| {
        let r = o.results.iter().position(|&r| r == v)?;
        matches!(o.kind, OpKind::If).then_some((i, r))
    })
}

impl<'f> Lowering<'f> {
    /// Finds every `dot` whose two operands the prefetch pass carries for an
    /// asynchronous ring, allocates the rings and records their values.
    pub(super) fn find_rings(&mut self, block: &'f Block) -> CompileResult<()> {
        if !self.a.switches.async_copy {
            return Ok(());
        }
        for (li, op) in block.ops.iter().enumerate() {
            for r in &op.regions {
                self.find_rings(r)?;
            }
            if !matches!(op.kind, OpKind::For { .. }) {
                continue;
            }
            let Some(body) = op.regions.first() else { continue };
            if self.b_ring_for(block, li)? {
                continue;
            }
            for (di, dot) in body.ops.iter().enumerate() {
                if matches!(dot.kind, OpKind::Dot) {
                    self.ring_for(block, li, di)?;
                }
            }
        }
        Ok(())
    }

    /// Sets up the ring of the `dot` at `body.ops[di]` of the loop at
    /// `block.ops[li]`, when its operands have the pass's shape.
    fn ring_for(&mut self, block: &'f Block, li: usize, di: usize) -> CompileResult<()> {
        let lp = &block.ops[li];
        let body = &lp.regions[0];
        let dot = &body.ops[di];
        let r = dot.results[0];
        let Some(plan) = self.ring_plan(dot) else {
            return Ok(());
        };
        let Some((a_source, b_source)) = self.ring_sources(dot, &plan) else {
            return Ok(());
        };
        let sources = [a_source, b_source.unwrap_or(dot.operands[1])];
        let chains: Vec<Chain> = match sources
            .iter()
            .map(|&v| self.chain(block, li, v))
            .collect::<Option<Vec<_>>>()
        {
            Some(c) => c,
            None => return Ok(()),
        };
        let (ca, cb) = (&chains[0], &chains[1]);
        let same_ifs = ca.same_ifs(cb);
        // The loop's loads must be held back until after this dot's barrier.
        let next_dot = body.ops[ca.ahead.0 + 1..]
            .iter()
            .position(|o| matches!(o.kind, OpKind::Dot))
            .map(|i| i + ca.ahead.0 + 1);
        if !same_ifs || next_dot != Some(di) || !self.feeds_next_iteration_only(body, ca.ahead.0) {
            return Ok(());
        }
        let dtype = self.elem_dtype(a_source);
        let (sa, sb, stage_len) = ring_stage(&plan, &self.a.target, &self.a.switches, dtype);
        let sb = match b_source {
            Some(_) => k_major_b(sa, sb, plan.shape),
            None => sb,
        };
        let stage_bytes = stage_len * dtype.size_bytes();
        let carried = ca.positions.len();
        let max_bytes = self.a.target.max_threadgroup_bytes;
        let stages = carried + 1;
        // wgmma rings synchronise through memory barriers (two per stage)
        // and, where tiles that qualify go by tensor copies (`tma.rs`),
        // count the warps' releases (one i32 each).
        let wgmma = plan.atom.reads_shared_memory();
        let tensor_copies = wgmma && self.tensor_copies_pay(&plan);
        let barrier_bytes = match wgmma {
            false => 0,
            true => RingBarriers::bytes(stages, tensor_copies),
        };
        // A loop the register prefetch carried may not fit as a ring; it then
        // stays in registers.
        let used: usize = self.b.func().threadgroup.iter().map(|t| t.footprint()).sum();
        if used + stages * stage_bytes + barrier_bytes > max_bytes {
            return Ok(());
        }
        let root = self
            .b
            .add_threadgroup(dtype, stages * stage_len, TgPurpose::Scratch);
        let ring = self.rings.len();
        let previous = wgmma.then(|| self.b.add_reg(metile_ir::DType::I32, 1));
        let barriers = wgmma.then(|| self.new_ring_barriers(stages, 2, tensor_copies));
        self.rings.push(Ring {
            root,
            stage_len,
            stages,
            tiles: vec![
                RingTile {
                    place: sa,
                    k_major: false,
                },
                RingTile {
                    place: sb,
                    k_major: b_source.is_some(),
                },
            ],
            dots: vec![r],
            b_only: false,
            carried: ca.positions.iter().map(|&c| body.args[c + 1]).collect(),
            previous,
            barriers,
            refill: None,
            loop_result: lp.results[ca.positions[0]],
            site: (block as *const Block as usize, li),
        });
        for (tile, chain) in chains.iter().enumerate() {
            self.mark_chain(block, li, chain, (ring, tile));
        }
        Ok(())
    }

    /// Records the values of `chain` (of the loop at `block.ops[li]`) as tile
    /// `tile` of ring `ring`.
    pub(super) fn mark_chain(
        &mut self,
        block: &'f Block,
        li: usize,
        chain: &Chain,
        (ring, tile): (usize, usize),
    ) {
        let lp = &block.ops[li];
        let body = &lp.regions[0];
        {
            let mark = |this: &mut Self, v: ValueId, slot: RingSlot| {
                this.ring_values.insert(v, RingValue { ring, tile, slot });
            };
            for (j, &c) in chain.positions.iter().enumerate() {
                mark(self, body.args[c + 1], RingSlot::Carried);
                mark(self, lp.results[c], RingSlot::Carried);
                let (pi, pr) = chain.prologue[j];
                mark(self, block.ops[pi].results[pr], RingSlot::Fixed(j));
            }
            let (ai, ar) = chain.ahead;
            mark(self, body.ops[ai].results[ar], RingSlot::Free);
        }
    }

    /// The atom plan of a loop's `dot` whose result stays in the plan's
    /// accumulator layout: what a ring needs of it.
    pub(super) fn ring_plan(&self, dot: &Op) -> Option<AtomTiling> {
        let r = dot.results[0];
        let plan = self.a.dot_plans.get(&r)?;
        let Class::Fixed(lc) = self.a.class(r) else {
            return None;
        };
        (self.layout(lc) == &plan.c).then(|| plan.clone())
    }

    /// `x` where a ring `dot`'s `b = x.T` and nothing else reads `b`, for a
    /// plan that reads `b` K-major: the prefetch pass carries `x`, not its
    /// transpose, and the ring holds `x`'s tiles, `wgmma`'s K-major `b`.
    pub(super) fn ring_b_source(&self, dot: &Op, plan: &AtomTiling) -> Option<ValueId> {
        let b = dot.operands[1];
        self.transposed_source(b)
            .filter(|_| self.uses[b.index()] == 1 && reads_k_major_b(plan))
    }

    /// The values whose tiles a ring `dot`'s stages hold: its `a`, and `x`
    /// where `b = x.T` is held K-major (`ring_b_source`). An fp8 plan
    /// multiplies the fp8 tiles its f16 operands convert (`fp8_dot`), both
    /// K-major, so its `b` must convert such an `x.T`; the conversions then
    /// read the stages (`ring_cast`).
    fn ring_sources(&self, dot: &Op, plan: &AtomTiling) -> Option<(ValueId, Option<ValueId>)> {
        if !plan.atom.operand.is_fp8() {
            return Some((dot.operands[0], self.ring_b_source(dot, plan)));
        }
        let (a, b) = (dot.operands[0], dot.operands[1]);
        let (xa, xb) = (self.fp8_source(a)?, self.fp8_source(b)?);
        let x = self.transposed_source(xb)?;
        [a, b, xb]
            .iter()
            .all(|v| self.uses[v.index()] == 1)
            .then_some((xa, Some(x)))
    }

    /// The chain of the dot operand `x` (a carried value of the loop at
    /// `block.ops[li]`), when every link is used only by the next one.
    pub(super) fn chain(&self, block: &Block, li: usize, x: ValueId) -> Option<Chain> {
        let lp = &block.ops[li];
        let body = lp.regions.first()?;
        let yields = &body.ops.last()?.operands;
        let carried_position = |v: ValueId| {
            body.args
                .iter()
                .position(|&a| a == v)
                .filter(|&p| p > 0)
                .map(|p| p - 1)
        };
        let mut positions = vec![carried_position(x)?];
        let ahead = loop {
            let c = *positions.last()?;
            if self.uses[body.args[c + 1].index()] != 1 || self.uses[lp.results[c].index()] != 0 {
                return None;
            }
            let y = *yields.get(c)?;
            match carried_position(y) {
                Some(next) if !positions.contains(&next) => positions.push(next),
                Some(_) => return None,
                None => break if_result(&body.ops, y)?,
            }
        };
        let ahead_value = body.ops[ahead.0].results[ahead.1];
        if self.uses[ahead_value.index()] != 1 {
            return None;
        }
        loaded_in_then(&body.ops[ahead.0], ahead.1, &self.uses)?;
        let mut prologue = vec![];
        for &c in &positions {
            let init = *lp.operands.get(3 + c)?;
            let (pi, pr) = if_result(&block.ops[..li], init)?;
            if self.uses[init.index()] != 1 {
                return None;
            }
            loaded_in_then(&block.ops[pi], pr, &self.uses)?;
            prologue.push((pi, pr));
        }
        Some(Chain {
            positions,
            ahead,
            prologue,
        })
    }

    /// The stage offset an `if` result of a ring gets (emitted before the `if`).
    fn ring_if_base(&mut self, rv: RingValue) -> CompileResult<GpuValue> {
        let ring = self.rings[rv.ring].clone();
        match rv.slot {
            RingSlot::Fixed(j) => Ok(self.const_i32((j * ring.stage_len) as i32)),
            RingSlot::Free => {
                let all: usize = (0..ring.stages).map(|s| s * ring.stage_len).sum();
                let mut free = self.const_i32(all as i32);
                for &v in &ring.carried {
                    let base = self.ring_base(v)?;
                    free = self.binary(BinaryOp::Sub, free, base);
                }
                Ok(free)
            }
            RingSlot::Carried => Err(self.internal("a carried ring value as an if result")),
        }
    }

    /// The stage offset of a value living in a ring.
    pub(super) fn ring_base(&self, v: ValueId) -> CompileResult<GpuValue> {
        match self.home(v)? {
            Home::Staged { base, .. } => Ok(*base),
            _ => Err(self.internal(format!("{v} is not in a ring"))),
        }
    }

    /// Before an `if` with ring results: each result's stage offset, and the
    /// loads in its then-region that fill them. A prologue's first stage
    /// also waits for every thread to be done with the ring (a loop around
    /// this one may have multiplied from it).
    pub(super) fn ring_if_prepare(&mut self, op: &'f Op) -> CompileResult<Vec<Option<GpuValue>>> {
        let mut bases = vec![];
        for (i, r) in op.results.iter().enumerate() {
            let Some(rv) = self.ring_values.get(r).copied() else {
                bases.push(None);
                continue;
            };
            let first_of_if = !bases.iter().any(Option::is_some);
            if rv.slot == RingSlot::Fixed(0) && first_of_if {
                if let Some(bars) = self.rings[rv.ring].barriers {
                    // A ring entered again (a loop around this one) may still
                    // have slower warps in its previous pass, waiting on or
                    // releasing stages: all of them finish before thread 0
                    // starts the barriers and counts over.
                    self.barrier()?;
                    self.init_ring_barriers(bars)?;
                }
                self.barrier()?;
                // The prologue fills the first stages; the last one counts as
                // the one "multiplied before the loop", which leaves one free.
                let ring = &self.rings[rv.ring];
                if let Some(previous) = ring.previous {
                    let last = self.const_i32(((ring.stages - 1) * ring.stage_len) as i32);
                    self.reg_write(previous, 0, last);
                }
            }
            let base = self.ring_if_base(rv)?;
            if let Some(bars) = self.rings[rv.ring].barriers.filter(|_| first_of_if) {
                let stage_len = self.rings[rv.ring].stage_len;
                self.start_fill(bars, base, stage_len);
                let refill = (rv.slot == RingSlot::Free).then(|| self.refill_parity(bars, base, stage_len));
                self.rings[rv.ring].refill = refill;
            }
            if let Some(load) = loaded_in_then(op, i, &self.uses) {
                self.ring_loads.insert(load, (rv, base));
            }
            bases.push(Some(base));
        }
        Ok(bases)
    }

    /// A load whose tile goes to a ring slot: asynchronous copies of its
    /// aligned vector runs where they can be used, else an ordinary load and
    /// a store into the slot. A masked load whose mask is constant over each
    /// run and whose masked-off value is zero copies every run, zero-filling
    /// those masked off (interior tiles, found by a uniform test, skip the
    /// per-run masks).
    pub(super) fn ring_load(&mut self, op: &'f Op, rv: RingValue, base: GpuValue) -> CompileResult<()> {
        let r = op.results[0];
        let ring = self.rings[rv.ring].clone();
        if let Some(bars) = ring.barriers {
            let place = ring.tiles[rv.tile].place;
            let dtype = self.elem_dtype(r);
            let shape = match self.f.ty(r).shape[..] {
                [rows, cols] => (rows, cols),
                _ => return Err(self.internal("a ring tile that is not 2-D")),
            };
            let at = (ring.root, place, base);
            let sync = (bars, ring.stage_len);
            // Copy: captures only copies, so both fill paths can take it.
            let by_threads = move |t: &mut Self| t.ring_copy(op, rv, base);
            // Release counts come with tensor copies: the last releaser issues them.
            let copied = match bars.release_counts {
                Some((_, last_release)) => {
                    let refill = ring.refill.map(|parity| (parity, last_release));
                    let shape_tile = (shape, (rv.ring, rv.tile));
                    self.tma_fill(op, at, sync, refill, shape_tile, dtype, by_threads)?
                }
                None => false,
            };
            if !copied {
                self.fill_by_threads(sync, base, ring.refill, by_threads)?;
            }
        } else {
            self.ring_copy(op, rv, base)?;
        }
        self.set_home(
            r,
            Home::Staged {
                ring: rv.ring,
                tile: rv.tile,
                base,
            },
        )
    }

    /// A ring load by the threads themselves: copies or loads and stores.
    ///
    /// A pointer tile whose runs are consecutive only if some scalars are
    /// non-negative (`axis_info::Guarded`: Triton's grouped `pid_n` wrapped by
    /// `% N`) copies its runs behind a uniform test of those scalars and goes
    /// through registers otherwise.
    fn ring_copy(&mut self, op: &'f Op, rv: RingValue, base: GpuValue) -> CompileResult<()> {
        let r = op.results[0];
        let Class::Fixed(l) = self.a.class(r) else {
            return Err(self.internal("a ring tile without a layout"));
        };
        let dtype = self.elem_dtype(r);
        let ring = self.rings[rv.ring].clone();
        let place = ring.tiles[rv.tile].place;
        let proven = self.copy_plan(op, l, dtype, place, false)?;
        let guards = match (&op.kind, &self.guarded) {
            (OpKind::Load { .. }, Some(g)) if !proven.copyable => g.guards_of(&op.operands),
            _ => vec![],
        };
        let guarded = match self.guards_hold(&guards)? {
            Some(holds) => {
                let plan = self.copy_plan(op, l, dtype, place, true)?;
                plan.copyable.then_some((holds, plan))
            }
            None => None,
        };
        let place_base = self.const_i32(place.base as i32);
        let slot = Slot {
            root: ring.root,
            at: Staged { base: 0, ..place },
            base: self.binary(BinaryOp::Add, base, place_base),
            src_root: self.root_value(op.operands[0])?,
        };
        match guarded {
            None => self.fill_slot(op, &slot, &proven, &proven),
            Some((holds, plan)) => self.if_else(
                holds,
                |t| t.fill_slot(op, &slot, &plan, &proven),
                |t| t.slot_through_registers(op, &slot, &proven),
            ),
        }
    }

    /// A uniform bool that holds when every guard does, or `None` where there
    /// are none or one cannot be tested.
    fn guards_hold(&mut self, guards: &[Guard]) -> CompileResult<Option<GpuValue>> {
        let mut all = None;
        for &g in guards {
            let holds = match g {
                Guard::NonNegative(v) => {
                    let Some(Home::Uniform(x)) = self.homes[v.index()] else {
                        return Ok(None);
                    };
                    let zero = match self.dtype_of(x) {
                        DType::I32 => self.const_i32(0),
                        d => self.konst(Literal::Int(0), d),
                    };
                    self.compare(CmpOp::Ge, x, zero)
                }
                Guard::SelectsFirst { condition, .. } => match self.mask_all_true(condition) {
                    Some(c) => c,
                    None => return Ok(None),
                },
            };
            all = Some(self.accumulate(BinaryOp::And, all, holds));
        }
        Ok(all)
    }

    /// How the threads copy a ring tile's runs, from the proven axis facts or
    /// from those that hold when the kernel's guards do (`guarded`).
    fn copy_plan(
        &mut self,
        op: &'f Op,
        l: LayoutId,
        dtype: DType,
        place: Staged,
        guarded: bool,
    ) -> CompileResult<CopyPlan> {
        let (l, width, index, aligned) = match op.kind {
            OpKind::TileLoad { .. } => {
                let w = self.layout_vector_width(l, dtype);
                let (index, aligned) = self.block_addressing(op, l, w)?;
                (l, w, index, aligned)
            }
            _ => {
                let ptr = op.operands[0];
                let narrow = self.narrow_copy_layout(op, l, dtype, guarded)?;
                // Runs too narrow to copy go through registers; into a
                // swizzled stage (`wgmma`) in the tile's own layout, whose
                // longer runs each take one vector store and one swizzled
                // index instead of one per element (measured on the H100,
                // f16 rows of 999 elements: 17.8 -> 43.4 TFLOP/s with
                // 128x128x64 tiles; into padded rows the narrow layout stays
                // ahead, 43.7 against 40.5 with 64x64x32 on `mma.sync`).
                let w = self.vector_width_under(guarded, narrow, ptr, dtype);
                let copyable = matches!(w * dtype.size_bytes(), 4 | 8 | 16);
                let l = if copyable || place.swizzle.is_none() {
                    narrow
                } else {
                    l
                };
                let w = self.vector_width_under(guarded, l, ptr, dtype);
                (l, w, self.elems(ptr, l)?, None)
            }
        };
        let bytes = width * dtype.size_bytes();
        let mask = match op.kind {
            OpKind::Load { has_mask: true, .. } => Some(op.operands[1]),
            _ => None,
        };
        Ok(CopyPlan {
            layout: l,
            width,
            index,
            aligned,
            copyable: matches!(bytes, 4 | 8 | 16) && place.ld % width == 0 && place.base % width == 0,
            zero_filled: mask.is_some_and(|m| {
                self.facts(guarded).get(m).constancy >= width as u64 && self.masked_off_value_is_zero(op)
            }),
            mask,
        })
    }

    /// Fills a ring slot by `plan`'s copies where they can be used (interior
    /// tiles, or zero-filling masked copies), else as `fallback` through
    /// registers.
    fn fill_slot(
        &mut self,
        op: &'f Op,
        slot: &Slot,
        plan: &CopyPlan,
        fallback: &CopyPlan,
    ) -> CompileResult<()> {
        let dtype = self.dtype_of(slot.root);
        let width = plan.width;
        let bytes = width * dtype.size_bytes();
        // Copies of every run; with `masked`, runs whose mask is off get zeros.
        let copies = |this: &mut Self, masked: bool| -> CompileResult<()> {
            let insides = match plan.mask.filter(|_| masked) {
                Some(m) => Some(this.elems(m, plan.layout)?),
                None => None,
            };
            let owner = this.owner(plan.layout);
            let mut first: Option<(Vec<i64>, GpuValue)> = None;
            for start in (0..plan.index.len()).step_by(width) {
                // A run a constant away from the first (in the stage's
                // placement) takes the first's offset plus that constant, which
                // the CUDA compiler folds into the copy's address.
                let at = this.layout(plan.layout).value_coords(start);
                let delta = first.as_ref().and_then(|(at0, dst0)| {
                    staged_delta(slot.at, dtype, at[0] - at0[0], at[1] - at0[1]).map(|d| (*dst0, d))
                });
                let dst = match delta {
                    Some((dst0, d)) => {
                        let d = this.const_i32(
                            i32::try_from(d).map_err(|_| this.internal("a stage offset past i32"))?,
                        );
                        this.binary(BinaryOp::Add, dst0, d)
                    }
                    None => {
                        let row = this.coord(plan.layout, 0, start);
                        let col = this.coord(plan.layout, 1, start);
                        let offset = this.staged_index(slot.at, row, col, dtype);
                        let dst = this.binary(BinaryOp::Add, slot.base, offset);
                        first.get_or_insert((at, dst));
                        dst
                    }
                };
                let mut operands = vec![slot.root, dst, slot.src_root, plan.index[start]];
                operands.extend(owner);
                operands.extend(insides.as_ref().map(|m| m[start]));
                this.emit(
                    GpuOpKind::AsyncCopy {
                        bytes: bytes as u8,
                        has_mask: owner.is_some(),
                        zero_fill: insides.is_some(),
                    },
                    operands,
                    vec![],
                );
            }
            Ok(())
        };
        let through_registers = |this: &mut Self| this.slot_through_registers(op, slot, fallback);
        let interior = match plan.mask {
            Some(m) => self.mask_all_true(m),
            None => plan.aligned,
        };
        match (plan.copyable, plan.mask.is_some(), interior) {
            (false, _, _) => through_registers(self),
            (true, false, None) => copies(self, false),
            (true, false, Some(c)) => self.if_else(c, |t| copies(t, false), through_registers),
            (true, true, Some(c)) if plan.zero_filled => {
                self.if_else(c, |t| copies(t, false), |t| copies(t, true))
            }
            (true, true, None) if plan.zero_filled => copies(self, true),
            (true, true, Some(c)) => self.if_else(c, |t| copies(t, false), through_registers),
            (true, true, None) => through_registers(self),
        }
    }

    /// An ordinary load of a ring tile, stored into its slot.
    fn slot_through_registers(&mut self, op: &'f Op, slot: &Slot, plan: &CopyPlan) -> CompileResult<()> {
        let xs = match op.kind {
            OpKind::TileLoad { .. } => {
                self.tile_load(op)?;
                self.elems(op.results[0], plan.layout)?
            }
            _ => self.load_in(op, plan.layout)?,
        };
        self.stage(slot.root, slot.at, plan.layout, &xs, None, Some(slot.base))
    }

    /// The layout the threads copy a pointer load's ring tile in: the tile's
    /// own, or where its pointer allows only narrower runs than the layout's
    /// (rows that are no multiple of 16 bytes), the blocked layout of those
    /// runs, so that a warp's copies read consecutive runs rather than one
    /// run every 16 bytes (4 to 8 times the memory transactions). Only where
    /// the pointer and the mask are computed from indices, not held in
    /// registers of the tile's layout. (`ring_copy` keeps the tile's own
    /// layout instead for runs no copy can take into a swizzled stage.)
    fn narrow_copy_layout(
        &mut self,
        op: &Op,
        l: LayoutId,
        dtype: metile_ir::DType,
        guarded: bool,
    ) -> CompileResult<LayoutId> {
        let ptr = op.operands[0];
        let width = self.vector_width_under(guarded, l, ptr, dtype);
        let computed = |v: &ValueId| !matches!(self.homes[v.index()], Some(Home::Regs { .. }));
        let mask = op
            .operands
            .get(1)
            .filter(|_| matches!(op.kind, OpKind::Load { has_mask: true, .. }));
        if width >= self.layout_vector_width(l, dtype) || !computed(&ptr) || !mask.is_none_or(computed) {
            return Ok(l);
        }
        let shape = self.f.ty(op.results[0]).shape.clone();
        let narrow = DistLayout::blocked(&shape, self.a.threads as usize, width)
            .map_err(|e| self.internal(format!("layout error: {e}")))?;
        Ok(self.a.layouts.intern(narrow))
    }

    /// True when a load's masked-off lanes read zero (no `other`, or a zero
    /// constant), which a zero-filling copy reproduces.
    pub(super) fn masked_off_value_is_zero(&self, op: &Op) -> bool {
        let OpKind::Load { has_other, .. } = op.kind else {
            return false;
        };
        if !has_other {
            return true;
        }
        let mut v = op.operands[op.operands.len() - 1];
        loop {
            let Some(def) = self.def_op[v.index()] else {
                return false;
            };
            match &def.kind {
                OpKind::Broadcast | OpKind::ExpandDims { .. } | OpKind::Cast => v = def.operands[0],
                OpKind::Constant(lit) => {
                    return matches!(lit, Literal::Int(0) | Literal::Bool(false))
                        || matches!(lit, Literal::Float(x) if *x == 0.0 && x.is_sign_positive())
                }
                _ => return false,
            }
        }
    }

    /// The ring stage offsets of a `dot`'s operands, when both live in one ring.
    pub(super) fn ring_operands(&self, op: &Op) -> Option<(usize, GpuValue, GpuValue)> {
        let home = |v: ValueId| match self.homes[v.index()] {
            Some(Home::Staged { ring, base, .. }) => Some((ring, base)),
            _ => None,
        };
        let (ra, a) = home(op.operands[0])?;
        let (rb, b) = home(op.operands[1])?;
        (ra == rb).then_some((ra, a, b))
    }

    /// `dot` on tiles in a ring: wait for this iteration's copies, one
    /// barrier, issue the held-back copies of a later iteration, then the
    /// atom steps over the stage.
    pub(super) fn ring_dot(
        &mut self,
        plan: &AtomTiling,
        (ring, base_a, base_b): (usize, GpuValue, GpuValue),
        reg: RegId,
    ) -> CompileResult<()> {
        let ring = self.rings[ring].clone();
        // This iteration's group is the oldest of the carried ones in flight.
        let pending = (ring.carried.len() - 1) as u8;
        self.emit(GpuOpKind::AsyncWait { pending }, ValueList::new(), vec![]);
        if let (Some(bars), Some(previous)) = (ring.barriers, ring.previous) {
            // Wait for this stage, multiply it, wait for the previous
            // iteration's wgmmas and release their stage, which the held-back
            // loads then refill.
            self.wait_ring_stage(bars, base_a, ring.stage_len);
            let sync = self.filled_by_threads(bars, base_a, ring.stage_len);
            let places = (ring.tiles[0].place, ring.tiles[1].place);
            let stage = Some((Some(base_a), Some(base_b), sync));
            let roots = (super::wgmma::OperandA::Staged(ring.root), ring.root);
            let k_major = ring.tiles[1].k_major;
            let issued = self.wgmma_issue_with(plan, roots, places, k_major, stage, reg)?;
            // Register operands are waited for where they are issued. An fp8
            // sum is added in once this iteration's refill is under way (the
            // previous stage's products were done last iteration).
            if issued.partial.is_none() {
                if issued.held.is_none() {
                    self.wgmma_wait(reg, issued.count, 1, None);
                }
                self.pending_wgmma.push((reg, issued.count, issued.held));
            }
            let released = self.reg_read(previous, 0, metile_ir::DType::I32);
            self.release_stage(bars, released, ring.stage_len)?;
            self.flush_deferred()?;
            self.reg_write(previous, 0, base_a);
            if issued.partial.is_some() {
                self.wgmma_finish(&issued, reg, 0);
            }
            return Ok(());
        }
        self.barrier()?;
        self.flush_deferred()?;
        let k = plan.shape.2;
        let frag_a = self.a.layouts.intern(plan.a.clone());
        let frag_b = self.a.layouts.intern(plan.b.clone());
        self.atom_steps(
            (ring.root, ring.root),
            plan,
            (ring.tiles[0].place, ring.tiles[1].place),
            (Some(base_a), Some(base_b)),
            (frag_a, frag_b),
            k,
            reg,
        )
    }

    /// `b = x.T` of a ring tile `x` held K-major (`RingTile::k_major`): `b`
    /// is the same stage, read as `b` by the ring's `dot`. `false` for
    /// any other op.
    pub(super) fn ring_transpose(&mut self, op: &Op) -> CompileResult<bool> {
        if !op.kind.is_transpose() {
            return Ok(false);
        }
        let Some(Home::Staged { ring, tile, base }) = self.homes[op.operands[0].index()] else {
            return Ok(false);
        };
        if !self.rings[ring].tiles[tile].k_major {
            return Err(self.internal("a transposed ring tile in a ring that holds it as it is"));
        }
        self.set_home(op.results[0], Home::Staged { ring, tile, base })?;
        Ok(true)
    }

    /// `f16(x)` of an fp8 ring tile `x` (an fp8 `dot`'s operand,
    /// `ring_sources`): the same stage, which the ring's `dot` multiplies as
    /// fp8. `false` for any other op.
    pub(super) fn ring_cast(&mut self, op: &Op) -> CompileResult<bool> {
        if self.fp8_source(op.results[0]).is_none() {
            return Ok(false);
        }
        let Some(Home::Staged { ring, tile, base }) = self.homes[op.operands[0].index()] else {
            return Ok(false);
        };
        self.set_home(op.results[0], Home::Staged { ring, tile, base })?;
        Ok(true)
    }

    /// Closes the copy group of an `if` that filled ring slots.
    pub(super) fn ring_commit(&mut self) {
        self.emit(GpuOpKind::AsyncCommit, ValueList::new(), vec![]);
    }

    /// The largest ring whose loop has been lowered (so that the code being
    /// lowered runs after it): its root, bytes, and whether tensor copies fill it.
    pub(super) fn finished_ring_memory(&self) -> Option<(GpuValue, usize, bool)> {
        let allocation = |root: GpuValue| self.b.func().threadgroup.iter().find(|a| a.value == root);
        self.rings
            .iter()
            .filter(|r| self.homes[r.loop_result.index()].is_some())
            .filter_map(|r| {
                let tensor_copies = r.barriers.is_some_and(|b| b.release_counts.is_some());
                // A ring sharing an earlier ring's memory (`b_ring.rs`) is found as that one.
                let own = allocation(r.root).filter(|a| !matches!(a.purpose, TgPurpose::Alias(_)))?;
                Some((r.root, own.bytes(), tensor_copies))
            })
            .max_by_key(|&(_, bytes, _)| bytes)
    }

    /// True when `v` is a value the lowering keeps in a ring.
    pub(super) fn in_ring(&self, v: ValueId) -> Option<RingValue> {
        self.ring_values.get(&v).copied()
    }
}
