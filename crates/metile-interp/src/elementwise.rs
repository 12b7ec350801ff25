//! Element-wise kernels: unary, binary, compare, cast and select, each
//! monomorphised per dtype and op so the inner loops are tight and vectorise.
//! `prepare` picks the function pointer once per op; the lazy shortcuts (affine
//! integer arithmetic, range masks) are tried first and fall back to dense loops.

use crate::elem::{convert, int_value, Arith, Element};
use crate::error::ExecError;
use crate::simd::{map1, map2};
use crate::value::{exact_affine, put_vec, take_vec, Operand, Repr, Scratch};
use metile_ir::{BinaryOp, CmpOp, DType, UnaryOp};

pub(crate) type UnaryFn = fn(&Repr, &mut Repr, usize, &mut Scratch) -> Result<(), ExecError>;
pub(crate) type BinaryFn = fn(&Repr, &Repr, &mut Repr, usize, &mut Scratch) -> Result<(), ExecError>;

/// Op codes for the const-generic kernels (const-folded inside each instance).
mod code {
    pub const ADD: u8 = 0;
    pub const SUB: u8 = 1;
    pub const MUL: u8 = 2;
    pub const DIV: u8 = 3;
    pub const FLOORDIV: u8 = 4;
    pub const REM: u8 = 5;
    pub const MAX: u8 = 6;
    pub const MIN: u8 = 7;
    pub const AND: u8 = 8;
    pub const OR: u8 = 9;
    pub const XOR: u8 = 10;
    pub const SHL: u8 = 11;
    pub const SHR: u8 = 12;

    pub const NEG: u8 = 0;
    pub const NOT: u8 = 1;
    pub const EXP: u8 = 2;
    pub const LOG: u8 = 3;
    pub const SQRT: u8 = 4;
    pub const ABS: u8 = 5;
    pub const TANH: u8 = 6;

    pub const LT: u8 = 0;
    pub const LE: u8 = 1;
    pub const GT: u8 = 2;
    pub const GE: u8 = 3;
    pub const EQ: u8 = 4;
    pub const NE: u8 = 5;
}

#[inline(always)]
fn apply_binary<T: Arith, const OP: u8>(a: T, b: T) -> T {
    match OP {
        code::ADD => T::add(a, b),
        code::SUB => T::sub(a, b),
        code::MUL => T::mul(a, b),
        code::DIV => T::div(a, b),
        code::FLOORDIV => T::floordiv(a, b),
        code::REM => T::rem(a, b),
        code::MAX => T::max(a, b),
        code::MIN => T::min(a, b),
        code::AND => T::and(a, b),
        code::OR => T::or(a, b),
        code::XOR => T::xor(a, b),
        code::SHL => T::shl(a, b),
        _ => T::shr(a, b),
    }
}

#[inline(always)]
fn apply_unary<T: Arith, const OP: u8>(a: T) -> T {
    match OP {
        code::NEG => T::neg(a),
        code::NOT => T::not(a),
        code::EXP => T::exp(a),
        code::LOG => T::log(a),
        code::SQRT => T::sqrt(a),
        code::ABS => T::abs(a),
        _ => T::tanh(a),
    }
}

#[inline(always)]
fn apply_compare<T: Arith, const OP: u8>(a: T, b: T) -> bool {
    match OP {
        code::LT => T::lt(a, b),
        code::LE => T::le(a, b),
        code::GT => T::lt(b, a),
        code::GE => T::le(b, a),
        code::EQ => T::eq(a, b),
        _ => !T::eq(a, b),
    }
}

fn is_int(d: DType) -> bool {
    d.is_int()
}

/// Affine integer arithmetic: `Some(result)` when the op keeps the tile affine.
fn lazy_binary(op: u8, a: &Repr, b: &Repr, dtype: DType) -> Option<Repr> {
    let affine = |start: i64, step: i64| Some(Repr::Affine { start, step });
    let int = is_int(dtype);
    match (op, a, b) {
        // Affine tiles only ever hold integers; the guard keeps that explicit.
        (_, Repr::Affine { .. }, _) | (_, _, Repr::Affine { .. }) if !int => None,
        (code::ADD, Repr::Affine { start, step }, Repr::Splat(c))
        | (code::ADD, Repr::Splat(c), Repr::Affine { start, step }) => {
            affine(start.wrapping_add(int_value(*c, dtype)), *step)
        }
        (code::SUB, Repr::Affine { start, step }, Repr::Splat(c)) => {
            affine(start.wrapping_sub(int_value(*c, dtype)), *step)
        }
        (code::SUB, Repr::Splat(c), Repr::Affine { start, step }) => {
            affine(int_value(*c, dtype).wrapping_sub(*start), step.wrapping_neg())
        }
        (code::MUL, Repr::Affine { start, step }, Repr::Splat(c))
        | (code::MUL, Repr::Splat(c), Repr::Affine { start, step }) => {
            let c = int_value(*c, dtype);
            affine(start.wrapping_mul(c), step.wrapping_mul(c))
        }
        (code::ADD, Repr::Affine { start: s1, step: t1 }, Repr::Affine { start: s2, step: t2 }) => {
            affine(s1.wrapping_add(*s2), t1.wrapping_add(*t2))
        }
        (code::SUB, Repr::Affine { start: s1, step: t1 }, Repr::Affine { start: s2, step: t2 }) => {
            affine(s1.wrapping_sub(*s2), t1.wrapping_sub(*t2))
        }
        (code::AND, Repr::Range { lo: l1, hi: h1 }, Repr::Range { lo: l2, hi: h2 }) => {
            Some(range(*l1.max(l2), *h1.min(h2)))
        }
        (code::AND, Repr::Range { lo, hi }, Repr::Splat(c))
        | (code::AND, Repr::Splat(c), Repr::Range { lo, hi }) => {
            Some(if *c != 0 { range(*lo, *hi) } else { range(0, 0) })
        }
        _ => None,
    }
}

/// A range mask, with every empty range normalised to `0..0`.
fn range(lo: usize, hi: usize) -> Repr {
    if lo < hi {
        Repr::Range { lo, hi }
    } else {
        Repr::Range { lo: 0, hi: 0 }
    }
}

fn binary_entry<T: Arith, const OP: u8>(
    a: &Repr,
    b: &Repr,
    out: &mut Repr,
    n: usize,
    scratch: &mut Scratch,
) -> Result<(), ExecError> {
    if let (Repr::Splat(x), Repr::Splat(y)) = (a, b) {
        *out = Repr::Splat(apply_binary::<T, OP>(T::from_bits(*x), T::from_bits(*y)).to_bits());
        return Ok(());
    }
    if let Some(r) = lazy_binary(OP, a, b, T::DTYPE) {
        *out = r;
        return Ok(());
    }
    let [sa, sb, _] = T::scratch(&mut scratch.typed);
    let a = a.operand::<T>(n, sa)?;
    let b = b.operand::<T>(n, sb)?;
    let mut v = take_vec::<T>(out, n);
    match (a, b) {
        (Operand::Slice(x), Operand::Slice(y)) => map2(x, y, &mut v, apply_binary::<T, OP>),
        (Operand::Slice(x), Operand::Splat(y)) => map1(x, &mut v, |x| apply_binary::<T, OP>(x, y)),
        (Operand::Splat(x), Operand::Slice(y)) => map1(y, &mut v, |y| apply_binary::<T, OP>(x, y)),
        (Operand::Splat(x), Operand::Splat(y)) => v.fill(apply_binary::<T, OP>(x, y)),
    }
    put_vec(out, v);
    Ok(())
}

fn unary_entry<T: Arith, const OP: u8>(
    a: &Repr,
    out: &mut Repr,
    n: usize,
    scratch: &mut Scratch,
) -> Result<(), ExecError> {
    match (OP, a) {
        (_, Repr::Splat(x)) => {
            *out = Repr::Splat(apply_unary::<T, OP>(T::from_bits(*x)).to_bits());
            return Ok(());
        }
        (code::NEG, Repr::Affine { start, step }) if is_int(T::DTYPE) => {
            *out = Repr::Affine {
                start: start.wrapping_neg(),
                step: step.wrapping_neg(),
            };
            return Ok(());
        }
        _ => {}
    }
    let [sa, _, _] = T::scratch(&mut scratch.typed);
    let a = a.operand::<T>(n, sa)?;
    let mut v = take_vec::<T>(out, n);
    match a {
        Operand::Slice(x) => map1(x, &mut v, apply_unary::<T, OP>),
        Operand::Splat(x) => v.fill(apply_unary::<T, OP>(x)),
    }
    put_vec(out, v);
    Ok(())
}

/// The indices `lo..hi` where a predicate that changes value at most once along
/// `0..n` holds, found by bisection.
fn monotone_interval(n: usize, pred: impl Fn(usize) -> bool) -> Repr {
    if n == 0 {
        return range(0, 0);
    }
    let first = pred(0);
    if first == pred(n - 1) {
        return if first { range(0, n) } else { range(0, 0) };
    }
    // Invariant: pred(lo) == first, pred(hi) != first.
    let (mut lo, mut hi) = (0, n - 1);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) == first {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    if first {
        range(0, hi)
    } else {
        range(hi, n)
    }
}

/// `affine OP c` as a range mask, when the affine tile has exact values.
fn lazy_compare(op: u8, affine: (i64, i64), c: i64, n: usize, dtype: DType) -> Option<Repr> {
    let (first, step) = exact_affine(affine.0, affine.1, n, dtype)?;
    let value = |i: usize| i128::from(first) + i128::from(step) * i as i128;
    // A u64 constant comes as its bits.
    let c = if dtype == DType::U64 {
        i128::from(c as u64)
    } else {
        i128::from(c)
    };
    match op {
        code::LT => Some(monotone_interval(n, |i| value(i) < c)),
        code::LE => Some(monotone_interval(n, |i| value(i) <= c)),
        code::GT => Some(monotone_interval(n, |i| value(i) > c)),
        code::GE => Some(monotone_interval(n, |i| value(i) >= c)),
        code::EQ | code::NE => {
            // Where the line meets c, if it does at an integer index inside the tile.
            let hit = if step == 0 {
                None
            } else {
                let d = c - i128::from(first);
                let s = i128::from(step);
                (d % s == 0 && (0..n as i128).contains(&(d / s))).then(|| (d / s) as usize)
            };
            let all_equal = step == 0 && i128::from(first) == c;
            match (op, hit) {
                (code::EQ, Some(k)) => Some(range(k, k + 1)),
                (code::EQ, None) => Some(if all_equal { range(0, n) } else { range(0, 0) }),
                (_, None) => Some(if all_equal { range(0, 0) } else { range(0, n) }),
                (_, Some(0)) => Some(range(1, n)),
                (_, Some(k)) if k + 1 == n => Some(range(0, k)),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The same comparison with its operands swapped (`c < x` is `x > c`).
fn mirrored(op: u8) -> u8 {
    match op {
        code::LT => code::GT,
        code::LE => code::GE,
        code::GT => code::LT,
        code::GE => code::LE,
        other => other,
    }
}

fn compare_entry<T: Arith, const OP: u8>(
    a: &Repr,
    b: &Repr,
    out: &mut Repr,
    n: usize,
    scratch: &mut Scratch,
) -> Result<(), ExecError> {
    let lazy = match (a, b) {
        (Repr::Splat(x), Repr::Splat(y)) => Some(Repr::Splat(u64::from(apply_compare::<T, OP>(
            T::from_bits(*x),
            T::from_bits(*y),
        )))),
        (Repr::Affine { start, step }, Repr::Splat(c)) if is_int(T::DTYPE) => {
            lazy_compare(OP, (*start, *step), int_value(*c, T::DTYPE), n, T::DTYPE)
        }
        (Repr::Splat(c), Repr::Affine { start, step }) if is_int(T::DTYPE) => lazy_compare(
            mirrored(OP),
            (*start, *step),
            int_value(*c, T::DTYPE),
            n,
            T::DTYPE,
        ),
        _ => None,
    };
    if let Some(r) = lazy {
        *out = r;
        return Ok(());
    }
    let [sa, sb, _] = T::scratch(&mut scratch.typed);
    let a = a.operand::<T>(n, sa)?;
    let b = b.operand::<T>(n, sb)?;
    let mut v = take_vec::<bool>(out, n);
    match (a, b) {
        (Operand::Slice(x), Operand::Slice(y)) => map2(x, y, &mut v, apply_compare::<T, OP>),
        (Operand::Slice(x), Operand::Splat(y)) => map1(x, &mut v, |x| apply_compare::<T, OP>(x, y)),
        (Operand::Splat(x), Operand::Slice(y)) => map1(y, &mut v, |y| apply_compare::<T, OP>(x, y)),
        (Operand::Splat(x), Operand::Splat(y)) => v.fill(apply_compare::<T, OP>(x, y)),
    }
    put_vec(out, v);
    Ok(())
}

fn cast_entry<S: Element, D: Element>(
    a: &Repr,
    out: &mut Repr,
    n: usize,
    scratch: &mut Scratch,
) -> Result<(), ExecError> {
    match a {
        Repr::Splat(x) => {
            *out = Repr::Splat(convert::<S, D>(S::from_bits(*x)).to_bits());
            return Ok(());
        }
        Repr::Affine { start, step } if is_int(S::DTYPE) && is_int(D::DTYPE) => {
            let narrowing_or_same_width = D::DTYPE.bits() <= S::DTYPE.bits();
            if narrowing_or_same_width {
                // Same bits modulo the narrower width: the affine form carries over.
                *out = Repr::Affine {
                    start: *start,
                    step: *step,
                };
                return Ok(());
            }
            if let Some((first, step)) = exact_affine(*start, *step, n, S::DTYPE) {
                *out = Repr::Affine { start: first, step };
                return Ok(());
            }
        }
        _ => {}
    }
    let [sa, _, _] = S::scratch(&mut scratch.typed);
    let a = a.operand::<S>(n, sa)?;
    let mut v = take_vec::<D>(out, n);
    match a {
        Operand::Slice(x) => map1(x, &mut v, convert::<S, D>),
        Operand::Splat(x) => v.fill(convert::<S, D>(x)),
    }
    put_vec(out, v);
    Ok(())
}

/// Element `i` of an operand.
#[inline(always)]
pub(crate) fn lane<T: Copy>(o: Operand<T>, i: usize) -> T {
    match o {
        Operand::Splat(x) => x,
        Operand::Slice(s) => s[i],
    }
}

/// `select(cond, a, b)` on dense tiles (pointers select their offsets).
pub(crate) fn select<T: Element>(
    cond: &Repr,
    a: &Repr,
    b: &Repr,
    out: &mut Repr,
    n: usize,
    scratch: &mut Scratch,
) -> Result<(), ExecError> {
    match *cond {
        Repr::Splat(c) => {
            out.assign_from(if c != 0 { a } else { b });
            return Ok(());
        }
        // A mask `lo..hi` covering every lane, or none (full and empty blocks of
        // a ragged loop): a copy, not a lane-by-lane select.
        Repr::Range { lo, hi } if lo == 0 && hi >= n => {
            out.assign_from(a);
            return Ok(());
        }
        Repr::Range { lo, hi } if lo >= hi.min(n) => {
            out.assign_from(b);
            return Ok(());
        }
        _ => {}
    }
    let cond = cond.operand::<bool>(n, &mut scratch.mask)?;
    let [sa, sb, _] = T::scratch(&mut scratch.typed);
    let a = a.operand::<T>(n, sa)?;
    let b = b.operand::<T>(n, sb)?;
    let mut v = take_vec::<T>(out, n);
    if let (Operand::Slice(c), Operand::Slice(x), Operand::Slice(y)) = (cond, a, b) {
        for (((o, &c), &x), &y) in v.iter_mut().zip(c).zip(x).zip(y) {
            *o = if c { x } else { y };
        }
    } else {
        for (i, o) in v.iter_mut().enumerate() {
            *o = if lane(cond, i) { lane(a, i) } else { lane(b, i) };
        }
    }
    put_vec(out, v);
    Ok(())
}

macro_rules! pick_code {
    ($f:ident, $T:ty, $code:expr, [$($c:ident),*]) => {
        match $code {
            $(code::$c => $f::<$T, { code::$c }>,)*
            _ => return None,
        }
    };
}

/// The kernel for `op` on `dtype`, or `None` when the combination is meaningless
/// (bitwise ops on floats, arithmetic on bool).
pub(crate) fn binary_fn(op: BinaryOp, dtype: DType) -> Option<BinaryFn> {
    use BinaryOp::*;
    let allowed = match op {
        Add | Sub | Mul | Div | FloorDiv | Rem | Shl | Shr => dtype != DType::Bool,
        And | Or | Xor => !dtype.is_float(),
        Max | Min => true,
        // The interpreter computes the approximate division exactly.
        FastDiv => dtype.is_float(),
        Pow | Atan2 | MulHi => return crate::functions::binary_fn(op, dtype),
    } && !(matches!(op, Shl | Shr) && dtype.is_float());
    if !allowed {
        return None;
    }
    let c = match op {
        Add => code::ADD,
        Sub => code::SUB,
        Mul => code::MUL,
        Div | FastDiv => code::DIV,
        FloorDiv => code::FLOORDIV,
        Rem => code::REM,
        Max => code::MAX,
        Min => code::MIN,
        And => code::AND,
        Or => code::OR,
        Xor => code::XOR,
        Shl => code::SHL,
        Shr => code::SHR,
        Pow | Atan2 | MulHi => return None,
    };
    Some(crate::elem::with_elem!(dtype, T => pick_code!(
        binary_entry, T, c,
        [ADD, SUB, MUL, DIV, FLOORDIV, REM, MAX, MIN, AND, OR, XOR, SHL, SHR]
    )))
}

pub(crate) fn unary_fn(op: UnaryOp, dtype: DType) -> Option<UnaryFn> {
    let allowed = match op {
        UnaryOp::Not => !dtype.is_float(),
        UnaryOp::Neg | UnaryOp::Abs => dtype != DType::Bool,
        UnaryOp::Exp | UnaryOp::FastExp | UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Tanh => dtype.is_float(),
        _ => return crate::functions::unary_fn(op, dtype),
    };
    if !allowed {
        return None;
    }
    let c = match op {
        UnaryOp::Neg => code::NEG,
        UnaryOp::Not => code::NOT,
        // Computed exactly: within the error the GPUs' approximation allows.
        UnaryOp::Exp | UnaryOp::FastExp => code::EXP,
        UnaryOp::Log => code::LOG,
        UnaryOp::Sqrt => code::SQRT,
        UnaryOp::Abs => code::ABS,
        UnaryOp::Tanh => code::TANH,
        _ => return None,
    };
    Some(crate::elem::with_elem!(dtype, T => pick_code!(
        unary_entry, T, c, [NEG, NOT, EXP, LOG, SQRT, ABS, TANH]
    )))
}

pub(crate) fn compare_fn(op: CmpOp, dtype: DType) -> Option<BinaryFn> {
    let c = match op {
        CmpOp::Lt => code::LT,
        CmpOp::Le => code::LE,
        CmpOp::Gt => code::GT,
        CmpOp::Ge => code::GE,
        CmpOp::Eq => code::EQ,
        CmpOp::Ne => code::NE,
    };
    Some(crate::elem::with_elem!(dtype, T => pick_code!(
        compare_entry, T, c, [LT, LE, GT, GE, EQ, NE]
    )))
}

pub(crate) fn cast_fn(from: DType, to: DType) -> UnaryFn {
    crate::elem::with_elem!(from, S => crate::elem::with_elem!(to, D => cast_entry::<S, D> as UnaryFn))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dense_i32(r: &Repr, n: usize) -> Vec<i32> {
        let mut v = vec![];
        r.materialize_into(n, &mut v).unwrap();
        v
    }

    #[test]
    fn monotone_interval_finds_prefixes_and_suffixes() {
        assert_eq!(monotone_interval(8, |i| i < 3), Repr::Range { lo: 0, hi: 3 });
        assert_eq!(monotone_interval(8, |i| i >= 5), Repr::Range { lo: 5, hi: 8 });
        assert_eq!(monotone_interval(8, |_| true), Repr::Range { lo: 0, hi: 8 });
        assert_eq!(monotone_interval(8, |_| false), Repr::Range { lo: 0, hi: 0 });
        assert_eq!(monotone_interval(1, |_| true), Repr::Range { lo: 0, hi: 1 });
    }

    #[test]
    fn lazy_compare_agrees_with_dense_on_small_cases() {
        let n = 7;
        for start in -4i64..4 {
            for step in -3i64..=3 {
                for c in -12i64..12 {
                    for op in [code::LT, code::LE, code::GT, code::GE, code::EQ, code::NE] {
                        let want: Vec<bool> = (0..n)
                            .map(|i| {
                                let v = start + step * i as i64;
                                match op {
                                    code::LT => v < c,
                                    code::LE => v <= c,
                                    code::GT => v > c,
                                    code::GE => v >= c,
                                    code::EQ => v == c,
                                    _ => v != c,
                                }
                            })
                            .collect();
                        if let Some(r) = lazy_compare(op, (start, step), c, n, DType::I32) {
                            let mut got: Vec<bool> = vec![];
                            r.materialize_into(n, &mut got).unwrap();
                            assert_eq!(got, want, "start {start} step {step} c {c} op {op}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn affine_arithmetic_matches_dense() {
        let mut s = Scratch::default();
        let a = Repr::Affine { start: 3, step: 2 };
        let c = Repr::Splat((-7i32).to_bits());
        let f = binary_fn(BinaryOp::Mul, DType::I32).unwrap();
        let mut out = Repr::Uninit;
        f(&a, &c, &mut out, 5, &mut s).unwrap();
        assert!(matches!(out, Repr::Affine { .. }));
        assert_eq!(dense_i32(&out, 5), vec![-21, -35, -49, -63, -77]);
        let g = binary_fn(BinaryOp::Sub, DType::I32).unwrap();
        f(&c, &a, &mut out, 5, &mut s).unwrap();
        let mut out2 = Repr::Uninit;
        g(&c, &out, &mut out2, 5, &mut s).unwrap();
        assert_eq!(dense_i32(&out2, 5), vec![14, 28, 42, 56, 70]);
    }
}
