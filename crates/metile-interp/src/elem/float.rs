//! The float elements: f32 and f64 (IEEE arithmetic), f16 and bf16 (computed
//! in f32, rounded once), and the fp8 storage types (bits; conversions round
//! once, to nearest even, saturating).

use super::{Arith, CastSource, Dense, Element};
use crate::math;
use crate::value::TypedScratch;
use half::{bf16, f16};
use metile_ir::fp8::Fp8;
use metile_ir::DType;

/// An fp8 e4m3 element (Triton's `float8e4nv`): its bits.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(transparent)]
pub(crate) struct F8E4M3(pub u8);

/// An fp8 e5m2 element (Triton's `float8e5`): its bits.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(transparent)]
pub(crate) struct F8E5M2(pub u8);

/// Rounds an integer of magnitude `magnitude` to `significant` bits (nearest, ties
/// to even) and returns it as an `f32`, which holds the result exactly. Converting
/// that `f32` to f16/bf16 is then exact (or overflows to infinity exactly when the
/// integer does), so an int becomes f16/bf16 with a single rounding, as C requires.
fn round_int_to_significant_bits(negative: bool, magnitude: u64, significant: u32) -> f32 {
    let width = 64 - magnitude.leading_zeros();
    let rounded = if width <= significant {
        magnitude as f32
    } else {
        let shift = width - significant;
        let kept = magnitude >> shift;
        let dropped = magnitude & ((1u64 << shift) - 1);
        let half = 1u64 << (shift - 1);
        let kept = if dropped > half || (dropped == half && kept & 1 == 1) {
            kept + 1
        } else {
            kept
        };
        // kept <= 2^significant, shift <= 63: both factors and the product are exact in f32.
        kept as f32 * 2f32.powi(shift as i32)
    };
    if negative {
        -rounded
    } else {
        rounded
    }
}

/// Rounds to f32 with "round to odd": inexact results get an odd last bit. A value
/// rounded this way to 24 bits and then to nearest-even at 11 or 8 bits (f16, bf16)
/// is rounded exactly as if directly, so an f64 becomes f16/bf16 with one rounding.
pub(crate) fn f64_to_f32_round_to_odd(x: f64) -> f32 {
    let y = x as f32;
    if !y.is_finite() || f64::from(y) == x || y.to_bits() & 1 == 1 {
        return y;
    }
    // y is even and inexact: its odd neighbour on x's side is the round-to-odd result.
    let toward_zero = f64::from(y).abs() > x.abs();
    f32::from_bits(if toward_zero {
        y.to_bits() - 1
    } else {
        y.to_bits() + 1
    })
}

/// f32 and f64: IEEE arithmetic; float `//` is `trunc(a / b)`, `%` is `fmod`,
/// max/min are `fmax`/`fmin` (a NaN operand yields the other one).
macro_rules! ieee_arith {
    ($T:ty, $exp:expr) => {
        impl Arith for $T {
            fn add(a: Self, b: Self) -> Self {
                a + b
            }
            fn sub(a: Self, b: Self) -> Self {
                a - b
            }
            fn mul(a: Self, b: Self) -> Self {
                a * b
            }
            fn div(a: Self, b: Self) -> Self {
                a / b
            }
            fn floordiv(a: Self, b: Self) -> Self {
                (a / b).trunc()
            }
            fn rem(a: Self, b: Self) -> Self {
                // Rust's float `%` is C's fmod: the result has the dividend's sign.
                a % b
            }
            fn max(a: Self, b: Self) -> Self {
                <$T>::max(a, b)
            }
            fn min(a: Self, b: Self) -> Self {
                <$T>::min(a, b)
            }
            fn and(a: Self, _b: Self) -> Self {
                a
            }
            fn or(a: Self, _b: Self) -> Self {
                a
            }
            fn xor(a: Self, _b: Self) -> Self {
                a
            }
            fn shl(a: Self, _b: Self) -> Self {
                a
            }
            fn shr(a: Self, _b: Self) -> Self {
                a
            }
            fn neg(a: Self) -> Self {
                -a
            }
            fn not(a: Self) -> Self {
                a
            }
            fn abs(a: Self) -> Self {
                a.abs()
            }
            fn exp(a: Self) -> Self {
                $exp(a)
            }
            fn log(a: Self) -> Self {
                a.ln()
            }
            fn sqrt(a: Self) -> Self {
                a.sqrt()
            }
            fn tanh(a: Self) -> Self {
                a.tanh()
            }
            fn lt(a: Self, b: Self) -> bool {
                a < b
            }
            fn le(a: Self, b: Self) -> bool {
                a <= b
            }
            fn eq(a: Self, b: Self) -> bool {
                a == b
            }
        }
    };
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    fn to_bits(self) -> u64 {
        u64::from(f32::to_bits(self))
    }
    fn from_bits(bits: u64) -> Self {
        f32::from_bits(bits as u32)
    }
    unsafe fn read(p: *const u8) -> Self {
        std::ptr::read_unaligned(p as *const f32)
    }
    unsafe fn write(p: *mut u8, v: Self) {
        std::ptr::write_unaligned(p as *mut f32, v)
    }
    fn cast_from_int(v: i64) -> Self {
        // Rust's int-to-float `as` rounds to nearest, ties to even: one rounding.
        v as f32
    }
    fn cast_from_uint(v: u64) -> Self {
        v as f32
    }
    fn cast_from_float(v: f32) -> Self {
        v
    }
    fn cast_from_double(v: f64) -> Self {
        v as f32
    }
    fn cast_source(self) -> CastSource {
        CastSource::Float(self)
    }
    fn f32_view<'a>(s: &'a [Self], _buf: &'a mut Vec<f32>) -> &'a [f32] {
        s
    }
    element_common!(f32, F32, f32s);
}

ieee_arith!(f32, math::exp_f32);

impl Element for f64 {
    const DTYPE: DType = DType::F64;
    fn to_bits(self) -> u64 {
        f64::to_bits(self)
    }
    fn from_bits(bits: u64) -> Self {
        f64::from_bits(bits)
    }
    unsafe fn read(p: *const u8) -> Self {
        std::ptr::read_unaligned(p as *const f64)
    }
    unsafe fn write(p: *mut u8, v: Self) {
        std::ptr::write_unaligned(p as *mut f64, v)
    }
    fn cast_from_int(v: i64) -> Self {
        v as f64
    }
    fn cast_from_uint(v: u64) -> Self {
        v as f64
    }
    fn cast_from_float(v: f32) -> Self {
        f64::from(v)
    }
    fn cast_from_double(v: f64) -> Self {
        v
    }
    fn cast_source(self) -> CastSource {
        CastSource::Double(self)
    }
    /// Only for paths that compute in f32 by definition (`dot`); f64 reductions
    /// and scans stay in f64 (`prepare` routes them to the exact kernels).
    fn f32_view<'a>(s: &'a [Self], buf: &'a mut Vec<f32>) -> &'a [f32] {
        buf.clear();
        buf.extend(s.iter().map(|&x| x as f32));
        buf
    }
    element_common!(f64, F64, f64s);
}

ieee_arith!(f64, f64::exp);

/// f16 and bf16: every op computes in f32 and rounds the result to the type (RNE).
macro_rules! half_element {
    ($T:ty, $variant:ident, $field:ident, $significant:expr) => {
        impl Element for $T {
            const DTYPE: DType = DType::$variant;
            fn to_bits(self) -> u64 {
                u64::from(<$T>::to_bits(self))
            }
            fn from_bits(bits: u64) -> Self {
                <$T>::from_bits(bits as u16)
            }
            unsafe fn read(p: *const u8) -> Self {
                std::ptr::read_unaligned(p as *const $T)
            }
            unsafe fn write(p: *mut u8, v: Self) {
                std::ptr::write_unaligned(p as *mut $T, v)
            }
            fn cast_from_int(v: i64) -> Self {
                <$T>::from_f32(round_int_to_significant_bits(
                    v < 0,
                    v.unsigned_abs(),
                    $significant,
                ))
            }
            fn cast_from_uint(v: u64) -> Self {
                <$T>::from_f32(round_int_to_significant_bits(false, v, $significant))
            }
            fn cast_from_float(v: f32) -> Self {
                <$T>::from_f32(v)
            }
            fn cast_from_double(v: f64) -> Self {
                <$T>::from_f32(f64_to_f32_round_to_odd(v))
            }
            fn cast_source(self) -> CastSource {
                CastSource::Float(self.to_f32())
            }
            fn f32_view<'a>(s: &'a [Self], buf: &'a mut Vec<f32>) -> &'a [f32] {
                buf.clear();
                buf.extend(s.iter().map(|x| x.to_f32()));
                buf
            }
            element_common!($T, $variant, $field);
        }

        narrow_float_arith!($T, |x: $T| x.to_f32(), <$T>::from_f32);
    };
}

/// Arithmetic of a float type narrower than f32: computed in f32 with `$widen`,
/// rounded back with `$narrow`.
macro_rules! narrow_float_arith {
    ($T:ty, $widen:expr, $narrow:expr) => {
        impl Arith for $T {
            fn add(a: Self, b: Self) -> Self {
                $narrow($widen(a) + $widen(b))
            }
            fn sub(a: Self, b: Self) -> Self {
                $narrow($widen(a) - $widen(b))
            }
            fn mul(a: Self, b: Self) -> Self {
                $narrow($widen(a) * $widen(b))
            }
            fn div(a: Self, b: Self) -> Self {
                $narrow($widen(a) / $widen(b))
            }
            fn floordiv(a: Self, b: Self) -> Self {
                $narrow(<f32 as Arith>::floordiv($widen(a), $widen(b)))
            }
            fn rem(a: Self, b: Self) -> Self {
                $narrow($widen(a) % $widen(b))
            }
            fn max(a: Self, b: Self) -> Self {
                $narrow(f32::max($widen(a), $widen(b)))
            }
            fn min(a: Self, b: Self) -> Self {
                $narrow(f32::min($widen(a), $widen(b)))
            }
            fn and(a: Self, _b: Self) -> Self {
                a
            }
            fn or(a: Self, _b: Self) -> Self {
                a
            }
            fn xor(a: Self, _b: Self) -> Self {
                a
            }
            fn shl(a: Self, _b: Self) -> Self {
                a
            }
            fn shr(a: Self, _b: Self) -> Self {
                a
            }
            fn neg(a: Self) -> Self {
                $narrow(-$widen(a))
            }
            fn not(a: Self) -> Self {
                a
            }
            fn abs(a: Self) -> Self {
                $narrow($widen(a).abs())
            }
            fn exp(a: Self) -> Self {
                $narrow(math::exp_f32($widen(a)))
            }
            fn log(a: Self) -> Self {
                $narrow($widen(a).ln())
            }
            fn sqrt(a: Self) -> Self {
                $narrow($widen(a).sqrt())
            }
            fn tanh(a: Self) -> Self {
                $narrow($widen(a).tanh())
            }
            fn lt(a: Self, b: Self) -> bool {
                $widen(a) < $widen(b)
            }
            fn le(a: Self, b: Self) -> bool {
                $widen(a) <= $widen(b)
            }
            fn eq(a: Self, b: Self) -> bool {
                $widen(a) == $widen(b)
            }
        }
    };
}

half_element!(f16, F16, f16s, 11);
half_element!(bf16, BF16, bf16s, 8);

/// The fp8 storage types: conversions round once (to nearest even, saturating,
/// `metile_ir::fp8`); arithmetic never reaches them (the builder computes in f32),
/// but is defined the same way for totality.
macro_rules! fp8_element {
    ($T:ident, $variant:ident, $field:ident, $format:expr) => {
        impl $T {
            fn widen(self) -> f32 {
                $format.decode(self.0)
            }
            fn narrow(v: f32) -> Self {
                $T($format.encode(f64::from(v)))
            }
        }

        impl Element for $T {
            const DTYPE: DType = DType::$variant;
            fn to_bits(self) -> u64 {
                u64::from(self.0)
            }
            fn from_bits(bits: u64) -> Self {
                $T(bits as u8)
            }
            unsafe fn read(p: *const u8) -> Self {
                $T(std::ptr::read(p))
            }
            unsafe fn write(p: *mut u8, v: Self) {
                std::ptr::write(p, v.0)
            }
            // Integers beyond 2^53 round on their way to f64, but they saturate anyway.
            fn cast_from_int(v: i64) -> Self {
                $T($format.encode(v as f64))
            }
            fn cast_from_uint(v: u64) -> Self {
                $T($format.encode(v as f64))
            }
            fn cast_from_float(v: f32) -> Self {
                $T($format.encode(f64::from(v)))
            }
            fn cast_from_double(v: f64) -> Self {
                $T($format.encode(v))
            }
            fn cast_source(self) -> CastSource {
                CastSource::Float(self.widen())
            }
            fn f32_view<'a>(s: &'a [Self], buf: &'a mut Vec<f32>) -> &'a [f32] {
                buf.clear();
                buf.extend(s.iter().map(|x| x.widen()));
                buf
            }
            element_common!($T, $variant, $field);
        }

        narrow_float_arith!($T, $T::widen, $T::narrow);
    };
}

fp8_element!(F8E4M3, F8E4M3, f8e4m3s, Fp8::E4M3);
fp8_element!(F8E5M2, F8E5M2, f8e5m2s, Fp8::E5M2);
