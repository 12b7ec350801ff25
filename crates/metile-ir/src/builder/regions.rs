//! The builder's thread-level ops and regions (loops, ifs, simdgroup roles):
//! blocks are opened, filled by the frontend, closed, and attached to their op.

use super::{Builder, Operand};
use crate::dtype::{broadcast_shapes, AddrSpace, DType, Elem, Type};
use crate::error::IrResult;
use crate::ir_bail;
use crate::tile_ir::*;

impl Builder {
    // ----------------------------------------------------------- thread level

    fn threads(&self, what: &str) -> IrResult<usize> {
        match self.threads_per_group {
            Some(t) => Ok(t),
            None => ir_bail!("{what}: the threadgroup size is unknown while tracing this kernel"),
        }
    }

    pub fn thread_id(&mut self) -> IrResult<ValueId> {
        let t = self.threads("thread_id")?;
        Ok(self.emit1(OpKind::ThreadId, vec![], Type::tile(DType::I32, &[t])))
    }

    pub fn simd_lane_id(&mut self) -> IrResult<ValueId> {
        let t = self.threads("simd_lane_id")?;
        Ok(self.emit1(OpKind::SimdLaneId, vec![], Type::tile(DType::I32, &[t])))
    }

    fn per_thread(&mut self, x: Operand, what: &str) -> IrResult<ValueId> {
        let t = self.threads(what)?;
        let v = self.materialize(x, None);
        let ty = self.ty(v).clone();
        if ty.is_ptr() {
            ir_bail!("{what} does not accept pointers");
        }
        if ty.is_scalar() {
            return self.broadcast_to(v, &[t]);
        }
        if ty.shape != [t] {
            ir_bail!("{what} needs a thread-level value (one element per thread, shape [{t}]), got {ty}");
        }
        Ok(v)
    }

    pub fn simd_shuffle_xor(&mut self, x: Operand, mask: Operand) -> IrResult<ValueId> {
        let v = self.per_thread(x, "simd_shuffle_xor")?;
        let m = self.index_scalar(mask, "simd_shuffle_xor's mask")?;
        let ty = self.ty(v).clone();
        Ok(self.emit1(OpKind::SimdShuffleXor, vec![v, m], ty))
    }

    pub fn simd_broadcast(&mut self, x: Operand, lane: Operand) -> IrResult<ValueId> {
        let v = self.per_thread(x, "simd_broadcast")?;
        let l = self.index_scalar(lane, "simd_broadcast's lane")?;
        let ty = self.ty(v).clone();
        Ok(self.emit1(OpKind::SimdBroadcast, vec![v, l], ty))
    }

    pub fn shared(&mut self, size: i64, dtype: DType) -> IrResult<ValueId> {
        if size <= 0 {
            ir_bail!("shared: size must be a positive number of elements, got {size}");
        }
        let ty = Type {
            elem: Elem::Ptr(dtype, AddrSpace::Shared),
            shape: vec![],
        };
        Ok(self.emit1(OpKind::Shared { size: size as usize }, vec![], ty))
    }

    pub fn barrier(&mut self) {
        self.emit(OpKind::Barrier, vec![], vec![]);
    }

    // --------------------------------------------------------------- regions

    /// Opens a block with fresh arguments of the given types; ops go into it.
    pub fn push_block(&mut self, arg_types: &[Type]) -> Vec<ValueId> {
        let args: Vec<ValueId> = arg_types.iter().map(|t| self.new_value(t.clone())).collect();
        self.blocks.push(Block {
            args: args.clone(),
            ops: vec![],
        });
        args
    }

    /// Closes the innermost block and hands it back (dropping it discards its ops).
    pub fn pop_block(&mut self) -> IrResult<Block> {
        if self.blocks.len() <= 1 {
            ir_bail!("internal: no region is open");
        }
        Ok(self.blocks.pop().unwrap_or_default())
    }

    /// Reopens a block returned by [`Builder::pop_block`] to append more ops.
    pub fn resume_block(&mut self, block: Block) {
        self.blocks.push(block);
    }

    pub fn depth(&self) -> usize {
        self.blocks.len()
    }

    /// Ends the current block with `yield values`.
    pub fn yield_values(&mut self, values: &[ValueId]) {
        self.emit(OpKind::Yield, values.to_vec(), vec![]);
    }

    /// The type a carried value must have to hold both `a` and `b` (a scalar
    /// broadcast to a tile, an int widened to a float).
    pub fn join_types(&self, a: &Type, b: &Type, name: &str) -> IrResult<Type> {
        if a == b {
            return Ok(a.clone());
        }
        let shape = match broadcast_shapes(&a.shape, &b.shape) {
            Some(s) => s,
            None => ir_bail!(
                "`{name}` is a tile of shape {:?} before and {:?} after; its shape must not change",
                a.shape,
                b.shape
            ),
        };
        let elem = match (a.elem, b.elem) {
            (Elem::Scalar(x), Elem::Scalar(y)) => Elem::Scalar(DType::promote(x, y)),
            (x, y) if x == y => x,
            _ => ir_bail!(
                "`{name}` changes between {} and {}; a pointer must stay the same pointer type",
                a.elem,
                b.elem
            ),
        };
        Ok(Type { elem, shape })
    }

    /// Converts `v` to type `ty` (used for carried and yielded values).
    pub fn convert_to(&mut self, v: ValueId, ty: &Type) -> IrResult<ValueId> {
        let v = match ty.elem {
            Elem::Scalar(d) => self.cast(v, d)?,
            Elem::Ptr(..) if self.ty(v).elem == ty.elem => v,
            Elem::Ptr(..) => ir_bail!("cannot convert {} to {}", self.ty(v), ty),
        };
        self.broadcast_to(v, &ty.shape)
    }

    /// Builds `for iv in range(start, end, step)` carrying `inits` in one call:
    /// `body` gets the loop variable and the carried values and returns the next
    /// carried values, which are converted to the carried types. For code that
    /// knows its carried types up front (the frontend learns them by tracing).
    pub fn build_for(
        &mut self,
        (start, end, step): (Operand, Operand, Operand),
        inits: &[ValueId],
        body: impl FnOnce(&mut Builder, ValueId, &[ValueId]) -> IrResult<Vec<ValueId>>,
    ) -> IrResult<Vec<ValueId>> {
        let start = self.loop_bound(start, "the loop start")?;
        let end = self.loop_bound(end, "the loop end")?;
        let step = self.loop_bound(step, "the loop step")?;
        let types: Vec<Type> = inits.iter().map(|&v| self.ty(v).clone()).collect();
        let mut arg_types = vec![Type::scalar(DType::I32)];
        arg_types.extend(types.iter().cloned());
        let args = self.push_block(&arg_types);
        let yielded = body(self, args[0], &args[1..]);
        let converted = yielded.and_then(|ys| {
            if ys.len() != types.len() {
                ir_bail!(
                    "the loop body yields {} values for {} carried ones",
                    ys.len(),
                    types.len()
                );
            }
            ys.iter()
                .zip(&types)
                .map(|(&y, t)| self.convert_to(y, t))
                .collect::<IrResult<Vec<_>>>()
        });
        let ys = match converted {
            Ok(ys) => ys,
            Err(e) => {
                self.pop_block()?;
                return Err(e);
            }
        };
        self.yield_values(&ys);
        let block = self.pop_block()?;
        self.finish_for(start, end, step, inits, block)
    }

    /// Appends `for iv in range(start, end, step)` with `body` (already ending in a
    /// yield); `inits` must have the types of `body`'s carried arguments.
    pub fn finish_for(
        &mut self,
        start: ValueId,
        end: ValueId,
        step: ValueId,
        inits: &[ValueId],
        body: Block,
    ) -> IrResult<Vec<ValueId>> {
        self.finish_pipelined_for((start, end, step), inits, body, None)
    }

    /// [`Builder::finish_for`] with the kernel's pipelining hint (`num_stages`).
    pub fn finish_pipelined_for(
        &mut self,
        (start, end, step): (ValueId, ValueId, ValueId),
        inits: &[ValueId],
        body: Block,
        num_stages: Option<u32>,
    ) -> IrResult<Vec<ValueId>> {
        let types: Vec<Type> = inits.iter().map(|&v| self.ty(v).clone()).collect();
        let mut operands = vec![start, end, step];
        operands.extend_from_slice(inits);
        let results = self.emit(OpKind::For { num_stages }, operands, types);
        self.attach_regions(vec![body]);
        Ok(results)
    }

    /// Appends a `while` loop: `cond` (ending in `yield flag`) and `body` (ending
    /// in `yield carried...`) both take the carried values, which `inits` start.
    pub fn finish_while(&mut self, inits: &[ValueId], cond: Block, body: Block) -> Vec<ValueId> {
        let types: Vec<Type> = inits.iter().map(|&v| self.ty(v).clone()).collect();
        let results = self.emit(OpKind::While, inits.to_vec(), types);
        self.attach_regions(vec![cond, body]);
        results
    }

    /// Appends the ops of a closed block to the current one (a region traced
    /// speculatively whose ops turn out to belong where it was opened).
    pub fn splice_block(&mut self, block: Block) {
        self.current().ops.extend(block.ops);
    }

    /// Appends an `if` whose blocks yield values of `types`.
    pub fn finish_if(
        &mut self,
        cond: ValueId,
        then_block: Block,
        else_block: Block,
        types: Vec<Type>,
    ) -> Vec<ValueId> {
        let results = self.emit(OpKind::If, vec![cond], types);
        self.attach_regions(vec![then_block, else_block]);
        results
    }

    pub fn finish_simdgroup_role(&mut self, role: u32, num_roles: u32, body: Block) -> IrResult<()> {
        if num_roles == 0 || role >= num_roles {
            ir_bail!(
                "simdgroup_role: role must be in [0, num_roles), got role={role}, num_roles={num_roles}"
            );
        }
        self.emit(OpKind::SimdgroupRole { role, num_roles }, vec![], vec![]);
        self.attach_regions(vec![body]);
        Ok(())
    }

    fn attach_regions(&mut self, regions: Vec<Block>) {
        if let Some(op) = self.current().ops.last_mut() {
            op.regions = regions;
        }
    }

    /// Converts a loop bound to a scalar int.
    pub fn loop_bound(&mut self, op: Operand, what: &str) -> IrResult<ValueId> {
        self.index_scalar(op, what)
    }

    /// A scalar bool for an `if` condition.
    pub fn condition(&mut self, op: Operand) -> IrResult<ValueId> {
        self.scalar_condition(op, "an `if` condition")
    }

    /// A scalar bool for a condition (`what` names it in errors).
    pub fn scalar_condition(&mut self, op: Operand, what: &str) -> IrResult<ValueId> {
        let v = self.materialize(op, Some(DType::Bool));
        let ty = self.ty(v).clone();
        if !ty.is_scalar() {
            ir_bail!("{what} must be a scalar, got a tile {ty}; reduce it first or use metile.where");
        }
        match ty.elem {
            Elem::Scalar(DType::Bool) => Ok(v),
            Elem::Scalar(_) => self.compare(CmpOp::Ne, Operand::Value(v), Operand::Int(0)),
            Elem::Ptr(..) => ir_bail!("{what} cannot be a pointer"),
        }
    }
}
