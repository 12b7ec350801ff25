//! Memory barriers of a `wgmma` operand ring (`async_ring.rs`).
//!
//! A `wgmma` ring (whichever way it is filled) synchronises through memory
//! barriers, two per stage. The *full* barrier expects one arrival per
//! tile: the thread starting a tile's tensor copies arrives with the bytes
//! to expect, the first thread of a fill the threads copied themselves
//! without. Every thread waits on it before multiplying the stage; a stage
//! the threads wrote (a register bit per stage says so) also takes a proxy
//! fence and a barrier, a stage of tensor copies none. The *empty* barrier
//! expects one arrival per warp: after `wgmma.wait_group 1` an iteration
//! releases the stage the previous iteration multiplied, and its refill,
//! later in the same iteration, waits for every warp's release first; tensor
//! copies are issued instead by the first lane of the warp whose release
//! completes the stage's round (an atomic count per stage), which waits for
//! no one. So an iteration's `wgmma`s run on
//! while the next one starts, without an extra stage and without a barrier
//! per iteration. Stages are used in turn: registers of per-stage bits hold
//! the parity of each barrier's next phase, flipped by each wait (by every
//! thread alike, whoever waits). The ring's first prologue initialises the
//! barriers (and release counts) between two barriers: no warp is still in
//! the ring's previous pass (a loop around the ring runs it again, and the
//! warps of a pass drift apart by up to its depth), and every thread sees
//! the initialisation before it uses them.

use super::Lowering;
use crate::error::CompileResult;
use metile_ir::gpu_ir::*;
use metile_ir::{BinaryOp, CmpOp, DType};

/// The memory barriers of a `wgmma` operand ring.
#[derive(Clone, Copy, Debug)]
pub(super) struct RingBarriers {
    /// Arrivals that complete a full barrier's phase: one per tile of a stage.
    pub arrivals: u32,
    /// `2 * stages` i64 memory barriers in threadgroup memory: stage `s`'s
    /// "full" barrier at `s` (its tiles have landed), its "empty" one at
    /// `stages + s` (every warp is done multiplying it).
    pub bars: GpuValue,
    pub stages: usize,
    /// Bit `s`: the parity of the phase of stage `s`'s full barrier that
    /// the next wait waits for.
    pub full_phases: RegId,
    /// The same for the empty barriers, flipped by every refill.
    pub empty_phases: RegId,
    /// Bit `s`: the threads copied some of stage `s`'s tiles themselves, so
    /// multiplying it needs a barrier (a tensor copy needs none).
    pub by_threads: RegId,
    /// With tensor copies: `stages` i32 counts of the warps' releases of
    /// each stage, and a register that is 1 in the first lane of the warp
    /// whose release completed a stage's round (this iteration's refill
    /// issuer), else 0. So no thread waits for the others' releases.
    pub release_counts: Option<(GpuValue, RegId)>,
}

impl RingBarriers {
    /// Threadgroup bytes of the barriers of a ring of `stages` stages: two
    /// i64 memory barriers a stage, and with tensor copies an i32 release
    /// count a stage (rounded to 16 bytes).
    pub(super) fn bytes(stages: usize, tensor_copies: bool) -> usize {
        16 * stages
            + if tensor_copies {
                (4 * stages).div_ceil(16) * 16
            } else {
                0
            }
    }
}

impl Lowering<'_> {
    /// The barriers of a ring of `stages` stages of `arrivals` tiles each,
    /// with release counts where tensor copies fill it.
    pub(super) fn new_ring_barriers(
        &mut self,
        stages: usize,
        arrivals: u32,
        tensor_copies: bool,
    ) -> RingBarriers {
        RingBarriers {
            arrivals,
            bars: self.b.add_threadgroup(DType::I64, 2 * stages, TgPurpose::Scratch),
            stages,
            full_phases: self.b.add_reg(DType::I32, 1),
            empty_phases: self.b.add_reg(DType::I32, 1),
            by_threads: self.b.add_reg(DType::I32, 1),
            release_counts: tensor_copies.then(|| {
                let counts = self.b.add_threadgroup(DType::I32, stages, TgPurpose::Scratch);
                (counts, self.b.add_reg(DType::I32, 1))
            }),
        }
    }

    /// `cond` for thread 0 only.
    pub(super) fn first_thread(&mut self) -> GpuValue {
        let tid = self.builtin(Builtin::ThreadIndex);
        let zero = self.const_i32(0);
        self.compare(CmpOp::Eq, tid, zero)
    }

    /// The memory barrier index of the stage at element offset `base`.
    pub(super) fn stage_index(&mut self, base: GpuValue, stage_len: usize) -> GpuValue {
        let len = self.const_i32(stage_len as i32);
        self.binary(BinaryOp::FloorDiv, base, len)
    }

    /// Thread 0 initialises the ring's barriers (before the prologue's
    /// barrier): a full barrier takes one arrival per tile, an empty one
    /// one per warp.
    pub(super) fn init_ring_barriers(&mut self, bars: RingBarriers) -> CompileResult<()> {
        let first = self.first_thread();
        let warps = self.a.threads.div_ceil(self.a.target.simd_width);
        self.if_else(
            first,
            |t| {
                for s in 0..bars.stages {
                    let full = t.const_i32(s as i32);
                    t.emit(
                        GpuOpKind::MbarrierInit { count: bars.arrivals },
                        [bars.bars, full],
                        vec![],
                    );
                    let empty = t.const_i32((bars.stages + s) as i32);
                    t.emit(
                        GpuOpKind::MbarrierInit { count: warps },
                        [bars.bars, empty],
                        vec![],
                    );
                    if let Some((counts, _)) = bars.release_counts {
                        let s = t.const_i32(s as i32);
                        let zero = t.const_i32(0);
                        t.mem_store(counts, s, zero, 1, None);
                    }
                }
                Ok(())
            },
            |_| Ok(()),
        )?;
        let zero = self.const_i32(0);
        self.reg_write(bars.full_phases, 0, zero);
        self.reg_write(bars.empty_phases, 0, zero);
        self.reg_write(bars.by_threads, 0, zero);
        Ok(())
    }

    /// `1 << slot`, and bit `slot` of register `bits` (0 or 1).
    fn stage_bit(&mut self, bits: RegId, slot: GpuValue) -> (GpuValue, GpuValue, GpuValue) {
        let one = self.const_i32(1);
        let mask = self.binary(BinaryOp::Shl, one, slot);
        let word = self.reg_read(bits, 0, DType::I32);
        let shifted = self.binary(BinaryOp::Shr, word, slot);
        let bit = self.binary(BinaryOp::And, shifted, one);
        (word, mask, bit)
    }

    /// Sets (`on`) or clears the stage's bit of `by_threads`.
    fn mark_by_threads(&mut self, bars: RingBarriers, base: GpuValue, stage_len: usize, on: bool) {
        let slot = self.stage_index(base, stage_len);
        let (word, mask, _) = self.stage_bit(bars.by_threads, slot);
        let word = if on {
            self.binary(BinaryOp::Or, word, mask)
        } else {
            let all = self.const_i32(-1);
            let others = self.binary(BinaryOp::Xor, mask, all);
            self.binary(BinaryOp::And, word, others)
        };
        self.reg_write(bars.by_threads, 0, word);
    }

    /// Before a fill of the stage at `base`: no thread has copied into it yet.
    pub(super) fn start_fill(&mut self, bars: RingBarriers, base: GpuValue, stage_len: usize) {
        self.mark_by_threads(bars, base, stage_len, false);
    }

    /// Whether the stage at `base` holds tiles the threads copied themselves.
    pub(super) fn filled_by_threads(
        &mut self,
        bars: RingBarriers,
        base: GpuValue,
        stage_len: usize,
    ) -> GpuValue {
        let slot = self.stage_index(base, stage_len);
        let (_, _, bit) = self.stage_bit(bars.by_threads, slot);
        let zero = self.const_i32(0);
        self.compare(CmpOp::Ne, bit, zero)
    }

    /// The parity to wait for on `phases`' barrier of stage `slot`, and flips it.
    fn next_parity(&mut self, phases: RegId, slot: GpuValue) -> GpuValue {
        let (word, mask, parity) = self.stage_bit(phases, slot);
        let flipped = self.binary(BinaryOp::Xor, word, mask);
        self.reg_write(phases, 0, flipped);
        parity
    }

    /// The empty barrier of the stage at `base` and the parity of the phase
    /// that frees it for this refill (every thread tracks it, whoever waits).
    pub(super) fn refill_parity(&mut self, bars: RingBarriers, base: GpuValue, stage_len: usize) -> GpuValue {
        let slot = self.stage_index(base, stage_len);
        self.next_parity(bars.empty_phases, slot)
    }

    /// The index of the empty barrier of the stage at `base`.
    fn empty_barrier(&mut self, bars: RingBarriers, base: GpuValue, stage_len: usize) -> GpuValue {
        let slot = self.stage_index(base, stage_len);
        let stages = self.const_i32(bars.stages as i32);
        self.binary(BinaryOp::Add, stages, slot)
    }

    /// Waits until every warp has released the stage at `base`.
    pub(super) fn wait_empty(
        &mut self,
        bars: RingBarriers,
        base: GpuValue,
        stage_len: usize,
        parity: GpuValue,
    ) {
        let empty = self.empty_barrier(bars, base, stage_len);
        self.emit(GpuOpKind::MbarrierWait, [bars.bars, empty, parity], vec![]);
    }

    /// One arrival without bytes on barrier `index`.
    fn arrive(&mut self, bars: RingBarriers, index: GpuValue) {
        self.emit(
            GpuOpKind::MbarrierArrive { expect_tx: false },
            [bars.bars, index],
            vec![],
        );
    }

    /// One arrival without bytes on barrier `index`, by the threads where `who` holds.
    fn arrive_if(&mut self, who: GpuValue, bars: RingBarriers, index: GpuValue) -> CompileResult<()> {
        self.if_else(
            who,
            |t| {
                t.arrive(bars, index);
                Ok(())
            },
            |_| Ok(()),
        )
    }

    /// This warp is done multiplying the stage at `base` (a wait of the
    /// whole warp for its `wgmma`s precedes); its first lane says so on the
    /// empty barrier and, with release counts, learns whether it was the
    /// last warp to (`last_release`).
    pub(super) fn release_stage(
        &mut self,
        bars: RingBarriers,
        base: GpuValue,
        stage_len: usize,
    ) -> CompileResult<()> {
        let empty = self.empty_barrier(bars, base, stage_len);
        let lane = self.builtin(Builtin::SimdLane);
        let zero = self.const_i32(0);
        let first = self.compare(CmpOp::Eq, lane, zero);
        if let Some((_, last_release)) = bars.release_counts {
            self.reg_write(last_release, 0, zero);
        }
        let slot = self.stage_index(base, stage_len);
        let warps = self.a.threads.div_ceil(self.a.target.simd_width) as i32;
        self.if_else(
            first,
            |t| {
                t.arrive(bars, empty);
                let Some((counts, last_release)) = bars.release_counts else {
                    return Ok(());
                };
                let one = t.const_i32(1);
                let before = t.emit1(
                    GpuOpKind::AtomicAdd,
                    [counts, slot, one],
                    GpuType::Scalar(DType::I32),
                );
                let w = t.const_i32(warps);
                let round = t.binary(BinaryOp::Rem, before, w);
                let last = t.const_i32(warps - 1);
                let last = t.compare(CmpOp::Eq, round, last);
                let last = t.cast(last, DType::I32);
                t.reg_write(last_release, 0, last);
                Ok(())
            },
            |_| Ok(()),
        )
    }

    /// Whether this thread issues the tensor copies of a refill: the first
    /// lane of the warp that released the stage last.
    pub(super) fn refill_issuer(&mut self, last_release: RegId) -> GpuValue {
        let last = self.reg_read(last_release, 0, DType::I32);
        let zero = self.const_i32(0);
        self.compare(CmpOp::Ne, last, zero)
    }

    /// Every thread waits for the stage at `base` to be filled.
    pub(super) fn wait_ring_stage(&mut self, bars: RingBarriers, base: GpuValue, stage_len: usize) {
        let slot = self.stage_index(base, stage_len);
        let parity = self.next_parity(bars.full_phases, slot);
        self.emit(GpuOpKind::MbarrierWait, [bars.bars, slot, parity], vec![]);
    }

    /// A tile the threads copy themselves: each waits for the stage to be
    /// free (a refill), copies, and thread 0 arrives without bytes.
    pub(super) fn fill_by_threads(
        &mut self,
        (bars, stage_len): (RingBarriers, usize),
        base: GpuValue,
        refill: Option<GpuValue>,
        copy: impl FnOnce(&mut Self) -> CompileResult<()>,
    ) -> CompileResult<()> {
        if let Some(parity) = refill {
            self.wait_empty(bars, base, stage_len, parity);
        }
        copy(self)?;
        self.mark_by_threads(bars, base, stage_len, true);
        self.arrive_without_copy(bars, base, stage_len)
    }

    /// Thread 0's arrival for a tile the threads copied themselves.
    fn arrive_without_copy(
        &mut self,
        bars: RingBarriers,
        base: GpuValue,
        stage_len: usize,
    ) -> CompileResult<()> {
        let slot = self.stage_index(base, stage_len);
        let first = self.first_thread();
        self.arrive_if(first, bars, slot)
    }
}
