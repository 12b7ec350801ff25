//! The MSL lowering checked against the interpreter (see `msl_lowering.rs`)
//! for scans and sorts along either axis of 1-D and 2-D tiles of every dtype,
//! across threadgroup sizes (sorts bit-exact, integer scans bit-exact, float
//! scans within tolerance), and for the float functions, `fma`, `umulhi` and
//! `xor_sum` with edge values.

mod lowering_support;

use lowering_support::*;
use metile_ir::{BinaryOp, Builder, DType, Function, ParamKind, ReduceOp, ScanOp, UnaryOp};

enum Along {
    Scan(ScanOp, bool),
    Sort(bool),
}

/// `Out = op(X)` along `axis` of a `shape` tile read row-major.
fn along_kernel(shape: &[usize], axis: usize, dtype: DType, what: &Along) -> Function {
    let mut b = Builder::new("along");
    let x = b.add_param("X", ParamKind::Pointer(dtype));
    let out = b.add_param("Out", ParamKind::Pointer(dtype));
    let numel: usize = shape.iter().product();
    let flat = b.arange(0, numel as i64).unwrap();
    let px = b.binary(BinaryOp::Add, v(x), v(flat)).unwrap();
    let po = b.binary(BinaryOp::Add, v(out), v(flat)).unwrap();
    let xv = b.load(v(px), None, None).unwrap();
    // Reshape the flat tile into `shape` through pointers: row * cols + col.
    let (xv, po) = if shape.len() == 2 {
        let rows = b.arange(0, shape[0] as i64).unwrap();
        let rows = b.expand_dims(rows, 1).unwrap();
        let cols = b.arange(0, shape[1] as i64).unwrap();
        let cols = b.expand_dims(cols, 0).unwrap();
        let r = b.binary(BinaryOp::Mul, v(rows), int(shape[1] as i64)).unwrap();
        let idx = b.binary(BinaryOp::Add, v(r), v(cols)).unwrap();
        let px = b.binary(BinaryOp::Add, v(x), v(idx)).unwrap();
        let po = b.binary(BinaryOp::Add, v(out), v(idx)).unwrap();
        (b.load(v(px), None, None).unwrap(), po)
    } else {
        (xv, po)
    };
    let r = match *what {
        Along::Scan(op, reverse) => b.scan(op, v(xv), axis as i64, reverse).unwrap(),
        Along::Sort(descending) => b.sort(v(xv), Some(axis as i64), descending).unwrap(),
    };
    b.store(v(po), v(r), None).unwrap();
    b.finish().unwrap()
}

fn along_case(shape: &[usize], axis: usize, dtype: DType, what: Along, seed: u64) -> Case {
    let numel: usize = shape.iter().product();
    let mut rng = Rng::new(seed);
    let mut x = Buf::random(dtype, numel, &mut rng);
    if matches!(what, Along::Scan(ScanOp::Prod, _)) {
        // Products of values near 1 stay finite and keep float tolerance meaningful.
        for i in 0..numel {
            let v = if dtype.is_float() {
                rng.float(0.9, 1.1)
            } else {
                rng.int(-3, 4) as f64
            };
            x.set(i, v);
        }
    }
    if dtype.is_float() && matches!(what, Along::Sort(_)) {
        for (j, val) in [f64::NAN, -0.0, 0.0, f64::INFINITY, f64::NEG_INFINITY, 1.0, 1.0]
            .into_iter()
            .enumerate()
        {
            x.set((j * 7) % numel, val);
        }
    }
    let scale = if dtype.is_float() {
        (numel as f64).sqrt()
    } else {
        1.0
    };
    Case::new(
        along_kernel(shape, axis, dtype, &what),
        vec![x, Buf::filled(dtype, numel, 0.0)],
        vec![Arg::Buf(0), Arg::Buf(1)],
        [1, 1, 1],
    )
    .scale(scale)
}

#[test]
fn scans_match_along_either_axis() {
    let mut seed = 500;
    for dtype in [
        DType::I32,
        DType::U32,
        DType::I64,
        DType::F32,
        DType::F16,
        DType::BF16,
    ] {
        for (shape, axis) in [
            (&[64][..], 0),
            (&[200][..], 0),
            (&[8, 16][..], 0),
            (&[8, 16][..], 1),
            (&[5, 3][..], 1),
        ] {
            for op in [ScanOp::Sum, ScanOp::Prod] {
                for reverse in [false, true] {
                    seed += 1;
                    along_case(shape, axis, dtype, Along::Scan(op, reverse), seed).check();
                }
            }
        }
    }
}

#[test]
fn sorts_match_bit_for_bit_along_either_axis() {
    let mut seed = 900;
    for dtype in [
        DType::I32,
        DType::U32,
        DType::I64,
        DType::F32,
        DType::F16,
        DType::BF16,
    ] {
        for (shape, axis) in [
            (&[64][..], 0),
            (&[256][..], 0),
            (&[8, 16][..], 0),
            (&[8, 16][..], 1),
            (&[3, 4][..], 1),
        ] {
            for descending in [false, true] {
                seed += 1;
                along_case(shape, axis, dtype, Along::Sort(descending), seed).check();
            }
        }
    }
}

#[test]
fn scans_and_sorts_work_for_every_threadgroup_size() {
    for sgs in [1, 2, 8] {
        along_case(&[16, 32], 1, DType::I32, Along::Scan(ScanOp::Sum, false), 7)
            .sgs(sgs)
            .check();
        along_case(&[16, 32], 0, DType::F32, Along::Sort(true), 8)
            .sgs(sgs)
            .check();
        along_case(&[1024], 0, DType::I32, Along::Sort(false), 9)
            .sgs(sgs)
            .check();
    }
}

/// `Out[k * BLOCK + i] = f_k(X[i], Y[i])` for the float functions and `fma`.
fn functions_kernel(dtype: DType, block: usize) -> (Function, usize) {
    let mut b = Builder::new("functions");
    let x = b.add_param("X", ParamKind::Pointer(dtype));
    let y = b.add_param("Y", ParamKind::Pointer(dtype));
    let out = b.add_param("Out", ParamKind::Pointer(dtype));
    let ar = b.arange(0, block as i64).unwrap();
    let px = b.binary(BinaryOp::Add, v(x), v(ar)).unwrap();
    let py = b.binary(BinaryOp::Add, v(y), v(ar)).unwrap();
    let xv = b.load(v(px), None, None).unwrap();
    let yv = b.load(v(py), None, None).unwrap();
    let unary = [
        UnaryOp::Exp2,
        UnaryOp::Log2,
        UnaryOp::Log1p,
        UnaryOp::Expm1,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Tan,
        UnaryOp::Asin,
        UnaryOp::Acos,
        UnaryOp::Atan,
        UnaryOp::Sinh,
        UnaryOp::Cosh,
        UnaryOp::Erf,
        UnaryOp::Rsqrt,
        UnaryOp::Floor,
        UnaryOp::Ceil,
        UnaryOp::Round,
        UnaryOp::Rint,
    ];
    let mut results = vec![];
    for op in unary {
        results.push(b.unary(op, v(xv)).unwrap());
    }
    results.push(b.binary(BinaryOp::Pow, v(xv), v(yv)).unwrap());
    results.push(b.binary(BinaryOp::Atan2, v(xv), v(yv)).unwrap());
    results.push(b.fma(v(xv), v(yv), v(xv)).unwrap());
    for (k, r) in results.iter().enumerate() {
        let off = b.binary(BinaryOp::Add, v(ar), int((k * block) as i64)).unwrap();
        let p = b.binary(BinaryOp::Add, v(out), v(off)).unwrap();
        b.store(v(p), v(*r), None).unwrap();
    }
    let count = results.len();
    (b.finish().unwrap(), count)
}

#[test]
fn float_functions_match_with_edge_values() {
    let block = 64;
    for (i, dtype) in [DType::F32, DType::F16, DType::BF16].into_iter().enumerate() {
        let mut rng = Rng::new(70 + i as u64);
        let mut x = Buf::random(dtype, block, &mut rng);
        let y = Buf::random(dtype, block, &mut rng);
        for (j, val) in [
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            -0.0,
            0.0,
            1.0,
            -1.0,
            2.5,
            -2.5,
            0.5,
            1e-3,
            5.0,
        ]
        .into_iter()
        .enumerate()
        {
            x.set(j, val);
        }
        let (f, count) = functions_kernel(dtype, block);
        Case::new(
            f,
            vec![x, y, Buf::filled(dtype, block * count, 0.0)],
            vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2)],
            [1, 1, 1],
        )
        .scale(4.0)
        .check();
    }
}

/// `Out = umulhi(X, Y)`, `Xor = xor_sum(X)`, `Rows = xor_sum(X2d, axis=1)`.
fn integer_kernel(dtype: DType, block: usize) -> Function {
    let mut b = Builder::new("integers");
    let x = b.add_param("X", ParamKind::Pointer(dtype));
    let y = b.add_param("Y", ParamKind::Pointer(dtype));
    let out = b.add_param("Out", ParamKind::Pointer(dtype));
    let xor = b.add_param("Xor", ParamKind::Pointer(dtype));
    let ar = b.arange(0, block as i64).unwrap();
    let px = b.binary(BinaryOp::Add, v(x), v(ar)).unwrap();
    let py = b.binary(BinaryOp::Add, v(y), v(ar)).unwrap();
    let po = b.binary(BinaryOp::Add, v(out), v(ar)).unwrap();
    let xv = b.load(v(px), None, None).unwrap();
    let yv = b.load(v(py), None, None).unwrap();
    let hi = b.binary(BinaryOp::MulHi, v(xv), v(yv)).unwrap();
    b.store(v(po), v(hi), None).unwrap();
    let total = b.reduce(ReduceOp::Xor, v(xv), None).unwrap();
    b.store(v(xor), v(total), None).unwrap();
    b.finish().unwrap()
}

#[test]
fn umulhi_and_xor_sum_are_exact_on_every_integer_dtype() {
    let block = 128;
    for (i, dtype) in [DType::I32, DType::U32, DType::I64].into_iter().enumerate() {
        let mut rng = Rng::new(80 + i as u64);
        let mut x = Buf::zeros(dtype, block);
        let mut y = Buf::zeros(dtype, block);
        let (lo, hi) = match dtype {
            DType::U32 => (0.0, 4294967295.0),
            DType::I32 => (-2147483648.0, 2147483647.0),
            _ => (-9.0e18, 9.0e18),
        };
        for j in 0..block {
            x.set(j, rng.float(lo, hi).round());
            y.set(j, rng.float(lo, hi).round());
        }
        for sgs in [1, 4] {
            Case::new(
                integer_kernel(dtype, block),
                vec![
                    x.clone(),
                    y.clone(),
                    Buf::zeros(dtype, block),
                    Buf::zeros(dtype, 1),
                ],
                vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2), Arg::Buf(3)],
                [1, 1, 1],
            )
            .sgs(sgs)
            .check();
        }
    }
}
