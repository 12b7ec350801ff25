//! The absent-lane pass on small kernels: which selects and identities it
//! inserts, and where it inserts nothing.

mod common;

use common::{int, v};
use metile_compiler::optimize_tile_ir;
use metile_ir::{BinaryOp, Builder, CmpOp, DType, Function, Literal, OpKind, ParamKind, ReduceOp, ValueId};

fn ops(f: &Function) -> Vec<OpKind> {
    let mut kinds = vec![];
    f.walk(&mut |op| kinds.push(op.kind.clone()));
    kinds
}

fn count(f: &Function, pred: impl Fn(&OpKind) -> bool) -> usize {
    ops(f).iter().filter(|k| pred(k)).count()
}

/// `x = load(X + offs, mask=offs < N)` with the mask built afresh each time it is used.
fn masked_load(b: &mut Builder, x: ValueId, n: ValueId) -> ValueId {
    let offs = b.arange(0, 64).unwrap();
    let mask = b.compare(CmpOp::Lt, v(offs), v(n)).unwrap();
    let p = b.binary(BinaryOp::Add, v(x), v(offs)).unwrap();
    b.load(v(p), Some(v(mask)), None).unwrap()
}

fn kernel(body: impl FnOnce(&mut Builder, ValueId, ValueId, ValueId)) -> Function {
    let mut b = Builder::new("k");
    let x = b.add_param("X", ParamKind::Pointer(DType::F32));
    let out = b.add_param("Out", ParamKind::Pointer(DType::F32));
    let n = b.add_param("N", ParamKind::Scalar(DType::I32));
    body(&mut b, x, out, n);
    common::round_trips(b.finish().unwrap())
}

#[test]
fn a_store_masked_by_the_presence_needs_no_select_even_when_the_mask_is_rebuilt() {
    let f = kernel(|b, x, out, n| {
        let a = masked_load(b, x, n);
        let e = b.unary(metile_ir::UnaryOp::Exp, v(a)).unwrap();
        let offs = b.arange(0, 64).unwrap();
        let mask = b.compare(CmpOp::Lt, v(offs), v(n)).unwrap();
        let p = b.binary(BinaryOp::Add, v(out), v(offs)).unwrap();
        b.store(v(p), v(e), Some(v(mask))).unwrap();
    });
    let f = optimize_tile_ir(f).unwrap();
    assert_eq!(
        count(&f, |k| matches!(k, OpKind::Select)),
        0,
        "{}",
        metile_ir::print_function(&f)
    );
}

#[test]
fn an_unmasked_store_of_a_computed_value_writes_zero_where_absent() {
    let f = kernel(|b, x, out, n| {
        let a = masked_load(b, x, n);
        let e = b.unary(metile_ir::UnaryOp::Exp, v(a)).unwrap();
        let offs = b.arange(0, 64).unwrap();
        let p = b.binary(BinaryOp::Add, v(out), v(offs)).unwrap();
        b.store(v(p), v(e), None).unwrap();
    });
    let f = optimize_tile_ir(f).unwrap();
    assert_eq!(count(&f, |k| matches!(k, OpKind::Select)), 1);
    assert!(ops(&f).contains(&OpKind::Constant(Literal::Float(0.0))));
}

#[test]
fn max_reduction_selects_minus_infinity_and_a_sum_of_a_load_selects_nothing() {
    let f = kernel(|b, x, out, n| {
        let a = masked_load(b, x, n);
        let m = b.reduce(ReduceOp::Max, v(a), None).unwrap();
        let s = b.reduce(ReduceOp::Sum, v(a), None).unwrap();
        let t = b.binary(BinaryOp::Add, v(m), v(s)).unwrap();
        b.store(v(out), v(t), None).unwrap();
    });
    let f = optimize_tile_ir(f).unwrap();
    assert_eq!(count(&f, |k| matches!(k, OpKind::Select)), 1);
    assert!(ops(&f).contains(&OpKind::Constant(Literal::Float(f64::NEG_INFINITY))));
}

#[test]
fn loads_with_other_and_unmasked_kernels_are_left_alone() {
    let build = |other: bool| {
        kernel(|b, x, out, n| {
            let offs = b.arange(0, 64).unwrap();
            let mask = b.compare(CmpOp::Lt, v(offs), v(n)).unwrap();
            let p = b.binary(BinaryOp::Add, v(x), v(offs)).unwrap();
            let a = if other {
                b.load(v(p), Some(v(mask)), Some(int(0))).unwrap()
            } else {
                b.load(v(p), None, None).unwrap()
            };
            let m = b.reduce(ReduceOp::Max, v(a), None).unwrap();
            b.store(v(out), v(m), None).unwrap();
        })
    };
    for other in [true, false] {
        let f = build(other);
        let before = optimize_tile_ir(f.clone()).unwrap();
        assert_eq!(count(&before, |k| matches!(k, OpKind::Select)), 0);
        let mut g = f;
        assert!(!metile_compiler::absent_lanes::resolve_absent_lanes(&mut g));
    }
}

#[test]
fn no_carry_merge_survives_the_pass() {
    let f = kernel(|b, x, out, n| {
        let a = masked_load(b, x, n);
        let old = b
            .full(&[64], metile_ir::Operand::Float(-1.0), DType::F32)
            .unwrap();
        let merged = b.carry_merge(a, old).unwrap();
        let offs = b.arange(0, 64).unwrap();
        let p = b.binary(BinaryOp::Add, v(out), v(offs)).unwrap();
        b.store(v(p), v(merged), None).unwrap();
        let plain = b.full(&[64], metile_ir::Operand::Float(2.0), DType::F32).unwrap();
        let kept = b.carry_merge(plain, old).unwrap();
        b.store(v(p), v(kept), None).unwrap();
    });
    let f = optimize_tile_ir(f).unwrap();
    assert_eq!(count(&f, |k| matches!(k, OpKind::CarryMerge)), 0);
    assert_eq!(count(&f, |k| matches!(k, OpKind::Select)), 1);
}
