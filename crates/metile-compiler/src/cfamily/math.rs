//! The spelling of the float functions beyond `exp log sqrt tanh`, `pow`,
//! `atan2`, `fma` and `umulhi`: the dialect's single-precision functions
//! ([`Dialect::float_fn`] for exact ones, [`Dialect::transcendental`] for the
//! others), or a helper where the language has none
//! ([`Dialect::float_function_helper`]); C's own names on double. f16/bf16
//! compute in float and round once.

use super::names::scalar_type;
use super::writer::{no_f64, unsigned_of};
use super::{BodyWriter, Dialect, EmitResult};
use metile_ir::gpu_ir::{GpuOp, GpuValue};
use metile_ir::{BinaryOp, DType, OpKind, UnaryOp};

impl<D: Dialect> BodyWriter<'_, D> {
    /// A float function of one argument (`UnaryOp::is_float_math`).
    pub(super) fn float_function(&mut self, u: UnaryOp, v: GpuValue) -> EmitResult<String> {
        let d = self.dtype(v);
        let name = OpKind::Unary(u).name();
        if !d.is_float() {
            return Err(format!("{name} on {d}"));
        }
        let a = self.name(v)?;
        if d.is_fp8() {
            return Err(format!("{name} on {d} (the builder computes fp8 in f32)"));
        }
        if d == DType::F64 {
            if !D::HAS_F64 {
                return Err(no_f64::<D>());
            }
            // C's double functions: the names without the `f`.
            return Ok(format!("{name}({a})"));
        }
        let arg = if d == DType::F32 {
            a.to_string()
        } else {
            format!("float({a})")
        };
        let call = match D::float_function_helper(u) {
            Some((h, f)) => {
                self.helpers.insert(h);
                format!("{f}({arg})")
            }
            // Exact functions need no correctly rounded variant.
            _ if matches!(u, UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Rint) => {
                format!("{}({arg})", D::float_fn(name))
            }
            _ => format!("{}({arg})", D::transcendental(name)),
        };
        Ok(if d == DType::F32 {
            call
        } else {
            format!("{}({call})", scalar_type(d))
        })
    }

    /// `pow(a, b)` or `atan2(a, b)` on a float type.
    pub(super) fn float_binary_function(&self, op: BinaryOp, d: DType, a: &str, b: &str) -> String {
        let f = D::transcendental(OpKind::Binary(op).name());
        if d == DType::F64 {
            return format!("{}({a}, {b})", OpKind::Binary(op).name());
        }
        if d == DType::F32 {
            format!("{f}({a}, {b})")
        } else {
            format!("{}({f}(float({a}), float({b})))", scalar_type(d))
        }
    }

    /// `umulhi(a, b)`: the high half of the unsigned double-width product.
    pub(super) fn mul_hi(&self, d: DType, a: &str, b: &str) -> EmitResult<String> {
        if d.is_narrow_int() {
            // The whole product fits 32 bits: its high half, shifted down.
            let ty = D::scalar(d);
            let u = if d.size_bytes() == 1 { "uchar" } else { "ushort" };
            let bits = d.bits();
            return Ok(format!("{ty}((uint({u}({a})) * uint({u}({b}))) >> {bits})"));
        }
        let wide = match d.size_bytes() {
            4 => false,
            8 => true,
            _ => return Err(format!("umulhi on {d}")),
        };
        let u = unsigned_of(d);
        let ty = D::scalar(d);
        let (ua, ub) = if d.is_signed_int() {
            (format!("as_type<{u}>({a})"), format!("as_type<{u}>({b})"))
        } else {
            (a.to_string(), b.to_string())
        };
        let product = D::mul_hi(&ua, &ub, wide);
        Ok(if d.is_signed_int() {
            format!("as_type<{ty}>({product})")
        } else {
            product
        })
    }

    /// `fma(a, b, c)`, rounded once (f16/bf16: in float, then rounded to the type).
    pub(super) fn fma(&self, op: &GpuOp) -> EmitResult<String> {
        let [x, y, z] = op.operands.as_slice() else {
            return Err("fma needs three operands".into());
        };
        let d = self.dtype(*x);
        let (a, b, c) = (self.name(*x)?, self.name(*y)?, self.name(*z)?);
        let f = D::float_fn("fma");
        Ok(match d {
            DType::F32 => format!("{f}({a}, {b}, {c})"),
            DType::F64 if D::HAS_F64 => format!("fma({a}, {b}, {c})"),
            DType::F64 => return Err(no_f64::<D>()),
            d if d.is_fp8() => return Err(format!("fma on {d} (the builder computes fp8 in f32)")),
            d if d.is_float() => format!("{}({f}(float({a}), float({b}), float({c})))", scalar_type(d)),
            _ => return Err(format!("fma on {d}")),
        })
    }
}
