//! Structured control flow: `for` with carried values, `if` with results, and
//! `simdgroup_role`.
//!
//! Carried values and `if` results live in register arrays (the GPU IR has no
//! block arguments): a uniform value in one register, a `Fixed` tile in one
//! register per element of its layout. The loop body reads the registers once at
//! its start (so every use in the body sees this iteration's values), computes all
//! yielded values, then writes them back; the results are read after the loop.
//! Loop bounds and `if` conditions are scalars, hence uniform, so loop and branch
//! bodies may hold barriers.
//!
//! `simdgroup_role(role, num_roles)` runs its body on the simdgroups with
//! `sgid * num_roles / num_sgs == role` (an `if` on the simdgroup index). Tiles
//! inside it are spread over those simdgroups (layout assignment's role domain),
//! so the body works on whole tiles; thread-level values stay per thread. Only
//! those simdgroups execute it, so anything that needs the whole threadgroup (a
//! barrier, an exchange through threadgroup memory, zero-filling shared memory)
//! is refused there; values defined before the role are converted before it.

use super::{Home, Lowering};
use crate::error::CompileResult;
use crate::layout_assign::Class;
use metile_ir::gpu_ir::*;
use metile_ir::{BinaryOp, CmpOp, DType, Op, ValueId};

const I32: GpuType = GpuType::Scalar(DType::I32);

/// Where a carried value or `if` result is kept.
#[derive(Clone)]
enum Slot {
    Regs {
        reg: RegId,
        dtype: DType,
        class: Class,
    },
    /// A tile in an asynchronous ring carried by a loop: its stage offset, in
    /// one register.
    RingCarried {
        reg: RegId,
        ring: usize,
        tile: usize,
    },
    /// A ring tile an `if` fills: its stage offset, chosen before the `if`.
    RingFilled {
        ring: usize,
        tile: usize,
        base: GpuValue,
    },
}

impl<'f> Lowering<'f> {
    fn slot_for(&mut self, result: ValueId) -> CompileResult<Slot> {
        if let Some(rv) = self.in_ring(result) {
            let reg = self.b.add_reg(DType::I32, 1);
            return Ok(Slot::RingCarried {
                reg,
                ring: rv.ring,
                tile: rv.tile,
            });
        }
        let class = self.a.class(result);
        let dtype = self.elem_dtype(result);
        let len = match class {
            Class::Uniform => 1,
            Class::Fixed(l) => self.values_of(l),
            Class::Flexible => return Err(self.internal("a carried value without a layout")),
        };
        let reg = self.b.add_reg(dtype, len as u32);
        Ok(Slot::Regs { reg, dtype, class })
    }

    /// The values of `v` as `slot` stores them.
    fn slot_values(&mut self, slot: &Slot, v: ValueId) -> CompileResult<Vec<GpuValue>> {
        match slot {
            Slot::Regs {
                class: Class::Fixed(l),
                ..
            } => self.elems(v, *l),
            Slot::Regs { .. } => Ok(vec![self.uniform(v)?]),
            Slot::RingCarried { .. } => Ok(vec![self.ring_base(v)?]),
            Slot::RingFilled { .. } => Ok(vec![]),
        }
    }

    fn write_slot(&mut self, slot: &Slot, values: &[GpuValue]) {
        let reg = match slot {
            Slot::Regs { reg, .. } | Slot::RingCarried { reg, .. } => *reg,
            Slot::RingFilled { .. } => return,
        };
        for (i, &x) in values.iter().enumerate() {
            self.reg_write(reg, i as u32, x);
        }
    }

    /// Reads a slot and makes it the home of `v`.
    fn read_slot(&mut self, slot: &Slot, v: ValueId) -> CompileResult<()> {
        match *slot {
            Slot::Regs {
                reg,
                dtype,
                class: Class::Fixed(l),
            } => {
                let elems = (0..self.values_of(l))
                    .map(|i| self.reg_read(reg, i as u32, dtype))
                    .collect();
                self.set_home(v, Home::Regs { layout: l, elems })
            }
            Slot::Regs { reg, dtype, .. } => {
                let x = self.reg_read(reg, 0, dtype);
                self.set_home(v, Home::Uniform(x))
            }
            Slot::RingCarried { reg, ring, tile } => {
                let base = self.reg_read(reg, 0, DType::I32);
                self.set_home(v, Home::Staged { ring, tile, base })
            }
            Slot::RingFilled { ring, tile, base } => self.set_home(v, Home::Staged { ring, tile, base }),
        }
    }

    /// Evaluates a region's yielded values, then stores them (all reads before any write).
    fn store_yields(&mut self, region: &'f metile_ir::Block, slots: &[Slot]) -> CompileResult<()> {
        let Some(y) = region.ops.last() else {
            return Ok(());
        };
        let mut all = Vec::with_capacity(slots.len());
        for (slot, &v) in slots.iter().zip(&y.operands) {
            all.push(self.slot_values(slot, v)?);
        }
        for (slot, values) in slots.iter().zip(&all) {
            self.write_slot(slot, values);
        }
        Ok(())
    }

    pub(super) fn for_op(&mut self, op: &'f Op) -> CompileResult<()> {
        let start = self.uniform(op.operands[0])?;
        let end = self.uniform(op.operands[1])?;
        let step = self.uniform(op.operands[2])?;
        let body = op
            .regions
            .first()
            .ok_or_else(|| self.internal("a for without a body"))?;
        let mut slots = Vec::with_capacity(op.results.len());
        for (&r, &init) in op.results.iter().zip(&op.operands[3..]) {
            let slot = self.slot_for(r)?;
            let values = self.slot_values(&slot, init)?;
            self.write_slot(&slot, &values);
            slots.push(slot);
        }
        let (start, end, step) = (
            self.cast(start, DType::I32),
            self.cast(end, DType::I32),
            self.cast(step, DType::I32),
        );
        self.stage_invariant_operands(body)?;
        let outer_wgmma = std::mem::take(&mut self.pending_wgmma);
        let iv = self.push_block(&[I32])[0];
        self.set_home(body.args[0], Home::Uniform(iv))?;
        for (slot, &arg) in slots.iter().zip(&body.args[1..]) {
            self.read_slot(slot, arg)?;
        }
        self.block(body)?;
        self.loc = op.loc.clone();
        self.op_name = "for".into();
        self.b.set_loc(op.loc.clone());
        self.store_yields(body, &slots)?;
        let gpu_body = self.pop_block();
        self.b
            .emit_region_op(GpuOpKind::For, [start, end, step], vec![gpu_body]);
        for (reg, count, held) in std::mem::replace(&mut self.pending_wgmma, outer_wgmma) {
            self.wgmma_wait(reg, count, 0, held);
        }
        for (slot, &r) in slots.iter().zip(&op.results) {
            self.read_slot(slot, r)?;
        }
        Ok(())
    }

    /// `while`: the carried values live in register slots like a `for`'s; region
    /// 0 reads them and computes the condition, region 1 reads them again and
    /// writes the next values. The condition is a scalar, hence uniform, so
    /// both regions may hold barriers.
    pub(super) fn while_op(&mut self, op: &'f Op) -> CompileResult<()> {
        let [cond, body] = op.regions.as_slice() else {
            return Err(self.internal("a while needs a condition and a body"));
        };
        let mut slots = Vec::with_capacity(op.results.len());
        for (&r, &init) in op.results.iter().zip(&op.operands) {
            let slot = self.slot_for(r)?;
            let values = self.slot_values(&slot, init)?;
            self.write_slot(&slot, &values);
            slots.push(slot);
        }
        let outer_wgmma = std::mem::take(&mut self.pending_wgmma);
        self.push_block(&[]);
        for (slot, &arg) in slots.iter().zip(&cond.args) {
            self.read_slot(slot, arg)?;
        }
        self.block(cond)?;
        let flag = cond
            .ops
            .last()
            .and_then(|y| y.operands.first().copied())
            .ok_or_else(|| self.internal("a while condition yields nothing"))?;
        self.loc = op.loc.clone();
        self.op_name = "while".into();
        self.b.set_loc(op.loc.clone());
        let flag = self.uniform(flag)?;
        self.emit(GpuOpKind::Condition, [flag], vec![]);
        let cond_block = self.pop_block();
        self.push_block(&[]);
        for (slot, &arg) in slots.iter().zip(&body.args) {
            self.read_slot(slot, arg)?;
        }
        self.block(body)?;
        self.loc = op.loc.clone();
        self.op_name = "while".into();
        self.b.set_loc(op.loc.clone());
        self.store_yields(body, &slots)?;
        let body_block = self.pop_block();
        self.b
            .emit_region_op(GpuOpKind::While, ValueList::new(), vec![cond_block, body_block]);
        for (reg, count, held) in std::mem::replace(&mut self.pending_wgmma, outer_wgmma) {
            self.wgmma_wait(reg, count, 0, held);
        }
        for (slot, &r) in slots.iter().zip(&op.results) {
            self.read_slot(slot, r)?;
        }
        Ok(())
    }

    pub(super) fn if_op(&mut self, op: &'f Op) -> CompileResult<()> {
        let cond = self.uniform(op.operands[0])?;
        let ring_bases = self.ring_if_prepare(op)?;
        let mut slots = Vec::with_capacity(op.results.len());
        for (&r, base) in op.results.iter().zip(&ring_bases) {
            slots.push(match (base, self.in_ring(r)) {
                (Some(base), Some(rv)) => Slot::RingFilled {
                    ring: rv.ring,
                    tile: rv.tile,
                    base: *base,
                },
                _ => self.slot_for(r)?,
            });
        }
        let mut blocks = Vec::with_capacity(2);
        for region in &op.regions {
            self.push_block(&[]);
            self.block(region)?;
            self.loc = op.loc.clone();
            self.op_name = "if".into();
            self.b.set_loc(op.loc.clone());
            self.store_yields(region, &slots)?;
            blocks.push(self.pop_block());
        }
        self.b.emit_region_op(GpuOpKind::If, [cond], blocks);
        if ring_bases.iter().any(Option::is_some) {
            self.ring_commit();
        }
        for (slot, &r) in slots.iter().zip(&op.results) {
            self.read_slot(slot, r)?;
        }
        Ok(())
    }

    pub(super) fn simdgroup_role(&mut self, op: &'f Op, role: u32, num_roles: u32) -> CompileResult<()> {
        let num_sgs = (self.a.threads / self.a.target.simd_width).max(1);
        let cond = self.at_depth(0, |this| {
            let sg = this.builtin(Builtin::SimdgroupIndex);
            let roles = this.const_i32(num_roles as i32);
            let sgs = this.const_i32(num_sgs as i32);
            let want = this.const_i32(role as i32);
            let scaled = this.binary(BinaryOp::Mul, sg, roles);
            let which = this.binary(BinaryOp::FloorDiv, scaled, sgs);
            this.compare(CmpOp::Eq, which, want)
        });
        let body = op
            .regions
            .first()
            .ok_or_else(|| self.internal("simdgroup_role without a body"))?;
        let domain = crate::layout_assign::enter_role(&self.a, op, role, num_roles)?;
        self.push_block(&[]);
        self.role_depths.push(self.innermost());
        self.a.role = Some(domain);
        let result = self.block(body);
        self.a.role = None;
        self.role_depths.pop();
        result?;
        let then_b = self.pop_block();
        self.b
            .emit_region_op(GpuOpKind::If, [cond], vec![then_b, GpuBlock::default()]);
        Ok(())
    }
}
