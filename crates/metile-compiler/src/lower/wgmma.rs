//! `dot` on NVIDIA's warpgroup MMA (`wgmma.mma_async`, sm_90a): the tensor
//! cores read A and B straight from threadgroup memory, so the operands are
//! staged (by the operand ring's copies, or by the threads' own stores) in
//! the swizzled layouts `wgmma` reads (`dot_tiling::wgmma_staging`), and the
//! threads only hold the accumulator, in the atom's C layout.
//!
//! One `dot` then runs: where the threads wrote the operands, every thread
//! orders its writes before the tensor cores' reads (`fence.proxy.async`)
//! and a barrier; `wgmma.fence`, then per `k` step one `wgmma` per atom tile
//! the warpgroup owns, each given the tile's start in A and B, and one
//! commit. Outside a ring it then waits for all of them; in a ring
//! (`async_ring.rs`, `ring_barriers.rs`) only for the previous iteration's
//! group, the last one being waited for after the loop.
//!
//! tf32 `wgmma` reads threadgroup operands only K-major, and `b` is
//! N-major: its `dot` multiplies the transposed product, `a`'s tile as the
//! threadgroup operand and `b`'s fragments read into registers
//! (`wgmma_reg_a_issue`), whose waits hold those registers.

use super::{CacheKey, Cached, Lowering};
use crate::atoms::AtomKind;
use crate::dot_tiling::{
    k_major_b, reads_k_major_b, wgmma_register_a, wgmma_staging, AtomTiling, Staged, Swizzle,
};
use crate::error::CompileResult;
use crate::layout_assign::LayoutId;
use metile_ir::gpu_ir::*;
use metile_ir::{BinaryOp, DType};

/// Registers a `wgmma` group reads (register array, first, count), held by
/// the wait that retires it.
pub(super) type Held = (RegId, u32, u32);

/// A group of `wgmma`s `wgmma_issue_with` started: how many accumulators it
/// writes, the register operands it still reads, and for an fp8 `dot`
/// summed apart, the sum `wgmma_finish` adds into the f32 accumulators once
/// the group is done.
pub(super) struct Issued {
    pub count: usize,
    pub held: Option<Held>,
    pub partial: Option<PartialSum>,
}

/// An fp8 `dot`'s sum of one slice of its columns (`wgmma_promoted_issue`):
/// the array the `wgmma`s write and the f32 accumulator each value adds to.
pub(super) struct PartialSum {
    array: RegId,
    targets: Vec<u32>,
}

/// The most values a thread holds of an fp8 `dot`'s partial sum: beside the
/// f32 accumulators (up to 128 for a warpgroup's 64 x 256), a slice this
/// wide still leaves room in 255 registers.
const PARTIAL_VALUES: usize = 64;

/// Where a `wgmma`'s A comes from.
#[derive(Clone, Copy, Debug)]
pub(super) enum OperandA {
    /// Threadgroup memory (this root), placed as the plan's staging says.
    Staged(GpuValue),
    /// A register array in the layout of `dot_tiling::wgmma_register_a`.
    Registers(RegId),
}

impl<'f> Lowering<'f> {
    /// The index of element `(row, col)` of an operand placed at `at`
    /// (`Staged::index`, in GPU IR).
    pub(super) fn staged_index(
        &mut self,
        at: Staged,
        row: GpuValue,
        col: GpuValue,
        dtype: DType,
    ) -> GpuValue {
        let base = self.const_i32(at.base as i32);
        let ld = self.const_i32(at.ld as i32);
        let Some(swizzle) = at.swizzle else {
            let offset = self.binary(BinaryOp::Mul, row, ld);
            let offset = self.binary(BinaryOp::Add, offset, col);
            return self.binary(BinaryOp::Add, base, offset);
        };
        // Blocks of `ld` columns (a power of two); within one, the linear
        // element offset with its 16-byte chunk bits XORed by its row bits.
        let size = dtype.size_bytes();
        let ld_shift = self.const_i32(at.ld.trailing_zeros() as i32);
        let block = self.binary(BinaryOp::Shr, col, ld_shift);
        let block_len = self.const_i32((swizzle.rows * at.ld) as i32);
        let block_start = self.binary(BinaryOp::Mul, block, block_len);
        let in_block = self.const_i32(at.ld as i32 - 1);
        let col_in = self.binary(BinaryOp::And, col, in_block);
        let linear = self.binary(BinaryOp::Mul, row, ld);
        let linear = self.binary(BinaryOp::Add, linear, col_in);
        let row_bits_at = self.const_i32(7 - size.trailing_zeros() as i32);
        let row_bits = self.binary(BinaryOp::Shr, linear, row_bits_at);
        let mask = self.const_i32((swizzle.bytes / 16 - 1) as i32);
        let row_bits = self.binary(BinaryOp::And, row_bits, mask);
        let chunk_at = self.const_i32(4 - size.trailing_zeros() as i32);
        let flip = self.binary(BinaryOp::Shl, row_bits, chunk_at);
        let swizzled = self.binary(BinaryOp::Xor, linear, flip);
        let index = self.binary(BinaryOp::Add, block_start, swizzled);
        self.binary(BinaryOp::Add, base, index)
    }

    /// `dot` on a `wgmma` plan outside an operand ring: both operands are
    /// stored whole into swizzled scratch, then multiplied. `false` when they
    /// do not fit the free threadgroup memory (the generic path takes it).
    pub(super) fn wgmma_dot(
        &mut self,
        op: &'f metile_ir::Op,
        plan: &AtomTiling,
        reg: RegId,
    ) -> CompileResult<bool> {
        if plan.atom.operand.is_fp8() {
            return self.wgmma_fp8_dot(op, plan, reg);
        }
        let (a, b) = (op.operands[0], op.operands[1]);
        let dtype = self.elem_dtype(a);
        let Some((sa, sb, len)) = wgmma_staging(plan, dtype) else {
            return Ok(false);
        };
        if len > self.dot_scratch_capacity(dtype) {
            return Ok(false);
        }
        let root = self.dot_scratch(dtype, len)?;
        // A loop-invariant `a` staged before the loop is read where it is.
        let a_root = self.staged_once(a);
        // `b = x.T` (attention's `dot(q, k.T)`): `x` is `b` K-major, the
        // layout `wgmma` also reads for 16-bit types, in which the threads'
        // runs of `x`'s rows stay whole (16-byte stores, where `b`'s N-major
        // placement would take them element by element).
        let transposed = self.transposed_source(b).filter(|_| reads_k_major_b(plan));
        let (b_staged, b_k_major, lb, bv) = match transposed {
            Some(x) => {
                let lx = self.natural_layout(x)?;
                let xv = self.elems(x, lx)?;
                (k_major_b(sa, sb, plan.shape), true, lx, xv)
            }
            None => {
                let lb = self.natural_layout(b)?;
                let bv = self.elems(b, lb)?;
                (sb, false, lb, bv)
            }
        };
        let a_values = match a_root {
            Some(_) => None,
            None => {
                let la = self.natural_layout(a)?;
                Some((la, self.elems(a, la)?))
            }
        };
        // An `a` already in the registers of the A fragments (a chained
        // product's accumulator) is read from them, not staged.
        let a_registers = match &a_values {
            Some((la, av)) => self.a_in_registers(plan, *la, av),
            None => None,
        };
        self.barrier()?;
        if let (Some((la, av)), None) = (&a_values, a_registers) {
            self.stage(root, sa, *la, av, None, None)?;
        }
        self.stage(root, b_staged, lb, &bv, None, None)?;
        let a_operand = match a_registers {
            Some(regs) => OperandA::Registers(regs),
            None => OperandA::Staged(a_root.unwrap_or(root)),
        };
        let issued = self.wgmma_issue_with(plan, (a_operand, root), (sa, b_staged), b_k_major, None, reg)?;
        // Held-back loads (the next iteration's operands) start while the
        // tensor cores work.
        self.flush_deferred()?;
        self.wgmma_finish(&issued, reg, 0);
        Ok(true)
    }

    /// `dot` on an fp8 `wgmma` plan: the f16 operands' fp8 sources
    /// (`fp8_dot`) are stored K-major into swizzled scratch, each in a
    /// scratch array of its own format, then multiplied `k32` at a time.
    /// `b = x.T` is staged from `x`'s registers as they are; any other `b`
    /// (`K x N`) is stored transposed, element by element.
    fn wgmma_fp8_dot(&mut self, op: &'f metile_ir::Op, plan: &AtomTiling, reg: RegId) -> CompileResult<bool> {
        let (Some(xa), Some(xb)) = (self.fp8_source(op.operands[0]), self.fp8_source(op.operands[1])) else {
            return Err(self.internal("an fp8 wgmma plan on operands that are not fp8 conversions"));
        };
        // A loop-invariant `a` staged before the loop is read where it is.
        let a_root = self.staged_once(xa);
        let (dtype_a, dtype_b) = (self.elem_dtype(xa), self.elem_dtype(xb));
        let Some((sa, sb, len)) = wgmma_staging(plan, dtype_a) else {
            return Ok(false);
        };
        // fp8 `b` is read K-major only: placed as its transpose, `N x K`.
        let sb = k_major_b(sa, sb, plan.shape);
        let need = if dtype_a == dtype_b { len } else { 2 * len };
        if need > self.dot_scratch_capacity(dtype_a) {
            return Ok(false);
        }
        let root_a = self.dot_scratch(dtype_a, len)?;
        let root_b = match dtype_a == dtype_b {
            true => root_a,
            false => self.dot_scratch(dtype_b, len)?,
        };
        let a_values = match a_root {
            Some(_) => None,
            None => {
                let la = self.natural_layout(xa)?;
                Some((la, self.elems(xa, la)?))
            }
        };
        let (b_source, b_transposed) = match self.transposed_source(xb) {
            Some(x) => (x, false),
            None => (xb, true),
        };
        let lb = self.natural_layout(b_source)?;
        let bv = self.elems(b_source, lb)?;
        self.barrier()?;
        if let Some((la, av)) = &a_values {
            self.stage(root_a, sa, *la, av, None, None)?;
        }
        match b_transposed {
            true => self.stage_transposed(root_b, sb, lb, &bv)?,
            false => self.stage(root_b, sb, lb, &bv, None, None)?,
        }
        let roots = (OperandA::Staged(a_root.unwrap_or(root_a)), root_b);
        let issued = self.wgmma_issue_with(plan, roots, (sa, sb), true, None, reg)?;
        self.flush_deferred()?;
        self.wgmma_finish(&issued, reg, 0);
        Ok(true)
    }

    /// Writes the elements a thread holds of a `K x N` tile in layout `l`
    /// at their transposed place: element `(k, n)` at `at.index(n, k)`.
    fn stage_transposed(
        &mut self,
        root: GpuValue,
        at: Staged,
        l: LayoutId,
        xs: &[GpuValue],
    ) -> CompileResult<()> {
        let dtype = self.dtype_of(root);
        let owner = self.owner(l);
        for (v, &x) in xs.iter().enumerate() {
            let k = self.coord(l, 0, v);
            let n = self.coord(l, 1, v);
            let index = self.staged_index(at, n, k, dtype);
            self.mem_store(root, index, x, 1, owner);
        }
        Ok(())
    }

    /// Stages, before the loop whose body is `body`, the `a` operand of each
    /// `wgmma` `dot` of the body that is defined outside it (attention's `q`),
    /// into threadgroup memory of its own, which the `dot`s then read in place
    /// of staging it again every iteration. Only where that memory leaves the
    /// `dot`'s own staging room.
    pub(super) fn stage_invariant_operands(&mut self, body: &'f metile_ir::Block) -> CompileResult<()> {
        let dots = || body.ops.iter().filter(|o| o.kind == metile_ir::OpKind::Dot);
        // The largest staging of the body's `dot`s, which must still fit
        // beside (fp8 plans stage fp8 tiles: the plan's operand dtype).
        let mut staging = 0;
        for op in dots() {
            let Some(plan) = self.a.dot_plans.get(&op.results[0]).cloned() else {
                continue;
            };
            let dtype = plan.atom.operand;
            let Some((_, _, len)) = wgmma_staging(&plan, dtype) else {
                continue;
            };
            // A `dot` of a `b` ring stages at most its `a` (`b_ring.rs`): none
            // where that is what is staged here once, or read from registers.
            let a = op.operands[0];
            let len = match self.b_ring_of(op) {
                Some(_) if self.homes[a.index()].is_some() => 0,
                Some(_) => {
                    let la = self.natural_layout(a)?;
                    match self.reads_a_from_registers(&plan, la) {
                        true => 0,
                        false => plan.shape.0 * plan.shape.2,
                    }
                }
                None => len,
            };
            staging = staging.max(len * dtype.size_bytes());
        }
        let mut staged_any = false;
        for op in dots() {
            let Some(plan) = self.atom_plan(op.results[0]) else {
                continue;
            };
            // An fp8 plan stages the fp8 tile the operand converts.
            let fp8 = matches!(plan.atom.kind, AtomKind::NvidiaWgmmaM64K32F8 { .. });
            let a = match fp8 {
                true => match self.fp8_source(op.operands[0]) {
                    Some(x) => x,
                    None => continue,
                },
                false => op.operands[0],
            };
            let defined_outside = self.homes[a.index()].is_some();
            let staged = self.staged_once(a).is_some();
            if !defined_outside || staged || !(fp8 || reads_k_major_b(&plan)) {
                continue;
            }
            let dtype = self.elem_dtype(a);
            let Some((sa, _, _)) = wgmma_staging(&plan, dtype) else {
                continue;
            };
            let (m, _, k) = plan.shape;
            let size = dtype.size_bytes();
            let own = (m * k * size).div_ceil(1024) * 1024;
            // Room for this memory and, beside it, the body's staging and a
            // 1024-byte alignment gap for each.
            let free = self.dot_scratch_capacity(dtype) * size;
            if own + staging + 2 * 1024 > free {
                continue;
            }
            let own = own / size;
            let root = self.b.add_threadgroup(dtype, own, TgPurpose::Scratch);
            let la = self.natural_layout(a)?;
            let av = self.elems(a, la)?;
            self.stage(root, sa, la, &av, None, None)?;
            self.cache(CacheKey::StagedOperand(a), Cached::One(root));
            staged_any = true;
        }
        // The threads' stores reach the tensor cores' reads through a proxy
        // fence and a barrier: here, once, since a ring whose stages come by
        // tensor copies publishes nothing the threads wrote.
        if staged_any {
            self.emit(GpuOpKind::ProxyFence, ValueList::new(), vec![]);
            self.barrier()?;
        }
        Ok(())
    }

    /// The threadgroup memory a loop-invariant `a` was staged into before
    /// the loop (`stage_invariant_operands`), if it was.
    pub(super) fn staged_once(&self, a: metile_ir::ValueId) -> Option<GpuValue> {
        match self.cached(&CacheKey::StagedOperand(a), self.at) {
            Some(Cached::One(root)) => Some(root),
            _ => None,
        }
    }

    /// `a`'s values `av` (held in layout `la`) written into a register array
    /// for `plan`'s `wgmma` to read as its A, where `la` already is the A
    /// fragments' layout.
    pub(super) fn a_in_registers(
        &mut self,
        plan: &AtomTiling,
        la: LayoutId,
        av: &[GpuValue],
    ) -> Option<RegId> {
        if !self.reads_a_from_registers(plan, la) {
            return None;
        }
        let regs = self.b.add_reg(plan.atom.operand, av.len() as u32);
        for (i, &x) in av.iter().enumerate() {
            self.reg_write(regs, i as u32, x);
        }
        Some(regs)
    }

    /// Whether `a`, held in layout `la`, is already the A fragments of
    /// `plan`'s 16-bit `wgmma` (`dot_tiling::wgmma_register_a`).
    pub(super) fn reads_a_from_registers(&self, plan: &AtomTiling, la: LayoutId) -> bool {
        self.a.switches.wgmma_register_a
            && wgmma_register_a(plan, &self.a.target, &self.a.switches, self.a.threads as usize)
                .is_some_and(|l| &l == self.layout(la))
    }

    /// The fp8 tile that `v` (an f16 `dot` operand) converts, if it does.
    pub(super) fn fp8_source(&self, v: metile_ir::ValueId) -> Option<metile_ir::ValueId> {
        crate::fp8_dot::cast_source(self.def_op[v.index()]?, &self.f.values)
    }

    /// The value whose transpose `v` is (`v = x.T`, a 2-D permute), if so.
    pub(super) fn transposed_source(&self, v: metile_ir::ValueId) -> Option<metile_ir::ValueId> {
        let op = self.def_op[v.index()]?;
        op.kind.is_transpose().then_some(op.operands[0])
    }

    /// The multiplication of operands staged at `places` (plus the stage
    /// offsets `stage`, in a ring), `b` placed K-major (`b_k_major`: staged
    /// as its transpose, `N x K`, exactly as `a` is) or N-major: fences and
    /// a barrier (in a ring, where `stage`'s flag says the threads wrote some
    /// of it), the `wgmma`s of every `k` step and their commit. Returns what
    /// was issued (the caller waits, holding its register operands; an fp8
    /// `dot`'s sum is added in by `wgmma_finish`).
    pub(super) fn wgmma_issue_with(
        &mut self,
        plan: &AtomTiling,
        (a_operand, root_b): (OperandA, GpuValue),
        (sa, sb): (Staged, Staged),
        b_k_major: bool,
        stage: Option<(Option<GpuValue>, Option<GpuValue>, GpuValue)>,
        reg: RegId,
    ) -> CompileResult<Issued> {
        let dtype = self.dtype_of(root_b);
        let size = dtype.size_bytes();
        let (Some(swz_a), Some(swz_b)) = (sa.swizzle, sb.swizzle) else {
            return Err(self.internal("wgmma operands without a swizzled placement"));
        };
        let k = plan.shape.2;
        let (am, an, ak) = plan.atom.shape;
        let (reps_m, reps_n) = plan.reps;
        let nc = plan.atom.values_per_thread().2;
        // Threads' writes reach the tensor cores' reads through a proxy
        // fence and a barrier; tensor copies through their memory barrier.
        let publish = |t: &mut Self| {
            t.emit(GpuOpKind::ProxyFence, ValueList::new(), vec![]);
            t.barrier()
        };
        match stage {
            Some((_, _, by_threads)) => self.if_else(by_threads, publish, |_| Ok(()))?,
            None => publish(self)?,
        }
        // Row r starts at r * ld in A's blocks; column c of B (a multiple of
        // its block width) at c * k.
        let operand_a = k_major_operand(swz_a);
        let start_a = match a_operand {
            OperandA::Staged(_) => {
                self.warpgroup_start(plan, (0, reps_m * am, sa.ld), stage.and_then(|(oa, _, _)| oa))
            }
            OperandA::Registers(_) => self.const_i32(0),
        };
        if let AtomKind::NvidiaWgmmaM64K8Tf32 { n } = plan.atom.kind {
            let OperandA::Staged(root) = a_operand else {
                return Err(self.internal("a tf32 wgmma with its A in registers"));
            };
            let ob = stage.and_then(|(_, ob, _)| ob);
            let held = self.wgmma_reg_a_issue(plan, (root, n, reg), (sa, operand_a, start_a), (sb, ob))?;
            return Ok(Issued {
                count: nc * reps_m * reps_n,
                held,
                partial: None,
            });
        }
        // Column c of an N-major B (a multiple of its block width) starts at
        // c * k; row c of a K-major one at c * ld, as A's rows.
        let b_unit = if b_k_major { sb.ld } else { k };
        let start_b = self.warpgroup_start(plan, (1, reps_n * an, b_unit), stage.and_then(|(_, ob, _)| ob));
        let operand_b = if b_k_major {
            k_major_operand(swz_b)
        } else {
            WgmmaOperand {
                swizzle_bytes: swz_b.bytes as u16,
                lbo: (k * swz_b.bytes) as u32,
                sbo: (8 * swz_b.bytes) as u32,
                mn_major: true,
            }
        };
        let count = nc * reps_m * reps_n;
        if plan.atom.operand.is_fp8() && !self.a.switches.fp8_fast_accum {
            let OperandA::Staged(root_a) = a_operand else {
                return Err(self.internal("an fp8 wgmma with its A in registers"));
            };
            if !b_k_major {
                return Err(self.internal("an fp8 wgmma with an N-major B"));
            }
            let a = (root_a, operand_a, start_a, sa);
            return self.wgmma_promoted_issue(plan, a, (root_b, operand_b, start_b, sb), reg);
        }
        let acc = reg;
        self.emit(GpuOpKind::WgmmaFence, ValueList::new(), vec![]);
        for k0 in (0..k).step_by(ak) {
            let b_indices: Vec<GpuValue> = (0..reps_n)
                .map(|ni| {
                    let at = if b_k_major {
                        sb.index(ni * an, k0, size)
                    } else {
                        sb.index(k0, ni * an, size)
                    };
                    let b_at = self.const_i32(at as i32);
                    self.binary(BinaryOp::Add, start_b, b_at)
                })
                .collect();
            for mi in 0..reps_m {
                let a_at = sa.index(mi * am, k0, size);
                let a_at = self.const_i32(a_at as i32);
                let a_index = self.binary(BinaryOp::Add, start_a, a_at);
                for (ni, &b_index) in b_indices.iter().enumerate() {
                    let first = (nc * (ni + reps_n * mi)) as u32;
                    let n = an as u16;
                    match a_operand {
                        OperandA::Staged(root) => self.emit(
                            GpuOpKind::Wgmma {
                                n,
                                a: operand_a,
                                b: operand_b,
                                acc,
                                first,
                                accumulate: true,
                            },
                            [root, a_index, root_b, b_index],
                            vec![],
                        ),
                        // The `m x k` accumulator layout holds `k / 2` values
                        // a thread per row block, 8 per `k16` step.
                        OperandA::Registers(regs) => self.emit(
                            GpuOpKind::WgmmaRegA {
                                n,
                                b: operand_b,
                                acc,
                                first,
                                a: regs,
                                a_first: (mi * k / 2 + k0 / 2) as u32,
                            },
                            [root_b, b_index],
                            vec![],
                        ),
                    };
                    self.clobber_reg(acc);
                }
            }
        }
        self.emit(GpuOpKind::WgmmaCommit, ValueList::new(), vec![]);
        Ok(Issued {
            count,
            held: None,
            partial: None,
        })
    }

    /// The `wgmma`s of an fp8 `dot`, summed apart from the f32 accumulators
    /// `reg`. fp8 products reach an accumulator with about 14 bits kept (the
    /// tensor cores align them to the largest exponent, the accumulator's
    /// included), so each `dot` (a loop's `k` tile) multiplies into an array
    /// of its own, its first `k32` step overwriting it, which is then added
    /// into `reg`: cuBLAS's promotion (`fp8_fast_accum` skips it). Column
    /// slices of at most [`PARTIAL_VALUES`] values a thread take turns in one
    /// array (a 64 x 256 warpgroup tile: two m64n128 halves, whose
    /// accumulator values are the m64n256 one's first and second halves);
    /// each but the last is waited for and added in here, the last by
    /// `wgmma_finish`.
    fn wgmma_promoted_issue(
        &mut self,
        plan: &AtomTiling,
        (root_a, operand_a, start_a, sa): (GpuValue, WgmmaOperand, GpuValue, Staged),
        (root_b, operand_b, start_b, sb): (GpuValue, WgmmaOperand, GpuValue, Staged),
        reg: RegId,
    ) -> CompileResult<Issued> {
        let size = self.dtype_of(root_b).size_bytes();
        let k = plan.shape.2;
        let (am, an, ak) = plan.atom.shape;
        let (reps_m, reps_n) = plan.reps;
        let nc = plan.atom.values_per_thread().2;
        let mut splits = 1;
        while nc / splits * reps_m > PARTIAL_VALUES && (an / (2 * splits)) % 8 == 0 {
            splits *= 2;
        }
        let (n_sub, nc_sub) = (an / splits, nc / splits);
        let array = self.b.add_reg(DType::F32, (nc_sub * reps_m) as u32);
        let slices: Vec<(usize, usize)> = (0..reps_n)
            .flat_map(|ni| (0..splits).map(move |h| (ni, h)))
            .collect();
        let mut partial = None;
        for &(ni, h) in &slices {
            if let Some(done) = partial.take() {
                self.add_partial_sum(&done, reg);
            }
            self.emit(GpuOpKind::WgmmaFence, ValueList::new(), vec![]);
            for k0 in (0..k).step_by(ak) {
                let b_at = self.const_i32(sb.index(ni * an + h * n_sub, k0, size) as i32);
                let b_index = self.binary(BinaryOp::Add, start_b, b_at);
                for mi in 0..reps_m {
                    let a_at = self.const_i32(sa.index(mi * am, k0, size) as i32);
                    let a_index = self.binary(BinaryOp::Add, start_a, a_at);
                    let kind = GpuOpKind::Wgmma {
                        n: n_sub as u16,
                        a: operand_a,
                        b: operand_b,
                        acc: array,
                        first: (nc_sub * mi) as u32,
                        accumulate: k0 != 0,
                    };
                    self.emit(kind, [root_a, a_index, root_b, b_index], vec![]);
                    self.clobber_reg(array);
                }
            }
            self.emit(GpuOpKind::WgmmaCommit, ValueList::new(), vec![]);
            let targets = (0..reps_m)
                .flat_map(|mi| (0..nc_sub).map(move |v| (nc * (ni + reps_n * mi) + h * nc_sub + v) as u32))
                .collect();
            partial = Some(PartialSum { array, targets });
        }
        Ok(Issued {
            count: nc_sub * reps_m,
            held: None,
            partial,
        })
    }

    /// Waits for the `wgmma`s that write `p` and adds it into the f32
    /// accumulators `reg`.
    fn add_partial_sum(&mut self, p: &PartialSum, reg: RegId) {
        self.wgmma_wait(p.array, p.targets.len(), 0, None);
        for (i, &t) in p.targets.iter().enumerate() {
            let sum = self.reg_read(reg, t, DType::F32);
            let part = self.reg_read(p.array, i as u32, DType::F32);
            let sum = self.binary(BinaryOp::Add, sum, part);
            self.reg_write(reg, t, sum);
        }
    }

    /// Waits until at most `pending` `wgmma` groups are in flight, `issued`
    /// done among them; an fp8 `dot` summed apart waits for all and adds its
    /// last partial sum into the f32 accumulators `reg`.
    pub(super) fn wgmma_finish(&mut self, issued: &Issued, reg: RegId, pending: u8) {
        match &issued.partial {
            Some(p) => self.add_partial_sum(p, reg),
            None => self.wgmma_wait(reg, issued.count, pending, issued.held),
        }
    }

    /// The index where the warpgroup's block of an operand starts: the
    /// thread's coordinate along `axis` of the accumulator layout rounded
    /// down to the block's `extent`, times `scale` elements per unit, plus
    /// the stage's `offset` in a ring.
    fn warpgroup_start(
        &mut self,
        plan: &AtomTiling,
        (axis, extent, scale): (usize, usize, usize),
        offset: Option<GpuValue>,
    ) -> GpuValue {
        let lc = self.a.layouts.intern(plan.c.clone());
        let unit = self.at_depth(0, |this| {
            let t = this.thread_coord(lc, axis);
            let e = this.const_i32(extent as i32);
            let q = this.binary(BinaryOp::FloorDiv, t, e);
            let s = this.const_i32((extent * scale) as i32);
            this.binary(BinaryOp::Mul, q, s)
        });
        match offset {
            Some(o) => self.binary(BinaryOp::Add, unit, o),
            None => unit,
        }
    }

    /// The tf32 `wgmma`s (the transposed product) of one `dot`: b's
    /// fragments are read into registers (`frags`) and the `k8` steps issued
    /// in two groups, each group's fragments read while the other group's
    /// `wgmma`s run: read the first half, issue it, wait for the previous
    /// `dot`'s second group (holding its registers), read the second half,
    /// issue it, wait for the first. With one step there is nothing to
    /// overlap: the group is waited for at once. Returns the registers the
    /// group still in flight reads.
    fn wgmma_reg_a_issue(
        &mut self,
        plan: &AtomTiling,
        (root, n, reg): (GpuValue, u16, RegId),
        (sa, operand_a, start_a): (Staged, WgmmaOperand, GpuValue),
        (sb, ob): (Staged, Option<GpuValue>),
    ) -> CompileResult<Option<Held>> {
        let (k, (am, _, ak)) = (plan.shape.2, plan.atom.shape);
        let (reps_m, reps_n) = plan.reps;
        let nc = plan.atom.values_per_thread().2;
        let size = DType::F32.size_bytes();
        let frag = self.a.layouts.intern(plan.b.clone());
        let per_step = self.layout(frag).values();
        let steps = k / ak;
        let frags = self.b.add_reg(DType::F32, (per_step * steps) as u32);
        let halves = if steps > 1 { 2 } else { 1 };
        let bounds = |h: usize| (h * steps / halves, (h + 1) * steps / halves);
        let range = |h: usize| {
            let (s0, s1) = bounds(h);
            (frags, (s0 * per_step) as u32, ((s1 - s0) * per_step) as u32)
        };
        for h in 0..halves {
            let (s0, s1) = bounds(h);
            for step in s0..s1 {
                for v in 0..per_step {
                    let row = self.coord(frag, 0, v);
                    let k0 = self.const_i32((step * ak) as i32);
                    let row = self.binary(BinaryOp::Add, row, k0);
                    let col = self.coord(frag, 1, v);
                    let mut index = self.staged_index(sb, row, col, DType::F32);
                    if let Some(o) = ob {
                        index = self.binary(BinaryOp::Add, index, o);
                    }
                    let x = self.mem_load(root, index, 1, None, None);
                    self.reg_write(frags, (step * per_step + v) as u32, x);
                }
            }
            self.emit(GpuOpKind::WgmmaFence, ValueList::new(), vec![]);
            for step in s0..s1 {
                for mi in 0..reps_m {
                    let a_at = self.const_i32(sa.index(mi * am, step * ak, size) as i32);
                    let a_index = self.binary(BinaryOp::Add, start_a, a_at);
                    for ni in 0..reps_n {
                        self.emit(
                            GpuOpKind::WgmmaRegA {
                                n,
                                b: operand_a,
                                acc: reg,
                                first: (nc * (ni + reps_n * mi)) as u32,
                                a: frags,
                                a_first: (step * per_step + 4 * ni) as u32,
                            },
                            [root, a_index],
                            vec![],
                        );
                        self.clobber_reg(reg);
                    }
                }
            }
            self.emit(GpuOpKind::WgmmaCommit, ValueList::new(), vec![]);
            let count = nc * reps_m * reps_n;
            match (halves, h) {
                (1, _) => self.wgmma_wait(reg, count, 0, Some(range(0))),
                (_, 0) => self.wgmma_wait(reg, count, 1, Some(range(1))),
                _ => self.wgmma_wait(reg, count, 1, Some(range(0))),
            }
        }
        Ok((halves == 2).then(|| range(1)))
    }

    /// Waits until at most `pending` `wgmma` groups are in flight, the
    /// `count` accumulators of `reg` written by the finished ones, and the
    /// register operands `held` they read free again.
    pub(super) fn wgmma_wait(&mut self, reg: RegId, count: usize, pending: u8, held: Option<Held>) {
        self.emit(
            GpuOpKind::WgmmaWait {
                pending,
                acc: reg,
                count: count as u32,
                held,
            },
            ValueList::new(),
            vec![],
        );
        self.clobber_reg(reg);
    }
}

/// How `wgmma` reads a swizzled K-major operand (A, or B placed as its
/// transpose): rows of K one after the other, 8-row groups `8 * bytes` apart.
fn k_major_operand(swizzle: Swizzle) -> WgmmaOperand {
    WgmmaOperand {
        swizzle_bytes: swizzle.bytes as u16,
        lbo: 16,
        sbo: (8 * swizzle.bytes) as u32,
        mn_major: false,
    }
}

/// How far (in elements) the element `(dr, dc)` rows and columns from another
/// sits from it in the staged placement `at` (`Lowering::staged_index`), where
/// that is the same for every position of the first: always in padded rows; in
/// a swizzled placement when the columns move by whole blocks and the rows by
/// whole periods of the swizzle (the XORed chunk bits come from row bits the
/// move leaves alone).
pub(super) fn staged_delta(at: Staged, dtype: DType, dr: i64, dc: i64) -> Option<i64> {
    let ld = at.ld as i64;
    let Some(swizzle) = at.swizzle else {
        return Some(dr * ld + dc);
    };
    let size = dtype.size_bytes() as i64;
    // The row bits XORed into the chunk bits start at 128 bytes and span
    // `bytes / 16` values of them.
    let period = (128 / size) * (swizzle.bytes as i64 / 16);
    let moved = dr * ld;
    (dc.rem_euclid(ld) == 0 && moved.rem_euclid(period) == 0)
        .then(|| dc.div_euclid(ld) * (swizzle.rows as i64 * ld) + moved)
}
