//! `while` loops, `device_assert` and the checks of the kernel's promises
//! (`assume`) in the interpreter, on hand-built Tile IR.

mod common;

use common::*;
use metile_interp::ExecError;
use metile_ir::{AssumeFact, BinaryOp, Builder, CmpOp, DType, Function, Operand, ParamKind, Type};

/// `n = start; steps = 0; while n > 1: n = n / 2 (floor); steps += 1`, then
/// stores `steps` and the final `n`.
fn halvings() -> Function {
    let mut b = Builder::new("halvings");
    let out = b.add_param("Out", ParamKind::Pointer(DType::I32));
    let start = b.add_param("start", ParamKind::Scalar(DType::I32));
    b.set_loc(loc(10));
    let zero = b.constant(metile_ir::Literal::Int(0), DType::I32);
    let carried = [Type::scalar(DType::I32), Type::scalar(DType::I32)];
    let args = b.push_block(&carried);
    let more = b.compare(CmpOp::Gt, args[0].into(), Operand::Int(1)).unwrap();
    b.yield_values(&[more]);
    let cond = b.pop_block().unwrap();
    let args = b.push_block(&carried);
    let half = b
        .binary(BinaryOp::FloorDiv, args[0].into(), Operand::Int(2))
        .unwrap();
    let steps = b.binary(BinaryOp::Add, args[1].into(), Operand::Int(1)).unwrap();
    b.yield_values(&[half, steps]);
    let body = b.pop_block().unwrap();
    let res = b.finish_while(&[start, zero], cond, body);
    b.store(out.into(), res[1].into(), None).unwrap();
    let p = b.binary(BinaryOp::Add, out.into(), Operand::Int(1)).unwrap();
    b.store(p.into(), res[0].into(), None).unwrap();
    b.finish().unwrap()
}

#[test]
fn while_runs_until_its_condition_fails() {
    for (start, steps, last) in [(1, 0, 1), (-5, 0, -5), (2, 1, 1), (1000, 9, 1)] {
        let out = run1(halvings(), &[i32s(&[9, 9]), scalar_i32(start)]);
        assert_eq!(out[0].i32s(), vec![steps, last], "start {start}");
    }
}

#[test]
fn while_regions_are_verified() {
    let mut f = halvings();
    // A condition region that yields the carried values instead of a flag.
    for op in &mut f.body.ops {
        if let Some(cond) = op
            .regions
            .first_mut()
            .filter(|_| op.kind == metile_ir::OpKind::While)
        {
            let args = cond.args.clone();
            if let Some(y) = cond.ops.last_mut() {
                y.operands = args;
            }
        }
    }
    let err = metile_ir::verify(&f).unwrap_err().to_string();
    assert!(
        err.contains("(yield)") && err.contains("where [Type { elem: Scalar(Bool)"),
        "{err}"
    );
}

fn asserting(message: &str) -> Function {
    let mut b = Builder::new("asserting");
    let x = b.add_param("X", ParamKind::Pointer(DType::F32));
    b.set_loc(loc(22));
    let ar = b.arange(0, 4).unwrap();
    let p = b.binary(BinaryOp::Add, x.into(), ar.into()).unwrap();
    let v = b.load(p.into(), None, None).unwrap();
    let ok = b.compare(CmpOp::Ge, v.into(), Operand::Float(0.0)).unwrap();
    b.device_assert(ok.into(), message).unwrap();
    b.finish().unwrap()
}

#[test]
fn a_false_assert_names_the_program_element_and_line() {
    let f = asserting("x must be positive");
    assert!(try_run(f.clone(), &[f32s(&[1.0, 2.0, 3.0, 4.0])], [3, 1, 1]).is_ok());
    let err = try_run(f, &[f32s(&[1.0, 2.0, -3.0, 4.0])], [3, 1, 1]).unwrap_err();
    match &err {
        ExecError::AssertionFailed { loc, message, at } => {
            assert_eq!(loc.line, 22);
            assert_eq!(message, "x must be positive");
            assert_eq!(at, "program (0, 0, 0), element (2)");
        }
        other => panic!("{other:?}"),
    }
    assert!(err
        .to_string()
        .contains("device_assert failed: x must be positive"));
}

#[test]
fn assert_messages_must_be_printable_ascii() {
    let mut b = Builder::new("k");
    let err = b.device_assert(Operand::Bool(true), "caf\u{e9}").unwrap_err();
    assert!(err.0.contains("printable ASCII"), "{}", err.0);
}

fn promising(fact: AssumeFact, n: i64) -> Function {
    let mut b = Builder::new("promising");
    let idx = b.add_param("Idx", ParamKind::Pointer(DType::I32));
    let out = b.add_param("Out", ParamKind::Pointer(DType::I32));
    b.set_loc(loc(31));
    let ar = b.arange(0, 8).unwrap();
    let p = b.binary(BinaryOp::Add, idx.into(), ar.into()).unwrap();
    let v = b.load(p.into(), None, None).unwrap();
    let v = b.assume(v.into(), fact, n, "hint").unwrap();
    let q = b.binary(BinaryOp::Add, out.into(), ar.into()).unwrap();
    b.store(q.into(), v.into(), None).unwrap();
    b.finish().unwrap()
}

#[test]
fn kept_promises_change_nothing_and_broken_ones_fail() {
    let cases: [(AssumeFact, i64, [i32; 8], Option<&str>); 6] = [
        (AssumeFact::MultipleOf, 4, [8, 1, 2, 3, 12, 5, 6, 7], None),
        (
            AssumeFact::MultipleOf,
            4,
            [8, 1, 2, 3, 13, 5, 6, 7],
            Some("element (4) of x is 13"),
        ),
        (AssumeFact::Contiguous, 4, [4, 5, 6, 7, 0, 1, 2, 3], None),
        (
            AssumeFact::Contiguous,
            4,
            [4, 5, 7, 8, 0, 1, 2, 3],
            Some("element (2) of x is 7 after 5"),
        ),
        (AssumeFact::Constant, 2, [1, 1, 3, 3, 0, 0, 9, 9], None),
        (
            AssumeFact::Constant,
            2,
            [1, 1, 3, 4, 0, 0, 9, 9],
            Some("element (3) of x is 4"),
        ),
    ];
    for (fact, n, data, broken) in cases {
        let result = try_run(promising(fact, n), &[i32s(&data), i32s(&[0; 8])], [1, 1, 1]);
        match (result, broken) {
            (Ok(out), None) => assert_eq!(out[1].i32s(), data.to_vec()),
            (Err(e), Some(why)) => {
                let text = e.to_string();
                assert!(text.contains(why) && text.contains(":31:"), "{text}");
            }
            (other, _) => panic!("{fact:?} {data:?}: {other:?}"),
        }
    }
}

#[test]
fn promises_are_only_about_integers() {
    let mut b = Builder::new("k");
    let err = b
        .assume(Operand::Float(1.0), AssumeFact::MultipleOf, 4, "multiple_of")
        .unwrap_err();
    assert!(err.0.contains("describes integers or pointers"), "{}", err.0);
    let err = b
        .assume(Operand::Int(1), AssumeFact::MultipleOf, 0, "multiple_of")
        .unwrap_err();
    assert!(err.0.contains("needs a positive int"), "{}", err.0);
}
