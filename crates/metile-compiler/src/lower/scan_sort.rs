//! Scans (`cumsum`, `cumprod`) and `sort` along one axis, through threadgroup
//! memory, whatever the operand's layout.
//!
//! The tile is written to scratch at its row-major indices by each element's
//! canonical owner (as a layout conversion does); the whole threadgroup then
//! works on the scratch copy in loops of `for (e = tid; e < count; e +=
//! threads)`, one barrier after each step; finally every thread reads its own
//! elements back, so the result has the operand's layout. The steps are a
//! run-time loop (uniform bounds, so its barriers are legal), which keeps the
//! code the same size whatever the tile's length.
//!
//! * A scan is Hillis and Steele's: step `s` adds (or multiplies) into every
//!   element the one `2^s` places before it along the axis (after it with
//!   `reverse`), reading one half of the scratch and writing the other; after
//!   `log2(len)` steps each element holds its inclusive prefix. Integers wrap
//!   exactly as the interpreter's running sum does; floats (f16/bf16 in f32)
//!   are summed in a different order, within float tolerance.
//! * A sort runs the interpreter's bitonic network (`metile-interp`'s
//!   `sort_line`) in place: one step per `(k, j)` stage, each thread taking
//!   whole compare-and-swap pairs, so results are bit-identical to the
//!   interpreter's, NaNs and signed zeros included.

use super::{Home, Lowering};
use crate::error::CompileResult;
use crate::layout_assign::LayoutId;
use metile_ir::gpu_ir::*;
use metile_ir::{BinaryOp, CmpOp, DType, Literal, Op, ScanOp};

/// Where the elements of one line along the axis are: element `p` of line
/// `l` is at `(l / stride) * len * stride + l % stride + p * stride`.
#[derive(Clone, Copy)]
struct Lines {
    len: i64,
    stride: i64,
    numel: i64,
}

impl Lines {
    fn of(shape: &[usize], axis: usize) -> Lines {
        Lines {
            len: shape[axis] as i64,
            stride: shape[axis + 1..].iter().product::<usize>() as i64,
            numel: shape.iter().product::<usize>() as i64,
        }
    }
}

impl<'f> Lowering<'f> {
    /// `for (iv = tid; iv < count; iv += threads) body(iv)`.
    fn for_each_item(
        &mut self,
        count: i64,
        body: impl FnOnce(&mut Self, GpuValue) -> CompileResult<()>,
    ) -> CompileResult<()> {
        let tid = self.builtin(Builtin::ThreadIndex);
        let end = self.const_i32(count as i32);
        let step = self.const_i32(self.a.threads as i32);
        let iv = self.push_block(&[GpuType::Scalar(DType::I32)])[0];
        let built = body(self, iv);
        let gpu_body = self.pop_block();
        built?;
        self.b
            .emit_region_op(GpuOpKind::For, [tid, end, step], vec![gpu_body]);
        Ok(())
    }

    /// `x op c` on a non-negative i32 index, with the identities the line
    /// arithmetic meets (`/ 1`, `% 1`, shifts by 0, `& 0`) folded.
    /// `for (iv = start; step > 0 ? iv < end : iv > end; iv += step) body(iv)`
    /// with bounds every thread shares, so the body may hold barriers.
    fn uniform_loop(
        &mut self,
        (start, end, step): (GpuValue, i64, i64),
        body: impl FnOnce(&mut Self, GpuValue) -> CompileResult<()>,
    ) -> CompileResult<()> {
        let end = self.const_i32(end as i32);
        let step = self.const_i32(step as i32);
        let iv = self.push_block(&[GpuType::Scalar(DType::I32)])[0];
        let built = body(self, iv);
        let gpu_body = self.pop_block();
        built?;
        self.b
            .emit_region_op(GpuOpKind::For, [start, end, step], vec![gpu_body]);
        Ok(())
    }

    /// `1 << x`.
    fn pow2(&mut self, x: GpuValue) -> GpuValue {
        let one = self.const_i32(1);
        self.binary(BinaryOp::Shl, one, x)
    }

    fn i32_op(&mut self, op: BinaryOp, x: GpuValue, c: i64) -> GpuValue {
        match (op, c) {
            (BinaryOp::FloorDiv, 1) | (BinaryOp::Shl | BinaryOp::Shr, 0) => return x,
            (BinaryOp::Rem, 1) | (BinaryOp::And, 0) => return self.const_i32(0),
            _ => {}
        }
        let c = self.const_i32(c as i32);
        self.binary(op, x, c)
    }

    /// Refuses a tile whose copies need more threadgroup memory than is free.
    fn check_room(&self, what: &str, dtype: DType, elements: usize) -> CompileResult<()> {
        let free = self.scratch_capacity(dtype);
        if elements > free {
            return Err(self.err(format!(
                "{what} works in threadgroup memory and needs {} bytes for this tile, but {} are free; \
                 use a smaller tile",
                elements * dtype.size_bytes(),
                free * dtype.size_bytes()
            )));
        }
        Ok(())
    }

    /// Writes a tile held in layout `l` to `root[0..]` at its row-major indices,
    /// between barriers.
    fn stage_to_scratch(&mut self, root: GpuValue, l: LayoutId, elems: &[GpuValue]) -> CompileResult<()> {
        let layout = self.layout(l).clone();
        let owner = self.owner(l);
        let range = self.partial_range(&layout);
        let writer = self.and_opt(owner, range);
        self.barrier()?;
        for (v, &x) in elems.iter().enumerate() {
            let idx = self.element_index(l, v);
            self.mem_store(root, idx, x, 1, writer);
        }
        self.barrier()
    }

    /// Reads a tile in layout `l` back from `root[base..]`.
    fn read_from_scratch(&mut self, root: GpuValue, base: i64, l: LayoutId) -> Vec<GpuValue> {
        let layout = self.layout(l).clone();
        let range = self.partial_range(&layout);
        (0..layout.values())
            .map(|v| {
                let idx = self.element_index(l, v);
                let idx = if base == 0 {
                    idx
                } else {
                    self.i32_op(BinaryOp::Add, idx, base)
                };
                self.mem_load(root, idx, 1, range, None)
            })
            .collect()
    }

    pub(super) fn scan(&mut self, op: &'f Op, scan: ScanOp, axis: usize, reverse: bool) -> CompileResult<()> {
        let (x, r) = (op.operands[0], op.results[0]);
        let dtype = self.elem_dtype(x);
        let acc = match dtype {
            DType::F16 | DType::BF16 | DType::F8E4M3 | DType::F8E5M2 => DType::F32,
            d => d,
        };
        let lines = Lines::of(&self.f.ty(x).shape, axis);
        let lx = self.natural_layout(x)?;
        let elems = self.elems(x, lx)?;
        if lines.len == 1 {
            return self.set_home(r, Home::Regs { layout: lx, elems });
        }
        let elems: Vec<GpuValue> = elems.into_iter().map(|e| self.cast(e, acc)).collect();
        let numel = lines.numel as usize;
        self.check_room("a scan", acc, 2 * numel)?;
        let root = self.scratch(acc, 2 * numel)?;
        self.stage_to_scratch(root, lx, &elems)?;
        let (combine, identity) = match scan {
            ScanOp::Sum => (BinaryOp::Add, 0i32),
            ScanOp::Prod => (BinaryOp::Mul, 1i32),
        };
        let identity = match acc {
            d if d.is_float() => Literal::Float(f64::from(identity)),
            _ => Literal::Int(i64::from(identity)),
        };
        let steps = 64 - (lines.len as u64 - 1).leading_zeros() as i64;
        let zero = self.const_i32(0);
        self.uniform_loop((zero, steps, 1), |this, step| {
            let distance = this.pow2(step);
            let parity = this.i32_op(BinaryOp::And, step, 1);
            let from = this.i32_op(BinaryOp::Mul, parity, lines.numel);
            let numel = this.const_i32(lines.numel as i32);
            let to = this.binary(BinaryOp::Sub, numel, from);
            let reach = this.i32_op(BinaryOp::Mul, distance, lines.stride);
            this.for_each_item(lines.numel, |this, e| {
                let pos = this.i32_op(BinaryOp::FloorDiv, e, lines.stride);
                let pos = this.i32_op(BinaryOp::Rem, pos, lines.len);
                let (has_partner, partner) = if reverse {
                    let last = this.const_i32((lines.len - 1) as i32);
                    let room = this.binary(BinaryOp::Sub, last, pos);
                    let has = this.compare(CmpOp::Ge, room, distance);
                    (has, this.binary(BinaryOp::Add, e, reach))
                } else {
                    let has = this.compare(CmpOp::Ge, pos, distance);
                    (has, this.binary(BinaryOp::Sub, e, reach))
                };
                let own_at = this.binary(BinaryOp::Add, e, from);
                let partner_at = this.binary(BinaryOp::Add, partner, from);
                let own = this.mem_load(root, own_at, 1, None, None);
                let id = this.konst(identity, acc);
                let earlier = this.mem_load(root, partner_at, 1, Some(has_partner), Some(id));
                let sum = this.binary(combine, earlier, own);
                let out_at = this.binary(BinaryOp::Add, e, to);
                this.mem_store(root, out_at, sum, 1, None);
                Ok(())
            })?;
            this.barrier()
        })?;
        let from = (steps & 1) * lines.numel;
        let result: Vec<GpuValue> = self
            .read_from_scratch(root, from, lx)
            .into_iter()
            .map(|v| self.cast(v, dtype))
            .collect();
        self.set_home(
            r,
            Home::Regs {
                layout: lx,
                elems: result,
            },
        )
    }

    /// `a` sorts after `b`: `a > b`, or `a` is NaN and `b` is not.
    fn sorts_after(&mut self, a: GpuValue, b: GpuValue) -> GpuValue {
        let gt = self.compare(CmpOp::Gt, a, b);
        if !self.dtype_of(a).is_float() {
            return gt;
        }
        let a_nan = self.compare(CmpOp::Ne, a, a);
        let b_number = self.compare(CmpOp::Eq, b, b);
        let nan_first = self.binary(BinaryOp::And, a_nan, b_number);
        self.binary(BinaryOp::Or, gt, nan_first)
    }

    pub(super) fn sort(&mut self, op: &'f Op, axis: usize, descending: bool) -> CompileResult<()> {
        let (x, r) = (op.operands[0], op.results[0]);
        let dtype = self.elem_dtype(x);
        let lines = Lines::of(&self.f.ty(x).shape, axis);
        let lx = self.natural_layout(x)?;
        let elems = self.elems(x, lx)?;
        if lines.len == 1 {
            return self.set_home(r, Home::Regs { layout: lx, elems });
        }
        if lines.len & (lines.len - 1) != 0 {
            return Err(self.internal("sort of a line whose length is not a power of two"));
        }
        let numel = lines.numel as usize;
        self.check_room("sort", dtype, numel)?;
        let root = self.scratch(dtype, numel)?;
        self.stage_to_scratch(root, lx, &elems)?;
        let log_len = i64::from(lines.len.trailing_zeros());
        let one = self.const_i32(1);
        self.uniform_loop((one, log_len + 1, 1), |this, log_k| {
            let last = this.i32_op(BinaryOp::Sub, log_k, 1);
            this.uniform_loop((last, -1, -1), |this, log_j| {
                this.compare_and_swap_stage(root, lines, (log_k, log_j), descending)?;
                this.barrier()
            })
        })?;
        let result = self.read_from_scratch(root, 0, lx);
        self.set_home(
            r,
            Home::Regs {
                layout: lx,
                elems: result,
            },
        )
    }

    /// One stage of the bitonic network: every pair `(i, i | j)` with bit `j`
    /// of `i` clear, in every line, ordered ascending where bit `k` of `i` is
    /// clear (descending there with `descending`, and the opposite elsewhere).
    /// `log_k` and `log_j` are the loop's `log2` of `k` and `j`.
    fn compare_and_swap_stage(
        &mut self,
        root: GpuValue,
        lines: Lines,
        (log_k, log_j): (GpuValue, GpuValue),
        descending: bool,
    ) -> CompileResult<()> {
        let pairs_per_line = lines.len / 2;
        let k = self.pow2(log_k);
        let j = self.pow2(log_j);
        let above_j = self.i32_op(BinaryOp::Add, log_j, 1);
        let below_j = self.i32_op(BinaryOp::Sub, j, 1);
        let reach = self.i32_op(BinaryOp::Mul, j, lines.stride);
        self.for_each_item(lines.numel / 2, |this, q| {
            let line = this.i32_op(BinaryOp::FloorDiv, q, pairs_per_line);
            let h = this.i32_op(BinaryOp::Rem, q, pairs_per_line);
            // i = h with a 0 inserted at bit position log2(j).
            let high = this.binary(BinaryOp::Shr, h, log_j);
            let high = this.binary(BinaryOp::Shl, high, above_j);
            let low = this.binary(BinaryOp::And, h, below_j);
            let i = this.binary(BinaryOp::Or, high, low);
            let outer = this.i32_op(BinaryOp::FloorDiv, line, lines.stride);
            let outer = this.i32_op(BinaryOp::Mul, outer, lines.len * lines.stride);
            let inner = this.i32_op(BinaryOp::Rem, line, lines.stride);
            let base = this.binary(BinaryOp::Add, outer, inner);
            let offset = this.i32_op(BinaryOp::Mul, i, lines.stride);
            let at_lo = this.binary(BinaryOp::Add, base, offset);
            let at_hi = this.binary(BinaryOp::Add, at_lo, reach);
            let lo = this.mem_load(root, at_lo, 1, None, None);
            let hi = this.mem_load(root, at_hi, 1, None, None);
            let lo_after = this.sorts_after(lo, hi);
            let hi_after = this.sorts_after(hi, lo);
            let bit = this.binary(BinaryOp::And, i, k);
            let zero = this.const_i32(0);
            let mut ascending = this.compare(CmpOp::Eq, bit, zero);
            if descending {
                let yes = this.bool_const(true);
                ascending = this.binary(BinaryOp::Xor, ascending, yes);
            }
            let swap = this.select(ascending, lo_after, hi_after);
            let new_lo = this.select(swap, hi, lo);
            let new_hi = this.select(swap, lo, hi);
            this.mem_store(root, at_lo, new_lo, 1, None);
            this.mem_store(root, at_hi, new_hi, 1, None);
            Ok(())
        })
    }
}
