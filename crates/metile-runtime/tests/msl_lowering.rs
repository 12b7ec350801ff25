//! The MSL lowering checked against the interpreter: kernels built with the
//! Tile IR builder run on `cpu` (the oracle) and on `msl-emu` (compile_msl +
//! the emulator) on random inputs. Element-wise ops, masks, pointer arithmetic,
//! reductions, broadcasts and layout conversions, loops and ifs.

mod lowering_support;

use lowering_support::*;
use metile_ir::{BinaryOp, Builder, CmpOp, DType, Function, ParamKind, ReduceOp, Type, UnaryOp};

fn add_kernel(block: usize, dtype: DType) -> Function {
    let mut b = Builder::new("add");
    let x = b.add_param("X", ParamKind::Pointer(dtype));
    let y = b.add_param("Y", ParamKind::Pointer(dtype));
    let out = b.add_param("Out", ParamKind::Pointer(dtype));
    let n = b.add_param("N", ParamKind::Scalar(DType::I32));
    let pid = b.program_id(0).unwrap();
    let base = b.binary(BinaryOp::Mul, v(pid), int(block as i64)).unwrap();
    let ar = b.arange(0, block as i64).unwrap();
    let offs = b.binary(BinaryOp::Add, v(base), v(ar)).unwrap();
    let mask = b.compare(CmpOp::Lt, v(offs), v(n)).unwrap();
    let px = b.binary(BinaryOp::Add, v(x), v(offs)).unwrap();
    let py = b.binary(BinaryOp::Add, v(y), v(offs)).unwrap();
    let xv = b.load(v(px), Some(v(mask)), None).unwrap();
    let yv = b.load(v(py), Some(v(mask)), None).unwrap();
    let sum = b.binary(BinaryOp::Add, v(xv), v(yv)).unwrap();
    let po = b.binary(BinaryOp::Add, v(out), v(offs)).unwrap();
    b.store(v(po), v(sum), Some(v(mask))).unwrap();
    b.finish().unwrap()
}

fn add_case(block: usize, dtype: DType, n: usize, seed: u64) -> Case {
    let mut rng = Rng::new(seed);
    let grid = n.div_ceil(block) as u32;
    // One element past N must stay untouched.
    let bufs = vec![
        Buf::random(dtype, n, &mut rng),
        Buf::random(dtype, n, &mut rng),
        Buf::filled(dtype, n + 1, 7.0),
    ];
    Case::new(
        add_kernel(block, dtype),
        bufs,
        vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2), i32_arg(n as i32)],
        [grid, 1, 1],
    )
}

#[test]
fn add_matches_the_interpreter_for_blocks_dtypes_and_threadgroup_sizes() {
    add_case(256, DType::F32, 1000, 1).check();
    add_case(1024, DType::F32, 3000, 2).check();
    add_case(100, DType::F32, 250, 3).check();
    add_case(256, DType::F16, 777, 4).check();
    add_case(256, DType::BF16, 777, 5).check();
    add_case(128, DType::I32, 500, 6).check();
    add_case(128, DType::I64, 300, 7).check();
    add_case(256, DType::F32, 1000, 8).sgs(1).check();
    add_case(64, DType::F32, 1000, 9).sgs(8).check();
}

/// The seed's softmax: three passes over a row with loop-carried tiles.
fn softmax_kernel(block: usize) -> Function {
    let mut b = Builder::new("softmax");
    let x = b.add_param("X", ParamKind::Pointer(DType::F32));
    let out = b.add_param("Out", ParamKind::Pointer(DType::F32));
    let n = b.add_param("N", ParamKind::Scalar(DType::I32));
    let row = b.program_id(0).unwrap();
    let row_start = b.binary(BinaryOp::Mul, v(row), v(n)).unwrap();
    let xrow = b.binary(BinaryOp::Add, v(x), v(row_start)).unwrap();
    let orow = b.binary(BinaryOp::Add, v(out), v(row_start)).unwrap();
    let load_block = |b: &mut Builder, i| {
        let ar = b.arange(0, block as i64).unwrap();
        let cols = b.binary(BinaryOp::Add, v(i), v(ar)).unwrap();
        let mask = b.compare(CmpOp::Lt, v(cols), v(n)).unwrap();
        let p = b.binary(BinaryOp::Add, v(xrow), v(cols)).unwrap();
        (b.load(v(p), Some(v(mask)), None).unwrap(), cols, mask)
    };
    let m0 = b.full(&[block], float(-1e38), DType::F32).unwrap();
    let m = for_loop(
        &mut b,
        (int(0), v(n), int(block as i64)),
        &[m0],
        |b, i, carried| {
            let (xv, _, _) = load_block(b, i);
            vec![b.binary(BinaryOp::Max, v(carried[0]), v(xv)).unwrap()]
        },
    )[0];
    let m = b.reduce(ReduceOp::Max, v(m), None).unwrap();
    let s0 = b.full(&[block], float(0.0), DType::F32).unwrap();
    let s = for_loop(
        &mut b,
        (int(0), v(n), int(block as i64)),
        &[s0],
        |b, i, carried| {
            let (xv, _, _) = load_block(b, i);
            let d = b.binary(BinaryOp::Sub, v(xv), v(m)).unwrap();
            let e = b.unary(UnaryOp::Exp, v(d)).unwrap();
            vec![b.binary(BinaryOp::Add, v(carried[0]), v(e)).unwrap()]
        },
    )[0];
    let s = b.reduce(ReduceOp::Sum, v(s), None).unwrap();
    for_loop(&mut b, (int(0), v(n), int(block as i64)), &[], |b, i, _| {
        let (xv, cols, mask) = load_block(b, i);
        let d = b.binary(BinaryOp::Sub, v(xv), v(m)).unwrap();
        let e = b.unary(UnaryOp::Exp, v(d)).unwrap();
        let q = b.binary(BinaryOp::Div, v(e), v(s)).unwrap();
        let p = b.binary(BinaryOp::Add, v(orow), v(cols)).unwrap();
        b.store(v(p), v(q), Some(v(mask))).unwrap();
        vec![]
    });
    b.finish().unwrap()
}

#[test]
fn seed_softmax_matches_the_interpreter() {
    for (block, n, rows, seed) in [
        (256usize, 1000usize, 3usize, 10u64),
        (64, 37, 2, 11),
        (1024, 1024, 2, 12),
    ] {
        let mut rng = Rng::new(seed);
        let bufs = vec![
            Buf::random(DType::F32, n * rows, &mut rng),
            Buf::filled(DType::F32, n * rows, 0.0),
        ];
        Case::new(
            softmax_kernel(block),
            bufs,
            vec![Arg::Buf(0), Arg::Buf(1), i32_arg(n as i32)],
            [rows as u32, 1, 1],
        )
        .scale(4.0)
        .check();
    }
}

/// `out[k * BLOCK + i] = op_k(a[i], b[i])` for every binary op valid on `dtype`,
/// then every comparison (as i32).
/// `guard_undefined`: integer divisions by zero and shifts by counts outside
/// `[0, bits)` store 0 through a `select` (their results are undefined, and the
/// interpreter fails where one is stored).
fn binary_zoo(dtype: DType, block: usize, guard_undefined: bool) -> (Function, usize) {
    let mut ops = vec![
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::FloorDiv,
        BinaryOp::Rem,
        BinaryOp::Max,
        BinaryOp::Min,
    ];
    if dtype.is_float() {
        ops.push(BinaryOp::Div);
    } else {
        ops.extend([
            BinaryOp::And,
            BinaryOp::Or,
            BinaryOp::Xor,
            BinaryOp::Shl,
            BinaryOp::Shr,
        ]);
    }
    let cmps = [CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge, CmpOp::Eq, CmpOp::Ne];
    let mut b = Builder::new("binary_zoo");
    let a = b.add_param("A", ParamKind::Pointer(dtype));
    let bb = b.add_param("B", ParamKind::Pointer(dtype));
    let out = b.add_param("Out", ParamKind::Pointer(dtype));
    let cmp_out = b.add_param("Cmp", ParamKind::Pointer(DType::I32));
    let ar = b.arange(0, block as i64).unwrap();
    let pa = b.binary(BinaryOp::Add, v(a), v(ar)).unwrap();
    let pb = b.binary(BinaryOp::Add, v(bb), v(ar)).unwrap();
    let xa = b.load(v(pa), None, None).unwrap();
    let xb = b.load(v(pb), None, None).unwrap();
    let bits = 8 * dtype.size_bytes() as i64;
    for (k, &op) in ops.iter().enumerate() {
        let mut r = b.binary(op, v(xa), v(xb)).unwrap();
        let defined = match op {
            BinaryOp::FloorDiv | BinaryOp::Rem if dtype.is_int() => {
                Some(b.compare(CmpOp::Ne, v(xb), int(0)).unwrap())
            }
            BinaryOp::Shl | BinaryOp::Shr => {
                let lo = b.compare(CmpOp::Ge, v(xb), int(0)).unwrap();
                let hi = b.compare(CmpOp::Lt, v(xb), int(bits)).unwrap();
                Some(b.binary(BinaryOp::And, v(lo), v(hi)).unwrap())
            }
            _ => None,
        };
        if let Some(ok) = defined.filter(|_| guard_undefined) {
            r = b.select(v(ok), v(r), int(0)).unwrap();
        }
        let off = b.binary(BinaryOp::Add, v(ar), int((k * block) as i64)).unwrap();
        let p = b.binary(BinaryOp::Add, v(out), v(off)).unwrap();
        b.store(v(p), v(r), None).unwrap();
    }
    for (k, &c) in cmps.iter().enumerate() {
        let r = b.compare(c, v(xa), v(xb)).unwrap();
        let r = b.cast(r, DType::I32).unwrap();
        let off = b.binary(BinaryOp::Add, v(ar), int((k * block) as i64)).unwrap();
        let p = b.binary(BinaryOp::Add, v(cmp_out), v(off)).unwrap();
        b.store(v(p), v(r), None).unwrap();
    }
    (b.finish().unwrap(), ops.len())
}

#[test]
fn every_binary_op_and_comparison_matches_on_every_dtype() {
    let block = 128;
    for (i, dtype) in [
        DType::I32,
        DType::U32,
        DType::I64,
        DType::F32,
        DType::F16,
        DType::BF16,
    ]
    .into_iter()
    .enumerate()
    {
        let mut rng = Rng::new(20 + i as u64);
        let (f, nops) = binary_zoo(dtype, block, true);
        let mut a = Buf::random(dtype, block, &mut rng);
        let mut bv = Buf::random(dtype, block, &mut rng);
        // Edge cases: division by zero, MIN // -1, shifts past the width, equal operands.
        if dtype.is_int() {
            bv.set(0, 0.0);
            bv.set(1, 40.0);
            bv.set(2, -1.0);
            a.set(3, 5.0);
            bv.set(3, 5.0);
            if dtype == DType::I32 {
                a.set(2, f64::from(i32::MIN));
            }
        } else {
            bv.set(0, 0.0);
            a.set(1, 0.0);
            bv.set(1, 0.0);
            a.set(3, 1.5);
            bv.set(3, 1.5);
        }
        let bufs = vec![
            a,
            bv,
            Buf::filled(dtype, block * nops, 0.0),
            Buf::filled(DType::I32, block * 6, -9.0),
        ];
        Case::new(
            f,
            bufs,
            vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2), Arg::Buf(3)],
            [1, 1, 1],
        )
        .check();
    }
}

#[test]
fn undefined_integer_ops_give_the_guarded_values_on_the_emulator() {
    // The interpreter fails where these are stored; the emitted MSL (and CUDA) guard
    // them: 0 for division and remainder by zero, counts modulo the width for shifts.
    let block = 32;
    for dtype in [DType::I32, DType::U32, DType::I64] {
        let (f, nops) = binary_zoo(dtype, block, false);
        let bits = 8 * dtype.size_bytes() as i64;
        let mut a = Buf::filled(dtype, block, 0.0);
        let mut bv = Buf::filled(dtype, block, 0.0);
        let counts = [0, bits, bits + 3, 2 * bits - 1, -1, -bits + 1, 5, 1];
        for i in 0..block {
            a.set(i, (i as f64 + 1.0) * 37.0 * if i % 3 == 0 { -1.0 } else { 1.0 });
            let c = counts[i % counts.len()];
            let c = if dtype == DType::U32 {
                c.rem_euclid(1 << 32)
            } else {
                c
            };
            bv.set(i, c as f64);
        }
        let bufs = vec![
            a.clone(),
            bv.clone(),
            Buf::filled(dtype, block * nops, 0.0),
            Buf::filled(DType::I32, block * 6, -9.0),
        ];
        let case = Case::new(
            f,
            bufs,
            vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2), Arg::Buf(3)],
            [1, 1, 1],
        );
        let Some(out) = case.run_emulator() else {
            return;
        };
        // Ops 3..5 are `//` and `%`, the last two `<<` and `>>`.
        let wrap = |x: i128| -> i128 {
            let m = 1i128 << bits;
            let r = x.rem_euclid(m);
            if dtype.is_signed_int() && r >= m / 2 {
                r - m
            } else {
                r
            }
        };
        for i in 0..block {
            let (x, y) = (a.get(i) as i128, bv.get(i) as i128);
            let shift = (y & i128::from(bits as i32 - 1)) as u32;
            let want = [
                (3, if y == 0 { 0 } else { x / y }),
                (4, if y == 0 { 0 } else { x % y }),
                (nops - 2, wrap(x << shift)),
                (nops - 1, x >> shift),
            ];
            for (k, w) in want {
                let got = out[2].get(k * block + i) as i128;
                assert_eq!(got, wrap(w), "{dtype} op {k}: {x} and {y}");
            }
        }
    }
}

/// Every dtype Apple GPUs compute in (all but f64).
fn msl_dtypes() -> impl Iterator<Item = DType> {
    DType::ALL.into_iter().filter(|&d| d != DType::F64)
}

/// `out[k * BLOCK + i] = f_k(x[i])` for unary math and casts to every dtype.
fn unary_zoo(dtype: DType, block: usize) -> Function {
    let mut b = Builder::new("unary_zoo");
    let x = b.add_param("X", ParamKind::Pointer(dtype));
    let targets: Vec<DType> = msl_dtypes().collect();
    let outs: Vec<_> = targets
        .iter()
        .map(|d| b.add_param(&format!("Out_{d}"), ParamKind::Pointer(*d)))
        .collect();
    let math = b.add_param("Math", ParamKind::Pointer(DType::F32));
    let ar = b.arange(0, block as i64).unwrap();
    let px = b.binary(BinaryOp::Add, v(x), v(ar)).unwrap();
    let xv = b.load(v(px), None, None).unwrap();
    for (d, &o) in targets.iter().zip(&outs) {
        let c = b.cast(xv, *d).unwrap();
        let p = b.binary(BinaryOp::Add, v(o), v(ar)).unwrap();
        b.store(v(p), v(c), None).unwrap();
    }
    let mut ops = vec![UnaryOp::Neg, UnaryOp::Abs];
    if dtype.is_float() {
        ops.extend([UnaryOp::Exp, UnaryOp::Log, UnaryOp::Sqrt, UnaryOp::Tanh]);
    } else {
        ops.push(UnaryOp::Not);
    }
    for (k, &op) in ops.iter().enumerate() {
        let r = b.unary(op, v(xv)).unwrap();
        let r = b.cast(r, DType::F32).unwrap();
        let off = b.binary(BinaryOp::Add, v(ar), int((k * block) as i64)).unwrap();
        let p = b.binary(BinaryOp::Add, v(math), v(off)).unwrap();
        b.store(v(p), v(r), None).unwrap();
    }
    b.finish().unwrap()
}

#[test]
fn unary_math_and_casts_match_on_every_dtype() {
    let block = 64;
    for (i, dtype) in msl_dtypes().enumerate() {
        let mut rng = Rng::new(40 + i as u64);
        let mut x = Buf::random(dtype, block, &mut rng);
        if dtype.is_float() {
            // Saturation, NaN, infinities and big magnitudes.
            for (j, val) in [
                3e9,
                -3e9,
                f64::NAN,
                f64::INFINITY,
                f64::NEG_INFINITY,
                100.0,
                -0.0,
                60000.0,
            ]
            .iter()
            .enumerate()
            {
                x.set(j, *val);
            }
        } else if dtype == DType::I64 {
            x.set(0, 3e12);
            x.set(1, -(2f64.powi(40)) - 12345.0);
            x.set(2, 16777217.0);
        } else if dtype == DType::I32 {
            x.set(0, 16777217.0);
            x.set(1, f64::from(i32::MIN));
            x.set(2, 2147483647.0);
        }
        let mut bufs = vec![x];
        let mut args = vec![Arg::Buf(0)];
        for d in msl_dtypes() {
            args.push(Arg::Buf(bufs.len()));
            bufs.push(Buf::filled(d, block, 0.0));
        }
        args.push(Arg::Buf(bufs.len()));
        bufs.push(Buf::filled(DType::F32, block * 6, 0.0));
        Case::new(unary_zoo(dtype, block), bufs, args, [1, 1, 1]).check();
    }
}

/// Reductions over a `[rows, cols]` tile: whole, axis 0, axis 1.
fn reduce_kernel(rows: usize, cols: usize, dtype: DType, op: ReduceOp) -> Function {
    let mut b = Builder::new("reduce2d");
    let x = b.add_param("X", ParamKind::Pointer(dtype));
    let all = b.add_param("All", ParamKind::Pointer(dtype));
    let by_col = b.add_param("ByCol", ParamKind::Pointer(dtype));
    let by_row = b.add_param("ByRow", ParamKind::Pointer(dtype));
    let r = b.arange(0, rows as i64).unwrap();
    let c = b.arange(0, cols as i64).unwrap();
    let r2 = b.expand_dims(r, 1).unwrap();
    let r2 = b.binary(BinaryOp::Mul, v(r2), int(cols as i64)).unwrap();
    let c2 = b.expand_dims(c, 0).unwrap();
    let offs = b.binary(BinaryOp::Add, v(r2), v(c2)).unwrap();
    let p = b.binary(BinaryOp::Add, v(x), v(offs)).unwrap();
    let t = b.load(v(p), None, None).unwrap();
    let whole = b.reduce(op, v(t), None).unwrap();
    b.store(v(all), v(whole), None).unwrap();
    let a0 = b.reduce(op, v(t), Some(0)).unwrap();
    let p0 = b.binary(BinaryOp::Add, v(by_col), v(c)).unwrap();
    b.store(v(p0), v(a0), None).unwrap();
    let a1 = b.reduce(op, v(t), Some(1)).unwrap();
    let p1 = b.binary(BinaryOp::Add, v(by_row), v(r)).unwrap();
    b.store(v(p1), v(a1), None).unwrap();
    b.finish().unwrap()
}

#[test]
fn reductions_match_for_shapes_ops_dtypes_and_threadgroup_sizes() {
    let shapes = [
        (64usize, 64usize),
        (4, 256),
        (256, 4),
        (1, 32),
        (8, 8),
        (3, 5),
        (32, 128),
    ];
    let mut seed = 60;
    for &(rows, cols) in &shapes {
        for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
            for (dtype, sgs) in [(DType::F32, None), (DType::I32, Some(4)), (DType::F16, Some(2))] {
                seed += 1;
                let mut rng = Rng::new(seed);
                let bufs = vec![
                    Buf::random(dtype, rows * cols, &mut rng),
                    Buf::filled(dtype, 1, 0.0),
                    Buf::filled(dtype, cols, 0.0),
                    Buf::filled(dtype, rows, 0.0),
                ];
                let mut case = Case::new(
                    reduce_kernel(rows, cols, dtype, op),
                    bufs,
                    vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2), Arg::Buf(3)],
                    [1, 1, 1],
                )
                .scale(8.0);
                case.num_sgs = sgs;
                case.check();
            }
        }
    }
}

/// Row softmax over a 2-D tile: `x - max(x, axis=1)[:, None]` stays in registers;
/// also `x[:, None] * y[None, :]` (an outer product of two 1-D loads).
fn broadcast_kernel(rows: usize, cols: usize) -> Function {
    let mut b = Builder::new("broadcasts");
    let x = b.add_param("X", ParamKind::Pointer(DType::F32));
    let y = b.add_param("Y", ParamKind::Pointer(DType::F32));
    let out = b.add_param("Out", ParamKind::Pointer(DType::F32));
    let outer = b.add_param("Outer", ParamKind::Pointer(DType::F32));
    let r = b.arange(0, rows as i64).unwrap();
    let c = b.arange(0, cols as i64).unwrap();
    let r2 = b.expand_dims(r, 1).unwrap();
    let r2 = b.binary(BinaryOp::Mul, v(r2), int(cols as i64)).unwrap();
    let c2 = b.expand_dims(c, 0).unwrap();
    let offs = b.binary(BinaryOp::Add, v(r2), v(c2)).unwrap();
    let p = b.binary(BinaryOp::Add, v(x), v(offs)).unwrap();
    let t = b.load(v(p), None, None).unwrap();
    let m = b.reduce(ReduceOp::Max, v(t), Some(1)).unwrap();
    let m2 = b.expand_dims(m, 1).unwrap();
    let d = b.binary(BinaryOp::Sub, v(t), v(m2)).unwrap();
    let e = b.unary(UnaryOp::Exp, v(d)).unwrap();
    let s = b.reduce(ReduceOp::Sum, v(e), Some(1)).unwrap();
    let s2 = b.expand_dims(s, 1).unwrap();
    let q = b.binary(BinaryOp::Div, v(e), v(s2)).unwrap();
    let po = b.binary(BinaryOp::Add, v(out), v(offs)).unwrap();
    b.store(v(po), v(q), None).unwrap();
    // Outer product of a column load and a row load.
    let px = b.binary(BinaryOp::Add, v(x), v(r)).unwrap();
    let xr = b.load(v(px), None, None).unwrap();
    let py = b.binary(BinaryOp::Add, v(y), v(c)).unwrap();
    let yc = b.load(v(py), None, None).unwrap();
    let xr2 = b.expand_dims(xr, 1).unwrap();
    let yc2 = b.expand_dims(yc, 0).unwrap();
    let prod = b.binary(BinaryOp::Mul, v(xr2), v(yc2)).unwrap();
    // A reduction result used against a fresh 1-D tile of another layout.
    let col_sum = b.reduce(ReduceOp::Sum, v(prod), Some(0)).unwrap();
    let both = b.binary(BinaryOp::Add, v(prod), v(col_sum)).unwrap();
    let pouter = b.binary(BinaryOp::Add, v(outer), v(offs)).unwrap();
    b.store(v(pouter), v(both), None).unwrap();
    let tail = b
        .binary(BinaryOp::Add, v(outer), int((rows * cols) as i64))
        .unwrap();
    let tail = b.binary(BinaryOp::Add, v(tail), v(c)).unwrap();
    let yc_plus = b.binary(BinaryOp::Add, v(col_sum), v(yc)).unwrap();
    b.store(v(tail), v(yc_plus), None).unwrap();
    b.finish().unwrap()
}

#[test]
fn broadcasts_expand_dims_and_slice_layouts_match() {
    for (rows, cols, sgs, seed) in [
        (16usize, 64usize, None, 80u64),
        (64, 16, Some(4), 81),
        (8, 256, Some(8), 82),
        (32, 32, Some(1), 83),
    ] {
        let mut rng = Rng::new(seed);
        let bufs = vec![
            Buf::random(DType::F32, rows * cols, &mut rng),
            Buf::random(DType::F32, cols, &mut rng),
            Buf::filled(DType::F32, rows * cols, 0.0),
            Buf::filled(DType::F32, rows * cols + cols, 0.0),
        ];
        let mut case = Case::new(
            broadcast_kernel(rows, cols),
            bufs,
            vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2), Arg::Buf(3)],
            [1, 1, 1],
        )
        .scale(8.0);
        case.num_sgs = sgs;
        case.check();
    }
}

/// A loop carrying a scalar and a tile, an `if` on a scalar with tile results,
/// a masked load with `other`, and a negative-step loop.
fn control_kernel(block: usize) -> Function {
    let mut b = Builder::new("control");
    let x = b.add_param("X", ParamKind::Pointer(DType::F32));
    let out = b.add_param("Out", ParamKind::Pointer(DType::F32));
    let n = b.add_param("N", ParamKind::Scalar(DType::I32));
    let pid = b.program_id(0).unwrap();
    let acc0 = b.full(&[block], float(0.0), DType::F32).unwrap();
    let cnt0 = b.constant(metile_ir::Literal::Int(0), DType::I32);
    let res = for_loop(
        &mut b,
        (int(0), v(n), int(block as i64)),
        &[acc0, cnt0],
        |b, i, carried| {
            let ar = b.arange(0, block as i64).unwrap();
            let cols = b.binary(BinaryOp::Add, v(i), v(ar)).unwrap();
            let mask = b.compare(CmpOp::Lt, v(cols), v(n)).unwrap();
            let p = b.binary(BinaryOp::Add, v(x), v(cols)).unwrap();
            let xv = b.load(v(p), Some(v(mask)), Some(float(-1.0))).unwrap();
            let acc = b.binary(BinaryOp::Add, v(carried[0]), v(xv)).unwrap();
            let cnt = b.binary(BinaryOp::Add, v(carried[1]), int(1)).unwrap();
            vec![acc, cnt]
        },
    );
    let (acc, cnt) = (res[0], res[1]);
    let parity = b.binary(BinaryOp::Rem, v(pid), int(2)).unwrap();
    let odd = b.compare(CmpOp::Eq, v(parity), int(1)).unwrap();
    let tile = Type::tile(DType::F32, &[block]);
    let chosen = if_else(
        &mut b,
        v(odd),
        &[tile],
        |b| vec![b.binary(BinaryOp::Mul, v(acc), v(cnt)).unwrap()],
        |b| vec![b.unary(UnaryOp::Neg, v(acc)).unwrap()],
    )[0];
    // Count down: acc2 = chosen + sum over k of k (negative step).
    let down = for_loop(&mut b, (int(5), int(0), int(-2)), &[chosen], |b, k, carried| {
        vec![b.binary(BinaryOp::Add, v(carried[0]), v(k)).unwrap()]
    })[0];
    let ar = b.arange(0, block as i64).unwrap();
    let base = b.binary(BinaryOp::Mul, v(pid), int(block as i64)).unwrap();
    let offs = b.binary(BinaryOp::Add, v(base), v(ar)).unwrap();
    let p = b.binary(BinaryOp::Add, v(out), v(offs)).unwrap();
    b.store(v(p), v(down), None).unwrap();
    b.finish().unwrap()
}

#[test]
fn loops_ifs_and_masked_loads_with_other_match() {
    for (block, n, seed) in [(128usize, 1000usize, 90u64), (256, 256, 91), (64, 5, 92)] {
        let mut rng = Rng::new(seed);
        let bufs = vec![
            Buf::random(DType::F32, n, &mut rng),
            Buf::filled(DType::F32, block * 3, 0.0),
        ];
        Case::new(
            control_kernel(block),
            bufs,
            vec![Arg::Buf(0), Arg::Buf(1), i32_arg(n as i32)],
            [3, 1, 1],
        )
        .scale(4.0)
        .check();
    }
}
