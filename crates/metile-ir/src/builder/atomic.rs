//! Atomics (`atomic_add`, ..., `atomic_cas`): Triton's signatures and typing.
//! The operand is converted to the pointee type and everything is broadcast to
//! one shape, as for `store`; the result is the old values in that shape.

use super::{Builder, Operand};
use crate::dtype::{AddrSpace, DType, Elem, Type};
use crate::error::IrResult;
use crate::ir_bail;
use crate::tile_ir::*;

/// The dtypes `op` accepts, for messages: "i32, u32, i64 or f32".
fn accepted_names(op: AtomicOp) -> String {
    let names: Vec<&str> = DType::ALL
        .iter()
        .filter(|&&d| op.accepts(d))
        .map(|d| d.name())
        .collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => names.join(""),
    }
}

/// An atomic's memory ordering and scope (Triton's `sem=` and `scope=`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AtomicFlags {
    pub sem: MemSem,
    pub scope: MemScope,
}

impl Builder {
    /// One atomic read-modify-write per element of `ptr` (broadcast against
    /// the operands): `cmp` is the comparand of `AtomicOp::Cas` (and only of it).
    pub fn atomic(
        &mut self,
        op: AtomicOp,
        ptr: Operand,
        cmp: Option<Operand>,
        value: Operand,
        mask: Option<Operand>,
        flags: AtomicFlags,
    ) -> IrResult<ValueId> {
        let kind = OpKind::Atomic {
            op,
            sem: flags.sem,
            scope: flags.scope,
            has_mask: mask.is_some(),
        };
        let name = kind.name();
        if cmp.is_some() != (op == AtomicOp::Cas) {
            ir_bail!("internal: {name} takes a comparand exactly when it is atomic_cas");
        }
        let dtype = self.pointee(ptr, name)?;
        if let Some(Elem::Ptr(_, AddrSpace::Shared)) = self.elem_of(ptr) {
            ir_bail!("{name} needs a pointer into a kernel buffer; atomics on metile.shared memory are not supported");
        }
        if !op.accepts(dtype) {
            ir_bail!(
                "{name} is not defined on {dtype} pointers; it takes {}",
                accepted_names(op)
            );
        }
        let mut all = vec![ptr];
        all.extend(cmp);
        all.push(value);
        all.extend(mask);
        let shape = self.common_shape(&all, name)?;
        let p = self.materialize(ptr, None);
        let mut operands = vec![self.broadcast_to(p, &shape)?];
        if let Some(c) = cmp {
            operands.push(self.operand_of(c, dtype, &shape, name, "comparand")?);
        }
        operands.push(self.operand_of(value, dtype, &shape, name, "value")?);
        if let Some(m) = mask {
            operands.push(self.mask_value(m, &shape, name)?);
        }
        Ok(self.emit1(kind, operands, Type::tile(dtype, &shape)))
    }

    /// An atomic's operand in the pointee type: numbers are converted as by a
    /// store; pointers are refused.
    fn operand_of(
        &mut self,
        x: Operand,
        dtype: DType,
        shape: &[usize],
        name: &str,
        what: &str,
    ) -> IrResult<ValueId> {
        if let Some(Elem::Ptr(..)) = self.elem_of(x) {
            ir_bail!("{name}: the {what} must be a number or a tile of numbers, got a pointer");
        }
        self.coerce(x, dtype, shape)
    }
}
