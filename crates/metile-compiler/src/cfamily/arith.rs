//! Arithmetic and comparisons: the rules of `writer.rs` for unary and
//! binary ops on every dtype.

use super::text::{push_infix, Name};
use super::writer::{no_f64, unsigned_of, BodyWriter, EmitResult, Helper};
use super::{names::scalar_type, Dialect};
use metile_ir::gpu_ir::GpuValue;
use metile_ir::{BinaryOp, CmpOp, DType, UnaryOp};
use std::fmt::Write;

impl<D: Dialect> BodyWriter<'_, D> {
    pub(super) fn unary(&mut self, u: UnaryOp, v: GpuValue) -> EmitResult<String> {
        let d = self.dtype(v);
        let a = self.name(v)?;
        if d.is_fp8() {
            return Err(format!("{u:?} on {d} (the builder computes fp8 in f32)"));
        }
        if d == DType::F64 && !D::HAS_F64 {
            return Err(no_f64::<D>());
        }
        let math = |name: &str| -> String {
            let f = D::transcendental(name);
            match d {
                DType::F32 => format!("{f}({a})"),
                // C's double functions carry no suffix.
                DType::F64 => format!("{name}({a})"),
                DType::F16 | DType::BF16 => format!("{}({f}(float({a})))", scalar_type(d)),
                _ => a.to_string(),
            }
        };
        Ok(match u {
            UnaryOp::Neg => match d {
                DType::F32 | DType::F16 | DType::F64 => format!("-{a}"),
                DType::BF16 => format!("bfloat(-float({a}))"),
                d if d.is_signed_int() => self.negate_int(d, &a, v),
                DType::U64 => format!("0UL - {a}"),
                DType::U32 => format!("0u - {a}"),
                // Narrow unsigned: negated in int, truncated where stored.
                d if d.is_int() => format!("-{a}"),
                _ => a.to_string(),
            },
            UnaryOp::Not => match d {
                DType::Bool => format!("!{a}"),
                d if d.is_int() => format!("~{a}"),
                _ => return Err(format!("bitwise not on {d}")),
            },
            UnaryOp::Exp => math("exp"),
            UnaryOp::FastExp | UnaryOp::FastExp2 => {
                let name = if u == UnaryOp::FastExp {
                    "fast_exp"
                } else {
                    "fast_exp2"
                };
                match D::approximation(name) {
                    Some(f) if d == DType::F32 => {
                        self.helpers.insert(Helper::FastMath);
                        format!("{f}({a})")
                    }
                    // Elsewhere the approximations are the exact functions.
                    _ if u == UnaryOp::FastExp => math("exp"),
                    _ => return self.float_function(UnaryOp::Exp2, v),
                }
            }
            UnaryOp::Log => math("log"),
            UnaryOp::Sqrt => math("sqrt"),
            UnaryOp::Tanh => math("tanh"),
            UnaryOp::Abs => match d {
                DType::F32 => format!("{}({a})", D::float_fn("fabs")),
                DType::F64 => format!("fabs({a})"),
                DType::F16 | DType::BF16 => {
                    format!("{}({}(float({a})))", scalar_type(d), D::float_fn("fabs"))
                }
                d if d.is_signed_int() => format!("{a} < 0 ? {} : {a}", self.negate_int(d, &a, v)),
                _ => a.to_string(),
            },
            u => return self.float_function(u, v),
        })
    }

    /// Writes the right-hand side of `op(x, y)` to `out`.
    pub(super) fn binary(&self, out: &mut String, op: BinaryOp, x: GpuValue, y: GpuValue) -> EmitResult<()> {
        let d = self.dtype(x);
        let (a, b) = (self.name(x)?, self.name(y)?);
        let sym = match op {
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div | BinaryOp::FastDiv => "/",
            BinaryOp::And => "&",
            BinaryOp::Or => "|",
            BinaryOp::Xor => "^",
            _ => "",
        };
        // Writing to a String cannot fail.
        macro_rules! w {
            ($($t:tt)*) => {{
                let _ = write!(out, $($t)*);
            }};
        }
        if d.is_fp8() {
            return Err(format!("{op:?} on {d} (the builder computes fp8 in f32)"));
        }
        if d == DType::F64 {
            if !D::HAS_F64 {
                return Err(no_f64::<D>());
            }
            match op {
                BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::FastDiv => {
                    push_infix(out, &a, sym, &b)
                }
                BinaryOp::FloorDiv => w!("trunc({a} / {b})"),
                BinaryOp::Rem => w!("fmod({a}, {b})"),
                BinaryOp::Max => w!("fmax({a}, {b})"),
                BinaryOp::Min => w!("fmin({a}, {b})"),
                BinaryOp::Pow => w!("pow({a}, {b})"),
                BinaryOp::Atan2 => w!("atan2({a}, {b})"),
                _ => return Err(format!("{op:?} on {d}")),
            }
            return Ok(());
        }
        if d.is_float() {
            let native = d != DType::BF16;
            // f16/bf16 ops other than native + - * / compute in float and round once.
            let narrow = scalar_type(d);
            let [trunc, fmod, fmax, fmin] = ["trunc", "fmod", "fmax", "fmin"].map(D::float_fn);
            if let Some(f) = self.fast_division(x).filter(|_| op == BinaryOp::FastDiv) {
                // The caller asked for the helper.
                w!("{f}({a}, {b})");
                return Ok(());
            }
            match op {
                // Elsewhere the approximate division is the exact one.
                BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::FastDiv
                    if native =>
                {
                    push_infix(out, &a, sym, &b)
                }
                BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::FastDiv => {
                    w!("{narrow}(float({a}) {sym} float({b}))")
                }
                BinaryOp::FloorDiv if d == DType::F32 => w!("{trunc}({a} / {b})"),
                BinaryOp::FloorDiv => w!("{narrow}({trunc}(float({a}) / float({b})))"),
                BinaryOp::Rem if d == DType::F32 => w!("{fmod}({a}, {b})"),
                BinaryOp::Rem => w!("{narrow}({fmod}(float({a}), float({b})))"),
                BinaryOp::Max if d == DType::F32 => w!("{fmax}({a}, {b})"),
                BinaryOp::Max => w!("{narrow}({fmax}(float({a}), float({b})))"),
                BinaryOp::Min if d == DType::F32 => w!("{fmin}({a}, {b})"),
                BinaryOp::Min => w!("{narrow}({fmin}(float({a}), float({b})))"),
                BinaryOp::Pow | BinaryOp::Atan2 => {
                    out.push_str(&self.float_binary_function(op, d, &a.to_string(), &b.to_string()))
                }
                _ => return Err(format!("{op:?} on {d}")),
            }
            return Ok(());
        }
        if d == DType::Bool {
            match op {
                BinaryOp::And | BinaryOp::Min | BinaryOp::Mul => w!("{a} && {b}"),
                BinaryOp::Or | BinaryOp::Max => w!("{a} || {b}"),
                BinaryOp::Xor | BinaryOp::Sub | BinaryOp::Add => w!("{a} != {b}"),
                _ => return Err(format!("{op:?} on bool")),
            }
            return Ok(());
        }
        if d.is_narrow_int() {
            return self.narrow_binary(out, op, d, (x, &a), (y, &b));
        }
        let bits = if d.size_bytes() == 8 { 63 } else { 31 };
        let signed = d.is_signed_int();
        match op {
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul => {
                if !signed || self.ranges.no_overflow(op, x, y, d) {
                    push_infix(out, &a, sym, &b)
                } else {
                    self.wrapping(out, d, (x, &a), sym, (y, &b))
                }
            }
            BinaryOp::Div | BinaryOp::FloorDiv | BinaryOp::Rem => {
                out.push_str(&self.int_division(op, d, x, y)?)
            }
            BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => push_infix(out, &a, sym, &b),
            BinaryOp::Max => w!("{a} > {b} ? {a} : {b}"),
            BinaryOp::Min => w!("{a} < {b} ? {a} : {b}"),
            BinaryOp::Shl => {
                let u = unsigned_of(d);
                if signed {
                    w!(
                        "as_type<{}>(as_type<{u}>({a}) << (as_type<{u}>({b}) & {u}({bits})))",
                        scalar_type(d)
                    )
                } else {
                    w!("{a} << ({b} & {bits}u)")
                }
            }
            BinaryOp::MulHi => out.push_str(&self.mul_hi(d, &a.to_string(), &b.to_string())?),
            BinaryOp::Pow | BinaryOp::Atan2 | BinaryOp::FastDiv => return Err(format!("{op:?} on {d}")),
            BinaryOp::Shr => match d {
                DType::U32 => w!("{a} >> ({b} & {bits}u)"),
                DType::I64 => w!("{a} >> ({b} & {bits}L)"),
                DType::U64 => w!("{a} >> ({b} & {bits}UL)"),
                _ => w!("{a} >> ({b} & {bits})"),
            },
        }
        Ok(())
    }

    /// The dialect's approximate division of `x` by another value of its
    /// dtype, where it has one for that dtype (f32).
    pub(super) fn fast_division(&self, x: GpuValue) -> Option<&'static str> {
        D::approximation("fast_div").filter(|_| self.dtype(x) == DType::F32)
    }

    pub(super) fn compare(&mut self, c: CmpOp, x: GpuValue, y: GpuValue) -> EmitResult<String> {
        let d = self.dtype(x);
        let (mut a, mut b) = (self.name(x)?, self.name(y)?);
        match d {
            d if d.is_fp8() => return Err(format!("comparison of {d} (the builder computes fp8 in f32)")),
            DType::BF16 => {
                a = Name::text(format!("float({a})"));
                b = Name::text(format!("float({b})"));
            }
            DType::Bool if !matches!(c, CmpOp::Eq | CmpOp::Ne) => {
                a = Name::text(format!("int({a})"));
                b = Name::text(format!("int({b})"));
            }
            _ => {}
        }
        let sym = match c {
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
        };
        Ok(format!("{a} {sym} {b}"))
    }
}
