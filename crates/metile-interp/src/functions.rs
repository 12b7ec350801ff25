//! The math functions beyond `exp log sqrt tanh` (`exp2`, `sin`, `erf`, ...,
//! `pow`, `atan2`, `fma`) and `umulhi`. Float functions compute in f32 (f16
//! and bf16 are widened exactly and the result is rounded once) with Rust's
//! `f32` methods, i.e. the platform's libm (`sinf`, `powf`, ...), except `erf`
//! (`math::erf_f32`; Rust has none) and `rsqrt` (`1 / sqrt(x)` in f64, rounded once).
//! `docs/language.md` lists the measured error of each.

use crate::elem::{CastSource, Element};
use crate::elementwise::{lane, BinaryFn, UnaryFn};
use crate::error::ExecError;
use crate::math::{erf_f32, erf_f64};
use crate::simd::{map1, map2};
use crate::value::{put_vec, take_vec, Operand, Repr, Scratch};
use metile_ir::{BinaryOp, DType, UnaryOp};

/// `(a, b, c) -> out` over `n` elements.
pub(crate) type TernaryFn = fn(&Repr, &Repr, &Repr, &mut Repr, usize, &mut Scratch) -> Result<(), ExecError>;

mod code {
    pub const EXP2: u8 = 0;
    pub const LOG2: u8 = 1;
    pub const LOG1P: u8 = 2;
    pub const EXPM1: u8 = 3;
    pub const SIN: u8 = 4;
    pub const COS: u8 = 5;
    pub const TAN: u8 = 6;
    pub const ASIN: u8 = 7;
    pub const ACOS: u8 = 8;
    pub const ATAN: u8 = 9;
    pub const SINH: u8 = 10;
    pub const COSH: u8 = 11;
    pub const ERF: u8 = 12;
    pub const RSQRT: u8 = 13;
    pub const FLOOR: u8 = 14;
    pub const CEIL: u8 = 15;
    pub const ROUND: u8 = 16;
    pub const RINT: u8 = 17;

    pub const POW: u8 = 0;
    pub const ATAN2: u8 = 1;
}

#[inline(always)]
fn widen<T: Element>(x: T) -> f32 {
    match x.cast_source() {
        CastSource::Float(f) => f,
        CastSource::Double(d) => d as f32,
        CastSource::Int(i) => i as f32,
        CastSource::UInt(u) => u as f32,
    }
}

#[inline(always)]
fn apply_unary<const OP: u8>(x: f32) -> f32 {
    match OP {
        code::EXP2 => x.exp2(),
        code::LOG2 => x.log2(),
        code::LOG1P => x.ln_1p(),
        code::EXPM1 => x.exp_m1(),
        code::SIN => x.sin(),
        code::COS => x.cos(),
        code::TAN => x.tan(),
        code::ASIN => x.asin(),
        code::ACOS => x.acos(),
        code::ATAN => x.atan(),
        code::SINH => x.sinh(),
        code::COSH => x.cosh(),
        code::ERF => erf_f32(x),
        // In f64: one rounding, as Metal's correctly rounded `rsqrt`.
        code::RSQRT => (1.0 / f64::from(x).sqrt()) as f32,
        code::FLOOR => x.floor(),
        code::CEIL => x.ceil(),
        code::ROUND => x.round(),
        _ => x.round_ties_even(),
    }
}

#[inline(always)]
fn apply_binary<const OP: u8>(a: f32, b: f32) -> f32 {
    match OP {
        code::POW => a.powf(b),
        _ => a.atan2(b),
    }
}

/// A float type's math functions: in f32 (rounded once to the type) for f32,
/// f16 and bf16; in f64 for f64.
trait FloatFns: Element {
    fn unary<const OP: u8>(x: Self) -> Self;
    fn binary<const OP: u8>(a: Self, b: Self) -> Self;
    fn fma(a: Self, b: Self, c: Self) -> Self;
}

macro_rules! f32_float_fns {
    ($($T:ty),*) => {
        $(impl FloatFns for $T {
            #[inline(always)]
            fn unary<const OP: u8>(x: Self) -> Self {
                Self::cast_from_float(apply_unary::<OP>(widen(x)))
            }
            #[inline(always)]
            fn binary<const OP: u8>(a: Self, b: Self) -> Self {
                Self::cast_from_float(apply_binary::<OP>(widen(a), widen(b)))
            }
            #[inline(always)]
            fn fma(a: Self, b: Self, c: Self) -> Self {
                Self::cast_from_float(widen(a).mul_add(widen(b), widen(c)))
            }
        })*
    };
}
f32_float_fns!(f32, half::f16, half::bf16);

impl FloatFns for f64 {
    #[inline(always)]
    fn unary<const OP: u8>(x: Self) -> Self {
        match OP {
            code::EXP2 => x.exp2(),
            code::LOG2 => x.log2(),
            code::LOG1P => x.ln_1p(),
            code::EXPM1 => x.exp_m1(),
            code::SIN => x.sin(),
            code::COS => x.cos(),
            code::TAN => x.tan(),
            code::ASIN => x.asin(),
            code::ACOS => x.acos(),
            code::ATAN => x.atan(),
            code::SINH => x.sinh(),
            code::COSH => x.cosh(),
            code::ERF => erf_f64(x),
            code::RSQRT => 1.0 / x.sqrt(),
            code::FLOOR => x.floor(),
            code::CEIL => x.ceil(),
            code::ROUND => x.round(),
            _ => x.round_ties_even(),
        }
    }
    #[inline(always)]
    fn binary<const OP: u8>(a: Self, b: Self) -> Self {
        match OP {
            code::POW => a.powf(b),
            _ => a.atan2(b),
        }
    }
    #[inline(always)]
    fn fma(a: Self, b: Self, c: Self) -> Self {
        a.mul_add(b, c)
    }
}

fn unary_entry<T: FloatFns, const OP: u8>(
    a: &Repr,
    out: &mut Repr,
    n: usize,
    scratch: &mut Scratch,
) -> Result<(), ExecError> {
    let f = T::unary::<OP>;
    if let Repr::Splat(x) = a {
        *out = Repr::Splat(f(T::from_bits(*x)).to_bits());
        return Ok(());
    }
    let [sa, _, _] = T::scratch(&mut scratch.typed);
    let a = a.operand::<T>(n, sa)?;
    let mut v = take_vec::<T>(out, n);
    match a {
        Operand::Slice(x) => map1(x, &mut v, f),
        Operand::Splat(x) => v.fill(f(x)),
    }
    put_vec(out, v);
    Ok(())
}

fn binary_entry<T: FloatFns, const OP: u8>(
    a: &Repr,
    b: &Repr,
    out: &mut Repr,
    n: usize,
    scratch: &mut Scratch,
) -> Result<(), ExecError> {
    let f = T::binary::<OP>;
    if let (Repr::Splat(x), Repr::Splat(y)) = (a, b) {
        *out = Repr::Splat(f(T::from_bits(*x), T::from_bits(*y)).to_bits());
        return Ok(());
    }
    let [sa, sb, _] = T::scratch(&mut scratch.typed);
    let a = a.operand::<T>(n, sa)?;
    let b = b.operand::<T>(n, sb)?;
    let mut v = take_vec::<T>(out, n);
    match (a, b) {
        (Operand::Slice(x), Operand::Slice(y)) => map2(x, y, &mut v, f),
        (x, y) => {
            for (i, o) in v.iter_mut().enumerate() {
                *o = f(lane(x, i), lane(y, i));
            }
        }
    }
    put_vec(out, v);
    Ok(())
}

fn fma_entry<T: FloatFns>(
    a: &Repr,
    b: &Repr,
    c: &Repr,
    out: &mut Repr,
    n: usize,
    scratch: &mut Scratch,
) -> Result<(), ExecError> {
    let f = T::fma;
    if let (Repr::Splat(x), Repr::Splat(y), Repr::Splat(z)) = (a, b, c) {
        *out = Repr::Splat(f(T::from_bits(*x), T::from_bits(*y), T::from_bits(*z)).to_bits());
        return Ok(());
    }
    let [sa, sb, sc] = T::scratch(&mut scratch.typed);
    let (a, b, c) = (
        a.operand::<T>(n, sa)?,
        b.operand::<T>(n, sb)?,
        c.operand::<T>(n, sc)?,
    );
    let mut v = take_vec::<T>(out, n);
    for (i, o) in v.iter_mut().enumerate() {
        *o = f(lane(a, i), lane(b, i), lane(c, i));
    }
    put_vec(out, v);
    Ok(())
}

/// The high half of the double-width unsigned product, in the operands' type.
trait MulHi: Element {
    fn mul_hi(a: Self, b: Self) -> Self;
}

macro_rules! mul_hi {
    ($(($T:ty, $U:ty, $Wide:ty)),*) => {
        $(impl MulHi for $T {
            fn mul_hi(a: Self, b: Self) -> Self {
                let bits = <$U>::BITS;
                ((<$Wide>::from(a as $U) * <$Wide>::from(b as $U)) >> bits) as $U as $T
            }
        })*
    };
}
mul_hi!(
    (i8, u8, u16),
    (u8, u8, u16),
    (i16, u16, u32),
    (u16, u16, u32),
    (i32, u32, u64),
    (u32, u32, u64),
    (i64, u64, u128),
    (u64, u64, u128)
);

fn mul_hi_entry<T: MulHi>(
    a: &Repr,
    b: &Repr,
    out: &mut Repr,
    n: usize,
    scratch: &mut Scratch,
) -> Result<(), ExecError> {
    if let (Repr::Splat(x), Repr::Splat(y)) = (a, b) {
        *out = Repr::Splat(T::mul_hi(T::from_bits(*x), T::from_bits(*y)).to_bits());
        return Ok(());
    }
    let [sa, sb, _] = T::scratch(&mut scratch.typed);
    let a = a.operand::<T>(n, sa)?;
    let b = b.operand::<T>(n, sb)?;
    let mut v = take_vec::<T>(out, n);
    for (i, o) in v.iter_mut().enumerate() {
        *o = T::mul_hi(lane(a, i), lane(b, i));
    }
    put_vec(out, v);
    Ok(())
}

/// Runs `$body` with `$T` bound to the element type of a float `$dtype`.
macro_rules! with_float {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            DType::F32 => {
                type $T = f32;
                Some($body)
            }
            DType::F16 => {
                type $T = half::f16;
                Some($body)
            }
            DType::BF16 => {
                type $T = half::bf16;
                Some($body)
            }
            DType::F64 => {
                type $T = f64;
                Some($body)
            }
            _ => None,
        }
    };
}

macro_rules! pick {
    ($f:ident, $T:ty, $code:expr, [$($c:ident),*]) => {
        match $code {
            $(code::$c => $f::<$T, { code::$c }> as _,)*
            _ => return None,
        }
    };
}

/// The kernel of a float function of one argument, `None` for the ops this
/// module does not own or a non-float dtype (the builder converts integers).
pub(crate) fn unary_fn(op: UnaryOp, dtype: DType) -> Option<UnaryFn> {
    let c = match op {
        // The approximate exponentials are computed exactly here: their
        // results are within the error the GPUs' versions allow.
        UnaryOp::Exp2 | UnaryOp::FastExp2 => code::EXP2,
        UnaryOp::Log2 => code::LOG2,
        UnaryOp::Log1p => code::LOG1P,
        UnaryOp::Expm1 => code::EXPM1,
        UnaryOp::Sin => code::SIN,
        UnaryOp::Cos => code::COS,
        UnaryOp::Tan => code::TAN,
        UnaryOp::Asin => code::ASIN,
        UnaryOp::Acos => code::ACOS,
        UnaryOp::Atan => code::ATAN,
        UnaryOp::Sinh => code::SINH,
        UnaryOp::Cosh => code::COSH,
        UnaryOp::Erf => code::ERF,
        UnaryOp::Rsqrt => code::RSQRT,
        UnaryOp::Floor => code::FLOOR,
        UnaryOp::Ceil => code::CEIL,
        UnaryOp::Round => code::ROUND,
        UnaryOp::Rint => code::RINT,
        _ => return None,
    };
    with_float!(dtype, T => pick!(unary_entry, T, c, [
        EXP2, LOG2, LOG1P, EXPM1, SIN, COS, TAN, ASIN, ACOS, ATAN, SINH, COSH, ERF, RSQRT, FLOOR,
        CEIL, ROUND, RINT
    ]))
}

/// `pow` and `atan2` on floats, `umulhi` on integers; `None` otherwise.
pub(crate) fn binary_fn(op: BinaryOp, dtype: DType) -> Option<BinaryFn> {
    match op {
        BinaryOp::Pow => with_float!(dtype, T => binary_entry::<T, { code::POW }> as BinaryFn),
        BinaryOp::Atan2 => with_float!(dtype, T => binary_entry::<T, { code::ATAN2 }> as BinaryFn),
        BinaryOp::MulHi => match dtype {
            DType::I8 => Some(mul_hi_entry::<i8> as BinaryFn),
            DType::U8 => Some(mul_hi_entry::<u8> as BinaryFn),
            DType::I16 => Some(mul_hi_entry::<i16> as BinaryFn),
            DType::U16 => Some(mul_hi_entry::<u16> as BinaryFn),
            DType::I32 => Some(mul_hi_entry::<i32> as BinaryFn),
            DType::U32 => Some(mul_hi_entry::<u32> as BinaryFn),
            DType::I64 => Some(mul_hi_entry::<i64> as BinaryFn),
            DType::U64 => Some(mul_hi_entry::<u64> as BinaryFn),
            _ => None,
        },
        _ => None,
    }
}

pub(crate) fn fma_fn(dtype: DType) -> Option<TernaryFn> {
    with_float!(dtype, T => fma_entry::<T> as TernaryFn)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run1(op: UnaryOp, xs: &[f32]) -> Vec<f32> {
        let f = unary_fn(op, DType::F32).unwrap();
        let mut out = Repr::Uninit;
        let mut s = Scratch::default();
        f(
            &Repr::Dense(f32::into_dense(xs.to_vec())),
            &mut out,
            xs.len(),
            &mut s,
        )
        .unwrap();
        let mut v = vec![];
        out.materialize_into(xs.len(), &mut v).unwrap();
        v
    }

    #[test]
    fn rounding_functions_follow_c() {
        let xs = [2.5f32, -2.5, 0.5, 1.5, -0.4];
        assert_eq!(run1(UnaryOp::Round, &xs), vec![3.0, -3.0, 1.0, 2.0, -0.0]);
        assert_eq!(run1(UnaryOp::Rint, &xs), vec![2.0, -2.0, 0.0, 2.0, -0.0]);
        assert_eq!(run1(UnaryOp::Floor, &xs), vec![2.0, -3.0, 0.0, 1.0, -1.0]);
        assert_eq!(run1(UnaryOp::Ceil, &xs), vec![3.0, -2.0, 1.0, 2.0, -0.0]);
    }

    #[test]
    fn umulhi_reads_operands_as_unsigned() {
        assert_eq!(i32::mul_hi(-1, 2), 1);
        assert_eq!(u32::mul_hi(0x8000_0000, 4), 2);
        assert_eq!(i64::mul_hi(-1, -1), -2);
        assert_eq!(i32::mul_hi(0x1234_5678, 0x10), 0x1);
        assert_eq!(i8::mul_hi(-1, 2), 1);
        assert_eq!(u16::mul_hi(0xffff, 0xffff), 0xfffe);
        assert_eq!(u64::mul_hi(u64::MAX, 2), 1);
    }

    #[test]
    fn integer_dtypes_have_no_float_kernels() {
        assert!(unary_fn(UnaryOp::Sin, DType::I32).is_none());
        assert!(binary_fn(BinaryOp::Pow, DType::I64).is_none());
        assert!(binary_fn(BinaryOp::MulHi, DType::F32).is_none());
        assert!(fma_fn(DType::Bool).is_none());
    }
}
