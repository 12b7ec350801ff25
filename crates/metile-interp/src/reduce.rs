//! Reductions and `dot`.
//!
//! Float reductions work in f32 whatever the input type (f16/bf16 results are
//! rounded once at the end). Sums over a contiguous run use eight interleaved
//! partial sums inside blocks of 256 and pairwise combination above that, which is
//! both more accurate than a running sum and vectorisable. Max/min follow
//! `fmax`/`fmin`: NaN elements are ignored unless every element is NaN.

use crate::elem::{Arith, Element};
use crate::error::ExecError;
use crate::value::{put_vec, take_vec, Repr, Scratch};
use metile_ir::ReduceOp;

/// A reduction of shape `[outer, len, inner]` over the middle axis.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReduceShape {
    pub outer: usize,
    pub len: usize,
    pub inner: usize,
    /// The result is a rank-0 scalar (held as a splat).
    pub scalar_result: bool,
}

const LANES: usize = 8;
const BLOCK: usize = 256;

fn sum_block(x: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += v;
        }
    }
    let mut s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for &v in tail {
        s += v;
    }
    s
}

pub(crate) fn pairwise_sum(x: &[f32]) -> f32 {
    if x.len() <= BLOCK {
        sum_block(x)
    } else {
        let mid = (x.len() / 2).div_ceil(LANES) * LANES;
        pairwise_sum(&x[..mid]) + pairwise_sum(&x[mid..])
    }
}

fn fold_lanes(x: &[f32], init: f32, f: impl Fn(f32, f32) -> f32 + Copy) -> f32 {
    let mut acc = [init; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = f(*a, v);
        }
    }
    let mut r = acc.iter().fold(init, |a, &b| f(a, b));
    for &v in tail {
        r = f(r, v);
    }
    r
}

fn reduce_f32_run(op: ReduceOp, x: &[f32]) -> f32 {
    match op {
        // xor is refused on floats when the kernel is prepared.
        ReduceOp::Sum | ReduceOp::Xor => pairwise_sum(x),
        // NaN is the identity of fmax/fmin: an all-NaN run stays NaN.
        ReduceOp::Max => fold_lanes(x, f32::NAN, f32::max),
        ReduceOp::Min => fold_lanes(x, f32::NAN, f32::min),
    }
}

/// Reduces a float tile (f32, f16 or bf16) in f32.
pub(crate) fn reduce_float<T: Element>(
    op: ReduceOp,
    shape: ReduceShape,
    input: &Repr,
    out: &mut Repr,
    scratch: &mut Scratch,
) -> Result<(), ExecError> {
    let n = shape.outer * shape.len * shape.inner;
    let [in_buf, _, _] = T::scratch(&mut scratch.typed);
    let x = input.dense_slice::<T>(n, in_buf)?;
    let [conv, acc_buf, _] = &mut scratch.floats;
    let x = T::f32_view(x, conv);
    let m = shape.outer * shape.inner;
    let mut acc = std::mem::take(acc_buf);
    acc.clear();
    if shape.inner == 1 {
        acc.extend(
            x.chunks_exact(shape.len.max(1))
                .take(shape.outer)
                .map(|run| reduce_f32_run(op, run)),
        );
        acc.resize(m, reduce_f32_run(op, &[]));
    } else {
        for o in 0..shape.outer {
            let plane = &x[o * shape.len * shape.inner..(o + 1) * shape.len * shape.inner];
            let start = acc.len();
            match plane.chunks_exact(shape.inner).next() {
                Some(first) => acc.extend_from_slice(first),
                None => acc.resize(start + shape.inner, reduce_f32_run(op, &[])),
            }
            let row_acc = &mut acc[start..];
            for row in plane.chunks_exact(shape.inner).skip(1) {
                for (a, &v) in row_acc.iter_mut().zip(row) {
                    *a = match op {
                        ReduceOp::Sum | ReduceOp::Xor => *a + v,
                        ReduceOp::Max => f32::max(*a, v),
                        ReduceOp::Min => f32::min(*a, v),
                    };
                }
            }
        }
    }
    if shape.scalar_result {
        let r = acc.first().copied().unwrap_or(0.0);
        *out = Repr::Splat(T::cast_from_float(r).to_bits());
    } else {
        let mut v = take_vec::<T>(out, m);
        for (o, &a) in v.iter_mut().zip(acc.iter()) {
            *o = T::cast_from_float(a);
        }
        put_vec(out, v);
    }
    scratch.floats[1] = acc;
    Ok(())
}

/// Reduces an integer or bool tile exactly (sums wrap; bool max/min are any/all),
/// or an f64 tile in f64 (a running sum; max/min ignore NaN unless all are NaN).
pub(crate) fn reduce_exact<T: Arith>(
    op: ReduceOp,
    shape: ReduceShape,
    input: &Repr,
    out: &mut Repr,
    scratch: &mut Scratch,
) -> Result<(), ExecError> {
    let n = shape.outer * shape.len * shape.inner;
    let [in_buf, acc_buf, _] = T::scratch(&mut scratch.typed);
    let x = input.dense_slice::<T>(n, in_buf)?;
    let d = T::DTYPE;
    let shift = 64 - d.bits().max(1);
    let identity = match op {
        ReduceOp::Sum | ReduceOp::Xor => T::cast_from_int(0),
        // NaN is the identity of fmax/fmin (f64 reduces here).
        ReduceOp::Max | ReduceOp::Min if d.is_float() => T::cast_from_double(f64::NAN),
        ReduceOp::Max if d.is_signed_int() => T::cast_from_int(i64::MIN >> shift),
        ReduceOp::Min if d.is_signed_int() => T::cast_from_int(i64::MAX >> shift),
        ReduceOp::Max => T::cast_from_int(0),
        // Every bit set: the largest unsigned value, and `true`.
        ReduceOp::Min => T::cast_from_int(-1),
    };
    let combine = |a: T, b: T| match op {
        ReduceOp::Sum => T::add(a, b),
        ReduceOp::Max => T::max(a, b),
        ReduceOp::Min => T::min(a, b),
        ReduceOp::Xor => T::xor(a, b),
    };
    let m = shape.outer * shape.inner;
    acc_buf.clear();
    acc_buf.resize(m, identity);
    for o in 0..shape.outer {
        for l in 0..shape.len {
            let row = &x[(o * shape.len + l) * shape.inner..(o * shape.len + l + 1) * shape.inner];
            for (a, &v) in acc_buf[o * shape.inner..(o + 1) * shape.inner]
                .iter_mut()
                .zip(row)
            {
                *a = combine(*a, v);
            }
        }
    }
    if shape.scalar_result {
        *out = Repr::Splat(acc_buf.first().copied().unwrap_or(identity).to_bits());
    } else {
        let mut v = take_vec::<T>(out, m);
        v.copy_from_slice(&acc_buf[..m]);
        put_vec(out, v);
    }
    Ok(())
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct DotShape {
    pub m: usize,
    pub k: usize,
    pub n: usize,
}

/// `acc + a @ b` with products accumulated in f32; the result has acc's type `D`.
pub(crate) fn dot<T: Element, D: Element>(
    shape: DotShape,
    a: &Repr,
    b: &Repr,
    acc: &Repr,
    out: &mut Repr,
    scratch: &mut Scratch,
) -> Result<(), ExecError> {
    let DotShape { m, k, n } = shape;
    let mut c = std::mem::take(&mut scratch.floats[2]);
    {
        let [tc, _, _] = D::scratch(&mut scratch.typed);
        let accv = acc.dense_slice::<D>(m * n, tc)?;
        c.clear();
        c.extend_from_slice(D::f32_view(accv, &mut scratch.floats[0]));
    }
    let [fa, fb, _] = &mut scratch.floats;
    let [ta, tb, _] = T::scratch(&mut scratch.typed);
    let av = T::f32_view(a.dense_slice::<T>(m * k, ta)?, fa);
    let bv = T::f32_view(b.dense_slice::<T>(k * n, tb)?, fb);
    for (i, c_row) in c.chunks_exact_mut(n.max(1)).enumerate().take(m) {
        for (p, &a_ip) in av[i * k..(i + 1) * k].iter().enumerate() {
            for (cv, &bv) in c_row.iter_mut().zip(&bv[p * n..(p + 1) * n]) {
                *cv += a_ip * bv;
            }
        }
    }
    let mut v = take_vec::<D>(out, m * n);
    for (o, &x) in v.iter_mut().zip(c.iter()) {
        *o = D::cast_from_float(x);
    }
    put_vec(out, v);
    scratch.floats[2] = c;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairwise_sum_is_accurate() {
        let x: Vec<f32> = (0..100_003).map(|i| 0.1 + (i % 7) as f32 * 1e-3).collect();
        let exact: f64 = x.iter().map(|&v| f64::from(v)).sum();
        let got = f64::from(pairwise_sum(&x));
        assert!((got - exact).abs() / exact < 1e-6, "{got} vs {exact}");
    }

    #[test]
    fn float_max_ignores_nan() {
        assert_eq!(
            reduce_f32_run(ReduceOp::Max, &[f32::NAN, 1.0, 3.0, f32::NAN]),
            3.0
        );
        assert!(reduce_f32_run(ReduceOp::Min, &[f32::NAN, f32::NAN]).is_nan());
    }
}
