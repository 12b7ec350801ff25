//! Conversions between dtypes, with the interpreter's semantics
//! (`metile-interp`'s `elem.rs`):
//!
//! * float to integer truncates and saturates, NaN to 0 (helpers: a C cast of
//!   an out-of-range float is undefined);
//! * integer to integer wraps (C's conversions, exact on two's complement);
//! * to a float type rounds once, to nearest even; int to bfloat through a
//!   round-to-odd float (a helper);
//! * fp8 values are their bits (`uchar`): decoding to float is exact, and
//!   encoding rounds to nearest even and saturates to the largest finite value,
//!   NaN to `0x7f` (NVIDIA's `cvt.rn.satfinite`, which Triton uses). The
//!   helpers are generated from the formats' parameters below and spelled with
//!   integer operations only, so every dialect computes the same bits; f64
//!   (where the language has it) has its own encoder, so it too is rounded once.
//! * a dialect may spell int-to-half itself ([`Dialect::int_to_half`]).

use super::text::zero_text;
use super::writer::no_f64;
use super::{BodyWriter, Dialect, EmitResult, Helper};
use metile_ir::fp8::Fp8;
use metile_ir::gpu_ir::GpuValue;
use metile_ir::DType;

fn fp8_format(d: DType) -> Option<Fp8> {
    match d {
        DType::F8E4M3 => Some(Fp8::E4M3),
        DType::F8E5M2 => Some(Fp8::E5M2),
        _ => None,
    }
}

fn fp8_name(f: Fp8) -> &'static str {
    match f {
        Fp8::E4M3 => "e4m3",
        Fp8::E5M2 => "e5m2",
    }
}

/// The fp8 format's exponent bias and stored mantissa bits.
fn fp8_shape(f: Fp8) -> (u32, u32) {
    match f {
        Fp8::E4M3 => (7, 3),
        Fp8::E5M2 => (15, 2),
    }
}

/// The name of the helper decoding `d` (an fp8 type) to float.
fn decoder(d: DType) -> Option<(Helper, String)> {
    let f = fp8_format(d)?;
    Some((Helper::Fp8ToFloat(d), format!("metile_{}_to_float", fp8_name(f))))
}

/// `float metile_e4m3_to_float(uchar)` (or e5m2): exact.
pub(super) fn decoder_source(d: DType) -> String {
    let Some(f) = fp8_format(d) else {
        return String::new();
    };
    let (bias, m) = fp8_shape(f);
    let name = fp8_name(f);
    let exp_max = (0x7f >> m) as u32;
    let specials = match f {
        Fp8::E4M3 => format!(
            "  if (e == {exp_max}u && m == {}u) return as_type<float>(s | 0x7fc00000u);\n",
            (1 << m) - 1
        ),
        Fp8::E5M2 => format!(
            "  if (e == {exp_max}u) return as_type<float>(s | (m != 0u ? 0x7fc00000u : 0x7f800000u));\n"
        ),
    };
    let quantum = 2f64.powi(1 - bias as i32 - m as i32);
    format!(
        "// fp8 {name} to float, exactly.\n\
         static inline float metile_{name}_to_float(uchar v) {{\n  \
         uint s = uint(v & 0x80u) << 24;\n  \
         uint e = (uint(v) >> {m}) & {emask}u;\n  \
         uint m = uint(v) & {mmask}u;\n\
         {specials}  \
         if (e == 0u) return as_type<float>(s | as_type<uint>(float(m) * {quantum:e}f));\n  \
         return as_type<float>(s | ((e + {rebias}u) << 23) | (m << {shift}));\n}}\n",
        emask = exp_max,
        mmask = (1u32 << m) - 1,
        rebias = 127 - bias,
        shift = 23 - m,
    )
}

/// `uchar metile_e4m3_from_float(float)` (or `_from_double`, or e5m2): to
/// nearest even, saturating, NaN to `0x7f`; integer operations on the bits.
pub(super) fn encoder_source(d: DType, double: bool) -> String {
    let Some(f) = fp8_format(d) else {
        return String::new();
    };
    let (bias, m) = fp8_shape(f);
    let name = fp8_name(f);
    // The source format: its unsigned type, width, stored mantissa bits, bias.
    let (fty, uty, width, mant, src_bias, suffix) = if double {
        ("double", "ulong", 64u32, 52u32, 1023u32, "UL")
    } else {
        ("float", "uint", 32, 23, 127, "u")
    };
    let bits_of = |x: f64| -> u64 {
        if double {
            x.to_bits()
        } else {
            u64::from((x as f32).to_bits())
        }
    };
    let hex = |v: u64| format!("0x{v:x}{suffix}");
    let abs_mask = if double {
        u64::MAX >> 1
    } else {
        u64::from(u32::MAX >> 1)
    };
    let inf = bits_of(f64::INFINITY);
    let max = bits_of(f.max_value());
    let min_normal = bits_of(2f64.powi(1 - bias as i32));
    // Below half the smallest subnormal everything rounds to zero (exactly half ties to 0).
    let zero_below = src_bias + 1 - bias - m - 1;
    // A subnormal result counts quanta of 2^(1 - bias - m): the source's full
    // significand shifted right by `k - e`.
    let k = src_bias + mant + 1 - bias - m;
    let drop = mant - m;
    format!(
        "// {fty} to fp8 {name}: to nearest even, saturating to the largest finite value, NaN to 0x7f.\n\
         static inline uchar metile_{name}_from_{fty}({fty} x) {{\n  \
         {uty} b = as_type<{uty}>(x);\n  \
         uint s = uint(b >> {sign_shift}) & 0x80u;\n  \
         {uty} a = b & {abs_mask};\n  \
         if (a > {inf}) return uchar(0x7fu);\n  \
         if (a >= {max}) return uchar(s | 0x{max8:x}u);\n  \
         if (a < {min_normal}) {{\n    \
         uint e = uint(a >> {mant});\n    \
         if (e < {zero_below}u) return uchar(s);\n    \
         {uty} m = (a & {mant_mask}) | {implicit};\n    \
         uint shift = {k}u - e;\n    \
         {uty} q = m >> shift;\n    \
         {uty} rest = m & (({uty}(1) << shift) - 1{suffix});\n    \
         {uty} half_q = {uty}(1) << (shift - 1u);\n    \
         if (rest > half_q || (rest == half_q && (q & 1{suffix}) != 0{suffix})) q += 1{suffix};\n    \
         return uchar(s | uint(q));\n  \
         }}\n  \
         {uty} r = (a + {round} + ((a >> {drop}) & 1{suffix})) >> {drop};\n  \
         return uchar(s | uint(r - {rebias}));\n}}\n",
        sign_shift = width - 8,
        abs_mask = hex(abs_mask),
        inf = hex(inf),
        max = hex(max),
        max8 = f.max_bits(),
        min_normal = hex(min_normal),
        mant_mask = hex((1u64 << mant) - 1),
        implicit = hex(1u64 << mant),
        round = hex((1u64 << (drop - 1)) - 1),
        rebias = hex(u64::from(src_bias - bias) << m),
    )
}

/// `metile_bfloat_from_ulong`: as `metile_bfloat_from_long`, for u64.
pub(super) const BFLOAT_FROM_ULONG: &str =
    "// Rounds once: to float with round-to-odd (exact for the later rounding), then to bfloat.\n\
static inline bfloat metile_bfloat_from_ulong(ulong m) {\n  \
float f = float(m);\n  \
uint bits = as_type<uint>(f);\n  \
bool top = f >= 18446744073709551616.0f;\n  \
ulong g = top ? 0UL : ulong(f);\n  \
if ((top || g != m) && (bits & 1u) == 0u) {\n    \
bits = (top || g > m) ? bits - 1u : bits + 1u;\n  \
}\n  \
return bfloat(as_type<float>(bits));\n}\n";

/// `metile_float_to_char(float)` and the like: truncating, saturating, NaN to
/// 0, for the integer types and sources the three original helpers
/// (`FloatToInt`, `FloatToUint`, `FloatToLong`) do not cover.
pub(super) fn float_to_integer_source<D: Dialect>(double: bool, to: DType) -> String {
    let (fty, suffix) = if double { ("double", "") } else { ("float", "f") };
    let ty = D::scalar(to);
    let bits = to.bits();
    let (lo, hi_exclusive) = if to.is_signed_int() {
        (-(2f64.powi(bits as i32 - 1)), 2f64.powi(bits as i32 - 1))
    } else {
        (0.0, 2f64.powi(bits as i32))
    };
    let max = match to {
        DType::U64 => "18446744073709551615UL".to_string(),
        DType::I64 => "9223372036854775807L".to_string(),
        DType::U32 => "4294967295u".to_string(),
        _ => format!("{ty}({})", hi_exclusive as i64 - 1),
    };
    let min = match to {
        DType::I64 => "(-9223372036854775807L - 1L)".to_string(),
        DType::I32 => "(-2147483647 - 1)".to_string(),
        _ => format!("{ty}({})", lo as i64),
    };
    format!(
        "static inline {ty} metile_{fty}_to_{ty}({fty} x) {{\n  \
         return isnan(x) ? {ty}(0) : x >= {hi:.1}{suffix} ? {max} : x <= {lo:.1}{suffix} ? {min} : {ty}(x);\n}}\n",
        hi = hi_exclusive,
        lo = lo,
    )
}

impl<D: Dialect> BodyWriter<'_, D> {
    /// The text of `a` (of dtype `from`) converted to `to`.
    pub(super) fn cast(&mut self, v: GpuValue, to: DType) -> EmitResult<String> {
        let from = self.dtype(v);
        let a = self.name(v)?.to_string();
        self.convert_text(&a, from, to)
    }

    fn convert_text(&mut self, a: &str, from: DType, to: DType) -> EmitResult<String> {
        if from == to {
            return Ok(a.to_string());
        }
        if !D::HAS_F64 && (from == DType::F64 || to == DType::F64) {
            return Err(no_f64::<D>());
        }
        // fp8 sources decode to float (exactly) and convert from there.
        if let Some((helper, name)) = decoder(from) {
            self.helpers.insert(helper);
            let wide = format!("{name}({a})");
            return self.convert_text(&wide, DType::F32, to);
        }
        if let Some(f) = fp8_format(to) {
            let double = from == DType::F64;
            self.helpers.insert(Helper::Fp8FromFloat(to, double));
            let arg = match from {
                DType::F32 | DType::F64 => a.to_string(),
                DType::Bool => format!("({a} ? 1.0f : 0.0f)"),
                _ => format!("float({a})"),
            };
            let source = if double { "double" } else { "float" };
            return Ok(format!("metile_{}_from_{source}({arg})", fp8_name(f)));
        }
        let to_ty = D::scalar(to);
        Ok(match (from, to) {
            (DType::F64, DType::Bool) => format!("{a} != 0.0"),
            (_, DType::Bool) if from.is_float() => format!("float({a}) != 0.0f"),
            (_, DType::Bool) => format!("{a} != {}", zero_text(from)),
            (DType::Bool, d) if d.is_float() => format!("{to_ty}({a} ? 1.0f : 0.0f)"),
            (DType::Bool, _) => format!("{to_ty}({a})"),
            (f, t) if f.is_float() && t.is_float() => match (f, t) {
                (DType::F32, _) | (_, DType::F32) | (DType::F64, _) | (_, DType::F64) => {
                    format!("{to_ty}({a})")
                }
                _ => format!("{to_ty}(float({a}))"),
            },
            (f, t) if f.is_float() => {
                let double = f == DType::F64;
                let (helper, name) = match (t, double) {
                    (DType::I32, false) => (Helper::FloatToInt, "metile_float_to_int".to_string()),
                    (DType::U32, false) => (Helper::FloatToUint, "metile_float_to_uint".to_string()),
                    (DType::I64, false) => (Helper::FloatToLong, "metile_float_to_long".to_string()),
                    _ => (
                        Helper::FloatToInteger(t, double),
                        format!("metile_{}_to_{}", if double { "double" } else { "float" }, to_ty),
                    ),
                };
                self.helpers.insert(helper);
                if f == DType::F32 || double {
                    format!("{name}({a})")
                } else {
                    format!("{name}(float({a}))")
                }
            }
            (DType::U64, DType::BF16) => {
                self.helpers.insert(Helper::BfloatFromUlong);
                format!("metile_bfloat_from_ulong({a})")
            }
            (_, DType::BF16) => {
                self.helpers.insert(Helper::BfloatFromLong);
                format!("metile_bfloat_from_long(long({a}))")
            }
            (_, DType::F16) => D::int_to_half(from, a).unwrap_or_else(|| format!("{to_ty}({a})")),
            (_, t) if t.is_float() => format!("{to_ty}({a})"),
            // Integer to integer: bit-exact wrapping conversions.
            (DType::I64 | DType::U64, DType::I32) => format!("as_type<int>(uint({a}))"),
            (DType::U32, DType::I32) => format!("as_type<int>({a})"),
            (_, _) => format!("{to_ty}({a})"),
        })
    }
}
