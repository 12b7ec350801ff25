//! `dot(a[M,K], b[K,N], acc[M,N])`: the accumulator's registers, then either
//! the matrix-atom path (`dot_atoms.rs`, where the target has an atom for the
//! operands and the result got the atom's layout) or the generic path below.
//!
//! Generic path: both operands are staged in threadgroup scratch, `a` row-major as `M x kc`
//! and `b` as `kc x N` after it, each element written once by its canonical
//! owner. Every thread then computes its own accumulator registers (in the
//! accumulator's layout) with a loop over `k`, reading `a[m][k]` once per
//! distinct row and `b[k][n]` once per distinct column it owns (vector reads
//! when its columns are contiguous), and accumulating `acc + a * b` in f32 in
//! `k` order, like the interpreter. Index arithmetic without `k` is hoisted to
//! the top level, and a loop-carried f32 accumulator is accumulated in its own
//! register array rather than copied in and out (see `in_place_accumulator`).
//!
//! `kc` is `K` when `(M + N) * K` elements fit the free threadgroup memory;
//! otherwise the largest divisor of `K` that fits, and a uniform loop walks the
//! `K / kc` chunks (barrier, stage the chunk's elements under a predicate,
//! barrier, accumulate). Only when a single `k` column of both operands does not
//! fit is the op refused.

use super::{Home, Lowering};
use crate::dot_tiling::AtomTiling;
use crate::error::CompileResult;
use crate::layout_assign::{Class, LayoutId};
use metile_ir::gpu_ir::*;
use metile_ir::{BinaryOp, CmpOp, DType, Op, ValueId};

const I32: GpuType = GpuType::Scalar(DType::I32);

impl<'f> Lowering<'f> {
    pub(super) fn dot(&mut self, op: &'f Op) -> CompileResult<()> {
        let (acc, r) = (op.operands[2], op.results[0]);
        let Class::Fixed(lc) = self.a.class(r) else {
            return Err(self.internal("dot without a result layout"));
        };
        let result_dtype = self.elem_dtype(r);

        let accv = self.elems(acc, lc)?;
        let count = accv.len();
        let reg = match self.in_place_accumulator(acc, &accv) {
            Some(reg) => reg,
            None => {
                let reg = self.b.add_reg(DType::F32, count as u32);
                for (v, &x) in accv.iter().enumerate() {
                    let f = self.cast(x, DType::F32);
                    self.reg_write(reg, v as u32, f);
                }
                reg
            }
        };
        match self.atom_plan(r) {
            Some(plan) if self.atom_dot(op, &plan, reg)? => {}
            _ => self.generic_dot(op, lc, reg)?,
        }

        let elems: Vec<GpuValue> = (0..count)
            .map(|v| {
                let x = self.reg_read(reg, v as u32, DType::F32);
                self.cast(x, result_dtype)
            })
            .collect();
        self.set_home(r, Home::Regs { layout: lc, elems })
    }

    /// The matrix-atom plan of the `dot` whose result is `r`, where the
    /// result's layout is the plan's accumulator layout.
    pub(super) fn atom_plan(&self, r: ValueId) -> Option<AtomTiling> {
        let Class::Fixed(lc) = self.a.class(r) else {
            return None;
        };
        self.a
            .dot_plans
            .get(&r)
            .filter(|p| self.layout(lc) == &p.c)
            .cloned()
    }

    /// The generic path: every thread accumulates its own registers of `lc`.
    fn generic_dot(&mut self, op: &'f Op, lc: LayoutId, reg: RegId) -> CompileResult<()> {
        let (a, b) = (op.operands[0], op.operands[1]);
        let (m, k) = (self.f.ty(a).shape[0], self.f.ty(a).shape[1]);
        let n = self.f.ty(b).shape[1];
        let operand_dtype = self.elem_dtype(a);
        let capacity = self.dot_scratch_capacity(operand_dtype);
        let kc = (1..=k)
            .rev()
            .find(|&c| k % c == 0 && (m + n) * c <= capacity)
            .ok_or_else(|| {
                self.err(format!(
                    "staging one column of a and one row of b takes {} bytes of threadgroup memory, more than is \
                     free; use smaller tiles",
                    (m + n) * operand_dtype.size_bytes()
                ))
            })?;
        let root = self.dot_scratch(operand_dtype, (m + n) * kc)?;

        let la = self.natural_layout(a)?;
        let lb = self.natural_layout(b)?;
        let av = self.elems(a, la)?;
        let bv = self.elems(b, lb)?;

        self.over_k_chunks(k, kc, |this, k0| {
            let k0 = k0.unwrap_or_else(|| this.const_i32(0));
            this.dot_chunk(root, (m, n, k, kc), (la, &av), (lb, &bv), lc, reg, k0)
        })
    }

    /// Runs `chunk` once with no chunk start when `kc == k`, else in a uniform
    /// loop over the chunk starts `0, kc, .. < k`. Ops held back for after the
    /// staging (`Lowering::block`) are emitted first when there is a loop: in
    /// it they would run once per chunk.
    pub(super) fn over_k_chunks(
        &mut self,
        k: usize,
        kc: usize,
        mut chunk: impl FnMut(&mut Self, Option<GpuValue>) -> CompileResult<()>,
    ) -> CompileResult<()> {
        if kc == k {
            return chunk(self, None);
        }
        self.flush_deferred()?;
        let (start, end, step) = (
            self.const_i32(0),
            self.const_i32(k as i32),
            self.const_i32(kc as i32),
        );
        let k0 = self.push_block(&[I32])[0];
        chunk(self, Some(k0))?;
        let body = self.pop_block();
        self.b
            .emit_region_op(GpuOpKind::For, [start, end, step], vec![body]);
        Ok(())
    }

    /// Stages columns `k0 .. k0 + kc` of a and rows of b, then accumulates them.
    #[allow(clippy::too_many_arguments)]
    fn dot_chunk(
        &mut self,
        root: GpuValue,
        (m, n, k, kc): (usize, usize, usize, usize),
        (la, av): (LayoutId, &[GpuValue]),
        (lb, bv): (LayoutId, &[GpuValue]),
        lc: LayoutId,
        reg: RegId,
        k0: GpuValue,
    ) -> CompileResult<()> {
        let whole = kc == k;
        self.barrier()?;
        // a[i][kk] at i * kc + (kk - k0).
        let owner_a = self.owner(la);
        for (v, &x) in av.iter().enumerate() {
            if whole {
                let e = self.element_index(la, v);
                self.mem_store(root, e, x, 1, owner_a);
                continue;
            }
            let row = self.coord(la, 0, v);
            let col = self.coord(la, 1, v);
            let rel = self.binary(BinaryOp::Sub, col, k0);
            let inside = self.in_range(rel, kc as i64);
            let kc_v = self.const_i32(kc as i32);
            let base = self.binary(BinaryOp::Mul, row, kc_v);
            let idx = self.binary(BinaryOp::Add, base, rel);
            let mask = self.and_opt(Some(inside), owner_a);
            self.mem_store(root, idx, x, 1, mask);
        }
        // b[kk][j] at m * kc + (kk - k0) * n + j: a contiguous element range.
        let owner_b = self.owner(lb);
        let b_base = self.const_i32((m * kc) as i32);
        let k0n = if whole {
            None
        } else {
            let n_v = self.const_i32(n as i32);
            Some(self.binary(BinaryOp::Mul, k0, n_v))
        };
        for (v, &x) in bv.iter().enumerate() {
            let e = self.element_index(lb, v);
            let (rel, mask) = match k0n {
                None => (e, owner_b),
                Some(k0n) => {
                    let rel = self.binary(BinaryOp::Sub, e, k0n);
                    let inside = self.in_range(rel, (kc * n) as i64);
                    (rel, self.and_opt(Some(inside), owner_b))
                }
            };
            let idx = self.binary(BinaryOp::Add, b_base, rel);
            self.mem_store(root, idx, x, 1, mask);
        }
        self.barrier()?;
        if whole {
            self.flush_deferred()?;
        }

        // for kk in 0..kc: acc[v] += a[row(v)][kk] * b[kk][col(v)]
        // a[row][kk] is at `row * kc + kk` and b[kk][col] at `kk * n + (m * kc + col)`:
        // the parts without `kk` depend only on the thread, so they are computed
        // once at the top level (per distinct row, per vector run of columns),
        // leaving one add per a read and one add per b read in the loop.
        let count = self.values_of(lc);
        let width = self.dot_b_width(lc, m * kc, n, self.dtype_of(root));
        let (a_rows, b_runs) = self.at_depth(0, |this| {
            let kc_v = this.const_i32(kc as i32);
            let row_t = this.thread_coord(lc, 0);
            let col_t = this.thread_coord(lc, 1);
            let b_col = this.binary(BinaryOp::Add, b_base, col_t);
            let mut a_rows: Vec<(i64, GpuValue)> = vec![];
            let mut b_runs: Vec<(i64, GpuValue)> = vec![];
            for v in 0..count {
                let coords = this.layout(lc).value_coords(v);
                let (dr, dc) = (coords[0], coords[1]);
                if !a_rows.iter().any(|&(r, _)| r == dr) {
                    let dr_v = this.const_i32(dr as i32);
                    let row = this.binary(BinaryOp::Add, row_t, dr_v);
                    a_rows.push((dr, this.binary(BinaryOp::Mul, row, kc_v)));
                }
                let run_start = dc - dc.rem_euclid(width as i64);
                if !b_runs.iter().any(|&(c, _)| c == run_start) {
                    let rs_v = this.const_i32(run_start as i32);
                    b_runs.push((run_start, this.binary(BinaryOp::Add, b_col, rs_v)));
                }
            }
            (a_rows, b_runs)
        });
        let (zero, end, one) = (self.const_i32(0), self.const_i32(kc as i32), self.const_i32(1));
        let n_v = self.const_i32(n as i32);
        let kk = self.push_block(&[I32])[0];
        let b_row = self.binary(BinaryOp::Mul, kk, n_v);
        let mut a_vals: Vec<(i64, GpuValue)> = vec![];
        let mut b_vals: Vec<(i64, GpuValue)> = vec![];
        for v in 0..count {
            let coords = self.layout(lc).value_coords(v);
            let (dr, dc) = (coords[0], coords[1]);
            let a_val = match a_vals.iter().find(|(r, _)| *r == dr) {
                Some(&(_, x)) => x,
                None => {
                    let &(_, base) = a_rows
                        .iter()
                        .find(|(r, _)| *r == dr)
                        .ok_or_else(|| self.internal("a dot row without its index"))?;
                    let idx = self.binary(BinaryOp::Add, base, kk);
                    let x = self.mem_load(root, idx, 1, None, None);
                    let x = self.cast(x, DType::F32);
                    a_vals.push((dr, x));
                    x
                }
            };
            let b_val = match b_vals.iter().find(|(c, _)| *c == dc) {
                Some(&(_, x)) => x,
                None => {
                    let run_start = dc - dc.rem_euclid(width as i64);
                    let &(_, col) = b_runs
                        .iter()
                        .find(|(c, _)| *c == run_start)
                        .ok_or_else(|| self.internal("a dot column run without its index"))?;
                    let idx = self.binary(BinaryOp::Add, b_row, col);
                    let loaded = self.mem_load(root, idx, width as u8, None, None);
                    for lane in 0..width {
                        let x = if width == 1 {
                            loaded
                        } else {
                            let dtype = self.dtype_of(root);
                            self.emit1(
                                GpuOpKind::Extract { lane: lane as u8 },
                                [loaded],
                                GpuType::Scalar(dtype),
                            )
                        };
                        let x = self.cast(x, DType::F32);
                        b_vals.push((run_start + lane as i64, x));
                    }
                    b_vals
                        .iter()
                        .find(|(c, _)| *c == dc)
                        .map(|&(_, x)| x)
                        .ok_or_else(|| self.internal("a dot column outside its vector run"))?
                }
            };
            let prod = self.binary(BinaryOp::Mul, a_val, b_val);
            let cur = self.reg_read(reg, v as u32, DType::F32);
            let next = self.binary(BinaryOp::Add, cur, prod);
            self.reg_write(reg, v as u32, next);
        }
        let body = self.pop_block();
        self.b
            .emit_region_op(GpuOpKind::For, [zero, end, one], vec![body]);
        Ok(())
    }

    /// The register array to accumulate in directly, skipping the copy in and
    /// out: one when the accumulator is only this dot's, f32, and its elements
    /// are exactly the current contents of a register array of the same length
    /// (typically a loop-carried accumulator), read in the block the dot is in.
    /// The same block matters: in a nested loop the dot would run several times
    /// on one read of the array, and must start from that value each time.
    fn in_place_accumulator(&self, acc: ValueId, accv: &[GpuValue]) -> Option<RegId> {
        if self.uses[acc.index()] != 1
            || self.elem_dtype(acc) != DType::F32
            || self.def_depth[acc.index()] != self.innermost()
        {
            return None;
        }
        let &(reg, _, _) = self.reg_reads.get(accv.first()?)?;
        let array = &self.b.func().regs[reg.0 as usize];
        let exact = array.dtype == DType::F32
            && array.len as usize == accv.len()
            && accv
                .iter()
                .enumerate()
                .all(|(v, &x)| self.holds(reg, v as u32, x));
        exact.then_some(reg)
    }

    /// Width of the vector reads of b's staged rows: the accumulator layout's
    /// contiguous column runs, when every run start is aligned in scratch.
    fn dot_b_width(&self, lc: LayoutId, b_base: usize, n: usize, dtype: DType) -> usize {
        let w = self.layout_vector_width(lc, dtype);
        if w > 1 && b_base % w == 0 && n % w == 0 {
            w
        } else {
            1
        }
    }

    /// Coordinate `axis` of register `v` of a separable layout.
    pub(super) fn coord(&mut self, l: LayoutId, axis: usize, v: usize) -> GpuValue {
        let t = self.thread_coord(l, axis);
        let c = self.layout(l).value_coords(v)[axis];
        if c == 0 {
            return t;
        }
        let c = self.const_i32(c as i32);
        self.binary(BinaryOp::Add, t, c)
    }

    /// `0 <= x < len`.
    pub(super) fn in_range(&mut self, x: GpuValue, len: i64) -> GpuValue {
        let zero = self.const_i32(0);
        let len = self.const_i32(len as i32);
        let ge = self.compare(CmpOp::Ge, x, zero);
        let lt = self.compare(CmpOp::Lt, x, len);
        self.binary(BinaryOp::And, ge, lt)
    }
}
