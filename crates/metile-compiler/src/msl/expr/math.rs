//! The spelling of the float functions beyond `exp log sqrt tanh`, `pow`,
//! `atan2`, `fma` and `umulhi`.
//!
//! CUDA calls the libdevice function of each (`sinf`, `erff`, `log1pf`, ...).
//! MSL calls `metal::precise::` for the transcendental ones; Metal has no
//! `erf`, `log1p` or `expm1`, so those are helpers emitted with the kernel:
//! `erf` is the interpreter's polynomial (`metile-interp`'s `erf_f32`, same
//! coefficients), `log1p(x) = log(u) * x / (u - 1)` with `u = 1 + x` and
//! `expm1(x) = (u - 1) * (x / log(u))` with `u = exp(x)` (Kahan's forms, whose
//! rounding errors cancel). f16/bf16 compute in float and round once.

use super::{unsigned_of, BodyWriter, EmitResult, Helper};
use crate::msl::names::scalar_type;
use crate::msl::text::Lang;
use metile_ir::gpu_ir::{GpuOp, GpuValue};
use metile_ir::{BinaryOp, DType, OpKind, UnaryOp};

pub(super) fn helper_source(h: Helper) -> &'static str {
    match h {
        Helper::Erf => {
            "// erf: x + x * P(x^2) below 0.875, 1 - exp(-x^2) * R(1 / |x|) up to 4, then +-1.\n\
             static inline float metile_erf(float x) {\n  \
             float a = fabs(x);\n  \
             if (isnan(x)) return x;\n  \
             if (a >= 4.0f) return copysign(1.0f, x);\n  \
             if (a < 0.875f) {\n    \
             float t = x * x;\n    \
             float p = -1.0694233e-05f;\n    \
             p = p * t + 0.0001156039f;\n    \
             p = p * t + -0.0008517245f;\n    \
             p = p * t + 0.0052228826f;\n    \
             p = p * t + -0.02686596f;\n    \
             p = p * t + 0.112837896f;\n    \
             p = p * t + -0.37612638f;\n    \
             p = p * t + 0.12837917f;\n    \
             return x + x * p;\n  \
             }\n  \
             float u = 1.0f / a;\n  \
             float r = 0.015747964f;\n  \
             r = r * u + -0.09702005f;\n  \
             r = r * u + 0.2403014f;\n  \
             r = r * u + -0.2679921f;\n  \
             r = r * u + 0.010065993f;\n  \
             r = r * u + 0.3557146f;\n  \
             r = r * u + -0.42031905f;\n  \
             r = r * u + 0.030355053f;\n  \
             r = r * u + 0.56054294f;\n  \
             r = r * u + 0.00018686573f;\n  \
             return copysign(1.0f - precise::exp(-(a * a)) * r, x);\n}\n"
        }
        Helper::Log1p => {
            "static inline float metile_log1p(float x) {\n  \
             float u = 1.0f + x;\n  \
             if (u == 1.0f || u == INFINITY) return u == 1.0f ? x : u;\n  \
             return precise::log(u) * (x / (u - 1.0f));\n}\n"
        }
        Helper::Expm1 => {
            "static inline float metile_expm1(float x) {\n  \
             float u = precise::exp(x);\n  \
             if (u == 1.0f) return x;\n  \
             float um1 = u - 1.0f;\n  \
             if (um1 == -1.0f) return -1.0f;\n  \
             if (isinf(u)) return u;\n  \
             return um1 * (x / precise::log(u));\n}\n"
        }
        // PTX's approximations, as Triton's `exp` and `/` compile: `ex2.approx`
        // is within 2 ulp of 2^x (subnormal results kept), `div.full` within
        // 2 ulp of a / b for every divisor. `exp` multiplies by log2(e) first,
        // whose rounding adds a relative error of |x| * 2^-24 (2^-17 at the
        // largest |x| with a finite, normal result).
        Helper::FastMath => {
            "static inline float metile_fast_exp2(float x) {\n  \
             float y;\n  \
             asm(\"ex2.approx.f32 %0, %1;\" : \"=f\"(y) : \"f\"(x));\n  \
             return y;\n}\n\
             static inline float metile_fast_exp(float x) { return metile_fast_exp2(x * 1.44269504088896341f); }\n\
             static inline float metile_fast_div(float a, float b) {\n  \
             float q;\n  \
             asm(\"div.full.f32 %0, %1, %2;\" : \"=f\"(q) : \"f\"(a), \"f\"(b));\n  \
             return q;\n}\n"
        }
        _ => "",
    }
}

impl BodyWriter<'_> {
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
            return match self.lang {
                // CUDA's double functions: the names without the `f`.
                Lang::Cuda => Ok(format!("{name}({a})")),
                Lang::Msl => Err("Metal has no f64".into()),
            };
        }
        let arg = if d == DType::F32 {
            a.to_string()
        } else {
            format!("float({a})")
        };
        let helper = match u {
            UnaryOp::Erf => Some((Helper::Erf, "metile_erf")),
            UnaryOp::Log1p => Some((Helper::Log1p, "metile_log1p")),
            UnaryOp::Expm1 => Some((Helper::Expm1, "metile_expm1")),
            _ => None,
        };
        let call = match helper {
            Some((h, f)) if self.lang == Lang::Msl => {
                self.helpers.insert(h);
                format!("{f}({arg})")
            }
            // Exact functions need no `precise::`.
            _ if matches!(u, UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Rint) => {
                format!("{}({arg})", self.lang.float_fn(name))
            }
            _ => format!("{}({arg})", self.lang.transcendental(name)),
        };
        Ok(if d == DType::F32 {
            call
        } else {
            format!("{}({call})", scalar_type(d))
        })
    }

    /// `pow(a, b)` or `atan2(a, b)` on a float type.
    pub(super) fn float_binary_function(&self, op: BinaryOp, d: DType, a: &str, b: &str) -> String {
        let f = self.lang.transcendental(OpKind::Binary(op).name());
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
            let ty = self.lang.scalar(d);
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
        let ty = self.lang.scalar(d);
        let (ua, ub) = if d.is_signed_int() {
            (format!("as_type<{u}>({a})"), format!("as_type<{u}>({b})"))
        } else {
            (a.to_string(), b.to_string())
        };
        let product = match (self.lang, wide) {
            (Lang::Msl, _) => format!("mulhi({ua}, {ub})"),
            (Lang::Cuda, false) => format!("__umulhi({ua}, {ub})"),
            (Lang::Cuda, true) => format!("{u}(__umul64hi({ua}, {ub}))"),
        };
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
        let f = self.lang.float_fn("fma");
        Ok(match d {
            DType::F32 => format!("{f}({a}, {b}, {c})"),
            DType::F64 if self.lang == Lang::Cuda => format!("fma({a}, {b}, {c})"),
            DType::F64 => return Err("Metal has no f64".into()),
            d if d.is_fp8() => return Err(format!("fma on {d} (the builder computes fp8 in f32)")),
            d if d.is_float() => format!("{}({f}(float({a}), float({b}), float({c})))", scalar_type(d)),
            _ => return Err(format!("fma on {d}")),
        })
    }
}
