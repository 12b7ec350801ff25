//! Times the interpreter on the two reference kernels (vector add of 2^24 f32 and a
//! three-pass row softmax of 4096x4096 f32), built with `metile_ir::Builder` the way
//! the frontend traces them.
//!
//! `cargo run --release -p metile-interp --example interp_bench`

use metile_interp::{Executable, KernelArg, ScalarValue};
use metile_ir::{
    BinaryOp, Builder, CmpOp, DType, Function, Literal, Operand, ParamKind, ReduceOp, Type, UnaryOp,
};
use std::sync::Arc;
use std::time::Instant;

const BLOCK: usize = 1024;

fn vector_add() -> Function {
    let mut b = Builder::new("add");
    let x = b.add_param("X", ParamKind::Pointer(DType::F32));
    let y = b.add_param("Y", ParamKind::Pointer(DType::F32));
    let out = b.add_param("Out", ParamKind::Pointer(DType::F32));
    let n = b.add_param("N", ParamKind::Scalar(DType::I32));
    let pid = b.program_id(0).unwrap();
    let base = b
        .binary(BinaryOp::Mul, pid.into(), Operand::Int(BLOCK as i64))
        .unwrap();
    let ar = b.arange(0, BLOCK as i64).unwrap();
    let offs = b.binary(BinaryOp::Add, base.into(), ar.into()).unwrap();
    let mask = b.compare(CmpOp::Lt, offs.into(), n.into()).unwrap();
    let px = b.binary(BinaryOp::Add, x.into(), offs.into()).unwrap();
    let py = b.binary(BinaryOp::Add, y.into(), offs.into()).unwrap();
    let xv = b.load(px.into(), Some(mask.into()), None).unwrap();
    let yv = b.load(py.into(), Some(mask.into()), None).unwrap();
    let sum = b.binary(BinaryOp::Add, xv.into(), yv.into()).unwrap();
    let po = b.binary(BinaryOp::Add, out.into(), offs.into()).unwrap();
    b.store(po.into(), sum.into(), Some(mask.into())).unwrap();
    b.finish().unwrap()
}

/// One `for i in tile_range(0, N, BLOCK)` loop over a row; `body` gets the builder,
/// the loaded block `x`, the pointer offset tile and mask, and the carried values.
fn row_loop(
    b: &mut Builder,
    (x, row_base, n): (metile_ir::ValueId, metile_ir::ValueId, metile_ir::ValueId),
    inits: &[metile_ir::ValueId],
    body: impl FnOnce(
        &mut Builder,
        metile_ir::ValueId,
        metile_ir::ValueId,
        metile_ir::ValueId,
        &[metile_ir::ValueId],
    ) -> Vec<metile_ir::ValueId>,
) -> Vec<metile_ir::ValueId> {
    let zero = b.constant(Literal::Int(0), DType::I32);
    let step = b.constant(Literal::Int(BLOCK as i64), DType::I32);
    let mut arg_types = vec![Type::scalar(DType::I32)];
    arg_types.extend(inits.iter().map(|&v| b.ty(v).clone()));
    let args = b.push_block(&arg_types);
    let ar = b.arange(0, BLOCK as i64).unwrap();
    let cols = b.binary(BinaryOp::Add, args[0].into(), ar.into()).unwrap();
    let mask = b.compare(CmpOp::Lt, cols.into(), n.into()).unwrap();
    let offs = b.binary(BinaryOp::Add, row_base.into(), cols.into()).unwrap();
    let p = b.binary(BinaryOp::Add, x.into(), offs.into()).unwrap();
    let xv = b.load(p.into(), Some(mask.into()), None).unwrap();
    let yields = body(b, xv, offs, mask, &args[1..]);
    b.yield_values(&yields);
    let block = b.pop_block().unwrap();
    b.finish_for(zero, n, step, inits, block).unwrap()
}

fn softmax() -> Function {
    let mut b = Builder::new("softmax");
    let x = b.add_param("X", ParamKind::Pointer(DType::F32));
    let out = b.add_param("Out", ParamKind::Pointer(DType::F32));
    let n = b.add_param("N", ParamKind::Scalar(DType::I32));
    let row = b.program_id(0).unwrap();
    let row_base = b.binary(BinaryOp::Mul, row.into(), n.into()).unwrap();
    let ctx = (x, row_base, n);

    let m0 = b.full(&[BLOCK], Operand::Float(-1e38), DType::F32).unwrap();
    let m = row_loop(&mut b, ctx, &[m0], |b, xv, _, _, carried| {
        vec![b.binary(BinaryOp::Max, carried[0].into(), xv.into()).unwrap()]
    });
    let m = b.reduce(ReduceOp::Max, m[0].into(), None).unwrap();

    let s0 = b.full(&[BLOCK], Operand::Float(0.0), DType::F32).unwrap();
    let s = row_loop(&mut b, ctx, &[s0], |b, xv, _, _, carried| {
        let d = b.binary(BinaryOp::Sub, xv.into(), m.into()).unwrap();
        let e = b.unary(UnaryOp::Exp, d.into()).unwrap();
        vec![b.binary(BinaryOp::Add, carried[0].into(), e.into()).unwrap()]
    });
    let s = b.reduce(ReduceOp::Sum, s[0].into(), None).unwrap();

    row_loop(&mut b, ctx, &[], |b, xv, offs, mask, _| {
        let d = b.binary(BinaryOp::Sub, xv.into(), m.into()).unwrap();
        let e = b.unary(UnaryOp::Exp, d.into()).unwrap();
        let q = b.binary(BinaryOp::Div, e.into(), s.into()).unwrap();
        let p = b.binary(BinaryOp::Add, out.into(), offs.into()).unwrap();
        b.store(p.into(), q.into(), Some(mask.into())).unwrap();
        vec![]
    });
    b.finish().unwrap()
}

fn buffer(v: &mut [f32]) -> KernelArg {
    KernelArg::Buffer {
        ptr: v.as_mut_ptr() as *mut u8,
        len: v.len(),
        dtype: DType::F32,
    }
}

/// Best and median of `reps` timed runs, in milliseconds.
fn time(reps: usize, mut f: impl FnMut()) -> (f64, f64) {
    f();
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    t.sort_by(f64::total_cmp);
    (t[0], t[reps / 2])
}

fn main() {
    let threads = rayon::current_num_threads();
    println!("rayon threads: {threads}");
    // An optional argument picks one benchmark ("add" or "softmax").
    let only = std::env::args().nth(1);
    let wants = |name: &str| only.as_deref().is_none_or(|o| o == name);

    if wants("add") {
        bench_add();
    }
    if wants("softmax") {
        bench_softmax();
    }
}

fn bench_add() {
    // BENCH_ADD_LOG2 shrinks the problem to measure per-instance overhead in cache.
    let log2 = std::env::var("BENCH_ADD_LOG2")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    let n = 1usize << log2;
    let mut x: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 0.5).collect();
    let mut y: Vec<f32> = (0..n).map(|i| (i % 777) as f32).collect();
    let mut out = vec![0f32; n];
    let add = Executable::new(Arc::new(vector_add())).expect("prepare add");
    let grid = [n.div_ceil(BLOCK) as u32, 1, 1];
    let (best, median) = time(15, || {
        let args = [
            buffer(&mut x),
            buffer(&mut y),
            buffer(&mut out),
            KernelArg::Scalar(ScalarValue::I32(n as i32)),
        ];
        unsafe { add.launch(&args, grid) }.expect("launch add");
    });
    assert!(out.iter().zip(x.iter().zip(&y)).all(|(o, (a, b))| *o == a + b));
    println!("vector add 2^{log2} f32: best {best:.2} ms, median {median:.2} ms");
}

fn bench_softmax() {
    let rows = 4096usize;
    let cols = 4096usize;
    let mut xs: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 7919) % 1000) as f32 * 0.01 - 5.0)
        .collect();
    let mut outs = vec![0f32; rows * cols];
    let sm = Executable::new(Arc::new(softmax())).expect("prepare softmax");
    let (best, median) = time(10, || {
        let args = [
            buffer(&mut xs),
            buffer(&mut outs),
            KernelArg::Scalar(ScalarValue::I32(cols as i32)),
        ];
        unsafe { sm.launch(&args, [rows as u32, 1, 1]) }.expect("launch softmax");
    });
    let row_sum: f32 = outs[..cols].iter().sum();
    assert!((row_sum - 1.0).abs() < 1e-3, "row sums to {row_sum}");
    println!("softmax 4096x4096 f32: best {best:.2} ms, median {median:.2} ms");
}
