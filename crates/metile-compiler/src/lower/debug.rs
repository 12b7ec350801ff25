//! `device_print` and `device_assert`: per-thread `Print` and `Assert` GPU ops.
//!
//! A tile's elements are printed (or checked) by the threads that hold them,
//! each element once: where a layout replicates an element over several
//! threads, only its canonical owner prints it. Values that are all scalars are
//! printed once per program, by its first thread (of the running role).

use super::Lowering;
use crate::error::CompileResult;
use metile_ir::gpu_ir::*;
use metile_ir::print_format::print_pieces;
use metile_ir::{BinaryOp, CmpOp, Op};

impl<'f> Lowering<'f> {
    /// True on the first running thread (of the role, inside `simdgroup_role`).
    fn first_running_thread(&mut self) -> GpuValue {
        let base = self.a.role.map_or(0, |r| r.base);
        let tid = self.local_tid(base);
        let zero = self.const_i32(0);
        self.compare(CmpOp::Eq, tid, zero)
    }

    fn program_ids(&mut self) -> [GpuValue; 3] {
        [0u8, 1, 2].map(|a| self.builtin(Builtin::ThreadgroupPosition(a)))
    }

    /// Emits `then` guarded by `cond` (unguarded when `cond` is `None`).
    fn guarded(&mut self, cond: Option<GpuValue>, then: impl FnOnce(&mut Self)) {
        match cond {
            None => then(self),
            Some(c) => {
                self.push_block(&[]);
                then(self);
                let body = self.pop_block();
                self.b
                    .emit_region_op(GpuOpKind::If, [c], vec![body, GpuBlock::default()]);
            }
        }
    }

    pub(super) fn device_print(&mut self, op: &'f Op, prefix: &str, hex: bool) -> CompileResult<()> {
        let pid = self.program_ids();
        let n = op.operands.len();
        let hex_from = hex.then_some(n);
        let tile = op.operands.iter().copied().find(|&v| !self.f.ty(v).is_scalar());
        let Some(tile) = tile else {
            let mut args: Vec<GpuValue> = pid.to_vec();
            for &v in &op.operands {
                args.push(self.uniform(v)?);
            }
            let pieces = print_pieces(prefix, 0, n);
            let first = self.first_running_thread();
            let hex_from = hex_from.map(|_| 3);
            self.guarded(Some(first), |this| {
                this.emit(GpuOpKind::Print { pieces, hex_from }, args, vec![]);
            });
            return Ok(());
        };
        let shape = self.f.ty(tile).shape.clone();
        let l = self.natural_layout(tile)?;
        let mut columns = Vec::with_capacity(n);
        for &v in &op.operands {
            columns.push(if self.f.ty(v).is_scalar() {
                vec![self.uniform(v)?; self.values_of(l)]
            } else {
                self.elems(v, l)?
            });
        }
        let owner = self.owner(l);
        let rank = shape.len();
        let pieces = print_pieces(prefix, rank, n);
        let hex_from = hex_from.map(|_| 3 + rank);
        for i in 0..self.values_of(l) {
            let mut args: Vec<GpuValue> = pid.to_vec();
            args.extend(self.coordinates(l, i, &shape));
            args.extend(columns.iter().map(|c| c[i]));
            let pieces = pieces.clone();
            self.guarded(owner, |this| {
                this.emit(GpuOpKind::Print { pieces, hex_from }, args, vec![]);
            });
        }
        Ok(())
    }

    /// The coordinates of register `v`'s element of a tile of `shape` in `l`.
    fn coordinates(&mut self, l: crate::layout_assign::LayoutId, v: usize, shape: &[usize]) -> Vec<GpuValue> {
        let flat = self.element_index(l, v);
        let mut stride = 1usize;
        let mut coords = vec![flat; shape.len()];
        for (axis, &extent) in shape.iter().enumerate().rev() {
            let mut c = flat;
            if stride > 1 {
                let s = self.const_i32(stride as i32);
                c = self.binary(BinaryOp::FloorDiv, c, s);
            }
            if axis > 0 {
                let e = self.const_i32(extent as i32);
                c = self.binary(BinaryOp::Rem, c, e);
            }
            coords[axis] = c;
            stride *= extent;
        }
        coords
    }

    pub(super) fn device_assert(&mut self, op: &'f Op, message: &str) -> CompileResult<()> {
        let c = op.operands[0];
        let kind = GpuOpKind::Assert {
            message: message.to_string(),
        };
        if self.f.ty(c).is_scalar() {
            // Every thread holds the condition: the first one reports it.
            let cond = self.uniform(c)?;
            let first = self.first_running_thread();
            let not_first = self.emit1(
                GpuOpKind::Unary(metile_ir::UnaryOp::Not),
                [first],
                self.ty_of(first),
            );
            let holds = self.binary(BinaryOp::Or, cond, not_first);
            self.emit(kind, [holds], vec![]);
            return Ok(());
        }
        let shape = self.f.ty(c).shape.clone();
        let l = self.a.natural_layout(c, &shape)?;
        let elems = self.elems(c, l)?;
        let mut holds = self.bool_const(true);
        for e in elems {
            holds = self.binary(BinaryOp::And, holds, e);
        }
        // A replica checks what its owner checks: only owners report.
        if let Some(owner) = self.owner(l) {
            let not_owner = self.emit1(
                GpuOpKind::Unary(metile_ir::UnaryOp::Not),
                [owner],
                self.ty_of(owner),
            );
            holds = self.binary(BinaryOp::Or, holds, not_owner);
        }
        self.emit(kind, [holds], vec![]);
        Ok(())
    }
}
