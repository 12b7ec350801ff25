//! Atomics under contention (many program instances on the worker threads
//! hitting the same elements) and the builder's Philox4x32 against Random123's
//! published known-answer vectors.

mod common;

use common::*;
use metile_interp::ExecError;
use metile_ir::{
    AtomicFlags, AtomicOp, BinaryOp, Builder, CmpOp, DType, Function, Literal, MemScope, MemSem, Operand,
    ParamKind,
};

const RELAXED: AtomicFlags = AtomicFlags {
    sem: MemSem::Relaxed,
    scope: MemScope::Gpu,
};

/// What each lane adds (or combines): a constant, or its lane index.
#[derive(Clone, Copy)]
enum Value {
    Constant(Operand),
    Lane,
}

/// Every program applies `op` with `value` to `X[lane % bins]`, masked to
/// `lane < n`; with `keep_old`, the old values go to `Old[pid * block + lane]`
/// (which depend on the order the programs ran in, unless only one runs).
fn contended(op: AtomicOp, dtype: DType, block: usize, bins: i64, value: Value, keep_old: bool) -> Function {
    let mut b = Builder::new("contended");
    let x = b.add_param("X", ParamKind::Pointer(dtype));
    let old = b.add_param("Old", ParamKind::Pointer(dtype));
    let n = b.add_param("N", ParamKind::Scalar(DType::I32));
    b.set_loc(loc(3));
    let pid = b.program_id(0).unwrap();
    let ar = b.arange(0, block as i64).unwrap();
    let mask = b.compare(CmpOp::Lt, ar.into(), n.into()).unwrap();
    let bin = b.binary(BinaryOp::Rem, ar.into(), Operand::Int(bins)).unwrap();
    let p = b.binary(BinaryOp::Add, x.into(), bin.into()).unwrap();
    let value = match value {
        Value::Lane => ar.into(),
        Value::Constant(c) => c,
    };
    b.set_loc(loc(4));
    let r = b
        .atomic(op, p.into(), None, value, Some(mask.into()), RELAXED)
        .unwrap();
    if keep_old {
        let base = b
            .binary(BinaryOp::Mul, pid.into(), Operand::Int(block as i64))
            .unwrap();
        let o = b.binary(BinaryOp::Add, base.into(), ar.into()).unwrap();
        let q = b.binary(BinaryOp::Add, old.into(), o.into()).unwrap();
        b.store(q.into(), r.into(), None).unwrap();
    }
    b.finish().unwrap()
}

#[test]
fn contended_integer_adds_and_maxima_are_exact() {
    let (programs, block, n) = (300u32, 64usize, 50);
    let out = run(
        contended(
            AtomicOp::Add,
            DType::I32,
            block,
            8,
            Value::Constant(Operand::Int(3)),
            false,
        ),
        &[
            Data::zeros(DType::I32, 8),
            Data::zeros(DType::I32, 1),
            scalar_i32(n),
        ],
        [programs, 1, 1],
    );
    let per_bin = |b: i32| (0..n).filter(|l| l % 8 == b).count() as i32 * 3;
    let expected: Vec<i32> = (0..8).map(|b| per_bin(b) * programs as i32).collect();
    assert_eq!(out[0].i32s(), expected);
    let out = run(
        contended(AtomicOp::Max, DType::U32, block, 4, Value::Lane, false),
        &[
            Data::zeros(DType::U32, 4),
            Data::zeros(DType::U32, 1),
            scalar_i32(n),
        ],
        [programs, 1, 1],
    );
    assert_eq!(out[0].i64s(), vec![48, 49, 46, 47]);
}

#[test]
fn old_values_come_back_and_masked_lanes_return_zero() {
    let (block, n) = (16usize, 11);
    let start: Vec<i32> = (0..16).map(|i| 100 + i).collect();
    let out = run1(
        contended(AtomicOp::Xchg, DType::I32, block, 16, Value::Lane, true),
        &[i32s(&start), Data::zeros(DType::I32, block), scalar_i32(n)],
    );
    let expected_x: Vec<i32> = (0..16).map(|i| if i < n { i } else { 100 + i }).collect();
    let expected_old: Vec<i32> = (0..16).map(|i| if i < n { 100 + i } else { 0 }).collect();
    assert_eq!(out[0].i32s(), expected_x);
    assert_eq!(out[1].i32s(), expected_old);
}

#[test]
fn contended_half_precision_adds_round_once_per_add() {
    let (programs, block) = (128u32, 32usize);
    let out = run(
        contended(
            AtomicOp::Add,
            DType::F16,
            block,
            2,
            Value::Constant(Operand::Float(0.5)),
            false,
        ),
        &[
            Data::zeros(DType::F16, 2),
            Data::zeros(DType::F16, 1),
            scalar_i32(block as i32),
        ],
        [programs, 1, 1],
    );
    // 0.5 steps up to 1024 are exact in f16, in any order.
    assert_eq!(out[0].f32s(), vec![1024.0, 1024.0]);
}

#[test]
fn an_out_of_bounds_atomic_names_the_buffer_and_line() {
    let err = try_run(
        contended(
            AtomicOp::Xor,
            DType::I32,
            16,
            16,
            Value::Constant(Operand::Int(1)),
            false,
        ),
        &[
            Data::zeros(DType::I32, 10),
            Data::zeros(DType::I32, 16),
            scalar_i32(16),
        ],
        [1, 1, 1],
    )
    .unwrap_err();
    match err {
        ExecError::OutOfBounds {
            param,
            index,
            len,
            loc,
        } => {
            assert_eq!((param.as_str(), index, len, loc.line), ("X", 10, 10, 4));
        }
        other => panic!("expected an out-of-bounds error, got {other}"),
    }
}

/// Stores the four words of Philox4x32-10 on constant counters and key.
fn philox_constant(counter: [u32; 4], key: [u32; 2]) -> Function {
    let mut b = Builder::new("philox");
    let out = b.add_param("Out", ParamKind::Pointer(DType::U32));
    let mut konst = |x: u32| -> Operand { b.constant(Literal::Int(i64::from(x)), DType::U32).into() };
    let c = counter.map(&mut konst);
    let k = key.map(&mut konst);
    let words = b.philox(c, k, 10).unwrap();
    for (i, w) in words.into_iter().enumerate() {
        let p = b
            .binary(BinaryOp::Add, out.into(), Operand::Int(i as i64))
            .unwrap();
        b.store(p.into(), w, None).unwrap();
    }
    b.finish().unwrap()
}

#[test]
fn philox_matches_the_random123_known_answers() {
    // Random123's tests/kat_vectors, the "philox4x32 10" lines.
    let vectors: [([u32; 4], [u32; 2], [u32; 4]); 3] = [
        (
            [0; 4],
            [0; 2],
            [0x6627_E8D5, 0xE169_C58D, 0xBC57_AC4C, 0x9B00_DBD8],
        ),
        (
            [u32::MAX; 4],
            [u32::MAX; 2],
            [0x408F_276D, 0x41C8_3B0E, 0xA20B_C7C6, 0x6D54_51FD],
        ),
        (
            [0x243F_6A88, 0x85A3_08D3, 0x1319_8A2E, 0x0370_7344],
            [0xA409_3822, 0x299F_31D0],
            [0xD16C_FE09, 0x94FD_CCEB, 0x5001_E420, 0x2412_6EA1],
        ),
    ];
    for (counter, key, expected) in vectors {
        let out = run1(philox_constant(counter, key), &[Data::zeros(DType::U32, 4)]);
        let got: Vec<i64> = out[0].i64s();
        assert_eq!(
            got,
            expected.map(i64::from).to_vec(),
            "counter {counter:x?} key {key:x?}"
        );
    }
}
