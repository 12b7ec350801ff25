//! The Rust type behind each dtype and everything the interpreter does to one
//! element: bit-level conversion for scalars, memory access, C-style casts and the
//! arithmetic of the language's semantics.
//!
//! Pointers are stored as their `i64` element offsets (the buffer they point into
//! travels beside the offsets, see `value::Val`), so they reuse the `i64` paths.

use crate::value::TypedScratch;
use metile_ir::DType;

/// Where a cast reads its source from: every integer fits `i64` or `u64`, every
/// float type but f64 converts to `f32` exactly, and f64 is itself; a conversion
/// from any of these rounds once.
#[derive(Clone, Copy)]
pub(crate) enum CastSource {
    Int(i64),
    UInt(u64),
    Float(f32),
    Double(f64),
}

impl CastSource {
    /// The value as an i64 (integers wrap, floats truncate and saturate).
    pub(crate) fn as_i64(self) -> i64 {
        match self {
            CastSource::Int(i) => i,
            CastSource::UInt(u) => u as i64,
            CastSource::Float(f) => f as i64,
            CastSource::Double(d) => d as i64,
        }
    }
}

/// Runs `$m!` with the list of `(Rust type, Dense variant, scratch field)` of every dtype.
macro_rules! for_each_dense {
    ($m:ident) => {
        $m! {
            (bool, Bool, bools),
            (i8, I8, i8s),
            (u8, U8, u8s),
            (i16, I16, i16s),
            (u16, U16, u16s),
            (i32, I32, i32s),
            (u32, U32, u32s),
            (i64, I64, i64s),
            (u64, U64, u64s),
            (crate::elem::F8E4M3, F8E4M3, f8e4m3s),
            (crate::elem::F8E5M2, F8E5M2, f8e5m2s),
            (half::f16, F16, f16s),
            (half::bf16, BF16, bf16s),
            (f32, F32, f32s),
            (f64, F64, f64s)
        }
    };
}
pub(crate) use for_each_dense;

macro_rules! define_dense {
    ($(($T:ty, $variant:ident, $field:ident)),*) => {
        /// Dense storage of a tile, one variant per dtype.
        #[derive(Clone, Debug, PartialEq)]
        pub(crate) enum Dense {
            $($variant(Vec<$T>),)*
        }

        impl Dense {
            pub(crate) fn len(&self) -> usize {
                match self {
                    $(Dense::$variant(v) => v.len(),)*
                }
            }

            pub(crate) fn dtype(&self) -> DType {
                match self {
                    $(Dense::$variant(_) => DType::$variant,)*
                }
            }

            /// Copies `src` into `self`, reusing `self`'s allocation when the dtypes match.
            pub(crate) fn assign_from(&mut self, src: &Dense) {
                match (self, src) {
                    $((Dense::$variant(d), Dense::$variant(s)) => d.clone_from(s),)*
                    (d, s) => *d = s.clone(),
                }
            }
        }
    };
}
for_each_dense!(define_dense);

/// Runs `$body` with `$T` bound to the element type of `$dtype`.
macro_rules! with_elem {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            metile_ir::DType::Bool => {
                type $T = bool;
                $body
            }
            metile_ir::DType::I8 => {
                type $T = i8;
                $body
            }
            metile_ir::DType::U8 => {
                type $T = u8;
                $body
            }
            metile_ir::DType::I16 => {
                type $T = i16;
                $body
            }
            metile_ir::DType::U16 => {
                type $T = u16;
                $body
            }
            metile_ir::DType::I32 => {
                type $T = i32;
                $body
            }
            metile_ir::DType::U32 => {
                type $T = u32;
                $body
            }
            metile_ir::DType::I64 => {
                type $T = i64;
                $body
            }
            metile_ir::DType::U64 => {
                type $T = u64;
                $body
            }
            metile_ir::DType::F8E4M3 => {
                type $T = crate::elem::F8E4M3;
                $body
            }
            metile_ir::DType::F8E5M2 => {
                type $T = crate::elem::F8E5M2;
                $body
            }
            metile_ir::DType::F16 => {
                type $T = half::f16;
                $body
            }
            metile_ir::DType::BF16 => {
                type $T = half::bf16;
                $body
            }
            metile_ir::DType::F32 => {
                type $T = f32;
                $body
            }
            metile_ir::DType::F64 => {
                type $T = f64;
                $body
            }
        }
    };
}
pub(crate) use with_elem;

/// One element of a tile.
pub(crate) trait Element: Copy + Default + Send + Sync + 'static {
    const DTYPE: DType;
    /// The bit pattern a splat scalar of this type is stored as.
    fn to_bits(self) -> u64;
    fn from_bits(bits: u64) -> Self;
    /// Reads one element from memory (no alignment needed; a bool byte other than 0 is true).
    ///
    /// # Safety
    /// `p` must be valid for reading `size_bytes` of this dtype.
    unsafe fn read(p: *const u8) -> Self;
    /// # Safety
    /// `p` must be valid for writing `size_bytes` of this dtype.
    unsafe fn write(p: *mut u8, v: Self);
    /// The C conversion of an integer value (wrapping for ints, rounding to nearest even for floats).
    fn cast_from_int(v: i64) -> Self;
    /// As `cast_from_int`, for a `u64` value.
    fn cast_from_uint(v: u64) -> Self;
    /// The C conversion of a float value (truncating and saturating for ints, NaN to 0).
    fn cast_from_float(v: f32) -> Self;
    /// As `cast_from_float`, from an f64, rounded once.
    fn cast_from_double(v: f64) -> Self;
    fn cast_source(self) -> CastSource;
    fn vec(d: &Dense) -> Option<&Vec<Self>>;
    fn from_dense(d: Dense) -> Option<Vec<Self>>;
    fn into_dense(v: Vec<Self>) -> Dense;
    fn scratch(s: &mut TypedScratch) -> &mut [Vec<Self>; 3];
    /// The elements as `f32`, borrowing when they already are.
    fn f32_view<'a>(s: &'a [Self], buf: &'a mut Vec<f32>) -> &'a [f32];
}

/// The language's per-element semantics. Combinations the builder never produces
/// (bitwise ops on floats, arithmetic on bool or fp8) are refused when the kernel
/// is prepared; their methods here only have to be total.
pub(crate) trait Arith: Element {
    fn add(a: Self, b: Self) -> Self;
    fn sub(a: Self, b: Self) -> Self;
    fn mul(a: Self, b: Self) -> Self;
    fn div(a: Self, b: Self) -> Self;
    fn floordiv(a: Self, b: Self) -> Self;
    fn rem(a: Self, b: Self) -> Self;
    fn max(a: Self, b: Self) -> Self;
    fn min(a: Self, b: Self) -> Self;
    fn and(a: Self, b: Self) -> Self;
    fn or(a: Self, b: Self) -> Self;
    fn xor(a: Self, b: Self) -> Self;
    fn shl(a: Self, b: Self) -> Self;
    fn shr(a: Self, b: Self) -> Self;
    fn neg(a: Self) -> Self;
    fn not(a: Self) -> Self;
    fn abs(a: Self) -> Self;
    fn exp(a: Self) -> Self;
    fn log(a: Self) -> Self;
    fn sqrt(a: Self) -> Self;
    fn tanh(a: Self) -> Self;
    fn lt(a: Self, b: Self) -> bool;
    fn le(a: Self, b: Self) -> bool;
    fn eq(a: Self, b: Self) -> bool;
}

macro_rules! element_common {
    ($T:ty, $variant:ident, $field:ident) => {
        fn vec(d: &Dense) -> Option<&Vec<Self>> {
            match d {
                Dense::$variant(v) => Some(v),
                _ => None,
            }
        }
        fn from_dense(d: Dense) -> Option<Vec<Self>> {
            match d {
                Dense::$variant(v) => Some(v),
                _ => None,
            }
        }
        fn into_dense(v: Vec<Self>) -> Dense {
            Dense::$variant(v)
        }
        fn scratch(s: &mut TypedScratch) -> &mut [Vec<Self>; 3] {
            &mut s.$field
        }
    };
}

/// The absolute value of an integer (wrapping at the signed minimum; unsigned as is).
trait IntAbs {
    fn int_abs(self) -> Self;
}

macro_rules! int_abs {
    (signed: $($T:ty),*; unsigned: $($U:ty),*) => {
        $(impl IntAbs for $T {
            fn int_abs(self) -> Self {
                self.wrapping_abs()
            }
        })*
        $(impl IntAbs for $U {
            fn int_abs(self) -> Self {
                self
            }
        })*
    };
}
int_abs!(signed: i8, i16, i32, i64; unsigned: u8, u16, u32, u64);

macro_rules! int_element {
    ($T:ty, $variant:ident, $field:ident, $bits_ty:ty, $source:ident) => {
        impl Element for $T {
            const DTYPE: DType = DType::$variant;
            fn to_bits(self) -> u64 {
                self as $bits_ty as u64
            }
            fn from_bits(bits: u64) -> Self {
                bits as $bits_ty as $T
            }
            unsafe fn read(p: *const u8) -> Self {
                std::ptr::read_unaligned(p as *const $T)
            }
            unsafe fn write(p: *mut u8, v: Self) {
                std::ptr::write_unaligned(p as *mut $T, v)
            }
            fn cast_from_int(v: i64) -> Self {
                v as $T
            }
            fn cast_from_uint(v: u64) -> Self {
                v as $T
            }
            fn cast_from_float(v: f32) -> Self {
                v as $T
            }
            fn cast_from_double(v: f64) -> Self {
                v as $T
            }
            fn cast_source(self) -> CastSource {
                CastSource::$source(self as _)
            }
            fn f32_view<'a>(s: &'a [Self], buf: &'a mut Vec<f32>) -> &'a [f32] {
                buf.clear();
                buf.extend(s.iter().map(|&x| x as f32));
                buf
            }
            element_common!($T, $variant, $field);
        }

        impl Arith for $T {
            fn add(a: Self, b: Self) -> Self {
                a.wrapping_add(b)
            }
            fn sub(a: Self, b: Self) -> Self {
                a.wrapping_sub(b)
            }
            fn mul(a: Self, b: Self) -> Self {
                a.wrapping_mul(b)
            }
            /// Only reachable from hand-built IR (the builder turns int `/` into f32):
            /// truncating division, like `floordiv`.
            fn div(a: Self, b: Self) -> Self {
                Self::floordiv(a, b)
            }
            fn floordiv(a: Self, b: Self) -> Self {
                // By zero: 0, as the GPU backends' guarded code gives; the lane is
                // poisoned (`poison.rs`), so using it is an error.
                if b == 0 {
                    0
                } else {
                    a.wrapping_div(b)
                }
            }
            fn rem(a: Self, b: Self) -> Self {
                if b == 0 {
                    0
                } else {
                    a.wrapping_rem(b)
                }
            }
            fn max(a: Self, b: Self) -> Self {
                Ord::max(a, b)
            }
            fn min(a: Self, b: Self) -> Self {
                Ord::min(a, b)
            }
            fn and(a: Self, b: Self) -> Self {
                a & b
            }
            fn or(a: Self, b: Self) -> Self {
                a | b
            }
            fn xor(a: Self, b: Self) -> Self {
                a ^ b
            }
            fn shl(a: Self, b: Self) -> Self {
                // wrapping_shl masks the count to the bit width, as the GPU backends'
                // code does; a count outside [0, bits) poisons the lane (`poison.rs`).
                a.wrapping_shl(b as u32)
            }
            fn shr(a: Self, b: Self) -> Self {
                a.wrapping_shr(b as u32)
            }
            fn neg(a: Self) -> Self {
                (0 as $T).wrapping_sub(a)
            }
            fn not(a: Self) -> Self {
                !a
            }
            fn abs(a: Self) -> Self {
                a.int_abs()
            }
            fn exp(a: Self) -> Self {
                a
            }
            fn log(a: Self) -> Self {
                a
            }
            fn sqrt(a: Self) -> Self {
                a
            }
            fn tanh(a: Self) -> Self {
                a
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

int_element!(i8, I8, i8s, u8, Int);
int_element!(u8, U8, u8s, u8, Int);
int_element!(i16, I16, i16s, u16, Int);
int_element!(u16, U16, u16s, u16, Int);
int_element!(i32, I32, i32s, u32, Int);
int_element!(u32, U32, u32s, u32, Int);
int_element!(i64, I64, i64s, u64, Int);
int_element!(u64, U64, u64s, u64, UInt);

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn to_bits(self) -> u64 {
        u64::from(self)
    }
    fn from_bits(bits: u64) -> Self {
        bits != 0
    }
    unsafe fn read(p: *const u8) -> Self {
        // Read the byte, never a `bool`: user memory may hold any byte value.
        std::ptr::read(p) != 0
    }
    unsafe fn write(p: *mut u8, v: Self) {
        std::ptr::write(p, u8::from(v))
    }
    fn cast_from_int(v: i64) -> Self {
        v != 0
    }
    fn cast_from_uint(v: u64) -> Self {
        v != 0
    }
    fn cast_from_float(v: f32) -> Self {
        v != 0.0
    }
    fn cast_from_double(v: f64) -> Self {
        v != 0.0
    }
    fn cast_source(self) -> CastSource {
        CastSource::Int(i64::from(self))
    }
    fn f32_view<'a>(s: &'a [Self], buf: &'a mut Vec<f32>) -> &'a [f32] {
        buf.clear();
        buf.extend(s.iter().map(|&x| f32::from(u8::from(x))));
        buf
    }
    element_common!(bool, Bool, bools);
}

/// Logical semantics; arithmetic on bool is refused at prepare time.
impl Arith for bool {
    fn add(a: Self, b: Self) -> Self {
        a | b
    }
    fn sub(a: Self, b: Self) -> Self {
        a & !b
    }
    fn mul(a: Self, b: Self) -> Self {
        a & b
    }
    fn div(a: Self, _b: Self) -> Self {
        a
    }
    fn floordiv(a: Self, _b: Self) -> Self {
        a
    }
    fn rem(_a: Self, _b: Self) -> Self {
        false
    }
    fn max(a: Self, b: Self) -> Self {
        a | b
    }
    fn min(a: Self, b: Self) -> Self {
        a & b
    }
    fn and(a: Self, b: Self) -> Self {
        a & b
    }
    fn or(a: Self, b: Self) -> Self {
        a | b
    }
    fn xor(a: Self, b: Self) -> Self {
        a ^ b
    }
    fn shl(a: Self, _b: Self) -> Self {
        a
    }
    fn shr(a: Self, _b: Self) -> Self {
        a
    }
    fn neg(a: Self) -> Self {
        a
    }
    fn not(a: Self) -> Self {
        !a
    }
    fn abs(a: Self) -> Self {
        a
    }
    fn exp(a: Self) -> Self {
        a
    }
    fn log(a: Self) -> Self {
        a
    }
    fn sqrt(a: Self) -> Self {
        a
    }
    fn tanh(a: Self) -> Self {
        a
    }
    fn lt(a: Self, b: Self) -> bool {
        !a & b
    }
    fn le(a: Self, b: Self) -> bool {
        !a | b
    }
    fn eq(a: Self, b: Self) -> bool {
        a == b
    }
}

mod float;
pub(crate) use float::{F8E4M3, F8E5M2};

/// Converts one element the way a C cast does (see the crate docs for the rules).
#[inline(always)]
pub(crate) fn convert<S: Element, D: Element>(x: S) -> D {
    match x.cast_source() {
        CastSource::Int(i) => D::cast_from_int(i),
        CastSource::UInt(u) => D::cast_from_uint(u),
        CastSource::Float(f) => D::cast_from_float(f),
        CastSource::Double(d) => D::cast_from_double(d),
    }
}

/// The value of an integer splat as an `i64` (sign- or zero-extended as its dtype says).
/// A u64 above `i64::MAX` comes back wrapped (its bits).
pub(crate) fn int_value(bits: u64, dtype: DType) -> i64 {
    match dtype {
        DType::I8 => i64::from(bits as u8 as i8),
        DType::U8 => i64::from(bits as u8),
        DType::I16 => i64::from(bits as u16 as i16),
        DType::U16 => i64::from(bits as u16),
        DType::I32 => i64::from(bits as u32 as i32),
        DType::U32 => i64::from(bits as u32),
        DType::Bool => i64::from(bits != 0),
        _ => bits as i64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    #[test]
    fn new_dtypes_convert_like_c() {
        // A u64 beyond i64 converts from its unsigned value.
        assert_eq!(convert::<u64, f32>(u64::MAX), 18446744073709551616.0);
        assert_eq!(convert::<u64, i8>(u64::MAX), -1);
        assert_eq!(convert::<i8, u64>(-1), u64::MAX);
        assert_eq!(convert::<f64, u8>(300.7), 255);
        assert_eq!(convert::<f64, i16>(f64::NAN), 0);
        // f64 to f16 rounds once: 1 + 2^-11 + 2^-40 is just above a tie.
        let x = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        assert_eq!(convert::<f64, f16>(x).to_f32(), 1.0 + 2f32.powi(-10));
        assert_eq!(convert::<u64, bf16>(u64::MAX).to_f32(), 18446744073709551616.0);
        assert_eq!(convert::<f32, F8E4M3>(1000.0).0, 0x7e);
        assert_eq!(convert::<F8E5M2, f32>(F8E5M2(0x3c)), 1.0);
        assert_eq!(convert::<F8E4M3, i32>(F8E4M3(0xd0)), -8);
        assert_eq!(convert::<i32, F8E5M2>(-3).0, 0xc2);
    }

    #[test]
    fn int_to_half_floats_round_once() {
        // 2^24 + 2^16 + 1 is just above halfway between two bf16 values; rounding through
        // f32 first would land on the tie and round down to 2^24.
        let v: i64 = (1 << 24) + (1 << 16) + 1;
        assert_eq!(bf16::cast_from_int(v).to_f32(), ((1 << 24) + (1 << 17)) as f32);
        assert_eq!(f16::cast_from_int(65519).to_f32(), 65504.0);
        assert!(f16::cast_from_int(65520).to_f32().is_infinite());
        assert_eq!(f16::cast_from_int(-2049).to_f32(), -2048.0);
        assert_eq!(f16::cast_from_int(2051).to_f32(), 2052.0);
        assert_eq!(bf16::cast_from_int(i64::MIN).to_f32(), -(2f32.powi(63)));
    }

    #[test]
    fn float_to_int_truncates_and_saturates() {
        assert_eq!(i32::cast_from_float(-2.7), -2);
        assert_eq!(i32::cast_from_float(f32::NAN), 0);
        assert_eq!(i32::cast_from_float(1e20), i32::MAX);
        assert_eq!(u32::cast_from_float(-5.0), 0);
        assert_eq!(i64::cast_from_float(f32::NEG_INFINITY), i64::MIN);
        assert!(bool::cast_from_float(f32::NAN));
        assert!(!bool::cast_from_float(-0.0));
    }

    #[test]
    fn integer_division_truncates_and_never_traps() {
        assert_eq!(<i32 as Arith>::floordiv(-7, 2), -3);
        assert_eq!(<i32 as Arith>::rem(-7, 2), -1);
        assert_eq!(<i32 as Arith>::rem(7, -2), 1);
        assert_eq!(<i32 as Arith>::floordiv(5, 0), 0);
        assert_eq!(<i32 as Arith>::rem(5, 0), 0);
        assert_eq!(<i32 as Arith>::floordiv(i32::MIN, -1), i32::MIN);
        assert_eq!(<i32 as Arith>::rem(i32::MIN, -1), 0);
        assert_eq!(<u32 as Arith>::floordiv(7, 0), 0);
        assert_eq!(<i64 as Arith>::floordiv(i64::MIN, -1), i64::MIN);
    }

    #[test]
    fn shifts_mask_their_count() {
        assert_eq!(<i32 as Arith>::shl(1, 33), 2);
        assert_eq!(<i32 as Arith>::shr(-8, 1), -4);
        assert_eq!(<u32 as Arith>::shr(0x8000_0000, 31), 1);
        assert_eq!(<i32 as Arith>::shl(1, -1), i32::MIN);
        assert_eq!(<i64 as Arith>::shl(1, 65), 2);
    }

    #[test]
    fn float_max_min_ignore_nan() {
        assert_eq!(<f32 as Arith>::max(f32::NAN, 1.0), 1.0);
        assert_eq!(<f32 as Arith>::min(2.0, f32::NAN), 2.0);
        assert_eq!(<f32 as Arith>::floordiv(-7.0, 2.0), -3.0);
        assert_eq!(<f32 as Arith>::rem(-7.0, 2.0), -1.0);
    }

    #[test]
    fn bits_round_trip() {
        assert_eq!(i32::from_bits((-5i32).to_bits()), -5);
        assert_eq!(int_value((-5i32).to_bits(), DType::I32), -5);
        assert_eq!(int_value(u32::MAX.to_bits(), DType::U32), i64::from(u32::MAX));
        assert_eq!(f16::from_bits(f16::from_f32(1.5).to_bits()).to_f32(), 1.5);
    }
}
