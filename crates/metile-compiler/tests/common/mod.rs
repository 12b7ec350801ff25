//! Tile IR kernels built the way the Python frontend traces them (the seeds'
//! add, softmax and GEMM), shared by the compiler's tests.

#![allow(dead_code)]

pub mod zoo;

use metile_ir::{
    BinaryOp, Builder, CmpOp, DType, Function, Loc, Operand, ParamKind, ReduceOp, UnaryOp, ValueId,
};
use std::sync::Arc;

/// Default options but for the L2 program order, whose prologue the GEMM
/// goldens leave out so that they show the `dot` lowering alone (tests/split_k.rs
/// checks the prologue).
pub fn without_l2_order() -> metile_compiler::CompileOptions {
    let mut options = metile_compiler::CompileOptions::default();
    options.passes.set("l2_order", false);
    options
}

/// `f`, after checking that it prints, reads back and prints the same
/// (docs/ir.md): every kernel the tests build goes through here.
pub fn round_trips(f: Function) -> Function {
    metile_ir::text::check_tile_round_trip(&f).unwrap_or_else(|e| panic!("{e}"));
    f
}

pub fn loc(line: u32) -> Loc {
    Loc {
        file: Arc::from("kernels.py"),
        line,
    }
}

pub fn v(x: ValueId) -> Operand {
    Operand::Value(x)
}

pub fn int(x: i64) -> Operand {
    Operand::Int(x)
}

/// `for iv in range(start, end, step)` carrying `inits`.
pub fn for_loop(
    b: &mut Builder,
    (start, end, step): (Operand, Operand, Operand),
    inits: &[ValueId],
    body: impl FnOnce(&mut Builder, ValueId, &[ValueId]) -> Vec<ValueId>,
) -> Vec<ValueId> {
    b.build_for((start, end, step), inits, |b, iv, carried| {
        Ok(body(b, iv, carried))
    })
    .unwrap()
}

/// The seed's `add`: `Out[offs] = X[offs] + Y[offs]` under `offs < N`.
pub fn add(block: usize, dtype: DType) -> Function {
    let mut b = Builder::new("add");
    b.add_constexpr("BLOCK", &block.to_string());
    let x = b.add_param("X", ParamKind::Pointer(dtype));
    let y = b.add_param("Y", ParamKind::Pointer(dtype));
    let out = b.add_param("Out", ParamKind::Pointer(dtype));
    let n = b.add_param("N", ParamKind::Scalar(DType::I32));
    b.set_loc(loc(2));
    let pid = b.program_id(0).unwrap();
    b.set_loc(loc(3));
    let base = b.binary(BinaryOp::Mul, v(pid), int(block as i64)).unwrap();
    let ar = b.arange(0, block as i64).unwrap();
    let offs = b.binary(BinaryOp::Add, v(base), v(ar)).unwrap();
    b.set_loc(loc(4));
    let mask = b.compare(CmpOp::Lt, v(offs), v(n)).unwrap();
    b.set_loc(loc(5));
    let px = b.binary(BinaryOp::Add, v(x), v(offs)).unwrap();
    let xv = b.load(v(px), Some(v(mask)), None).unwrap();
    b.set_loc(loc(6));
    let py = b.binary(BinaryOp::Add, v(y), v(offs)).unwrap();
    let yv = b.load(v(py), Some(v(mask)), None).unwrap();
    b.set_loc(loc(7));
    let po = b.binary(BinaryOp::Add, v(out), v(offs)).unwrap();
    let sum = b.binary(BinaryOp::Add, v(xv), v(yv)).unwrap();
    b.store(v(po), v(sum), Some(v(mask))).unwrap();
    b.finish().unwrap()
}

/// The seed's three-pass softmax over one row per program.
pub fn softmax(block: usize) -> Function {
    let mut b = Builder::new("softmax");
    b.add_constexpr("BLOCK", &block.to_string());
    let x = b.add_param("X", ParamKind::Pointer(DType::F32));
    let out = b.add_param("Out", ParamKind::Pointer(DType::F32));
    let n = b.add_param("N", ParamKind::Scalar(DType::I32));
    b.set_loc(loc(3));
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
    b.set_loc(loc(4));
    let m0 = b.full(&[block], Operand::Float(-1e38), DType::F32).unwrap();
    let m = for_loop(
        &mut b,
        (int(0), v(n), int(block as i64)),
        &[m0],
        |b, i, carried| {
            b.set_loc(loc(9));
            let (xv, _, _) = load_block(b, i);
            b.set_loc(loc(10));
            vec![b.binary(BinaryOp::Max, v(carried[0]), v(xv)).unwrap()]
        },
    )[0];
    b.set_loc(loc(11));
    let m = b.reduce(ReduceOp::Max, v(m), None).unwrap();
    b.set_loc(loc(13));
    let s0 = b.full(&[block], Operand::Float(0.0), DType::F32).unwrap();
    let s = for_loop(
        &mut b,
        (int(0), v(n), int(block as i64)),
        &[s0],
        |b, i, carried| {
            b.set_loc(loc(17));
            let (xv, _, _) = load_block(b, i);
            b.set_loc(loc(18));
            let d = b.binary(BinaryOp::Sub, v(xv), v(m)).unwrap();
            let e = b.unary(UnaryOp::Exp, v(d)).unwrap();
            vec![b.binary(BinaryOp::Add, v(carried[0]), v(e)).unwrap()]
        },
    )[0];
    b.set_loc(loc(19));
    let s = b.reduce(ReduceOp::Sum, v(s), None).unwrap();
    for_loop(&mut b, (int(0), v(n), int(block as i64)), &[], |b, i, _| {
        b.set_loc(loc(24));
        let (xv, cols, mask) = load_block(b, i);
        b.set_loc(loc(25));
        let d = b.binary(BinaryOp::Sub, v(xv), v(m)).unwrap();
        let e = b.unary(UnaryOp::Exp, v(d)).unwrap();
        let q = b.binary(BinaryOp::Div, v(e), v(s)).unwrap();
        let p = b.binary(BinaryOp::Add, v(orow), v(cols)).unwrap();
        b.store(v(p), v(q), Some(v(mask))).unwrap();
        vec![]
    });
    b.finish().unwrap()
}

/// The seed's GEMM.
pub fn gemm(bm: usize, bn: usize, bk: usize, dtype: DType) -> Function {
    let mut b = Builder::new("gemm");
    for (k, val) in [("BLOCK_M", bm), ("BLOCK_N", bn), ("BLOCK_K", bk)] {
        b.add_constexpr(k, &val.to_string());
    }
    let a = b.add_param("A", ParamKind::Pointer(dtype));
    let bb = b.add_param("B", ParamKind::Pointer(dtype));
    let c = b.add_param("C", ParamKind::Pointer(DType::F32));
    let _m = b.add_param("M", ParamKind::Scalar(DType::I32));
    let n = b.add_param("N", ParamKind::Scalar(DType::I32));
    let k = b.add_param("K", ParamKind::Scalar(DType::I32));
    b.set_loc(loc(5));
    let pid_m = b.program_id(0).unwrap();
    let pid_n = b.program_id(1).unwrap();
    let row = b.binary(BinaryOp::Mul, v(pid_m), int(bm as i64)).unwrap();
    let col = b.binary(BinaryOp::Mul, v(pid_n), int(bn as i64)).unwrap();
    b.set_loc(loc(7));
    let acc0 = b.full(&[bm, bn], Operand::Float(0.0), DType::F32).unwrap();
    let acc = for_loop(
        &mut b,
        (int(0), v(k), int(bk as i64)),
        &[acc0],
        |b, kk, carried| {
            b.set_loc(loc(9));
            let ta = b
                .tile_load(v(a), v(row), v(kk), v(k), (bm as i64, bk as i64))
                .unwrap();
            b.set_loc(loc(10));
            let tb = b
                .tile_load(v(bb), v(kk), v(col), v(n), (bk as i64, bn as i64))
                .unwrap();
            b.set_loc(loc(11));
            vec![b.dot(v(ta), v(tb), Some(v(carried[0]))).unwrap()]
        },
    )[0];
    b.set_loc(loc(12));
    b.tile_store(v(c), v(row), v(col), v(n), v(acc), (bm as i64, bn as i64))
        .unwrap();
    b.finish().unwrap()
}
