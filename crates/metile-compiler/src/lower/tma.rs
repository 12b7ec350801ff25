//! `wgmma` operand rings filled by the tensor memory accelerator (sm_90):
//! one thread starts one `cp.async.bulk.tensor` per swizzle block of a tile,
//! the hardware writing it in the swizzled layout `wgmma` reads and zeros
//! outside the matrix, and the copy completes on the stage's memory barrier.
//!
//! A load qualifies when it reads a block of a row-major matrix the runtime
//! can describe at launch: a `tile_load`, or a load through
//! `ptr + (r0 + arange(R))[:, None] * stride + (c0 + arange(C))[None, :]`
//! masked by `row < rows` and `col < cols` (a bounded `tile_load`, or the
//! Triton spelling) with zeros masked off, where `ptr` is a buffer argument
//! and `stride`, `rows` and `cols` are scalar arguments or constants. The
//! kernel gets the matrix's tensor map (`GpuParamKind::TensorMap`) and a
//! flag (`TensorMapReady`) saying whether the runtime could build it for the
//! launch's arguments (16-byte aligned base and row pitch); without it, or
//! where an unbounded tile would leave its row, the threads copy as they would
//! without TMA (`async_ring.rs`).
//!
//! A `wgmma` ring (whichever way it is filled) synchronises through memory
//! barriers, two per stage. The *full* barrier expects one arrival per
//! operand: the thread starting a tile's tensor copies arrives with the bytes
//! to expect, the first thread of a fill the threads copied themselves
//! without. Every thread waits on it before multiplying the stage; a stage
//! the threads wrote (a register bit per stage says so) also takes a proxy
//! fence and a barrier, a stage of tensor copies none. The *empty* barrier
//! expects one arrival per warp: after `wgmma.wait_group 1` an iteration
//! releases the stage the previous iteration multiplied, and its refill,
//! later in the same iteration, waits for every warp's release first (only
//! thread 0 where it issues tensor copies). So an iteration's `wgmma`s run on
//! while the next one starts, without an extra stage and without a barrier
//! per iteration. Stages are used in turn: registers of per-stage bits hold
//! the parity of each barrier's next phase, flipped by each wait (by every
//! thread alike, whoever waits). The ring's first prologue initialises the
//! barriers before its barrier, when no thread can still be waiting on them.

use super::Lowering;
use crate::dot_tiling::Staged;
use crate::error::CompileResult;
use metile_ir::gpu_ir::*;
use metile_ir::{BinaryOp, CmpOp, DType, Literal, Op, OpKind, ParamKind, ValueId};

/// The memory barriers of a `wgmma` operand ring.
#[derive(Clone, Copy, Debug)]
pub(super) struct RingBarriers {
    /// `2 * stages` i64 memory barriers in threadgroup memory: stage `s`'s
    /// "full" barrier at `s` (its tiles have landed), its "empty" one at
    /// `stages + s` (every thread is done multiplying it).
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
}

/// A tile's origin along one axis: a scalar Tile IR value (or none) plus a constant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Coord {
    value: Option<ValueId>,
    offset: i64,
}

/// A load of a block of a row-major matrix.
#[derive(Clone, Copy, Debug)]
pub(super) struct BlockLoad {
    /// Tile IR parameter index of the buffer.
    buffer: usize,
    row: Coord,
    col: Coord,
    stride: LaunchValue,
    /// `None`: the load has no bound on that axis.
    rows: Option<LaunchValue>,
    cols: Option<LaunchValue>,
}

/// Rows of an unbounded matrix: the most a 32-bit coordinate reaches.
const UNBOUNDED_ROWS: i64 = i32::MAX as i64;

impl<'f> Lowering<'f> {
    fn def(&self, v: ValueId) -> Option<&'f Op> {
        self.def_op[v.index()]
    }

    /// `v` without the broadcasts around it.
    fn unbroadcast(&self, mut v: ValueId) -> ValueId {
        while let Some(op) = self.def(v).filter(|o| matches!(o.kind, OpKind::Broadcast)) {
            v = op.operands[0];
        }
        v
    }

    /// A scalar the runtime knows at launch: an integer argument or constant.
    fn launch_value(&self, v: ValueId) -> Option<LaunchValue> {
        let v = self.unbroadcast(v);
        if let Some(i) = self.f.params.iter().position(|p| p.value == v) {
            let int = matches!(
                self.f.params[i].kind,
                ParamKind::Scalar(DType::I32 | DType::U32 | DType::I64)
            );
            return int.then_some(LaunchValue::Arg(i));
        }
        match self.def(v)?.kind {
            OpKind::Constant(Literal::Int(c)) => Some(LaunchValue::Const(c)),
            _ => None,
        }
    }

    /// A uniform scalar as a coordinate.
    fn scalar_coord(&self, v: ValueId) -> Option<Coord> {
        if !self.f.ty(v).shape.is_empty() {
            return None;
        }
        Some(match self.def(v).map(|o| &o.kind) {
            Some(OpKind::Constant(Literal::Int(c))) => Coord {
                value: None,
                offset: *c,
            },
            _ => Coord {
                value: Some(v),
                offset: 0,
            },
        })
    }

    /// `c0 + arange(a, a + n)`: the coordinate `c0 + a` and `n`.
    fn index_vector(&self, v: ValueId) -> Option<(Coord, i64)> {
        let op = self.def(v)?;
        match op.kind {
            OpKind::Arange { start, end } => Some((
                Coord {
                    value: None,
                    offset: start,
                },
                end - start,
            )),
            OpKind::Binary(BinaryOp::Add) => {
                let (x, y) = (op.operands[0], op.operands[1]);
                let (range, scalar) = match self.def(x)?.kind {
                    OpKind::Arange { .. } => (x, y),
                    _ => (y, x),
                };
                let OpKind::Arange { start, end } = self.def(range)?.kind else {
                    return None;
                };
                let c = self.scalar_coord(self.unbroadcast(scalar))?;
                Some((
                    Coord {
                        offset: c.offset + start,
                        ..c
                    },
                    end - start,
                ))
            }
            _ => None,
        }
    }

    /// An index vector laid along `axis` of a 2-D tile (`x[:, None]` for rows).
    fn axis_index(&self, v: ValueId, axis: usize) -> Option<(Coord, i64)> {
        let op = self.def(self.unbroadcast(v))?;
        match op.kind {
            OpKind::ExpandDims { axis: new } if new == 1 - axis => self.index_vector(op.operands[0]),
            _ => None,
        }
    }

    /// Splits a sum of offsets into its terms, through broadcasts.
    fn offset_terms(&self, v: ValueId, terms: &mut Vec<ValueId>) {
        let v = self.unbroadcast(v);
        match self.def(v) {
            Some(op) if matches!(op.kind, OpKind::Binary(BinaryOp::Add)) => {
                self.offset_terms(op.operands[0], terms);
                self.offset_terms(op.operands[1], terms);
            }
            _ => terms.push(v),
        }
    }

    /// The row and column of one element `(row, col)` compare of a bounds mask.
    fn bound(&self, v: ValueId) -> Option<(usize, Coord, LaunchValue)> {
        let op = self.def(self.unbroadcast(v))?;
        if !matches!(op.kind, OpKind::Compare(CmpOp::Lt)) {
            return None;
        }
        let bound = self.launch_value(op.operands[1])?;
        (0..2).find_map(|axis| {
            let (c, _) = self.axis_index(op.operands[0], axis)?;
            Some((axis, c, bound))
        })
    }

    /// The block a load in a ring reads, when the tensor memory accelerator
    /// can copy it (see the module header).
    pub(super) fn block_load(&self, op: &Op, shape: (usize, usize)) -> Option<BlockLoad> {
        let param = |v: ValueId| {
            let v = self.unbroadcast(v);
            let i = self.f.params.iter().position(|p| p.value == v)?;
            matches!(self.f.params[i].kind, ParamKind::Pointer(_)).then_some(i)
        };
        if let OpKind::TileLoad { .. } = op.kind {
            return Some(BlockLoad {
                buffer: param(op.operands[0])?,
                row: self.scalar_coord(op.operands[1])?,
                col: self.scalar_coord(op.operands[2])?,
                stride: self.launch_value(op.operands[3])?,
                rows: None,
                cols: None,
            });
        }
        let OpKind::Load { has_mask, .. } = op.kind else {
            return None;
        };
        if has_mask && !self.masked_off_value_is_zero(op) {
            return None;
        }
        // The pointer: a buffer argument plus offsets, possibly in steps.
        let mut terms = vec![];
        let mut ptr = self.unbroadcast(op.operands[0]);
        while let Some(add) = self.def(ptr).filter(|o| matches!(o.kind, OpKind::AddPtr)) {
            self.offset_terms(add.operands[1], &mut terms);
            ptr = self.unbroadcast(add.operands[0]);
        }
        let buffer = param(ptr)?;
        let (mut row, mut col, mut stride) = (None, None, None);
        for t in terms {
            let def = self.def(t)?;
            if let Some((c, n)) = self.axis_index(t, 1) {
                (col.is_none() && n == shape.1 as i64).then_some(())?;
                col = Some(c);
            } else if matches!(def.kind, OpKind::Binary(BinaryOp::Mul)) {
                let (x, s) = (def.operands[0], def.operands[1]);
                let ((c, n), s) = match self.axis_index(x, 0) {
                    Some(r) => (r, s),
                    None => (self.axis_index(s, 0)?, x),
                };
                (row.is_none() && n == shape.0 as i64).then_some(())?;
                row = Some(c);
                stride = Some(self.launch_value(s)?);
            } else {
                return None;
            }
        }
        let mut load = BlockLoad {
            buffer,
            row: row?,
            col: col?,
            stride: stride?,
            rows: None,
            cols: None,
        };
        if has_mask {
            let mask = self.unbroadcast(op.operands[1]);
            let parts = match self.def(mask)?.kind {
                OpKind::Binary(BinaryOp::And) => self.def(mask)?.operands.to_vec(),
                _ => vec![mask],
            };
            for part in parts {
                let (axis, c, bound) = self.bound(part)?;
                let slot = if axis == 0 { &mut load.rows } else { &mut load.cols };
                let origin = if axis == 0 { load.row } else { load.col };
                (slot.is_none() && c == origin).then_some(())?;
                *slot = Some(bound);
            }
        }
        Some(load)
    }

    /// A coordinate as an i32 GPU value.
    fn coord_value(&mut self, c: Coord) -> CompileResult<GpuValue> {
        let offset = self.const_i32(c.offset as i32);
        let Some(v) = c.value else {
            return Ok(offset);
        };
        let v = self.uniform(v)?;
        let v = self.cast(v, DType::I32);
        Ok(if c.offset == 0 {
            v
        } else {
            self.binary(BinaryOp::Add, v, offset)
        })
    }

    /// The tensor map (and its ready flag) for `spec`, declared once.
    fn tensor_map(&mut self, spec: TensorMapSpec) -> (GpuValue, GpuValue) {
        if let Some(&(_, map, ready)) = self.tensor_maps.iter().find(|(s, ..)| *s == spec) {
            return (map, ready);
        }
        let n = self.tensor_maps.len();
        let name = &self.f.params[spec.buffer].name;
        let map = self.b.add_param(
            &format!("{name}_tma{n}"),
            GpuParamKind::TensorMap(spec),
            spec.buffer,
        );
        let ready = self.b.add_param(
            &format!("{name}_tma{n}_ready"),
            GpuParamKind::TensorMapReady(spec),
            spec.buffer,
        );
        self.tensor_maps.push((spec, map, ready));
        (map, ready)
    }

    /// `cond` for thread 0 only.
    fn first_thread(&mut self) -> GpuValue {
        let tid = self.builtin(Builtin::ThreadIndex);
        let zero = self.const_i32(0);
        self.compare(CmpOp::Eq, tid, zero)
    }

    /// The memory barrier index of the stage at element offset `base`.
    fn stage_index(&mut self, base: GpuValue, stage_len: usize) -> GpuValue {
        let len = self.const_i32(stage_len as i32);
        self.binary(BinaryOp::FloorDiv, base, len)
    }

    /// Thread 0 initialises the ring's barriers (before the prologue's
    /// barrier): a full barrier takes one arrival per operand, an empty one
    /// one per warp.
    pub(super) fn init_ring_barriers(&mut self, bars: RingBarriers) -> CompileResult<()> {
        let first = self.first_thread();
        let warps = self.a.threads.div_ceil(self.a.target.simd_width);
        self.if_else(
            first,
            |t| {
                for s in 0..bars.stages {
                    let full = t.const_i32(s as i32);
                    t.emit(GpuOpKind::MbarrierInit { count: 2 }, [bars.bars, full], vec![]);
                    let empty = t.const_i32((bars.stages + s) as i32);
                    t.emit(
                        GpuOpKind::MbarrierInit { count: warps },
                        [bars.bars, empty],
                        vec![],
                    );
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

    /// Sets (`on`) or clears the stage's bit of `by_threads`.
    fn mark_by_threads(&mut self, bars: RingBarriers, base: GpuValue, stage_len: usize, on: bool) {
        let slot = self.stage_index(base, stage_len);
        let one = self.const_i32(1);
        let bit = self.binary(BinaryOp::Shl, one, slot);
        let mask = self.reg_read(bars.by_threads, 0, DType::I32);
        let mask = if on {
            self.binary(BinaryOp::Or, mask, bit)
        } else {
            let all = self.const_i32(-1);
            let others = self.binary(BinaryOp::Xor, bit, all);
            self.binary(BinaryOp::And, mask, others)
        };
        self.reg_write(bars.by_threads, 0, mask);
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
        let mask = self.reg_read(bars.by_threads, 0, DType::I32);
        let shifted = self.binary(BinaryOp::Shr, mask, slot);
        let one = self.const_i32(1);
        let bit = self.binary(BinaryOp::And, shifted, one);
        let zero = self.const_i32(0);
        self.compare(CmpOp::Ne, bit, zero)
    }

    /// The parity to wait for on `phases`' barrier of stage `slot`, and flips it.
    fn next_parity(&mut self, phases: RegId, slot: GpuValue) -> GpuValue {
        let bits = self.reg_read(phases, 0, DType::I32);
        let shifted = self.binary(BinaryOp::Shr, bits, slot);
        let one = self.const_i32(1);
        let parity = self.binary(BinaryOp::And, shifted, one);
        let bit = self.binary(BinaryOp::Shl, one, slot);
        let flipped = self.binary(BinaryOp::Xor, bits, bit);
        self.reg_write(phases, 0, flipped);
        parity
    }

    /// The empty barrier of the stage at `base` and the parity of the phase
    /// that frees it for this refill (every thread tracks it, whoever waits).
    pub(super) fn refill_parity(&mut self, bars: RingBarriers, base: GpuValue, stage_len: usize) -> GpuValue {
        let slot = self.stage_index(base, stage_len);
        self.next_parity(bars.empty_phases, slot)
    }

    /// Waits until every thread has released the stage at `base`.
    fn wait_empty(&mut self, bars: RingBarriers, base: GpuValue, stage_len: usize, parity: GpuValue) {
        let slot = self.stage_index(base, stage_len);
        let stages = self.const_i32(bars.stages as i32);
        let empty = self.binary(BinaryOp::Add, stages, slot);
        self.emit(GpuOpKind::MbarrierWait, [bars.bars, empty, parity], vec![]);
    }

    /// This warp is done multiplying the stage at `base` (a wait of the
    /// whole warp for its `wgmma`s precedes); its first lane says so.
    pub(super) fn release_stage(
        &mut self,
        bars: RingBarriers,
        base: GpuValue,
        stage_len: usize,
    ) -> CompileResult<()> {
        let slot = self.stage_index(base, stage_len);
        let stages = self.const_i32(bars.stages as i32);
        let empty = self.binary(BinaryOp::Add, stages, slot);
        let lane = self.builtin(Builtin::SimdLane);
        let zero = self.const_i32(0);
        let first = self.compare(CmpOp::Eq, lane, zero);
        self.if_else(
            first,
            |t| {
                t.emit(
                    GpuOpKind::MbarrierArrive { expect_tx: false },
                    [bars.bars, empty],
                    vec![],
                );
                Ok(())
            },
            |_| Ok(()),
        )
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
    pub(super) fn arrive_without_copy(
        &mut self,
        bars: RingBarriers,
        base: GpuValue,
        stage_len: usize,
    ) -> CompileResult<()> {
        let slot = self.stage_index(base, stage_len);
        let first = self.first_thread();
        self.if_else(
            first,
            |t| {
                t.emit(
                    GpuOpKind::MbarrierArrive { expect_tx: false },
                    [bars.bars, slot],
                    vec![],
                );
                Ok(())
            },
            |_| Ok(()),
        )
    }

    /// Fills the operand placed at `place` of the stage at `base` with tensor
    /// copies where the launch allows, else with `by_threads`; a refill
    /// (`refill`: the empty barrier's parity) first waits for the stage to be
    /// free. `false` when the load does not qualify (nothing emitted).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn tma_fill(
        &mut self,
        op: &'f Op,
        (root, place, base): (GpuValue, Staged, GpuValue),
        (bars, stage_len): (RingBarriers, usize),
        refill: Option<GpuValue>,
        shape: (usize, usize),
        dtype: DType,
        by_threads: impl FnOnce(&mut Self) -> CompileResult<()>,
    ) -> CompileResult<bool> {
        if !self.a.target.default_passes.tma {
            return Ok(false);
        }
        let Some(load) = self.block_load(op, shape) else {
            return Ok(false);
        };
        let Some(swizzle) = place.swizzle else {
            return Ok(false);
        };
        let (rows, cols) = shape;
        let size = dtype.size_bytes();
        if swizzle.rows != rows || rows > 256 || cols % place.ld != 0 || place.ld * size != swizzle.bytes {
            return Ok(false);
        }
        let spec = TensorMapSpec {
            buffer: load.buffer,
            dtype,
            rows: load.rows.unwrap_or(LaunchValue::Const(UNBOUNDED_ROWS)),
            cols: load.cols.unwrap_or(load.stride),
            stride: load.stride,
            box_rows: rows as u16,
            box_cols: place.ld as u16,
            swizzle_bytes: swizzle.bytes as u16,
        };
        let (map, ready) = self.tensor_map(spec);
        let row = self.coord_value(load.row)?;
        let col = self.coord_value(load.col)?;
        let zero = self.const_i32(0);
        let mut usable = self.compare(CmpOp::Ne, ready, zero);
        // Without a column bound the tile must not leave its row, as a
        // tensor copy would read zeros there and the load the next row.
        if load.cols.is_none() {
            let stride = self.uniform_launch_value(load.stride)?;
            let width = self.const_i32(cols as i32);
            let end = self.binary(BinaryOp::Add, col, width);
            let inside = self.compare(CmpOp::Le, end, stride);
            let from_zero = self.compare(CmpOp::Ge, col, zero);
            usable = self.binary(BinaryOp::And, usable, inside);
            usable = self.binary(BinaryOp::And, usable, from_zero);
        }
        if load.rows.is_none() {
            let from_zero = self.compare(CmpOp::Ge, row, zero);
            usable = self.binary(BinaryOp::And, usable, from_zero);
        }
        let place_base = self.const_i32(place.base as i32);
        let slot_base = self.binary(BinaryOp::Add, base, place_base);
        let copies = |t: &mut Self| -> CompileResult<()> {
            let slot = t.stage_index(base, stage_len);
            let first = t.first_thread();
            t.if_else(
                first,
                |t| {
                    if let Some(parity) = refill {
                        t.wait_empty(bars, base, stage_len, parity);
                    }
                    let bytes = t.const_i32((rows * cols * size) as i32);
                    t.emit(
                        GpuOpKind::MbarrierArrive { expect_tx: true },
                        [bars.bars, slot, bytes],
                        vec![],
                    );
                    for j in 0..cols / place.ld {
                        let block = t.const_i32((j * rows * place.ld) as i32);
                        let dst = t.binary(BinaryOp::Add, slot_base, block);
                        let dc = t.const_i32((j * place.ld) as i32);
                        let c = t.binary(BinaryOp::Add, col, dc);
                        t.emit(
                            GpuOpKind::TmaLoad,
                            [root, dst, map, c, row, bars.bars, slot],
                            vec![],
                        );
                    }
                    Ok(())
                },
                |_| Ok(()),
            )
        };
        self.if_else(usable, copies, |t| {
            t.fill_by_threads((bars, stage_len), base, refill, by_threads)
        })?;
        Ok(true)
    }

    /// A launch value as a uniform i32.
    fn uniform_launch_value(&mut self, v: LaunchValue) -> CompileResult<GpuValue> {
        match v {
            LaunchValue::Const(c) => Ok(self.const_i32(c as i32)),
            LaunchValue::Arg(i) => {
                let p = self.f.params[i].value;
                let x = self.uniform(p)?;
                Ok(self.cast(x, DType::I32))
            }
        }
    }
}
