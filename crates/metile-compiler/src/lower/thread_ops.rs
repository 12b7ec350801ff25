//! Thread-level ops (`thread_id`, `simd_lane_id`, `simd_shuffle_xor`,
//! `simd_broadcast`, `shared`) and `tile_swizzle`.
//!
//! A thread-level value is a tile of shape `[T]` in the identity layout: thread
//! `t` holds element `t`, so these ops are the hardware operation on one register.
//! Shuffle masks and broadcast lanes are taken modulo 32, as in the interpreter.
//! `shared` memory is zero-filled (the interpreter gives each execution a fresh
//! zeroed buffer), between two barriers so no thread still reads the old contents.
//!
//! `tile_swizzle` evaluates the interpreter's formulas (see `metile-interp`'s
//! `swizzle.rs`) on the uniform program ids with 64-bit arithmetic; the morton
//! walk is a bounded loop (at most 34 levels for 32-bit grids) over registers.

use super::{Home, Lowering};
use crate::error::CompileResult;
use crate::layout_assign::Class;
use metile_ir::gpu_ir::*;
use metile_ir::{BinaryOp, CmpOp, DType, Literal, Op, OpKind, SwizzlePattern, UnaryOp};

const I64: DType = DType::I64;

impl<'f> Lowering<'f> {
    /// The identity thread layout of a thread-level result.
    fn thread_layout(&mut self, op: &Op) -> CompileResult<crate::layout_assign::LayoutId> {
        let Class::Fixed(l) = self.a.class(op.results[0]) else {
            return Err(self.internal("a thread-level value without a layout"));
        };
        let layout = self.layout(l);
        let identity =
            layout.values() == 1 && (0..layout.threads()).all(|t| layout.element(t, 0) == t as i64);
        if !identity {
            return Err(self.err(format!(
                "a thread-level value must have one element per thread ({} threads), got shape {:?}",
                self.a.threads,
                self.f.ty(op.results[0]).shape
            )));
        }
        Ok(l)
    }

    pub(super) fn thread_index_op(&mut self, op: &'f Op) -> CompileResult<()> {
        let l = self.thread_layout(op)?;
        let which = match op.kind {
            OpKind::SimdLaneId => Builtin::SimdLane,
            _ => Builtin::ThreadIndex,
        };
        let x = self.builtin(which);
        self.set_home(
            op.results[0],
            Home::Regs {
                layout: l,
                elems: vec![x],
            },
        )
    }

    pub(super) fn simd_exchange(&mut self, op: &'f Op) -> CompileResult<()> {
        let l = self.thread_layout(op)?;
        let x = self.elems(op.operands[0], l)?[0];
        let lane = self.uniform(op.operands[1])?;
        let lane = self.cast(lane, DType::I32);
        let low = self.const_i32(31);
        let lane = self.binary(BinaryOp::And, lane, low);
        let kind = match op.kind {
            OpKind::SimdShuffleXor => GpuOpKind::SimdShuffleXor,
            _ => GpuOpKind::SimdBroadcast,
        };
        let ty = self.ty_of(x);
        let y = self.emit1(kind, [x, lane], ty);
        self.set_home(
            op.results[0],
            Home::Regs {
                layout: l,
                elems: vec![y],
            },
        )
    }

    pub(super) fn shared(&mut self, op: &'f Op, size: usize) -> CompileResult<()> {
        let r = op.results[0];
        let dtype = crate::layout_assign::pointee(self.f, r)
            .ok_or_else(|| self.internal("shared without a dtype"))?;
        if !self.role_depths.is_empty() {
            return Err(self.err(
                "shared memory is zero-filled by the whole threadgroup; allocate it outside simdgroup_role",
            ));
        }
        let before = self.b.func().threadgroup_bytes();
        let bytes = (size * dtype.size_bytes()).div_ceil(16) * 16;
        let max_bytes = self.a.target.max_threadgroup_bytes;
        if before + bytes > max_bytes {
            return Err(self.err(format!(
                "needs {} bytes of threadgroup memory ({bytes} for this allocation); at most {max_bytes} \
                 are allowed",
                before + bytes
            )));
        }
        let root = self.b.add_threadgroup(dtype, size, TgPurpose::User);
        self.shared_roots.insert(r, root);
        let offset_dtype = self.a.offset_dtype();
        let zero_offset = self.konst(Literal::Int(0), offset_dtype);
        self.set_home(r, Home::Uniform(zero_offset))?;
        // Zero-fill: for (i = tid; i < size; i += threads) root[i] = 0.
        self.barrier()?;
        let tid = self.builtin(Builtin::ThreadIndex);
        let end = self.const_i32(size as i32);
        let step = self.const_i32(self.a.threads as i32);
        let i = self.push_block(&[GpuType::Scalar(DType::I32)])[0];
        let zero = self.zero_of(dtype);
        self.mem_store(root, i, zero, 1, None);
        let body = self.pop_block();
        self.b
            .emit_region_op(GpuOpKind::For, [tid, end, step], vec![body]);
        self.barrier()
    }

    fn k64(&mut self, c: i64) -> GpuValue {
        self.konst(Literal::Int(c), I64)
    }

    fn bin64(&mut self, op: BinaryOp, a: GpuValue, b: GpuValue) -> GpuValue {
        self.binary(op, a, b)
    }

    pub(super) fn swizzle(
        &mut self,
        op: &'f Op,
        pattern: SwizzlePattern,
        block_size: u32,
    ) -> CompileResult<()> {
        let pm32 = self.uniform(op.operands[0])?;
        let pn32 = self.uniform(op.operands[1])?;
        let pm = self.cast(pm32, I64);
        let pn = self.cast(pn32, I64);
        let (m, n) = match pattern {
            SwizzlePattern::Diagonal => {
                let gn = self.builtin(Builtin::ThreadgroupsPerGrid(1));
                let gn = self.cast(gn, I64);
                let bs = self.k64(i64::from(block_size));
                let shifted = self.bin64(BinaryOp::Mul, pm, bs);
                let x = self.bin64(BinaryOp::Add, pn, shifted);
                let r = self.bin64(BinaryOp::Rem, x, gn);
                let zero = self.k64(0);
                let negative = self.compare(CmpOp::Lt, r, zero);
                let wrapped = self.bin64(BinaryOp::Add, r, gn);
                (pm, self.select(negative, wrapped, r))
            }
            SwizzlePattern::Morton => self.morton(pm, pn, i64::from(block_size.max(1)))?,
        };
        let m = self.cast(m, DType::I32);
        let n = self.cast(n, DType::I32);
        self.set_home(op.results[0], Home::Uniform(m))?;
        self.set_home(op.results[1], Home::Uniform(n))
    }

    /// `clamp(min(lo + len, limit) - lo, 0, ..)`: the part of `[lo, lo + len)` below `limit`.
    fn clipped_extent(&mut self, lo: GpuValue, len: GpuValue, limit: GpuValue) -> GpuValue {
        let hi = self.bin64(BinaryOp::Add, lo, len);
        let hi = self.bin64(BinaryOp::Min, hi, limit);
        let extent = self.bin64(BinaryOp::Sub, hi, lo);
        let zero = self.k64(0);
        self.bin64(BinaryOp::Max, extent, zero)
    }

    fn morton(&mut self, pm: GpuValue, pn: GpuValue, block: i64) -> CompileResult<(GpuValue, GpuValue)> {
        let gm = self.builtin(Builtin::ThreadgroupsPerGrid(0));
        let gn = self.builtin(Builtin::ThreadgroupsPerGrid(1));
        let (gm, gn) = (self.cast(gm, I64), self.cast(gn, I64));
        let zero = self.k64(0);
        let one = self.k64(1);
        let two = self.k64(2);
        let bs = self.k64(block);
        let levels = (self.const_i32(0), self.const_i32(34), self.const_i32(1));

        // Inputs outside the grid are returned unchanged.
        let conds = [
            self.compare(CmpOp::Ge, pm, zero),
            self.compare(CmpOp::Ge, pn, zero),
            self.compare(CmpOp::Lt, pm, gm),
            self.compare(CmpOp::Lt, pn, gn),
        ];
        let mut inside = conds[0];
        for &c in &conds[1..] {
            inside = self.binary(BinaryOp::And, inside, c);
        }
        let row_start = self.bin64(BinaryOp::Mul, pm, gn);
        let t0 = self.bin64(BinaryOp::Add, row_start, pn);

        // side = the smallest power of two >= max(gm, gn).
        let side = self.b.add_reg(I64, 1);
        let t = self.b.add_reg(I64, 1);
        let m0 = self.b.add_reg(I64, 1);
        let n0 = self.b.add_reg(I64, 1);
        self.reg_write(side, 0, one);
        let largest = self.bin64(BinaryOp::Max, gm, gn);
        self.push_block(&[GpuType::Scalar(DType::I32)]);
        let s = self.reg_read(side, 0, I64);
        let grow = self.compare(CmpOp::Lt, s, largest);
        let doubled = self.bin64(BinaryOp::Mul, s, two);
        let s = self.select(grow, doubled, s);
        self.reg_write(side, 0, s);
        let body = self.pop_block();
        self.b
            .emit_region_op(GpuOpKind::For, [levels.0, levels.1, levels.2], vec![body]);

        // Descend quadrants in Z order while the square is larger than a block.
        self.reg_write(t, 0, t0);
        self.reg_write(m0, 0, zero);
        self.reg_write(n0, 0, zero);
        self.push_block(&[GpuType::Scalar(DType::I32)]);
        let s = self.reg_read(side, 0, I64);
        let active = self.compare(CmpOp::Gt, s, bs);
        self.push_block(&[]);
        let half = self.bin64(BinaryOp::FloorDiv, s, two);
        let mut tv = self.reg_read(t, 0, I64);
        let mut mv = self.reg_read(m0, 0, I64);
        let mut nv = self.reg_read(n0, 0, I64);
        let mut found = self.bool_const(false);
        for (dm, dn) in [(false, false), (false, true), (true, false), (true, true)] {
            let qm = if dm {
                self.bin64(BinaryOp::Add, mv, half)
            } else {
                mv
            };
            let qn = if dn {
                self.bin64(BinaryOp::Add, nv, half)
            } else {
                nv
            };
            let rows = self.clipped_extent(qm, half, gm);
            let cols = self.clipped_extent(qn, half, gn);
            let count = self.bin64(BinaryOp::Mul, rows, cols);
            let not_found = self.emit1(
                GpuOpKind::Unary(UnaryOp::Not),
                [found],
                GpuType::Scalar(DType::Bool),
            );
            let below = self.compare(CmpOp::Lt, tv, count);
            let take = self.binary(BinaryOp::And, not_found, below);
            let not_take = self.emit1(
                GpuOpKind::Unary(UnaryOp::Not),
                [take],
                GpuType::Scalar(DType::Bool),
            );
            let skip = self.binary(BinaryOp::And, not_found, not_take);
            mv = self.select(take, qm, mv);
            nv = self.select(take, qn, nv);
            let rest = self.bin64(BinaryOp::Sub, tv, count);
            tv = self.select(skip, rest, tv);
            found = self.binary(BinaryOp::Or, found, take);
        }
        self.reg_write(t, 0, tv);
        self.reg_write(m0, 0, mv);
        self.reg_write(n0, 0, nv);
        self.reg_write(side, 0, half);
        let then_b = self.pop_block();
        self.b
            .emit_region_op(GpuOpKind::If, [active], vec![then_b, GpuBlock::default()]);
        let body = self.pop_block();
        self.b
            .emit_region_op(GpuOpKind::For, [levels.0, levels.1, levels.2], vec![body]);

        // The remaining t, row-major inside the leaf square clipped to the grid.
        let (s, tv, mv, nv) = (
            self.reg_read(side, 0, I64),
            self.reg_read(t, 0, I64),
            self.reg_read(m0, 0, I64),
            self.reg_read(n0, 0, I64),
        );
        let width = self.clipped_extent(nv, s, gn);
        let dm = self.bin64(BinaryOp::FloorDiv, tv, width);
        let dn = self.bin64(BinaryOp::Rem, tv, width);
        let m = self.bin64(BinaryOp::Add, mv, dm);
        let n = self.bin64(BinaryOp::Add, nv, dn);
        Ok((self.select(inside, m, pm), self.select(inside, n, pn)))
    }
}
