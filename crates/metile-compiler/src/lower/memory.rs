//! Memory ops: `load`/`store` through pointer tiles and `tile_load`/`tile_store`.
//!
//! A pointer tile is a root (buffer parameter or shared allocation) plus integer
//! offsets. Each thread accesses its own registers' elements; a run of `w`
//! consecutive registers becomes one `w`-wide vector access when
//! * the layout's first value leaf is `w` contiguous elements of the last axis
//!   and every other leaf keeps runs aligned (strides multiples of `w`), and
//! * the offsets are provably consecutive over the run and its first offset is a
//!   multiple of `w` (axis analysis; buffer bases are 16-byte aligned), or, for
//!   `tile_load`/`tile_store`, a uniform run-time check that the base offset,
//!   column and stride are multiples of `w` picks the vector path.
//!
//! Masks: a mask that is constant over each run guards the vector access as a
//! whole; otherwise each run checks at run time that its whole mask is true and
//! falls back to per-element masked accesses. Where a thread moves several runs
//! and the mask is a bounds check on index tiles, one uniform test for the whole
//! tile (`uniform_masks.rs`) first picks the unmasked path for interior tiles. Masked-off elements are never
//! touched. Stores from replicated layouts (and uniform stores) are done by one
//! canonical owner per element, so no two threads write the same address. A
//! stored tile whose layout has narrower runs than the blocked layout's may
//! first move into that layout through threadgroup memory (`store_staging.rs`).

use super::{Home, Lowering};
use crate::error::CompileResult;
use crate::layout_assign::{Class, LayoutId};
use metile_ir::gpu_ir::*;
use metile_ir::{BinaryOp, CmpOp, DType, Literal, Op, OpKind, ValueId};

/// How a vector run is guarded.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RunMask {
    /// Unmasked.
    None,
    /// The mask of the run's first element holds for the whole run.
    First,
    /// Check at run time that the whole run is unmasked; else go element by element.
    All,
}

struct Access<'a> {
    root: GpuValue,
    dtype: DType,
    index: &'a [GpuValue],
    width: usize,
    masks: Option<&'a [GpuValue]>,
    run_mask: RunMask,
    /// A uniform condition under which vector accesses are aligned.
    aligned: Option<GpuValue>,
}

impl<'a> Access<'a> {
    /// An unmasked access of `index`'s runs, aligned where `aligned` holds.
    fn unmasked(
        root: GpuValue,
        dtype: DType,
        index: &'a [GpuValue],
        width: usize,
        aligned: Option<GpuValue>,
    ) -> Access<'a> {
        Access {
            root,
            dtype,
            index,
            width,
            masks: None,
            run_mask: RunMask::None,
            aligned,
        }
    }
}

impl<'f> Lowering<'f> {
    /// The widest run the layout allows for vector access of `dtype` (before
    /// looking at the addresses).
    pub(super) fn layout_vector_width(&self, l: LayoutId, dtype: DType) -> usize {
        if dtype == DType::Bool {
            return 1;
        }
        let t = &self.a.target;
        let max = t
            .max_vector_lanes
            .min(t.max_vector_bytes / dtype.size_bytes())
            .max(1);
        self.layout_run(l).min(max)
    }

    /// The length of the runs of consecutive elements along the last axis that
    /// each thread holds in consecutive registers, with every run starting at a
    /// multiple of its length (1 when the layout has none).
    pub(super) fn layout_run(&self, l: LayoutId) -> usize {
        let layout = self.layout(l);
        let Some(&first) = layout.value_leaves().first() else {
            return 1;
        };
        let rank = layout.shape().len();
        let last = layout.shape().last().copied().unwrap_or(1) as i64;
        if first.stride != 1 || layout.axis_of(first) != Some(rank - 1) || last % first.extent != 0 {
            return 1;
        }
        let w0 = first.extent;
        let aligned_runs = layout.thread_terms().iter().all(|t| t.stride % w0 == 0)
            && layout.value_leaves()[1..].iter().all(|l| l.stride % w0 == 0);
        if !aligned_runs {
            return 1;
        }
        w0 as usize
    }

    /// Vector width for accesses through the pointer tile `ptr` in layout `l`.
    pub(super) fn pointer_vector_width(&self, l: LayoutId, ptr: ValueId, dtype: DType) -> usize {
        self.vector_width_under(false, l, ptr, dtype)
    }

    /// [`Lowering::pointer_vector_width`] from the proven axis facts, or from
    /// those that hold when the kernel's guards do (`guarded`).
    pub(super) fn vector_width_under(&self, guarded: bool, l: LayoutId, ptr: ValueId, dtype: DType) -> usize {
        let mut w = self.layout_vector_width(l, dtype);
        let info = self.facts(guarded).get(ptr);
        while w > 1 && !(info.contiguity >= w as u64 && info.divisibility_at(w as u64) >= w as u64) {
            w /= 2;
        }
        w
    }

    fn run_mask_for(&self, mask: Option<ValueId>, width: usize) -> RunMask {
        match mask {
            None => RunMask::None,
            Some(m) if self.info.get(m).constancy >= width as u64 => RunMask::First,
            Some(_) => RunMask::All,
        }
    }

    pub(super) fn make_vector(&mut self, lanes: &[GpuValue]) -> GpuValue {
        let d = self.dtype_of(lanes[0]);
        self.emit1(
            GpuOpKind::MakeVector,
            lanes.to_vec(),
            GpuType::Vector(d, lanes.len() as u8),
        )
    }

    fn all_of(&mut self, masks: &[GpuValue]) -> GpuValue {
        let mut acc = masks[0];
        for &m in &masks[1..] {
            acc = self.binary(BinaryOp::And, acc, m);
        }
        acc
    }

    /// One vector load at `index`, its lanes written out.
    fn vector_load(
        &mut self,
        acc: &Access,
        start: usize,
        mask: Option<GpuValue>,
        others: Option<&[GpuValue]>,
    ) -> Vec<GpuValue> {
        let w = acc.width;
        let other = match (mask, others) {
            (Some(_), Some(o)) => Some(self.make_vector(&o[start..start + w])),
            _ => None,
        };
        let v = self.mem_load(acc.root, acc.index[start], w as u8, mask, other);
        (0..w)
            .map(|lane| {
                self.emit1(
                    GpuOpKind::Extract { lane: lane as u8 },
                    [v],
                    GpuType::Scalar(acc.dtype),
                )
            })
            .collect()
    }

    fn scalar_load(&mut self, acc: &Access, v: usize, others: Option<&[GpuValue]>) -> GpuValue {
        let mask = acc.masks.map(|m| m[v]);
        self.mem_load(acc.root, acc.index[v], 1, mask, others.map(|o| o[v]))
    }

    fn load_runs(&mut self, acc: &Access, others: Option<&[GpuValue]>) -> Vec<GpuValue> {
        let n = acc.index.len();
        let w = acc.width;
        if w <= 1 {
            return (0..n).map(|v| self.scalar_load(acc, v, others)).collect();
        }
        if acc.aligned.is_none() && acc.run_mask != RunMask::All {
            let mut out = Vec::with_capacity(n);
            for start in (0..n).step_by(w) {
                let mask = match acc.run_mask {
                    RunMask::First => acc.masks.map(|m| m[start]),
                    _ => None,
                };
                out.extend(self.vector_load(acc, start, mask, others));
            }
            return out;
        }
        // Run-time choice between the vector path and the element path, through registers.
        let reg = self.b.add_reg(acc.dtype, n as u32);
        let branch = |this: &mut Self, cond: GpuValue, range: std::ops::Range<usize>| {
            this.push_block(&[]);
            let lanes = this.vector_load(acc, range.start, None, None);
            for (k, x) in lanes.into_iter().enumerate() {
                this.reg_write(reg, (range.start + k) as u32, x);
            }
            let then_b = this.pop_block();
            this.push_block(&[]);
            for v in range {
                let x = this.scalar_load(acc, v, others);
                this.reg_write(reg, v as u32, x);
            }
            let else_b = this.pop_block();
            this.b.emit_region_op(GpuOpKind::If, [cond], vec![then_b, else_b]);
        };
        match acc.aligned {
            Some(cond) => {
                // One uniform branch for the whole tile.
                self.push_block(&[]);
                for start in (0..n).step_by(w) {
                    let lanes = self.vector_load(acc, start, None, None);
                    for (k, x) in lanes.into_iter().enumerate() {
                        self.reg_write(reg, (start + k) as u32, x);
                    }
                }
                let then_b = self.pop_block();
                self.push_block(&[]);
                for v in 0..n {
                    let x = self.scalar_load(acc, v, others);
                    self.reg_write(reg, v as u32, x);
                }
                let else_b = self.pop_block();
                self.b.emit_region_op(GpuOpKind::If, [cond], vec![then_b, else_b]);
            }
            None => {
                for start in (0..n).step_by(w) {
                    let masks = acc
                        .masks
                        .map(|m| m[start..start + w].to_vec())
                        .unwrap_or_default();
                    let all = self.all_of(&masks);
                    branch(self, all, start..start + w);
                }
            }
        }
        (0..n).map(|v| self.reg_read(reg, v as u32, acc.dtype)).collect()
    }

    fn vector_store(&mut self, acc: &Access, start: usize, values: &[GpuValue], mask: Option<GpuValue>) {
        let w = acc.width;
        let vec = self.make_vector(&values[start..start + w]);
        self.mem_store(acc.root, acc.index[start], vec, w as u8, mask);
    }

    fn scalar_stores(&mut self, acc: &Access, range: std::ops::Range<usize>, values: &[GpuValue]) {
        for v in range {
            let mask = acc.masks.map(|m| m[v]);
            self.mem_store(acc.root, acc.index[v], values[v], 1, mask);
        }
    }

    fn store_runs(&mut self, acc: &Access, values: &[GpuValue]) {
        let n = acc.index.len();
        let w = acc.width;
        if w <= 1 {
            self.scalar_stores(acc, 0..n, values);
            return;
        }
        if let Some(cond) = acc.aligned {
            self.push_block(&[]);
            for start in (0..n).step_by(w) {
                let mask = acc.masks.map(|m| m[start]);
                self.vector_store(acc, start, values, mask);
            }
            let then_b = self.pop_block();
            self.push_block(&[]);
            self.scalar_stores(acc, 0..n, values);
            let else_b = self.pop_block();
            self.b.emit_region_op(GpuOpKind::If, [cond], vec![then_b, else_b]);
            return;
        }
        for start in (0..n).step_by(w) {
            match acc.run_mask {
                RunMask::None => self.vector_store(acc, start, values, None),
                RunMask::First => {
                    let mask = acc.masks.map(|m| m[start]);
                    self.vector_store(acc, start, values, mask);
                }
                RunMask::All => {
                    let masks = acc
                        .masks
                        .map(|m| m[start..start + w].to_vec())
                        .unwrap_or_default();
                    let all = self.all_of(&masks);
                    self.push_block(&[]);
                    self.vector_store(acc, start, values, None);
                    let then_b = self.pop_block();
                    self.push_block(&[]);
                    self.scalar_stores(acc, start..start + w, values);
                    let else_b = self.pop_block();
                    self.b.emit_region_op(GpuOpKind::If, [all], vec![then_b, else_b]);
                }
            }
        }
    }

    // ------------------------------------------------------------ load/store

    /// The elements of a pointer `load` in layout `l` (masked lanes read
    /// `other`, or zero).
    pub(super) fn load_in(&mut self, op: &'f Op, l: LayoutId) -> CompileResult<Vec<GpuValue>> {
        let OpKind::Load { has_mask, has_other } = op.kind else {
            return Err(self.internal("not a load"));
        };
        let ptr = op.operands[0];
        let mask = has_mask.then(|| op.operands[1]);
        let other = has_other.then(|| op.operands[op.operands.len() - 1]);
        let dtype = self.elem_dtype(op.results[0]);
        let root = self.root_value(ptr)?;
        let index = self.elems(ptr, l)?;
        let width = self.pointer_vector_width(l, ptr, dtype);
        let unmasked = Access::unmasked(root, dtype, &index, width, None);
        let masked = |this: &mut Self| -> CompileResult<Vec<GpuValue>> {
            let masks = mask.map(|m| this.elems(m, l)).transpose()?;
            let others = other.map(|o| this.elems(o, l)).transpose()?;
            let acc = Access {
                masks: masks.as_deref(),
                run_mask: this.run_mask_for(mask, width),
                ..unmasked
            };
            Ok(this.load_runs(&acc, others.as_deref()))
        };
        // A mask constant over each vector run costs one predicate per run and
        // needs no second path: branching between an unmasked and a masked copy
        // would double the code and join the two through a register array,
        // where a 16-bit element takes a whole register.
        let split = width > 1 && index.len() > width && self.run_mask_for(mask, width) != RunMask::First;
        let all_true = mask.filter(|_| split).and_then(|m| self.mask_all_true(m));
        let elems = match all_true {
            None => masked(self)?,
            Some(all) => {
                // Interior tiles take the unmasked vector path, edges the per-lane one.
                let reg = self.b.add_reg(dtype, index.len() as u32);
                let fill = |this: &mut Self, xs: Vec<GpuValue>| {
                    for (i, x) in xs.into_iter().enumerate() {
                        this.reg_write(reg, i as u32, x);
                    }
                };
                self.if_else(
                    all,
                    |this| {
                        let fast = this.load_runs(&unmasked, None);
                        fill(this, fast);
                        Ok(())
                    },
                    |this| {
                        let slow = masked(this)?;
                        fill(this, slow);
                        Ok(())
                    },
                )?;
                (0..index.len())
                    .map(|i| self.reg_read(reg, i as u32, dtype))
                    .collect()
            }
        };
        Ok(elems)
    }

    pub(super) fn load(&mut self, op: &'f Op) -> CompileResult<()> {
        if let Some((rv, base)) = self.ring_loads.remove(&op.results[0]) {
            return self.ring_load(op, rv, base);
        }
        let OpKind::Load { has_mask, has_other } = op.kind else {
            return Err(self.internal("not a load"));
        };
        let ptr = op.operands[0];
        let mask = has_mask.then(|| op.operands[1]);
        let other = has_other.then(|| op.operands[op.operands.len() - 1]);
        let r = op.results[0];
        let root = self.root_value(ptr)?;
        match self.a.class(r) {
            Class::Fixed(l) => {
                let elems = self.load_in(op, l)?;
                self.set_home(r, Home::Regs { layout: l, elems })
            }
            _ => {
                let index = self.uniform(ptr)?;
                let m = mask.map(|m| self.uniform(m)).transpose()?;
                let o = other.map(|o| self.uniform(o)).transpose()?;
                let x = self.mem_load(root, index, 1, m, o);
                self.set_home(r, Home::Uniform(x))
            }
        }
    }

    pub(super) fn store(&mut self, op: &'f Op) -> CompileResult<()> {
        let ptr = op.operands[0];
        let value = op.operands[1];
        let mask = op.operands.get(2).copied();
        let dtype = self.elem_dtype(value);
        let root = self.root_value(ptr)?;
        let shape = self.f.ty(value).shape.clone();
        let l = match self.a.elementwise_layout(&op.operands, &shape)? {
            Some(Some(l)) => l,
            Some(None) => self.a.blocked(&shape)?,
            None => {
                // Every running thread holds the same store: the first one does it.
                let index = self.uniform(ptr)?;
                let v = self.uniform(value)?;
                let m = mask.map(|m| self.uniform(m)).transpose()?;
                let base = self.a.role.map_or(0, |r| r.base);
                let tid = self.local_tid(base);
                let zero = self.const_i32(0);
                let first = self.compare(CmpOp::Eq, tid, zero);
                let m = self.and_opt(m, Some(first));
                self.mem_store(root, index, v, 1, m);
                return Ok(());
            }
        };
        let width_of = |this: &Self, l: LayoutId| this.pointer_vector_width(l, ptr, dtype);
        let (l, values) = match self.staged_store(value, l, width_of)? {
            Some(staged) => staged,
            None => (l, self.elems(value, l)?),
        };
        let index = self.elems(ptr, l)?;
        let owner = self.owner(l);
        let width = self.pointer_vector_width(l, ptr, dtype);
        let store = |this: &mut Self, mask: Option<ValueId>| -> CompileResult<()> {
            let user_masks = mask.map(|m| this.elems(m, l)).transpose()?;
            let mut run_mask = this.run_mask_for(mask, width);
            let masks: Option<Vec<GpuValue>> = match (user_masks, owner) {
                (Some(ms), Some(o)) => Some(ms.iter().map(|&m| this.binary(BinaryOp::And, m, o)).collect()),
                (Some(ms), None) => Some(ms),
                (None, Some(o)) => {
                    run_mask = RunMask::First;
                    Some(vec![o; index.len()])
                }
                (None, None) => None,
            };
            let acc = Access {
                root,
                dtype,
                index: &index,
                width,
                masks: masks.as_deref(),
                run_mask,
                aligned: None,
            };
            this.store_runs(&acc, &values);
            Ok(())
        };
        let several_runs = width > 1 && index.len() > width;
        match mask.filter(|_| several_runs).and_then(|m| self.mask_all_true(m)) {
            None => store(self, mask),
            // Interior tiles take the unmasked vector path, edges the per-lane one.
            Some(all) => self.if_else(all, |this| store(this, None), |this| store(this, mask)),
        }
    }

    // ------------------------------------------------------ tile_load/store

    /// Per-register element offsets of a row-major block at
    /// `base + (row + r) * stride + col + c`, and the uniform alignment check for
    /// `width`-wide runs.
    pub(super) fn block_addressing(
        &mut self,
        op: &Op,
        l: LayoutId,
        width: usize,
    ) -> CompileResult<(Vec<GpuValue>, Option<GpuValue>)> {
        let d = self.a.offset_dtype();
        let base = self.uniform(op.operands[0])?;
        let row = self.uniform(op.operands[1])?;
        let col = self.uniform(op.operands[2])?;
        let stride = self.uniform(op.operands[3])?;
        let (row, col, stride) = (self.cast(row, d), self.cast(col, d), self.cast(stride, d));
        let rt = self.thread_coord(l, 0);
        let ct = self.thread_coord(l, 1);
        let (rt, ct) = (self.cast(rt, d), self.cast(ct, d));
        // base + (row + rt) * stride + col + ct: the thread's first element.
        let row0 = self.binary(BinaryOp::Add, row, rt);
        let col0 = self.binary(BinaryOp::Add, col, ct);
        let col0 = self.binary(BinaryOp::Add, base, col0);
        let mut row_bases: Vec<(i64, GpuValue)> = vec![];
        let mut index = Vec::with_capacity(self.values_of(l));
        for v in 0..self.values_of(l) {
            let coords = self.layout(l).value_coords(v);
            let (dr, dc) = (coords[0], coords[1]);
            let rb = match row_bases.iter().find(|(r, _)| *r == dr) {
                Some(&(_, rb)) => rb,
                None => {
                    let r = if dr == 0 {
                        row0
                    } else {
                        let c = self.konst(Literal::Int(dr), d);
                        self.binary(BinaryOp::Add, row0, c)
                    };
                    let scaled = self.binary(BinaryOp::Mul, r, stride);
                    let rb = self.binary(BinaryOp::Add, scaled, col0);
                    row_bases.push((dr, rb));
                    rb
                }
            };
            index.push(if dc == 0 {
                rb
            } else {
                let c = self.konst(Literal::Int(dc), d);
                self.binary(BinaryOp::Add, rb, c)
            });
        }
        let aligned = if width > 1 {
            let any = self.binary(BinaryOp::Or, stride, col);
            let any = self.binary(BinaryOp::Or, any, base);
            let low = self.konst(Literal::Int(width as i64 - 1), d);
            let bits = self.binary(BinaryOp::And, any, low);
            let zero = self.konst(Literal::Int(0), d);
            Some(self.compare(CmpOp::Eq, bits, zero))
        } else {
            None
        };
        Ok((index, aligned))
    }

    pub(super) fn tile_load(&mut self, op: &'f Op) -> CompileResult<()> {
        if let Some((rv, base)) = self.ring_loads.remove(&op.results[0]) {
            return self.ring_load(op, rv, base);
        }
        let r = op.results[0];
        let Class::Fixed(l) = self.a.class(r) else {
            return Err(self.internal("tile_load without a layout"));
        };
        let dtype = self.elem_dtype(r);
        let root = self.root_value(op.operands[0])?;
        let width = self.layout_vector_width(l, dtype);
        let (index, aligned) = self.block_addressing(op, l, width)?;
        let acc = Access::unmasked(root, dtype, &index, width, aligned);
        let elems = self.load_runs(&acc, None);
        self.set_home(r, Home::Regs { layout: l, elems })
    }

    pub(super) fn tile_store(&mut self, op: &'f Op) -> CompileResult<()> {
        let value = op.operands[4];
        let l = self.natural_layout(value)?;
        let dtype = self.elem_dtype(value);
        let root = self.root_value(op.operands[0])?;
        let width_of = |this: &Self, l: LayoutId| this.layout_vector_width(l, dtype);
        let (l, values) = match self.staged_store(value, l, width_of)? {
            Some(staged) => staged,
            None => (l, self.elems(value, l)?),
        };
        let width = self.layout_vector_width(l, dtype);
        let (index, aligned) = self.block_addressing(op, l, width)?;
        let owner = self.owner(l);
        let masks = owner.map(|o| vec![o; index.len()]);
        let acc = Access {
            root,
            dtype,
            index: &index,
            width,
            masks: masks.as_deref(),
            run_mask: if owner.is_some() {
                RunMask::First
            } else {
                RunMask::None
            },
            aligned,
        };
        self.store_runs(&acc, &values);
        Ok(())
    }
}
