//! Integer division and remainder by zero and out-of-range shifts: an error where
//! the result is observed, nothing where it is not (masked-off store lanes, lanes a
//! `select` discards, unused results). And interrupting a launch.

mod common;

use common::*;
use metile_interp::{ExecError, Executable, KernelArg};
use metile_ir::{BinaryOp, Builder, CmpOp, DType, Function, Operand, ParamKind, ReduceOp, Type, ValueId};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const N: usize = 8;

/// Params `X`, `Y` (i32[N]) and `Out` (i32[N]) and an i32 scalar `n`; `offs =
/// arange(0, N)`, `x` and `y` loaded unmasked. `body` builds on them at line 10 and
/// returns the value stored at line 20, under `offs < n` when `masked`.
fn kernel(masked: bool, body: impl FnOnce(&mut Builder, [ValueId; 3]) -> ValueId) -> Function {
    let mut b = Builder::new("poison");
    let xp = b.add_param("X", ParamKind::Pointer(DType::I32));
    let yp = b.add_param("Y", ParamKind::Pointer(DType::I32));
    let out = b.add_param("Out", ParamKind::Pointer(DType::I32));
    let n = b.add_param("n", ParamKind::Scalar(DType::I32));
    b.set_loc(loc(5));
    let offs = b.arange(0, N as i64).unwrap();
    let px = b.binary(BinaryOp::Add, xp.into(), offs.into()).unwrap();
    let x = b.load(px.into(), None, None).unwrap();
    let py = b.binary(BinaryOp::Add, yp.into(), offs.into()).unwrap();
    let y = b.load(py.into(), None, None).unwrap();
    b.set_loc(loc(10));
    let r = body(&mut b, [x, y, offs]);
    b.set_loc(loc(20));
    let po = b.binary(BinaryOp::Add, out.into(), offs.into()).unwrap();
    let mask = b.compare(CmpOp::Lt, offs.into(), n.into()).unwrap();
    b.store(po.into(), r.into(), masked.then_some(mask.into()))
        .unwrap();
    b.finish().unwrap()
}

fn args(x: &[i32], y: &[i32], n: i32) -> Vec<Data> {
    vec![i32s(x), i32s(y), Data::zeros(DType::I32, N), scalar_i32(n)]
}

const X: [i32; N] = [7, -7, 100, 5, 9, 1, 2, 3];
/// A zero divisor in lane 5.
const Y: [i32; N] = [2, 3, 7, -5, 4, 0, 6, 1];

fn floordiv(b: &mut Builder, [x, y, _]: [ValueId; 3]) -> ValueId {
    b.binary(BinaryOp::FloorDiv, x.into(), y.into()).unwrap()
}

fn expect_division_error(err: ExecError, detail: &str, used_by: &str) {
    let msg = err.to_string();
    assert!(matches!(err, ExecError::DivisionByZero { .. }), "{err:?}");
    assert!(msg.starts_with("test_kernel.py:10: "), "{msg}");
    assert!(msg.contains(detail), "{msg}");
    assert!(msg.contains(used_by), "{msg}");
}

#[test]
fn a_stored_division_by_zero_is_an_error_naming_both_lines() {
    let err = try_run(kernel(false, floordiv), &args(&X, &Y, 8), [1, 1, 1]).unwrap_err();
    expect_division_error(
        err,
        "integer division by zero: 1 // 0 on i32",
        "used as the value of `store` at test_kernel.py:20 (element 5)",
    );
    let rem = |b: &mut Builder, [x, y, _]: [ValueId; 3]| b.binary(BinaryOp::Rem, x.into(), y.into()).unwrap();
    let err = try_run(kernel(false, rem), &args(&X, &Y, 8), [1, 1, 1]).unwrap_err();
    expect_division_error(err, "integer remainder by zero: 1 % 0 on i32", "`store`");
}

#[test]
fn lanes_the_store_mask_skips_may_divide_by_zero() {
    // n = 5: lane 5 (the zero divisor) is not stored.
    let out = run1(kernel(true, floordiv), &args(&X, &Y, 5));
    assert_eq!(out[2].i32s(), vec![3, -2, 14, -1, 2, 0, 0, 0]);
    let err = try_run(kernel(true, floordiv), &args(&X, &Y, 6), [1, 1, 1]).unwrap_err();
    expect_division_error(err, "1 // 0", "(element 5)");
}

#[test]
fn a_select_that_discards_the_lane_hides_it() {
    // where(y != 0, x // y, -1)
    let guarded = |b: &mut Builder, v: [ValueId; 3]| {
        let q = floordiv(b, v);
        let ok = b.compare(CmpOp::Ne, v[1].into(), Operand::Int(0)).unwrap();
        b.select(ok.into(), q.into(), Operand::Int(-1)).unwrap()
    };
    let out = run1(kernel(false, guarded), &args(&X, &Y, 8));
    assert_eq!(out[2].i32s(), vec![3, -2, 14, -1, 2, -1, 0, 3]);
    // The other way round the poisoned lane is picked.
    let picked = |b: &mut Builder, v: [ValueId; 3]| {
        let q = floordiv(b, v);
        let zero = b.compare(CmpOp::Eq, v[1].into(), Operand::Int(0)).unwrap();
        b.select(zero.into(), q.into(), Operand::Int(-1)).unwrap()
    };
    let err = try_run(kernel(false, picked), &args(&X, &Y, 8), [1, 1, 1]).unwrap_err();
    expect_division_error(err, "1 // 0", "(element 5)");
}

#[test]
fn an_unused_result_is_no_error() {
    let unused = |b: &mut Builder, v: [ValueId; 3]| {
        floordiv(b, v);
        v[0]
    };
    let out = run1(kernel(false, unused), &args(&X, &Y, 8));
    assert_eq!(out[2].i32s(), X.to_vec());
}

#[test]
fn poison_follows_arithmetic_casts_and_comparisons() {
    // ((x // y) * 2 + 1) cast to i64 and back, compared, selected on: still poisoned.
    let chain = |b: &mut Builder, v: [ValueId; 3]| {
        let q = floordiv(b, v);
        let q = b.binary(BinaryOp::Mul, q.into(), Operand::Int(2)).unwrap();
        let q = b.binary(BinaryOp::Add, q.into(), Operand::Int(1)).unwrap();
        let q = b.cast(q, DType::I64).unwrap();
        let q = b.cast(q, DType::I32).unwrap();
        let big = b.compare(CmpOp::Gt, q.into(), Operand::Int(3)).unwrap();
        b.select(big.into(), v[0].into(), v[1].into()).unwrap()
    };
    let err = try_run(kernel(false, chain), &args(&X, &Y, 8), [1, 1, 1]).unwrap_err();
    expect_division_error(err, "1 // 0", "(element 5)");
}

#[test]
fn reductions_observe_every_lane() {
    let total = |b: &mut Builder, v: [ValueId; 3]| {
        let q = floordiv(b, v);
        let s = b.reduce(ReduceOp::Sum, q.into(), None).unwrap();
        b.broadcast_to(s, &[N]).unwrap()
    };
    let err = try_run(kernel(true, total), &args(&X, &Y, 1), [1, 1, 1]).unwrap_err();
    expect_division_error(
        err,
        "1 // 0",
        "used as the operand of `reduce_sum` at test_kernel.py:10 (element 5)",
    );
}

#[test]
fn addresses_are_observed_where_the_access_happens() {
    // load(X + (offs // y) % 8, mask=offs < n)
    let kernel = |n_lanes_loaded: bool| {
        let mut b = Builder::new("address");
        let xp = b.add_param("X", ParamKind::Pointer(DType::I32));
        let yp = b.add_param("Y", ParamKind::Pointer(DType::I32));
        let out = b.add_param("Out", ParamKind::Pointer(DType::I32));
        let n = b.add_param("n", ParamKind::Scalar(DType::I32));
        let offs = b.arange(0, N as i64).unwrap();
        let py = b.binary(BinaryOp::Add, yp.into(), offs.into()).unwrap();
        let y = b.load(py.into(), None, None).unwrap();
        b.set_loc(loc(10));
        let q = b.binary(BinaryOp::FloorDiv, offs.into(), y.into()).unwrap();
        let q = b.binary(BinaryOp::And, q.into(), Operand::Int(7)).unwrap();
        b.set_loc(loc(20));
        let p = b.binary(BinaryOp::Add, xp.into(), q.into()).unwrap();
        let mask = b.compare(CmpOp::Lt, offs.into(), n.into()).unwrap();
        let v = b
            .load(p.into(), n_lanes_loaded.then_some(mask.into()), None)
            .unwrap();
        let po = b.binary(BinaryOp::Add, out.into(), offs.into()).unwrap();
        b.store(po.into(), v.into(), Some(mask.into())).unwrap();
        b.finish().unwrap()
    };
    let out = run1(kernel(true), &args(&X, &Y, 5));
    assert_eq!(out[2].i32s(), vec![7, 7, 7, 7, -7, 0, 0, 0]);
    let err = try_run(kernel(true), &args(&X, &Y, 6), [1, 1, 1]).unwrap_err();
    expect_division_error(
        err,
        "5 // 0",
        "used as the address of `load` at test_kernel.py:20 (element 5)",
    );
    let err = try_run(kernel(false), &args(&X, &Y, 5), [1, 1, 1]).unwrap_err();
    expect_division_error(err, "5 // 0", "`load`");
}

#[test]
fn masked_loads_take_the_poison_of_other_where_the_mask_is_off() {
    // load(X + offs, mask=offs != 5, other=x // y): lane 5 reads the poisoned other.
    let with_other = |mask_lane: i64| {
        move |b: &mut Builder, v: [ValueId; 3]| {
            let q = floordiv(b, v);
            let m = b
                .compare(CmpOp::Ne, v[2].into(), Operand::Int(mask_lane))
                .unwrap();
            // Any pointer: X's param is the first value of the function.
            let p = b.binary(BinaryOp::Add, ValueId(0).into(), v[2].into()).unwrap();
            b.load(p.into(), Some(m.into()), Some(q.into())).unwrap()
        }
    };
    let err = try_run(kernel(false, with_other(5)), &args(&X, &Y, 8), [1, 1, 1]).unwrap_err();
    expect_division_error(err, "1 // 0", "(element 5)");
    let out = run1(kernel(false, with_other(3)), &args(&X, &Y, 8));
    assert_eq!(out[2].i32s(), vec![7, -7, 100, -1, 9, 1, 2, 3]);
}

#[test]
fn scalars_broadcast_their_poison() {
    // A scalar n // (n - 8) divides by zero for n = 8; broadcast and stored.
    let scalar = |b: &mut Builder, v: [ValueId; 3]| {
        let n = ValueId(3);
        let d = b.binary(BinaryOp::Sub, n.into(), Operand::Int(8)).unwrap();
        let q = b.binary(BinaryOp::FloorDiv, n.into(), d.into()).unwrap();
        let q = b.broadcast_to(q, &[N]).unwrap();
        b.binary(BinaryOp::Add, q.into(), v[0].into()).unwrap()
    };
    let err = try_run(kernel(false, scalar), &args(&X, &Y, 8), [1, 1, 1]).unwrap_err();
    expect_division_error(err, "8 // 0", "(element 0)");
    let out = run1(kernel(false, scalar), &args(&X, &Y, 6));
    assert_eq!(out[2].i32s(), X.iter().map(|x| x - 3).collect::<Vec<_>>());
}

#[test]
fn a_constant_zero_divisor_is_an_error_and_a_constant_nonzero_one_is_not() {
    let by = |c: i64| {
        move |b: &mut Builder, v: [ValueId; 3]| {
            b.binary(BinaryOp::FloorDiv, v[0].into(), Operand::Int(c))
                .unwrap()
        }
    };
    let err = try_run(kernel(false, by(0)), &args(&X, &Y, 8), [1, 1, 1]).unwrap_err();
    expect_division_error(err, "7 // 0", "(element 0)");
    let out = run1(kernel(false, by(-2)), &args(&X, &Y, 8));
    assert_eq!(out[2].i32s(), X.iter().map(|x| x / -2).collect::<Vec<_>>());
    // Masked-off lanes only: no error.
    let out = run1(kernel(true, by(0)), &args(&X, &Y, 0));
    assert_eq!(out[2].i32s(), vec![0; N]);
}

#[test]
fn shifts_by_negative_or_too_large_counts_are_errors() {
    for (d, bad, good) in [
        (DType::I32, [32i64, -1], 31i64),
        (DType::U32, [32, 40], 31),
        (DType::I64, [64, -3], 63),
    ] {
        for op in [BinaryOp::Shl, BinaryOp::Shr] {
            let build = || {
                let mut b = Builder::new("shift");
                let out = b.add_param("Out", ParamKind::Pointer(d));
                let c = b.add_param("c", ParamKind::Scalar(d));
                let offs = b.arange(0, 4).unwrap();
                let x = b.cast(offs, d).unwrap();
                b.set_loc(loc(10));
                let r = b.binary(op, x.into(), c.into()).unwrap();
                b.set_loc(loc(20));
                let p = b.binary(BinaryOp::Add, out.into(), offs.into()).unwrap();
                b.store(p.into(), r.into(), None).unwrap();
                b.finish().unwrap()
            };
            let scalar = |v: i64| match d {
                DType::I32 => Data::Scalar(metile_interp::ScalarValue::I32(v as i32)),
                DType::U32 => Data::Scalar(metile_interp::ScalarValue::U32(v as u32)),
                _ => Data::Scalar(metile_interp::ScalarValue::I64(v)),
            };
            for count in bad {
                let err = try_run(build(), &[Data::zeros(d, 4), scalar(count)], [1, 1, 1]).unwrap_err();
                let msg = err.to_string();
                assert!(matches!(err, ExecError::InvalidShift { .. }), "{err:?}");
                let symbol = if op == BinaryOp::Shl { "<<" } else { ">>" };
                assert!(
                    msg.starts_with("test_kernel.py:10: shift count out of range: 0 ")
                        && msg.contains(&format!(
                            "{symbol} {count} on {d} (the count must be in [0, {}))",
                            8 * d.size_bytes()
                        ))
                        && msg.contains("`store` at test_kernel.py:20"),
                    "{msg}"
                );
            }
            let out = run1(build(), &[Data::zeros(d, 4), scalar(good)]);
            let want: Vec<i64> = (0..4i64)
                .map(|x| match (op, d) {
                    (BinaryOp::Shl, DType::I32) => i64::from((x as i32).wrapping_shl(good as u32)),
                    (BinaryOp::Shl, DType::U32) => i64::from((x as u32).wrapping_shl(good as u32)),
                    (BinaryOp::Shl, _) => x.wrapping_shl(good as u32),
                    _ => x >> good,
                })
                .collect();
            assert_eq!(out[0].i64s(), want, "{d} {op:?}");
        }
    }
}

/// `acc = 0; for i in range(0, 4): acc += guard ? x // y : x` carried in a loop,
/// then stored; `guard` selects the division only where `y != 0` when true.
fn loop_kernel(guarded: bool) -> Function {
    let mut b = Builder::new("carried");
    let xp = b.add_param("X", ParamKind::Pointer(DType::I32));
    let yp = b.add_param("Y", ParamKind::Pointer(DType::I32));
    let out = b.add_param("Out", ParamKind::Pointer(DType::I32));
    let offs = b.arange(0, N as i64).unwrap();
    let px = b.binary(BinaryOp::Add, xp.into(), offs.into()).unwrap();
    let x = b.load(px.into(), None, None).unwrap();
    let py = b.binary(BinaryOp::Add, yp.into(), offs.into()).unwrap();
    let y = b.load(py.into(), None, None).unwrap();
    let init = b.full(&[N], Operand::Int(0), DType::I32).unwrap();
    let res = b
        .build_for(
            (Operand::Int(0), Operand::Int(4), Operand::Int(1)),
            &[init],
            |b, _, carried| {
                b.set_loc(loc(10));
                let q = b.binary(BinaryOp::FloorDiv, x.into(), y.into())?;
                let term = if guarded {
                    let ok = b.compare(CmpOp::Ne, y.into(), Operand::Int(0))?;
                    b.select(ok.into(), q.into(), x.into())?
                } else {
                    q
                };
                Ok(vec![b.binary(BinaryOp::Add, carried[0].into(), term.into())?])
            },
        )
        .unwrap();
    b.set_loc(loc(20));
    let po = b.binary(BinaryOp::Add, out.into(), offs.into()).unwrap();
    b.store(po.into(), res[0].into(), None).unwrap();
    b.finish().unwrap()
}

#[test]
fn loop_carried_values_carry_poison() {
    let y: Vec<i32> = Y.to_vec();
    let err = try_run(
        loop_kernel(false),
        &[i32s(&X), i32s(&y), Data::zeros(DType::I32, N)],
        [1, 1, 1],
    )
    .unwrap_err();
    expect_division_error(err, "1 // 0", "`store` at test_kernel.py:20 (element 5)");
    let out = run1(
        loop_kernel(true),
        &[i32s(&X), i32s(&y), Data::zeros(DType::I32, N)],
    );
    assert_eq!(out[2].i32s(), vec![12, -8, 56, -4, 8, 4, 0, 12]);
}

#[test]
fn conditions_and_loop_bounds_observe_poison() {
    // if (n // (n - 8)) > 0: store 1 — the condition divides by zero for n = 8.
    let mut b = Builder::new("cond");
    let out = b.add_param("Out", ParamKind::Pointer(DType::I32));
    let n = b.add_param("n", ParamKind::Scalar(DType::I32));
    b.set_loc(loc(10));
    let d = b.binary(BinaryOp::Sub, n.into(), Operand::Int(8)).unwrap();
    let q = b.binary(BinaryOp::FloorDiv, n.into(), d.into()).unwrap();
    b.set_loc(loc(20));
    let c = b.compare(CmpOp::Gt, q.into(), Operand::Int(0)).unwrap();
    b.push_block(&[]);
    let one = b.full(&[], Operand::Int(1), DType::I32).unwrap();
    b.yield_values(&[one]);
    let then_b = b.pop_block().unwrap();
    b.push_block(&[]);
    let zero = b.full(&[], Operand::Int(0), DType::I32).unwrap();
    b.yield_values(&[zero]);
    let else_b = b.pop_block().unwrap();
    let r = b.finish_if(c, then_b, else_b, vec![Type::scalar(DType::I32)]);
    // A loop bounded by q as well.
    let res = b
        .build_for(
            (Operand::Int(0), q.into(), Operand::Int(1)),
            &[r[0]],
            |b, _, carried| {
                Ok(vec![b.binary(
                    BinaryOp::Add,
                    carried[0].into(),
                    Operand::Int(1),
                )?])
            },
        )
        .unwrap();
    b.store(out.into(), res[0].into(), None).unwrap();
    let f = b.finish().unwrap();
    let err = try_run(f.clone(), &[Data::zeros(DType::I32, 1), scalar_i32(8)], [1, 1, 1]).unwrap_err();
    expect_division_error(
        err,
        "8 // 0",
        "used as the condition of `if` at test_kernel.py:20",
    );
    assert!(
        !err_text(&f, 8).contains("element"),
        "a scalar has no element to name"
    );
    let out = run1(f, &[Data::zeros(DType::I32, 1), scalar_i32(12)]);
    assert_eq!(out[0].i32s(), vec![1 + 3]);
}

fn err_text(f: &Function, n: i32) -> String {
    try_run(f.clone(), &[Data::zeros(DType::I32, 1), scalar_i32(n)], [1, 1, 1])
        .unwrap_err()
        .to_string()
}

#[test]
fn the_first_observed_lane_names_its_own_fault() {
    // (x // y) + (x % z): lane 5 of y is zero, lane 2 of z; the stored lane 2 is
    // the remainder's fault.
    let two = |b: &mut Builder, v: [ValueId; 3]| {
        let q = floordiv(b, v);
        let z = b.binary(BinaryOp::Sub, v[2].into(), Operand::Int(2)).unwrap();
        let r = b.binary(BinaryOp::Rem, v[0].into(), z.into()).unwrap();
        b.binary(BinaryOp::Add, q.into(), r.into()).unwrap()
    };
    let err = try_run(kernel(false, two), &args(&X, &Y, 8), [1, 1, 1]).unwrap_err();
    expect_division_error(err, "integer remainder by zero: 100 % 0 on i32", "(element 2)");
}

#[test]
fn a_failed_launch_leaves_no_poison_behind() {
    let exe = Executable::new(Arc::new(kernel(false, floordiv))).unwrap();
    let launch = |y: &[i32]| {
        let mut data = args(&X, y, 8);
        let kargs: Vec<KernelArg> = data.iter_mut().map(Data::arg).collect();
        // SAFETY: every buffer lives in `data` for the whole launch.
        let r = unsafe { exe.launch(&kargs, [3, 1, 1]) };
        r.map(|()| data[2].i32s())
    };
    assert!(launch(&Y).is_err());
    let ones = [1; N];
    assert_eq!(launch(&ones).unwrap(), X.to_vec());
}

#[test]
fn a_launch_stops_when_asked_between_instances_and_in_loops() {
    for (grid, iterations) in [([64u32, 1, 1], 4i64), ([1, 1, 1], i64::from(i32::MAX))] {
        let mut b = Builder::new("long");
        let out = b.add_param("Out", ParamKind::Pointer(DType::I64));
        let init = b.full(&[], Operand::Int(0), DType::I64).unwrap();
        let end = b.constant(metile_ir::Literal::Int(iterations), DType::I64);
        let res = b
            .build_for(
                (Operand::Int(0), end.into(), Operand::Int(1)),
                &[init],
                |b, _, c| Ok(vec![b.binary(BinaryOp::Add, c[0].into(), Operand::Int(1))?]),
            )
            .unwrap();
        let pid = b.program_id(0).unwrap();
        let p = b.binary(BinaryOp::Add, out.into(), pid.into()).unwrap();
        b.store(p.into(), res[0].into(), None).unwrap();
        let exe = Executable::new(Arc::new(b.finish().unwrap())).unwrap();
        let mut data = [Data::zeros(DType::I64, 64)];
        let kargs: Vec<KernelArg> = data.iter_mut().map(Data::arg).collect();
        let asked = AtomicUsize::new(0);
        let stop = || asked.fetch_add(1, Ordering::Relaxed) >= 10;
        // SAFETY: the buffer lives in `data` for the whole launch.
        let r = unsafe { exe.launch_interruptible(&kargs, grid, &stop) };
        assert_eq!(r, Err(ExecError::Interrupted), "grid {grid:?}");
        // The executable still works.
        if grid[0] > 1 {
            // SAFETY: as above.
            unsafe { exe.launch(&kargs, grid) }.unwrap();
            assert_eq!(data[0].i64s(), vec![iterations; 64]);
        }
    }
}
