//! The builder's truth values, debugging ops and compiler hints: Python's
//! `and`/`or`/`not` on traced values, `device_print`, `device_assert`, and the
//! promises of `multiple_of`, `max_contiguous` and `max_constancy`.

use super::{Builder, Operand};
use crate::dtype::{DType, Elem};
use crate::error::IrResult;
use crate::ir_bail;
use crate::tile_ir::*;

impl Builder {
    /// A value's truth as a bool tile of its shape: `x != 0` unless already bool.
    pub fn truth(&mut self, x: Operand, what: &str) -> IrResult<ValueId> {
        let v = self.materialize(x, Some(DType::Bool));
        match self.ty(v).elem {
            Elem::Scalar(DType::Bool) => Ok(v),
            Elem::Scalar(_) => self.compare(CmpOp::Ne, Operand::Value(v), Operand::Int(0)),
            Elem::Ptr(..) => ir_bail!("{what} has no truth value for a pointer"),
        }
    }

    /// Python's `a and b` / `a or b` on traced values: the element-wise logical
    /// and / or of both truths (broadcast together), a bool tile.
    pub fn logical(&mut self, op: BinaryOp, a: Operand, b: Operand) -> IrResult<ValueId> {
        let what = if op == BinaryOp::And { "`and`" } else { "`or`" };
        let a = self.truth(a, what)?;
        let b = self.truth(b, what)?;
        self.binary(op, Operand::Value(a), Operand::Value(b))
    }

    /// Python's `not x` on a traced value: the element-wise logical not.
    pub fn logical_not(&mut self, x: Operand) -> IrResult<ValueId> {
        let t = self.truth(x, "`not`")?;
        self.unary(UnaryOp::Not, Operand::Value(t))
    }

    /// `device_print(prefix, *values)`: numbers print as scalars.
    pub fn device_print(&mut self, prefix: &str, values: &[Operand], hex: bool) -> IrResult<()> {
        if !crate::print_format::is_printable(prefix) {
            ir_bail!("device_print's prefix must be printable ASCII text, got {prefix:?}");
        }
        let mut shape: Option<Vec<usize>> = None;
        let mut vs = Vec::with_capacity(values.len());
        for &x in values {
            let v = self.materialize(x, None);
            if self.ty(v).is_ptr() {
                ir_bail!("device_print prints numbers, not pointers ({})", self.ty(v));
            }
            if hex && self.ty(v).dtype().is_some_and(|d| d.is_float()) {
                ir_bail!(
                    "device_print(hex=True) prints integers, got a {} value",
                    self.ty(v)
                );
            }
            // fp8 values print as the f32 values they are.
            let v = match self.ty(v).dtype() {
                Some(d) if d.is_fp8() && !hex => self.cast(v, DType::F32)?,
                _ => v,
            };
            let s = &self.ty(v).shape;
            if !s.is_empty() {
                match &shape {
                    Some(first) if first != s => ir_bail!(
                        "device_print prints tiles of one shape (one line per element), got {first:?} and {s:?}"
                    ),
                    _ => shape = Some(s.clone()),
                }
            }
            vs.push(v);
        }
        self.emit(
            OpKind::Print {
                prefix: prefix.to_string(),
                hex,
            },
            vs,
            vec![],
        );
        Ok(())
    }

    /// `device_assert(cond, message)`: the launch fails where `cond` is false.
    pub fn device_assert(&mut self, cond: Operand, message: &str) -> IrResult<()> {
        if !crate::print_format::is_printable(message) {
            ir_bail!("device_assert's message must be printable ASCII text, got {message:?}");
        }
        if let Operand::Value(v) = cond {
            if self.ty(v).is_ptr() {
                ir_bail!("device_assert needs a condition, got a pointer ({})", self.ty(v));
            }
        }
        let c = self.truth(cond, "device_assert's condition")?;
        self.emit(
            OpKind::Assert {
                message: message.to_string(),
            },
            vec![c],
            vec![],
        );
        Ok(())
    }

    /// `assume(cond)`: the kernel promises that the bool scalar `cond` holds
    /// (see [`OpKind::AssumeTrue`]).
    pub fn assume_true(&mut self, cond: Operand) -> IrResult<()> {
        let c = match cond {
            Operand::Value(v) => v,
            _ => ir_bail!("metile.assume needs a bool scalar condition computed by the kernel"),
        };
        let ty = self.ty(c).clone();
        if ty.dtype() != Some(DType::Bool) || !ty.is_scalar() {
            ir_bail!("metile.assume needs a bool scalar condition, got a {ty} value");
        }
        self.emit(OpKind::AssumeTrue, vec![c], vec![]);
        Ok(())
    }

    /// `x` with a promise about its values (see [`OpKind::Assume`]).
    pub fn assume(&mut self, x: Operand, fact: AssumeFact, value: i64, what: &str) -> IrResult<ValueId> {
        if value <= 0 {
            ir_bail!("{what} needs a positive int, got {value}");
        }
        let v = self.materialize(x, None);
        let ty = self.ty(v).clone();
        let integral = ty.is_ptr() || ty.dtype().is_some_and(|d| d.is_int());
        if !integral {
            ir_bail!("{what} describes integers or pointers, got a {ty} value");
        }
        Ok(self.emit1(
            OpKind::Assume {
                fact,
                value: value as u64,
            },
            vec![v],
            ty,
        ))
    }
}
