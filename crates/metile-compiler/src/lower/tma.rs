//! `wgmma` operand rings filled by the tensor memory accelerator (sm_90):
//! one thread starts one `cp.async.bulk.tensor` per swizzle block of a tile,
//! the hardware writing it in the swizzled layout `wgmma` reads and zeros
//! outside the matrix, and the copy completes on the stage's memory barrier.
//!
//! Which loads qualify is `block_access.rs`'s; the kernel gets the
//! matrix's tensor map (`GpuParamKind::TensorMap`) and a flag
//! (`TensorMapReady`) saying whether the runtime could build it for the
//! launch's arguments (16-byte aligned base and row pitch); without it, or
//! where an unbounded tile would leave its row, the threads copy as they would
//! without TMA (`async_ring.rs`). The copies complete on the stage's full
//! barrier (`ring_barriers.rs`).
//!
//! A copy's coordinates are 32-bit, computed from the block's origin with
//! wrapping `i32` arithmetic, which is the kernel's own value wherever the
//! kernel computes its offsets in 32 bits. Offsets computed in 64 bits get
//! the same coordinates, so a block whose first row or column lies at 2^31 or
//! beyond (a matrix of more than 2^31 rows: 32 GiB at the narrowest f16 rows
//! a tensor copy takes) would be read at the wrong place; the tests here do
//! not look for that.

use super::affine_index::{Affine, RunTest};
use super::block_access::BlockLoad;
use super::ring_barriers::RingBarriers;
use super::Lowering;
use crate::dot_tiling::Staged;
use crate::error::CompileResult;
use metile_ir::gpu_ir::*;
use metile_ir::{BinaryOp, CmpOp, DType, Op};

/// Rows of an unbounded matrix: the most a 32-bit coordinate reaches.
const UNBOUNDED_ROWS: i64 = i32::MAX as i64;

impl<'f> Lowering<'f> {
    /// Whether a `wgmma` ring of `plan` fills with tensor copies. A consumer
    /// warp issues them on its path from one `wgmma` group to the next (in
    /// the loop, the last to release the stage), which pays only where a
    /// second warpgroup keeps the tensor cores
    /// busy meanwhile and an iteration's `k` spans at least 128 bytes: on the
    /// H100, one warpgroup ran 4–16% slower with them (f16 64x128x64,
    /// 128x64x64 and 128x128x64 tiles) and f16 128x256x32 on two 6–11%,
    /// while two warpgroups on 64-deep f16 tiles gain 5–10% and tf32
    /// 256x128x32 and 128x128x32 tiles 11–14% (benchmarks/gemm.py).
    pub(super) fn tensor_copies_pay(&self, plan: &crate::dot_tiling::AtomTiling) -> bool {
        let warpgroups = self.a.threads / (4 * self.a.target.simd_width);
        let k_bytes = plan.shape.2 * plan.atom.operand.size_bytes();
        self.a.switches.tma && warpgroups >= 2 && k_bytes >= 128
    }

    /// A form without lane indices (a block's origin) as an i32 GPU value,
    /// computed with wrapping `i32` arithmetic as the kernel computes it.
    fn affine_value(&mut self, form: &Affine) -> CompileResult<GpuValue> {
        let constant = self.const_i32(form.constant_term() as i32);
        let mut sum = None;
        for t in form.terms().iter().filter(|t| !t.factors.is_empty()) {
            let mut product = None;
            for &f in &t.factors {
                let x = self.uniform(f)?;
                let x = self.cast(x, DType::I32);
                product = Some(self.accumulate(BinaryOp::Mul, product, x));
            }
            let mut term = product.ok_or_else(|| self.internal("a term without factors"))?;
            if t.coeff != 1 {
                let c = self.const_i32(t.coeff as i32);
                term = self.binary(BinaryOp::Mul, term, c);
            }
            sum = Some(self.accumulate(BinaryOp::Add, sum, term));
        }
        Ok(match sum {
            None => constant,
            Some(s) if form.constant_term() == 0 => s,
            Some(s) => self.binary(BinaryOp::Add, s, constant),
        })
    }

    /// Whether `form` is a multiple of `n` at every launch (its factors'
    /// divisibility from the axis analysis).
    fn provably_multiple(&self, form: &Affine, n: i64) -> bool {
        form.terms().iter().all(|t| {
            let multiple = t
                .factors
                .iter()
                .fold(u128::from(t.coeff.unsigned_abs()), |m, &f| {
                    m.saturating_mul(u128::from(self.info.get(f).divisibility))
                });
            multiple % n as u128 == 0
        })
    }

    /// A uniform bool that holds where every test does (`affine_index.rs`),
    /// or `None` where one cannot be made.
    fn run_tests_hold(&mut self, tests: &[RunTest]) -> CompileResult<Option<GpuValue>> {
        let mut all = None;
        for t in tests {
            let bound = match t.bound {
                None => self.const_i32(0),
                Some(b) => match self.constant(b) {
                    Some(c) => self.const_i32(c as i32),
                    None => self.uniform(b)?,
                },
            };
            let Some(holds) = self.every_lane_compares(t.value, t.cmp, bound) else {
                return Ok(None);
            };
            all = Some(self.accumulate(BinaryOp::And, all, holds));
        }
        Ok(all)
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

    /// Fills the operand placed at `place` of the stage at `base` with tensor
    /// copies where the launch allows, else with `by_threads`. The copies of
    /// a prologue fill are thread 0's; those of a refill (`refill`: the empty
    /// barrier's parity, which the threads' fallback copies wait for, and the
    /// register flagging the warp that released the stage last) that warp's
    /// first lane's, which waits for no one. `false` when the load does not
    /// qualify (nothing emitted). The ring decides whether to try
    /// (`Lowering::tensor_copies_pay`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn tma_fill(
        &mut self,
        op: &'f Op,
        (root, place, base): (GpuValue, Staged, GpuValue),
        (bars, stage_len): (RingBarriers, usize),
        refill: Option<(GpuValue, RegId)>,
        (shape, ring_tile): ((usize, usize), (usize, usize)),
        dtype: DType,
        by_threads: impl FnOnce(&mut Self) -> CompileResult<()>,
    ) -> CompileResult<bool> {
        let Some(mut load) = self.block_load(op, shape) else {
            return Ok(false);
        };
        // A wrap whose far side no store observes needs no test (`unobserved_lanes.rs`).
        let BlockLoad { tests, row, col, .. } = &mut load;
        let origins = [&*row, &*col];
        tests.retain(|t| {
            let axis = (t.cmp == CmpOp::Lt)
                .then(|| self.tested_axis(t, origins, shape))
                .flatten();
            !axis.is_some_and(|a| self.unobserved_past(ring_tile, a, origins[a], t))
        });
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
            stacked: load.depth.is_some(),
        };
        let tests = if load.tests.is_empty() {
            None
        } else {
            let Some(holds) = self.run_tests_hold(&load.tests)? else {
                return Ok(false);
            };
            Some(holds)
        };
        let (map, ready) = self.tensor_map(spec);
        let row = self.affine_value(&load.row)?;
        let col = self.affine_value(&load.col)?;
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
        } else if !load.from_zero[1] && !load.col.is_non_negative_constant() {
            // The load reads what lies left of the matrix; the copy, zeros.
            usable = self.and_compare(usable, CmpOp::Ge, col, zero);
        }
        if (load.rows.is_none() || !load.from_zero[0]) && !load.row.is_non_negative_constant() {
            usable = self.and_compare(usable, CmpOp::Ge, row, zero);
        }
        // Of stacked matrices, the one the block lies in: before the first,
        // the load reads what lies before the buffer, the copy zeros.
        let depth = match &load.depth {
            Some(form) => {
                let depth = self.affine_value(form)?;
                if !form.is_non_negative_constant() {
                    usable = self.and_compare(usable, CmpOp::Ge, depth, zero);
                }
                Some(depth)
            }
            None => None,
        };
        // A tensor copy's first column lies on 16 bytes (the H100 faults
        // on others, measured).
        let align = (16 / size) as i64;
        if align > 1 && !self.provably_multiple(&load.col, align) {
            let low_bits = self.const_i32(align as i32 - 1);
            let low = self.binary(BinaryOp::And, col, low_bits);
            usable = self.and_compare(usable, CmpOp::Eq, low, zero);
        }
        if let Some(tests) = tests {
            usable = self.binary(BinaryOp::And, usable, tests);
        }
        let place_base = self.const_i32(place.base as i32);
        let slot_base = self.binary(BinaryOp::Add, base, place_base);
        let copies = |t: &mut Self| -> CompileResult<()> {
            let slot = t.stage_index(base, stage_len);
            let issuer = match refill {
                Some((_, last_release)) => t.refill_issuer(last_release),
                None => t.first_thread(),
            };
            t.if_else(
                issuer,
                |t| {
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
                        let operands = [root, dst, map, c, row, bars.bars, slot].into_iter().chain(depth);
                        t.emit(GpuOpKind::TmaLoad, operands.collect::<ValueList>(), vec![]);
                    }
                    Ok(())
                },
                |_| Ok(()),
            )
        };
        self.if_else(usable, copies, |t| {
            t.fill_by_threads(
                (bars, stage_len),
                base,
                refill.map(|(parity, _)| parity),
                by_threads,
            )
        })?;
        Ok(true)
    }

    /// `usable && (x cmp y)`: one more condition of a tensor copy.
    fn and_compare(&mut self, usable: GpuValue, cmp: CmpOp, x: GpuValue, y: GpuValue) -> GpuValue {
        let holds = self.compare(cmp, x, y);
        self.binary(BinaryOp::And, usable, holds)
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
