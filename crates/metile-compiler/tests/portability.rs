//! Kernels that the interpreter runs compile for every GPU target, and the
//! portability check reports what does not as an internal compiler error.

mod common;

use common::{loc, v};
use metile_compiler::portability::{compile_source, internal_errors, parse_targets};
use metile_compiler::CompileOptions;
use metile_ir::{BinaryOp, Builder, CmpOp, DType, Function, OpKind, ParamKind, ReduceOp, Type};

/// Triton's softmax: `x - max(x, axis=0)`, `sum(num, axis=0)`, a division by the
/// scalar sum, all on a 1-D tile.
fn softmax_axis0(block: usize) -> Function {
    let mut b = Builder::new("softmax_axis0");
    let x = b.add_param("X", ParamKind::Pointer(DType::F32));
    let out = b.add_param("Out", ParamKind::Pointer(DType::F32));
    let n = b.add_param("N", ParamKind::Scalar(DType::I32));
    b.set_loc(loc(3));
    let row = b.program_id(0).unwrap();
    let offs = b.arange(0, block as i64).unwrap();
    let mask = b.compare(CmpOp::Lt, v(offs), v(n)).unwrap();
    let base = b.binary(BinaryOp::Mul, v(row), v(n)).unwrap();
    let px = b.binary(BinaryOp::Add, v(x), v(base)).unwrap();
    let px = b.binary(BinaryOp::Add, v(px), v(offs)).unwrap();
    let xv = b.load(v(px), Some(v(mask)), None).unwrap();
    b.set_loc(loc(4));
    let m = b.reduce(ReduceOp::Max, v(xv), Some(0)).unwrap();
    let shifted = b.binary(BinaryOp::Sub, v(xv), v(m)).unwrap();
    let num = b.unary(metile_ir::UnaryOp::Exp, v(shifted)).unwrap();
    b.set_loc(loc(5));
    let den = b.reduce(ReduceOp::Sum, v(num), Some(-1)).unwrap();
    let y = b.binary(BinaryOp::Div, v(num), v(den)).unwrap();
    let po = b.binary(BinaryOp::Add, v(out), v(base)).unwrap();
    let po = b.binary(BinaryOp::Add, v(po), v(offs)).unwrap();
    b.store(v(po), v(y), Some(v(mask))).unwrap();
    b.finish().unwrap()
}

fn all_targets() -> Vec<metile_compiler::Target> {
    parse_targets("all").unwrap()
}

#[test]
fn axis_reductions_of_1d_tiles_compile_for_every_target() {
    let f = metile_compiler::optimize_tile_ir(common::round_trips(softmax_axis0(128))).unwrap();
    for t in all_targets() {
        compile_source(&f, &CompileOptions::default(), &t)
            .unwrap_or_else(|e| panic!("{}: {e}", t.arch_name()));
    }
}

#[test]
fn the_builder_spells_the_one_axis_of_a_1d_tile_as_the_whole_tile() {
    let f = softmax_axis0(64);
    let mut axes = Vec::new();
    f.walk(&mut |op| {
        if let OpKind::Reduce { axis, .. } = op.kind {
            axes.push(axis);
        }
    });
    assert_eq!(axes, [None, None]);
}

#[test]
fn a_scalar_axis_reduction_lowers_even_when_spelled_with_its_axis() {
    // IR read from elsewhere may keep `axis=0` on a 1-D tile: still a scalar.
    let mut f = metile_compiler::optimize_tile_ir(softmax_axis0(256)).unwrap();
    for op in f.body.ops.iter_mut() {
        if let OpKind::Reduce { axis, .. } = &mut op.kind {
            *axis = Some(0);
        }
    }
    assert!(internal_errors(&f, &CompileOptions::default(), &all_targets()).is_empty());
}

#[test]
fn the_check_reports_internal_errors_per_target() {
    // A result type the verifier rejects: every target reports it as a compiler bug.
    let mut f = softmax_axis0(32);
    let last = f.values.len() - 1;
    f.values[last] = Type::scalar(DType::Bool);
    let errors = internal_errors(&f, &CompileOptions::default(), &all_targets());
    let names: Vec<&str> = errors.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(names, ["apple", "apple10", "sm_80", "sm_90"]);
    assert!(errors.iter().all(|(_, e)| e.is_internal()), "{errors:?}");
}
