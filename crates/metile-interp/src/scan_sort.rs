//! Scans (`cumsum`, `cumprod`) and `sort` along one axis of a tile, viewed as
//! `[outer, len, inner]` like a reduction.
//!
//! Float scans accumulate in f32 from the first element of each line (the last
//! with `reverse`) and round each output once; integer scans wrap. `sort` runs
//! the bitonic network every GPU backend runs (`sort_line`), so equal elements
//! and NaNs end up in the same places everywhere.

use crate::elem::{Arith, CastSource, Element};
use crate::error::ExecError;
use crate::reduce::ReduceShape;
use crate::value::{put_vec, take_vec, Repr, Scratch};
use metile_ir::ScanOp;

/// The flat indices of line `(o, i)`, in order along the axis.
fn line(shape: ReduceShape, o: usize, i: usize) -> impl DoubleEndedIterator<Item = usize> + Clone {
    let base = o * shape.len * shape.inner + i;
    (0..shape.len).map(move |k| base + k * shape.inner)
}

fn lines(shape: ReduceShape) -> impl Iterator<Item = (usize, usize)> {
    (0..shape.outer).flat_map(move |o| (0..shape.inner).map(move |i| (o, i)))
}

fn widen<T: Element>(x: T) -> f32 {
    match x.cast_source() {
        CastSource::Float(f) => f,
        CastSource::Double(d) => d as f32,
        CastSource::Int(i) => i as f32,
        CastSource::UInt(u) => u as f32,
    }
}

/// A float scan (f32, f16, bf16), accumulated in f32.
pub(crate) fn scan_float<T: Element>(
    op: ScanOp,
    reverse: bool,
    shape: ReduceShape,
    input: &Repr,
    out: &mut Repr,
    scratch: &mut Scratch,
) -> Result<(), ExecError> {
    let n = shape.outer * shape.len * shape.inner;
    let [buf, _, _] = T::scratch(&mut scratch.typed);
    let x = input.dense_slice::<T>(n, buf)?;
    let mut v = take_vec::<T>(out, n);
    for (o, i) in lines(shape) {
        let idx = line(shape, o, i);
        let mut acc: Option<f32> = None;
        let mut step = |k: usize| {
            let e = widen(x[k]);
            let a = match (acc, op) {
                (None, _) => e,
                (Some(a), ScanOp::Sum) => a + e,
                (Some(a), ScanOp::Prod) => a * e,
            };
            acc = Some(a);
            v[k] = T::cast_from_float(a);
        };
        if reverse {
            idx.rev().for_each(&mut step);
        } else {
            idx.for_each(&mut step);
        }
    }
    put_vec(out, v);
    Ok(())
}

/// An integer scan, wrapping like the language's `+` and `*`.
pub(crate) fn scan_exact<T: Arith>(
    op: ScanOp,
    reverse: bool,
    shape: ReduceShape,
    input: &Repr,
    out: &mut Repr,
    scratch: &mut Scratch,
) -> Result<(), ExecError> {
    let n = shape.outer * shape.len * shape.inner;
    let [buf, _, _] = T::scratch(&mut scratch.typed);
    let x = input.dense_slice::<T>(n, buf)?;
    let mut v = take_vec::<T>(out, n);
    for (o, i) in lines(shape) {
        let idx = line(shape, o, i);
        let mut acc: Option<T> = None;
        let mut step = |k: usize| {
            let a = match (acc, op) {
                (None, _) => x[k],
                (Some(a), ScanOp::Sum) => T::add(a, x[k]),
                (Some(a), ScanOp::Prod) => T::mul(a, x[k]),
            };
            acc = Some(a);
            v[k] = a;
        };
        if reverse {
            idx.rev().for_each(&mut step);
        } else {
            idx.for_each(&mut step);
        }
    }
    put_vec(out, v);
    Ok(())
}

/// The order `sort` puts elements in: NaN above every number (so last when
/// ascending, first when descending); `-0.0` and `0.0` are equal.
#[inline]
fn greater<T: Arith>(a: T, b: T) -> bool {
    let nan = |x: T| !T::eq(x, x);
    T::lt(b, a) || (nan(a) && !nan(b))
}

/// Sorts one line of a power-of-two length in place with the bitonic network
/// (the GPU lowering's `sort` runs the same stages): for `k = 2, 4, .., n` and
/// `j = k/2, .., 1`, each `i` with bit `j` clear is compared with `i | j` and
/// the two swapped when out of order, ascending where bit `k` of `i` is clear
/// (the opposite with `descending`).
pub(crate) fn sort_line<T: Arith>(line: &mut [T], descending: bool) {
    let n = line.len();
    let mut k = 2;
    while k <= n {
        let mut j = k / 2;
        while j > 0 {
            for i in (0..n).filter(|i| i & j == 0) {
                let partner = i | j;
                let ascending = (i & k == 0) != descending;
                let (lo, hi) = (line[i], line[partner]);
                let swap = if ascending {
                    greater(lo, hi)
                } else {
                    greater(hi, lo)
                };
                if swap {
                    line.swap(i, partner);
                }
            }
            j /= 2;
        }
        k *= 2;
    }
}

pub(crate) fn sort<T: Arith>(
    descending: bool,
    shape: ReduceShape,
    input: &Repr,
    out: &mut Repr,
    scratch: &mut Scratch,
) -> Result<(), ExecError> {
    let n = shape.outer * shape.len * shape.inner;
    let [buf, line_buf, _] = T::scratch(&mut scratch.typed);
    let x = input.dense_slice::<T>(n, buf)?;
    let mut v = take_vec::<T>(out, n);
    for (o, i) in lines(shape) {
        line_buf.clear();
        line_buf.extend(line(shape, o, i).map(|k| x[k]));
        sort_line(line_buf, descending);
        for (k, &e) in line(shape, o, i).zip(line_buf.iter()) {
            v[k] = e;
        }
    }
    put_vec(out, v);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitonic_network_sorts_every_permutation_of_eight() {
        // Heap's algorithm over 0..8 would be 40320 lines; a fixed stride walk
        // through rotations and reversals covers the interesting orders.
        let mut seed = 12345u64;
        for _ in 0..2000 {
            let mut line: Vec<i32> = (0..8).collect();
            for i in (1..8).rev() {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                line.swap(i, (seed >> 33) as usize % (i + 1));
            }
            let mut up = line.clone();
            sort_line(&mut up, false);
            assert_eq!(up, (0..8).collect::<Vec<_>>());
            sort_line(&mut line, true);
            assert_eq!(line, (0..8).rev().collect::<Vec<_>>());
        }
    }

    #[test]
    fn nan_sorts_above_numbers() {
        let mut line = [f32::NAN, 1.0, f32::NEG_INFINITY, -0.0];
        sort_line(&mut line, false);
        assert_eq!(&line[..3], &[f32::NEG_INFINITY, -0.0, 1.0]);
        assert!(line[3].is_nan());
        sort_line(&mut line, true);
        assert!(line[0].is_nan());
        assert_eq!(&line[1..], &[1.0, -0.0, f32::NEG_INFINITY]);
    }

    #[test]
    fn scans_run_along_the_middle_axis() {
        let shape = ReduceShape {
            outer: 2,
            len: 3,
            inner: 2,
            scalar_result: false,
        };
        let x: Vec<i32> = (1..=12).collect();
        let mut out = Repr::Uninit;
        let mut s = Scratch::default();
        let input = Repr::Dense(i32::into_dense(x));
        scan_exact::<i32>(ScanOp::Sum, false, shape, &input, &mut out, &mut s).unwrap();
        let mut got: Vec<i32> = vec![];
        out.materialize_into(12, &mut got).unwrap();
        assert_eq!(got, vec![1, 2, 4, 6, 9, 12, 7, 8, 16, 18, 27, 30]);
        scan_exact::<i32>(ScanOp::Sum, true, shape, &input, &mut out, &mut s).unwrap();
        out.materialize_into(12, &mut got).unwrap();
        assert_eq!(got, vec![9, 12, 8, 10, 5, 6, 27, 30, 20, 22, 11, 12]);
    }
}
