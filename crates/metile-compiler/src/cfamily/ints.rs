//! Integer arithmetic that needs care in C: wrapping signed ops (signed
//! overflow is undefined in C++), division guarded against zero
//! and `MIN // -1`, and the 8- and 16-bit types, which C computes in int.

use super::names::scalar_type;
use super::text::{zero_text, Name};
use super::writer::unsigned_of;
use super::{BodyWriter, Dialect, EmitResult};
use metile_ir::gpu_ir::GpuValue;
use metile_ir::{BinaryOp, DType};
use std::fmt::Write;

impl<D: Dialect> BodyWriter<'_, D> {
    /// `as_type<int>(as_type<uint>(a) op as_type<uint>(b))`; constants are
    /// printed directly as unsigned literals.
    pub(super) fn wrapping(
        &self,
        out: &mut String,
        d: DType,
        (x, a): (GpuValue, &Name),
        op: &str,
        (y, b): (GpuValue, &Name),
    ) {
        let u = unsigned_of(d);
        let operand = |out: &mut String, v: GpuValue, text: &Name| {
            let _ = match self.ranges.constant(v) {
                Some(c) if d.size_bytes() == 8 => write!(out, "{}UL", c as i64 as u64),
                Some(c) => write!(out, "{}u", c as i32 as u32),
                None => {
                    out.push_str("as_type<");
                    out.push_str(u);
                    out.push_str(">(");
                    text.push_to(out);
                    out.push(')');
                    Ok(())
                }
            };
        };
        let _ = write!(out, "as_type<{}>(", scalar_type(d));
        operand(out, x, a);
        let _ = write!(out, " {op} ");
        operand(out, y, b);
        out.push(')');
    }

    pub(super) fn negate_int(&self, d: DType, a: &Name, v: GpuValue) -> String {
        // Narrow integers negate in int (no overflow); the result is truncated
        // where it is stored, which wraps `-MIN` to `MIN`.
        if d.is_narrow_int() {
            return format!("-{a}");
        }
        let safe = self.ranges.get(v).is_some_and(|r| match d {
            DType::I32 => r.lo > i128::from(i32::MIN),
            _ => r.lo > i128::from(i64::MIN),
        });
        if safe {
            format!("-{a}")
        } else {
            let u = unsigned_of(d);
            format!("as_type<{}>({u}(0) - as_type<{u}>({a}))", scalar_type(d))
        }
    }

    pub(super) fn int_division(
        &self,
        op: BinaryOp,
        d: DType,
        x: GpuValue,
        y: GpuValue,
    ) -> EmitResult<String> {
        let (a, b) = (self.name(x)?, self.name(y)?);
        let zero = zero_text(d);
        let sym = if op == BinaryOp::Rem { "%" } else { "/" };
        let signed = d.is_signed_int();
        if let Some(c) = self.ranges.constant(y) {
            return Ok(match c {
                0 => zero.to_string(),
                -1 if signed && op == BinaryOp::Rem => zero.to_string(),
                -1 if signed => self.negate_int(d, &a, x),
                _ => format!("{a} {sym} {b}"),
            });
        }
        let minus_one = if d == DType::I64 { "-1L" } else { "-1" };
        Ok(match (signed, op) {
            (true, BinaryOp::Rem) => format!("({b} == {zero} || {b} == {minus_one}) ? {zero} : {a} % {b}"),
            (true, _) => format!(
                "{b} == {zero} ? {zero} : ({b} == {minus_one} ? {} : {a} / {b})",
                self.negate_int(d, &a, x)
            ),
            (false, _) => format!("{b} == {zero} ? {zero} : {a} {sym} {b}"),
        })
    }

    /// An op on 8- or 16-bit integers: C computes them in int (`a + b` cannot
    /// overflow there) and the result is truncated to the type where it is
    /// stored, which is the wrapping the language defines. Products and left
    /// shifts go through `uint` (a 16-bit product, or a shifted negative
    /// value, would overflow int); shift counts are taken modulo the width.
    pub(super) fn narrow_binary(
        &self,
        out: &mut String,
        op: BinaryOp,
        d: DType,
        (x, a): (GpuValue, &Name),
        (y, b): (GpuValue, &Name),
    ) -> EmitResult<()> {
        let ty = D::scalar(d);
        let mask = d.bits() - 1;
        let text = match op {
            BinaryOp::Add => format!("{ty}({a} + {b})"),
            BinaryOp::Sub => format!("{ty}({a} - {b})"),
            BinaryOp::Mul => format!("{ty}(uint({a}) * uint({b}))"),
            BinaryOp::And => format!("{ty}({a} & {b})"),
            BinaryOp::Or => format!("{ty}({a} | {b})"),
            BinaryOp::Xor => format!("{ty}({a} ^ {b})"),
            BinaryOp::Max => format!("{a} > {b} ? {a} : {b}"),
            BinaryOp::Min => format!("{a} < {b} ? {a} : {b}"),
            BinaryOp::Shl => format!("{ty}(uint({a}) << (uint({b}) & {mask}u))"),
            BinaryOp::Shr => format!("{ty}({a} >> (uint({b}) & {mask}u))"),
            BinaryOp::Div | BinaryOp::FloorDiv | BinaryOp::Rem => {
                format!("{ty}({})", self.int_division(op, d, x, y)?)
            }
            BinaryOp::MulHi => self.mul_hi(d, &a.to_string(), &b.to_string())?,
            BinaryOp::Pow | BinaryOp::Atan2 | BinaryOp::FastDiv => return Err(format!("{op:?} on {d}")),
        };
        out.push_str(&text);
        Ok(())
    }
}
