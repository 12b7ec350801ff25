//! Element-wise ops, comparisons, casts, reductions and dot, for every dtype.

mod common;

use common::*;
use half::{bf16, f16};
use metile_ir::fp8::Fp8;
use metile_ir::{BinaryOp, Builder, CmpOp, DType, Function, Operand, ParamKind, ReduceOp, UnaryOp, ValueId};

const INTS: [DType; 8] = [
    DType::I32,
    DType::U32,
    DType::I64,
    DType::I8,
    DType::U8,
    DType::I16,
    DType::U16,
    DType::U64,
];
const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

fn bits_of(d: DType) -> u32 {
    d.bits()
}

/// `v` wrapped to the integer dtype `d`, as a mathematical value.
fn wrap(v: i128, d: DType) -> i128 {
    let m = 1i128 << bits_of(d);
    let r = v.rem_euclid(m);
    if d.is_signed_int() && r >= m / 2 {
        r - m
    } else {
        r
    }
}

/// Loads `A[0..n]` (and `B[0..n]`), applies `f` and stores to `Out[0..n]`.
fn map_kernel(n: usize, inputs: &[DType], f: impl FnOnce(&mut Builder, &[ValueId]) -> ValueId) -> Function {
    let mut b = Builder::new("map");
    let ptrs: Vec<ValueId> = inputs
        .iter()
        .enumerate()
        .map(|(i, &d)| b.add_param(&format!("In{i}"), ParamKind::Pointer(d)))
        .collect();
    let offs = b.arange(0, n as i64).unwrap();
    let vals: Vec<ValueId> = ptrs
        .iter()
        .map(|&p| {
            let q = b.binary(BinaryOp::Add, p.into(), offs.into()).unwrap();
            b.load(q.into(), None, None).unwrap()
        })
        .collect();
    let r = f(&mut b, &vals);
    let out_dtype = b.ty(r).dtype().unwrap();
    let out = b.add_param("Out", ParamKind::Pointer(out_dtype));
    let q = b.binary(BinaryOp::Add, out.into(), offs.into()).unwrap();
    b.store(q.into(), r.into(), None).unwrap();
    b.finish().unwrap()
}

fn int_values(d: DType) -> Vec<f64> {
    let mut v = vec![
        0.0, 1.0, -1.0, 7.0, -7.0, 2.0, -2.0, 31.0, 33.0, 100.0, 65.0, -65.0,
    ];
    match d {
        DType::I32 => v.extend([f64::from(i32::MIN), f64::from(i32::MAX), -1.0, 123456.0]),
        DType::U32 => {
            for x in &mut v {
                *x = x.abs();
            }
            v.extend([f64::from(u32::MAX), 2147483648.0, 1.0, 99.0]);
        }
        DType::I64 => v.extend([i64::MIN as f64, (i64::MAX - 1023) as f64, -1.0, 1e12]),
        DType::U64 => {
            for x in &mut v {
                *x = x.abs();
            }
            v.extend([(u64::MAX - 2047) as f64, 9223372036854775808.0, 1e12]);
        }
        // 8 and 16 bits: the extremes of the type.
        d => {
            let bits = d.bits() as i32;
            let (lo, hi) = if d.is_signed_int() {
                (-(2f64.powi(bits - 1)), 2f64.powi(bits - 1) - 1.0)
            } else {
                (0.0, 2f64.powi(bits) - 1.0)
            };
            for x in &mut v {
                *x = x.clamp(lo, hi);
            }
            v.extend([lo, hi, lo + 1.0, hi - 1.0]);
        }
    }
    v
}

#[test]
fn integer_binary_ops_follow_c_semantics_with_wrapping() {
    let ops = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::FloorDiv,
        BinaryOp::Rem,
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::And,
        BinaryOp::Or,
        BinaryOp::Xor,
        BinaryOp::Shl,
        BinaryOp::Shr,
    ];
    for d in INTS {
        let values = int_values(d);
        // Every pair of values: a = values[i], b = values[j].
        let n = values.len() * values.len();
        let a: Vec<f64> = (0..n).map(|k| values[k / values.len()]).collect();
        let bv: Vec<f64> = (0..n).map(|k| values[k % values.len()]).collect();
        let (da, db) = (Data::from_f64(d, &a), Data::from_f64(d, &bv));
        let (ia, ib) = (da.i128s(), db.i128s());
        for op in ops {
            // Where a division has a zero divisor or a shift an out-of-range count,
            // the result is undefined and observing it fails: those lanes store 0
            // through a `select` instead (see `poison.rs`; `poison.rs` tests fail them).
            let defined = |y: i128| match op {
                BinaryOp::FloorDiv | BinaryOp::Rem => y != 0,
                BinaryOp::Shl | BinaryOp::Shr => (0..i128::from(bits_of(d))).contains(&y),
                _ => true,
            };
            let f = map_kernel(n, &[d, d], |b, v| {
                let r = b.binary(op, v[0].into(), v[1].into()).unwrap();
                let ok = match op {
                    BinaryOp::FloorDiv | BinaryOp::Rem => {
                        b.compare(CmpOp::Ne, v[1].into(), Operand::Int(0)).unwrap()
                    }
                    BinaryOp::Shl | BinaryOp::Shr => {
                        let lo = b.compare(CmpOp::Ge, v[1].into(), Operand::Int(0)).unwrap();
                        let hi = b
                            .compare(CmpOp::Lt, v[1].into(), Operand::Int(i64::from(bits_of(d))))
                            .unwrap();
                        b.binary(BinaryOp::And, lo.into(), hi.into()).unwrap()
                    }
                    _ => return r,
                };
                b.select(ok.into(), r.into(), Operand::Int(0)).unwrap()
            });
            let out = run1(f, &[da.clone(), db.clone(), Data::zeros(d, n)]);
            let got = out[2].i128s();
            for k in 0..n {
                let (x, y) = (ia[k], ib[k]);
                let shift = (y & i128::from(bits_of(d) - 1)) as u32;
                let want = match op {
                    _ if !defined(y) => 0,
                    BinaryOp::Add => x + y,
                    BinaryOp::Sub => x - y,
                    BinaryOp::Mul => x.wrapping_mul(y),
                    BinaryOp::FloorDiv => x / y,
                    BinaryOp::Rem => x % y,
                    BinaryOp::Max => x.max(y),
                    BinaryOp::Min => x.min(y),
                    BinaryOp::And => x & y,
                    BinaryOp::Or => x | y,
                    BinaryOp::Xor => x ^ y,
                    BinaryOp::Shl => x << shift,
                    _ => x >> shift,
                };
                assert_eq!(got[k], wrap(want, d), "{d} {op:?}: {x} and {y}");
            }
        }
    }
}

#[test]
fn integer_division_edge_cases() {
    let a = i32s(&[7, -7, 7, -7, 5, i32::MIN, i32::MIN, 0]);
    let b = i32s(&[2, 2, -2, -2, 3, -1, 1, -5]);
    let f = map_kernel(8, &[DType::I32, DType::I32], |b, v| {
        b.binary(BinaryOp::FloorDiv, v[0].into(), v[1].into()).unwrap()
    });
    let out = run1(f, &[a.clone(), b.clone(), Data::zeros(DType::I32, 8)]);
    assert_eq!(out[2].i32s(), vec![3, -3, -3, 3, 1, i32::MIN, i32::MIN, 0]);
    let f = map_kernel(8, &[DType::I32, DType::I32], |b, v| {
        b.binary(BinaryOp::Rem, v[0].into(), v[1].into()).unwrap()
    });
    let out = run1(f, &[a.clone(), b.clone(), Data::zeros(DType::I32, 8)]);
    assert_eq!(out[2].i32s(), vec![1, -1, 1, -1, 2, 0, 0, 0]);
    // Division by zero is an error (see tests/poison.rs): true division is not.
    let b = i32s(&[2, 2, -2, -2, 0, -1, 1, 0]);
    // `/` on ints is true division in f32.
    let f = map_kernel(8, &[DType::I32, DType::I32], |b, v| {
        b.binary(BinaryOp::Div, v[0].into(), v[1].into()).unwrap()
    });
    let out = run1(f, &[a, b, Data::zeros(DType::F32, 8)]);
    let q = out[2].f32s();
    assert_eq!(q[0], 3.5);
    assert_eq!(q[1], -3.5);
    assert_eq!(q[4], f32::INFINITY);
    assert!(q[7].is_nan());
}

fn float_values() -> Vec<f64> {
    vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        2.5,
        -2.5,
        7.0,
        -7.25,
        3.0,
        0.1,
        1e-3,
        100.0,
        -65.5,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ]
}

fn round_to(d: DType, x: f32) -> f32 {
    match d {
        DType::F16 => f16::from_f32(x).to_f32(),
        DType::BF16 => bf16::from_f32(x).to_f32(),
        _ => x,
    }
}

fn same_float(a: f32, b: f32) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}

#[test]
fn float_binary_ops_compute_in_f32_and_round_per_op() {
    let ops = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::FloorDiv,
        BinaryOp::Rem,
        BinaryOp::Max,
        BinaryOp::Min,
    ];
    let values = float_values();
    let n = values.len() * values.len();
    let a: Vec<f64> = (0..n).map(|k| values[k / values.len()]).collect();
    let bv: Vec<f64> = (0..n).map(|k| values[k % values.len()]).collect();
    for d in FLOATS {
        let (da, db) = (Data::from_f64(d, &a), Data::from_f64(d, &bv));
        let (fa, fb) = (da.f32s(), db.f32s());
        for op in ops {
            let f = map_kernel(n, &[d, d], |b, v| b.binary(op, v[0].into(), v[1].into()).unwrap());
            let out = run1(f, &[da.clone(), db.clone(), Data::zeros(d, n)]);
            let got = out[2].f32s();
            for k in 0..n {
                let (x, y) = (fa[k], fb[k]);
                let want = round_to(
                    d,
                    match op {
                        BinaryOp::Add => x + y,
                        BinaryOp::Sub => x - y,
                        BinaryOp::Mul => x * y,
                        BinaryOp::Div => x / y,
                        BinaryOp::FloorDiv => (x / y).trunc(),
                        BinaryOp::Rem => x % y,
                        BinaryOp::Max => x.max(y),
                        _ => x.min(y),
                    },
                );
                assert!(
                    same_float(got[k], want),
                    "{d} {op:?}({x}, {y}) = {} want {want}",
                    got[k]
                );
            }
        }
    }
}

#[test]
fn float_max_min_ignore_nan_operands() {
    let f = map_kernel(3, &[DType::F32, DType::F32], |b, v| {
        b.binary(BinaryOp::Max, v[0].into(), v[1].into()).unwrap()
    });
    let out = run1(
        f,
        &[
            f32s(&[f32::NAN, 1.0, f32::NAN]),
            f32s(&[2.0, f32::NAN, f32::NAN]),
            Data::zeros(DType::F32, 3),
        ],
    );
    let got = out[2].f32s();
    assert_eq!(&got[..2], &[2.0, 1.0]);
    assert!(got[2].is_nan());
}

#[test]
fn unary_ops_for_every_dtype() {
    let values = float_values();
    for d in FLOATS {
        let input = Data::from_f64(d, &values);
        let xs = input.f32s();
        for op in [
            UnaryOp::Neg,
            UnaryOp::Exp,
            UnaryOp::Log,
            UnaryOp::Sqrt,
            UnaryOp::Abs,
            UnaryOp::Tanh,
        ] {
            let f = map_kernel(values.len(), &[d], |b, v| b.unary(op, v[0].into()).unwrap());
            let out = run1(f, &[input.clone(), Data::zeros(d, values.len())]);
            let got = out[1].f32s();
            for (k, &x) in xs.iter().enumerate() {
                let exact = match op {
                    UnaryOp::Neg => -f64::from(x),
                    UnaryOp::Exp => f64::from(x).exp(),
                    UnaryOp::Log => f64::from(x).ln(),
                    UnaryOp::Sqrt => f64::from(x).sqrt(),
                    UnaryOp::Abs => f64::from(x).abs(),
                    _ => f64::from(x).tanh(),
                };
                let want = round_to(d, exact as f32);
                let close = same_float(got[k], want)
                    || (got[k] - want).abs() <= 2.0 * f32::EPSILON * want.abs().max(f32::MIN_POSITIVE)
                    || (d != DType::F32 && (got[k] - want).abs() <= 1e-2 * want.abs());
                assert!(close, "{d} {op:?}({x}) = {} want {want}", got[k]);
            }
        }
    }
    for d in INTS {
        let input = Data::from_f64(d, &int_values(d));
        let xs = input.i128s();
        for op in [UnaryOp::Neg, UnaryOp::Not, UnaryOp::Abs] {
            let f = map_kernel(xs.len(), &[d], |b, v| b.unary(op, v[0].into()).unwrap());
            let got = run1(f, &[input.clone(), Data::zeros(d, xs.len())])[1].i128s();
            for (k, &x) in xs.iter().enumerate() {
                let want = match op {
                    UnaryOp::Neg => -x,
                    UnaryOp::Not => !x,
                    _ if d.is_unsigned_int() => x,
                    _ => x.abs(),
                };
                assert_eq!(got[k], wrap(want, d), "{d} {op:?}({x})");
            }
        }
    }
    // Logical not on bool; exp of an int tile goes through f32.
    let f = map_kernel(2, &[DType::Bool], |b, v| {
        b.unary(UnaryOp::Not, v[0].into()).unwrap()
    });
    let out = run1(f, &[Data::Bool(vec![true, false]), Data::zeros(DType::Bool, 2)]);
    assert_eq!(out[1].bools(), vec![false, true]);
    let f = map_kernel(2, &[DType::I32], |b, v| {
        b.unary(UnaryOp::Exp, v[0].into()).unwrap()
    });
    let out = run1(f, &[i32s(&[0, 1]), Data::zeros(DType::F32, 2)]);
    assert_eq!(out[1].f32s(), vec![1.0, std::f32::consts::E]);
}

#[test]
fn bool_logic_ops() {
    let a = Data::Bool(vec![false, false, true, true]);
    let bb = Data::Bool(vec![false, true, false, true]);
    for (op, want) in [
        (BinaryOp::And, [false, false, false, true]),
        (BinaryOp::Or, [false, true, true, true]),
        (BinaryOp::Xor, [false, true, true, false]),
        (BinaryOp::Max, [false, true, true, true]),
        (BinaryOp::Min, [false, false, false, true]),
    ] {
        let f = map_kernel(4, &[DType::Bool, DType::Bool], |b, v| {
            b.binary(op, v[0].into(), v[1].into()).unwrap()
        });
        let out = run1(f, &[a.clone(), bb.clone(), Data::zeros(DType::Bool, 4)]);
        assert_eq!(out[2].bools(), want.to_vec(), "{op:?}");
    }
}

#[test]
fn comparisons_for_every_dtype() {
    let ops = [CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge, CmpOp::Eq, CmpOp::Ne];
    for d in DType::ALL {
        let values = if d.is_float() {
            float_values()
        } else if d == DType::Bool {
            vec![0.0, 1.0]
        } else {
            int_values(d)
        };
        let n = values.len() * values.len();
        let a: Vec<f64> = (0..n).map(|k| values[k / values.len()]).collect();
        let bv: Vec<f64> = (0..n).map(|k| values[k % values.len()]).collect();
        let (da, db) = (Data::from_f64(d, &a), Data::from_f64(d, &bv));
        let as_f64 = |x: &Data| -> Vec<f64> { x.values() };
        let (fa, fb) = (as_f64(&da), as_f64(&db));
        for op in ops {
            let f = map_kernel(n, &[d, d], |b, v| {
                b.compare(op, v[0].into(), v[1].into()).unwrap()
            });
            let got = run1(f, &[da.clone(), db.clone(), Data::zeros(DType::Bool, n)])[2].bools();
            for k in 0..n {
                let (x, y) = (fa[k], fb[k]);
                let want = match op {
                    CmpOp::Lt => x < y,
                    CmpOp::Le => x <= y,
                    CmpOp::Gt => x > y,
                    CmpOp::Ge => x >= y,
                    CmpOp::Eq => x == y,
                    CmpOp::Ne => x != y,
                };
                assert_eq!(got[k], want, "{d} {op:?}({x}, {y})");
            }
        }
    }
}

/// The C conversion of the exact value `v` (held by a `from` element) to `to`.
fn reference_cast(v: f64, from: DType, to: DType) -> f64 {
    match to {
        DType::Bool => f64::from(u8::from(v != 0.0)),
        DType::F64 => v,
        DType::F32 => v as f32 as f64,
        DType::F16 => f16::from_f64(v).to_f64(),
        DType::BF16 => bf16::from_f64(v).to_f64(),
        DType::F8E4M3 => f64::from(Fp8::E4M3.decode(Fp8::E4M3.encode(v))),
        DType::F8E5M2 => f64::from(Fp8::E5M2.decode(Fp8::E5M2.encode(v))),
        int => {
            if from.is_float() {
                let bits = bits_of(int) as i32;
                let (lo, hi) = if int.is_signed_int() {
                    (-(2f64.powi(bits - 1)), 2f64.powi(bits - 1) - 1.0)
                } else {
                    (0.0, 2f64.powi(bits) - 1.0)
                };
                if v.is_nan() {
                    0.0
                } else {
                    v.trunc().clamp(lo, hi)
                }
            } else {
                wrap(v as i128, int) as f64
            }
        }
    }
}

#[test]
fn casts_between_every_pair_of_dtypes() {
    let values = [
        0.0,
        1.0,
        -1.0,
        2.5,
        -2.7,
        100.75,
        255.0,
        65504.0,
        70000.0,
        3e9,
        -3e9,
        16777217.0,
        1e20,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ];
    for from in DType::ALL {
        // Only values the source dtype holds; integer sources get integer values.
        let src: Vec<f64> = values
            .iter()
            .copied()
            .filter(|v| from.is_float() || (v.is_finite() && v.fract() == 0.0 && v.abs() < 1e10))
            .filter(|v| !from.is_unsigned_int() || *v >= 0.0)
            .filter(|v| !from.is_int() || v.abs() < 2f64.powi(from.bits() as i32 - 1))
            .collect();
        let input = Data::from_f64(from, &src);
        let exact: Vec<f64> = input.values();
        for to in DType::ALL {
            if to == from {
                continue;
            }
            let f = map_kernel(src.len(), &[from], |b, v| b.cast(v[0], to).unwrap());
            let out = run1(f, &[input.clone(), Data::zeros(to, src.len())]);
            let got: Vec<f64> = out[1].values();
            for (k, &v) in exact.iter().enumerate() {
                let want = reference_cast(v, from, to);
                assert!(
                    (got[k].is_nan() && want.is_nan()) || got[k] == want,
                    "cast {from} -> {to} of {v}: got {}, want {want}",
                    got[k]
                );
            }
        }
    }
}

/// Loads an `[r, c]` tile row-major from `X`, reduces it and stores the result.
fn reduce_kernel(d: DType, r: usize, c: usize, op: ReduceOp, axis: Option<i64>) -> Function {
    let mut b = Builder::new("reduce");
    let x = b.add_param("X", ParamKind::Pointer(d));
    let tile = b
        .tile_load(
            x.into(),
            Operand::Int(0),
            Operand::Int(0),
            Operand::Int(c as i64),
            (r as i64, c as i64),
        )
        .unwrap();
    let red = b.reduce(op, tile.into(), axis).unwrap();
    let out_dtype = b.ty(red).dtype().unwrap();
    let out = b.add_param("Out", ParamKind::Pointer(out_dtype));
    let n = b.ty(red).numel();
    if b.ty(red).is_scalar() {
        b.store(out.into(), red.into(), None).unwrap();
    } else {
        let offs = b.arange(0, n as i64).unwrap();
        let p = b.binary(BinaryOp::Add, out.into(), offs.into()).unwrap();
        b.store(p.into(), red.into(), None).unwrap();
    }
    b.finish().unwrap()
}

#[test]
fn reductions_over_all_elements_and_each_axis() {
    let (r, c) = (4usize, 8usize);
    let vals: Vec<f64> = (0..r * c).map(|i| ((i * 37) % 23) as f64 - 11.0).collect();
    for d in [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I64,
        DType::U32,
    ] {
        let vals: Vec<f64> = if d == DType::U32 {
            vals.iter().map(|v| v.abs()).collect()
        } else {
            vals.clone()
        };
        let input = Data::from_f64(d, &vals);
        for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
            for axis in [None, Some(0), Some(1), Some(-1)] {
                let groups: Vec<Vec<f64>> = match axis {
                    None => vec![vals.clone()],
                    Some(0) => (0..c)
                        .map(|j| (0..r).map(|i| vals[i * c + j]).collect())
                        .collect(),
                    _ => (0..r).map(|i| vals[i * c..(i + 1) * c].to_vec()).collect(),
                };
                let want: Vec<f64> = groups
                    .iter()
                    .map(|g| match op {
                        ReduceOp::Sum => g.iter().sum(),
                        ReduceOp::Max => g.iter().copied().fold(f64::MIN, f64::max),
                        ReduceOp::Min => g.iter().copied().fold(f64::MAX, f64::min),
                        ReduceOp::Xor => g.iter().fold(0i64, |a, &v| a ^ v as i64) as f64,
                    })
                    .collect();
                let f = reduce_kernel(d, r, c, op, axis);
                let out = run1(f, &[input.clone(), Data::zeros(d, want.len())]);
                let got: Vec<f64> = if d.is_float() {
                    out[1].f32s().iter().map(|&v| f64::from(v)).collect()
                } else {
                    out[1].i64s().iter().map(|&v| v as f64).collect()
                };
                assert_eq!(got, want, "{d} {op:?} axis {axis:?}");
            }
        }
    }
}

#[test]
fn f16_sums_accumulate_in_f32() {
    // 2048 + 1 + 1 + ... in f16 would get stuck at 2048; accumulated in f32 it does not.
    let mut vals = vec![1.0; 64];
    vals[0] = 2048.0;
    let f = reduce_kernel(DType::F16, 1, 64, ReduceOp::Sum, None);
    let out = run1(
        f,
        &[Data::from_f64(DType::F16, &vals), Data::zeros(DType::F16, 1)],
    );
    assert_eq!(out[1].f32s(), vec![2112.0]);
}

#[test]
fn float_max_reduction_ignores_nan() {
    let f = reduce_kernel(DType::F32, 1, 4, ReduceOp::Max, None);
    let out = run1(
        f,
        &[f32s(&[f32::NAN, -3.0, 5.0, f32::NAN]), Data::zeros(DType::F32, 1)],
    );
    assert_eq!(out[1].f32s(), vec![5.0]);
}

#[test]
fn bool_max_and_min_are_any_and_all() {
    for (op, want) in [(ReduceOp::Max, true), (ReduceOp::Min, false)] {
        let f = reduce_kernel(DType::Bool, 1, 3, op, None);
        let out = run1(
            f,
            &[Data::Bool(vec![false, true, false]), Data::zeros(DType::Bool, 1)],
        );
        assert_eq!(out[1].bools(), vec![want]);
    }
}

/// `Out = A @ B + Acc` for row-major tiles.
fn dot_kernel(m: usize, k: usize, n: usize, operand: DType, acc: DType) -> Function {
    let mut b = Builder::new("dot");
    let pa = b.add_param("A", ParamKind::Pointer(operand));
    let pb = b.add_param("B", ParamKind::Pointer(operand));
    let pc = b.add_param("C", ParamKind::Pointer(acc));
    let zero = Operand::Int(0);
    let a = b
        .tile_load(
            pa.into(),
            zero,
            zero,
            Operand::Int(k as i64),
            (m as i64, k as i64),
        )
        .unwrap();
    let bt = b
        .tile_load(
            pb.into(),
            zero,
            zero,
            Operand::Int(n as i64),
            (k as i64, n as i64),
        )
        .unwrap();
    let c = b
        .tile_load(
            pc.into(),
            zero,
            zero,
            Operand::Int(n as i64),
            (m as i64, n as i64),
        )
        .unwrap();
    let r = b.dot(a.into(), bt.into(), Some(c.into())).unwrap();
    b.tile_store(
        pc.into(),
        zero,
        zero,
        Operand::Int(n as i64),
        r.into(),
        (m as i64, n as i64),
    )
    .unwrap();
    b.finish().unwrap()
}

#[test]
fn dot_in_f16_accumulates_in_f32() {
    let (m, k, n) = (16, 32, 8);
    let a: Vec<f64> = (0..m * k).map(|i| ((i * 13) % 17) as f64 * 0.125 - 1.0).collect();
    let bm: Vec<f64> = (0..k * n).map(|i| ((i * 7) % 11) as f64 * 0.25 - 1.25).collect();
    let c: Vec<f64> = (0..m * n).map(|i| (i % 5) as f64).collect();
    for (operand, acc) in [
        (DType::F16, DType::F32),
        (DType::F16, DType::F16),
        (DType::F32, DType::F32),
        (DType::BF16, DType::F32),
    ] {
        let (da, db, dc) = (
            Data::from_f64(operand, &a),
            Data::from_f64(operand, &bm),
            Data::from_f64(acc, &c),
        );
        let (fa, fb, fc) = (da.f32s(), db.f32s(), dc.f32s());
        let out = run1(dot_kernel(m, k, n, operand, acc), &[da, db, dc]);
        let got = out[2].f32s();
        for i in 0..m {
            for j in 0..n {
                let exact: f64 = f64::from(fc[i * n + j])
                    + (0..k)
                        .map(|p| f64::from(fa[i * k + p]) * f64::from(fb[p * n + j]))
                        .sum::<f64>();
                let want = round_to(acc, exact as f32);
                let tol = if acc == DType::F16 { 1e-2 } else { 1e-5 } * exact.abs().max(1.0);
                assert!(
                    (f64::from(got[i * n + j]) - f64::from(want)).abs() <= tol,
                    "{operand}/{acc} [{i},{j}]"
                );
            }
        }
    }
}

#[test]
fn select_picks_per_lane() {
    let f = map_kernel(4, &[DType::Bool, DType::F32, DType::F32], |b, v| {
        b.select(v[0].into(), v[1].into(), v[2].into()).unwrap()
    });
    let out = run1(
        f,
        &[
            Data::Bool(vec![true, false, true, false]),
            f32s(&[1.0, 2.0, 3.0, 4.0]),
            f32s(&[-1.0, -2.0, -3.0, -4.0]),
            Data::zeros(DType::F32, 4),
        ],
    );
    assert_eq!(out[3].f32s(), vec![1.0, -2.0, 3.0, -4.0]);
}

#[test]
fn broadcast_and_expand_dims_follow_numpy() {
    // out[i, j] = col[i] * 10 + row[j] over a 3x4 tile.
    let mut b = Builder::new("outer");
    let out = b.add_param("Out", ParamKind::Pointer(DType::I32));
    let rows = b.arange(0, 3).unwrap();
    let cols = b.arange(0, 4).unwrap();
    let r2 = b.expand_dims(rows, 1).unwrap();
    let c2 = b.expand_dims(cols, 0).unwrap();
    let r10 = b.binary(BinaryOp::Mul, r2.into(), Operand::Int(10)).unwrap();
    let v = b.binary(BinaryOp::Add, r10.into(), c2.into()).unwrap();
    let r4 = b.binary(BinaryOp::Mul, r2.into(), Operand::Int(4)).unwrap();
    let offs = b.binary(BinaryOp::Add, r4.into(), c2.into()).unwrap();
    let p = b.binary(BinaryOp::Add, out.into(), offs.into()).unwrap();
    b.store(p.into(), v.into(), None).unwrap();
    let out = run1(b.finish().unwrap(), &[Data::zeros(DType::I32, 12)]);
    assert_eq!(out[0].i32s(), vec![0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23]);
}

#[test]
fn meaningless_op_and_dtype_pairs_are_refused_at_prepare() {
    // The builder refuses bitwise ops on floats; hand-built IR is refused by the
    // interpreter with the op, the reason and the line.
    let mut f = map_kernel(4, &[DType::I32, DType::I32], |b, v| {
        b.set_loc(loc(21));
        b.binary(BinaryOp::And, v[0].into(), v[1].into()).unwrap()
    });
    // Retype every i32 value to f32 and the pointers to f32 pointers.
    for ty in &mut f.values {
        ty.elem = match ty.elem {
            metile_ir::Elem::Scalar(DType::I32) if !ty.shape.is_empty() => {
                metile_ir::Elem::Scalar(DType::F32)
            }
            metile_ir::Elem::Ptr(DType::I32, s) => metile_ir::Elem::Ptr(DType::F32, s),
            e => e,
        };
    }
    for p in &mut f.params {
        p.kind = ParamKind::Pointer(DType::F32);
    }
    // Offsets (arange) stay integers; only loaded values became floats.
    let offs = f.body.ops[0].results[0];
    f.values[offs.index()] = metile_ir::Type::tile(DType::I32, &[4]);
    match metile_interp::Executable::new(std::sync::Arc::new(f)) {
        Err(err @ metile_interp::ExecError::Unsupported { .. }) => {
            let msg = err.to_string();
            assert!(
                msg.contains("`and`") && msg.contains("f32") && msg.contains("test_kernel.py:21"),
                "{msg}"
            );
        }
        Err(other) => panic!("unexpected error {other}"),
        Ok(_) => panic!("bitwise and on f32 must be refused"),
    }
}
