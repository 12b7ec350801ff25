//! Kernels that between them use every Tile IR op, for the tests that must
//! see every op (the text round trip, the per-pass filetests).

use super::{for_loop, int, loc, v};
use metile_ir::{
    AssumeFact, AtomicFlags, AtomicOp, BinaryOp, Builder, CmpOp, DType, Function, MemScope, MemSem, Operand,
    ParamKind, ReduceOp, ScanOp, SwizzlePattern, Type, UnaryOp, ValueId,
};

fn flags(sem: MemSem, scope: MemScope) -> AtomicFlags {
    AtomicFlags { sem, scope }
}

/// Element-wise math on every unary and binary op, casts, `fma`, `select`,
/// hints, and a store of the result.
pub fn math(block: usize) -> Function {
    let mut b = Builder::new("math");
    b.add_constexpr("BLOCK", &block.to_string());
    b.add_constexpr("MODE", "(1, 'a, b')");
    let x = b.add_param("X", ParamKind::Pointer(DType::F32));
    let out = b.add_param("Out", ParamKind::Pointer(DType::F32));
    let bits = b.add_param("Bits", ParamKind::Pointer(DType::I32));
    let n = b.add_param("N", ParamKind::Scalar(DType::I32));
    b.set_param_divisibility(n, 16);
    b.set_loc(loc(2));
    let pid = b.program_id(0).unwrap();
    let base = b.binary(BinaryOp::Mul, v(pid), int(block as i64)).unwrap();
    let base = b
        .assume(v(base), AssumeFact::MultipleOf, block as i64, "multiple_of")
        .unwrap();
    let ar = b.arange(0, block as i64).unwrap();
    let ar = b
        .assume(v(ar), AssumeFact::Contiguous, block as i64, "max_contiguous")
        .unwrap();
    let offs = b.binary(BinaryOp::Add, v(base), v(ar)).unwrap();
    let mask = b.compare(CmpOp::Lt, v(offs), v(n)).unwrap();
    let px = b.binary(BinaryOp::Add, v(x), v(offs)).unwrap();
    b.set_loc(loc(3));
    let xv = b.load(v(px), Some(v(mask)), Some(Operand::Float(0.5))).unwrap();
    let mut acc = xv;
    for (i, op) in [
        UnaryOp::Neg,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sqrt,
        UnaryOp::Abs,
        UnaryOp::Tanh,
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
    ]
    .into_iter()
    .enumerate()
    {
        b.set_loc(loc(10 + i as u32));
        let y = b.unary(op, v(xv)).unwrap();
        acc = b.binary(BinaryOp::Add, v(acc), v(y)).unwrap();
    }
    b.set_loc(loc(40));
    for op in [
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::FloorDiv,
        BinaryOp::Rem,
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::Pow,
        BinaryOp::Atan2,
    ] {
        acc = b.binary(op, v(acc), v(xv)).unwrap();
    }
    b.set_loc(loc(41));
    let ints = b.cast(acc, DType::I32).unwrap();
    let mut bits_acc = ints;
    for op in [
        BinaryOp::And,
        BinaryOp::Or,
        BinaryOp::Xor,
        BinaryOp::Shl,
        BinaryOp::Shr,
        BinaryOp::MulHi,
    ] {
        bits_acc = b.binary(op, v(bits_acc), v(ints)).unwrap();
    }
    let not = b.unary(UnaryOp::Not, v(bits_acc)).unwrap();
    b.set_loc(loc(42));
    let fused = b.fma(v(acc), v(xv), Operand::Float(-0.0)).unwrap();
    let mut picked = fused;
    for op in [CmpOp::Le, CmpOp::Gt, CmpOp::Ge, CmpOp::Eq, CmpOp::Ne] {
        let c = b.compare(op, v(picked), v(xv)).unwrap();
        picked = b.select(v(c), v(picked), Operand::Float(f64::INFINITY)).unwrap();
    }
    b.set_loc(loc(43));
    let po = b.binary(BinaryOp::Add, v(out), v(offs)).unwrap();
    b.store(v(po), v(picked), Some(v(mask))).unwrap();
    let pb = b.binary(BinaryOp::Add, v(bits), v(offs)).unwrap();
    b.store(v(pb), v(not), None).unwrap();
    b.finish().unwrap()
}

/// Shapes, reductions, scans, sorts, a `while`, an `if`, prints, asserts,
/// atomics and a swizzled 2-D grid.
pub fn shapes(rows: usize, cols: usize) -> Function {
    let mut b = Builder::new("shapes");
    let x = b.add_param("X", ParamKind::Pointer(DType::F32));
    let out = b.add_param("Out", ParamKind::Pointer(DType::F32));
    let counts = b.add_param("Counts", ParamKind::Pointer(DType::I32));
    let n = b.add_param("N", ParamKind::Scalar(DType::I32));
    b.set_loc(loc(2));
    let pm = b.program_id(0).unwrap();
    let pn = b.program_id(1).unwrap();
    let (pm, pn) = b.swizzle(v(pm), v(pn), SwizzlePattern::Morton, 4).unwrap();
    let gm = b.num_programs(0).unwrap();
    let tile = b.binary(BinaryOp::Mul, v(pm), v(gm)).unwrap();
    let tile = b.binary(BinaryOp::Add, v(tile), v(pn)).unwrap();
    let base = b
        .binary(BinaryOp::Mul, v(tile), int((rows * cols) as i64))
        .unwrap();
    b.set_loc(loc(3));
    let r = b.arange(0, rows as i64).unwrap();
    let r = b.expand_dims(r, 1).unwrap();
    let r = b.binary(BinaryOp::Mul, v(r), int(cols as i64)).unwrap();
    let c = b.arange(0, cols as i64).unwrap();
    let c = b.expand_dims(c, 0).unwrap();
    let offs = b.binary(BinaryOp::Add, v(r), v(c)).unwrap();
    let offs = b.binary(BinaryOp::Add, v(offs), v(base)).unwrap();
    let px = b.binary(BinaryOp::Add, v(x), v(offs)).unwrap();
    let tile_x = b.load(v(px), None, None).unwrap();
    b.set_loc(loc(4));
    let t = b.permute(v(tile_x), &[1, 0]).unwrap();
    let flat = b.reshape(v(t), &[(rows * cols) as i64]).unwrap();
    let back = b.reshape(v(flat), &[rows as i64, cols as i64]).unwrap();
    let joined = b.join(v(back), v(tile_x)).unwrap();
    let (lo, hi) = b.split(v(joined)).unwrap();
    let sum = b.binary(BinaryOp::Add, v(lo), v(hi)).unwrap();
    b.set_loc(loc(5));
    let row_max = b.reduce(ReduceOp::Max, v(sum), Some(1)).unwrap();
    let row_min = b.reduce(ReduceOp::Min, v(sum), Some(1)).unwrap();
    let spread = b.binary(BinaryOp::Sub, v(row_max), v(row_min)).unwrap();
    let total = b.reduce(ReduceOp::Sum, v(spread), None).unwrap();
    let prefix = b.scan(ScanOp::Sum, v(sum), 1, false).unwrap();
    let product = b.scan(ScanOp::Prod, v(prefix), 0, true).unwrap();
    let sorted = b.sort(v(product), Some(1), true).unwrap();
    let ascending = b.sort(v(sorted), Some(0), false).unwrap();
    b.set_loc(loc(6));
    let ints = b.cast(ascending, DType::I32).unwrap();
    let mixed = b.reduce(ReduceOp::Xor, v(ints), None).unwrap();
    b.device_print("mixed \"q\"", &[v(mixed)], true).unwrap();
    let positive = b.compare(CmpOp::Ge, v(total), Operand::Float(0.0)).unwrap();
    b.device_assert(v(positive), "the spread is not negative")
        .unwrap();
    b.set_loc(loc(7));
    // while i < N: i = i * 2 + 1
    let zero = b.constant(metile_ir::Literal::Int(0), DType::I32);
    let i32s = Type::scalar(DType::I32);
    let args = b.push_block(std::slice::from_ref(&i32s));
    let go = b.compare(CmpOp::Lt, v(args[0]), v(n)).unwrap();
    b.yield_values(&[go]);
    let cond = b.pop_block().unwrap();
    let args = b.push_block(&[i32s]);
    let twice = b.binary(BinaryOp::Mul, v(args[0]), int(2)).unwrap();
    let next = b.binary(BinaryOp::Add, v(twice), int(1)).unwrap();
    b.yield_values(&[next]);
    let body = b.pop_block().unwrap();
    let steps = b.finish_while(&[zero], cond, body)[0];
    b.set_loc(loc(8));
    let big = b.compare(CmpOp::Gt, v(steps), int(100)).unwrap();
    b.push_block(&[]);
    let scaled = b.binary(BinaryOp::Mul, v(total), Operand::Float(2.0)).unwrap();
    b.yield_values(&[scaled]);
    let then_b = b.pop_block().unwrap();
    b.push_block(&[]);
    b.yield_values(&[total]);
    let else_b = b.pop_block().unwrap();
    let chosen = b.finish_if(big, then_b, else_b, vec![Type::scalar(DType::F32)])[0];
    b.set_loc(loc(9));
    let po = b.binary(BinaryOp::Add, v(out), v(offs)).unwrap();
    let shifted = b.binary(BinaryOp::Add, v(ascending), v(chosen)).unwrap();
    b.store(v(po), v(shifted), None).unwrap();
    b.set_loc(loc(10));
    let pc = b.binary(BinaryOp::Add, v(counts), v(ints)).unwrap();
    let fine = b.compare(CmpOp::Lt, v(ints), v(n)).unwrap();
    b.atomic(
        AtomicOp::Add,
        v(pc),
        None,
        int(1),
        Some(v(fine)),
        flags(MemSem::AcqRel, MemScope::Gpu),
    )
    .unwrap();
    b.atomic(
        AtomicOp::Max,
        v(counts),
        None,
        v(steps),
        None,
        flags(MemSem::Relaxed, MemScope::Cta),
    )
    .unwrap();
    b.atomic(
        AtomicOp::Cas,
        v(counts),
        Some(int(0)),
        int(1),
        None,
        flags(MemSem::Acquire, MemScope::Gpu),
    )
    .unwrap();
    b.finish().unwrap()
}

/// Thread-level ops: thread and lane ids, shuffles, threadgroup memory,
/// barriers and simdgroup roles, traced for `threads` threads.
pub fn threads(threads: usize) -> Function {
    let mut b = Builder::new("threads");
    b.set_threads_per_group(threads);
    let x = b.add_param("X", ParamKind::Pointer(DType::F32));
    let out = b.add_param("Out", ParamKind::Pointer(DType::F32));
    b.set_loc(loc(2));
    let tid = b.thread_id().unwrap();
    let lane = b.simd_lane_id().unwrap();
    let px = b.binary(BinaryOp::Add, v(x), v(tid)).unwrap();
    let xv = b.load(v(px), None, None).unwrap();
    b.set_loc(loc(3));
    let swapped = b.simd_shuffle_xor(v(xv), int(1)).unwrap();
    let first = b.simd_broadcast(v(swapped), int(0)).unwrap();
    let lane_f = b.cast(lane, DType::F32).unwrap();
    let mixed = b.binary(BinaryOp::Add, v(first), v(lane_f)).unwrap();
    b.set_loc(loc(4));
    let scratch = b.shared(threads as i64, DType::F32).unwrap();
    let ps = b.binary(BinaryOp::Add, v(scratch), v(tid)).unwrap();
    b.store(v(ps), v(mixed), None).unwrap();
    b.barrier();
    b.set_loc(loc(5));
    b.push_block(&[]);
    let back = b.load(v(ps), None, None).unwrap();
    let po = b.binary(BinaryOp::Add, v(out), v(tid)).unwrap();
    b.store(v(po), v(back), None).unwrap();
    b.yield_values(&[]);
    let body = b.pop_block().unwrap();
    b.finish_simdgroup_role(0, 2, body).unwrap();
    b.finish().unwrap()
}

/// A GEMM written with pointer tiles advanced in the loop (Triton's
/// tutorial), with a software-pipelining hint.
pub fn pointer_gemm(bm: usize, bn: usize, bk: usize, dtype: DType) -> Function {
    let mut b = Builder::new("pointer_gemm");
    let a = b.add_param("A", ParamKind::Pointer(dtype));
    let bb = b.add_param("B", ParamKind::Pointer(dtype));
    let c = b.add_param("C", ParamKind::Pointer(DType::F32));
    let k = b.add_param("K", ParamKind::Scalar(DType::I32));
    let n = b.add_param("N", ParamKind::Scalar(DType::I32));
    b.set_loc(loc(2));
    let pm = b.program_id(0).unwrap();
    let pn = b.program_id(1).unwrap();
    let rm = b.binary(BinaryOp::Mul, v(pm), int(bm as i64)).unwrap();
    let rn = b.binary(BinaryOp::Mul, v(pn), int(bn as i64)).unwrap();
    let offs = |b: &mut Builder, base: ValueId, len: usize, axis: i64| {
        let ar = b.arange(0, len as i64).unwrap();
        let o = b.binary(BinaryOp::Add, v(base), v(ar)).unwrap();
        b.expand_dims(o, axis).unwrap()
    };
    let am = offs(&mut b, rm, bm, 1);
    let bnn = offs(&mut b, rn, bn, 0);
    let zero = b.constant(metile_ir::Literal::Int(0), DType::I32);
    let ak = offs(&mut b, zero, bk, 0);
    let bkk = offs(&mut b, zero, bk, 1);
    b.set_loc(loc(3));
    let a_rows = b.binary(BinaryOp::Mul, v(am), v(k)).unwrap();
    let a_offs = b.binary(BinaryOp::Add, v(a_rows), v(ak)).unwrap();
    let a_ptrs = b.binary(BinaryOp::Add, v(a), v(a_offs)).unwrap();
    let b_rows = b.binary(BinaryOp::Mul, v(bkk), v(n)).unwrap();
    let b_offs = b.binary(BinaryOp::Add, v(b_rows), v(bnn)).unwrap();
    let b_ptrs = b.binary(BinaryOp::Add, v(bb), v(b_offs)).unwrap();
    let acc0 = b.full(&[bm, bn], Operand::Float(0.0), DType::F32).unwrap();
    b.set_loc(loc(4));
    let step = b.binary(BinaryOp::Mul, int(bk as i64), v(n)).unwrap();
    let out = for_loop(
        &mut b,
        (int(0), v(k), int(bk as i64)),
        &[acc0, a_ptrs, b_ptrs],
        |b, _, carried| {
            b.set_loc(loc(5));
            let ta = b.load(v(carried[1]), None, None).unwrap();
            let tb = b.load(v(carried[2]), None, None).unwrap();
            let acc = b.dot(v(ta), v(tb), Some(v(carried[0]))).unwrap();
            b.set_loc(loc(6));
            let na = b.binary(BinaryOp::Add, v(carried[1]), int(bk as i64)).unwrap();
            let nb = b.binary(BinaryOp::Add, v(carried[2]), v(step)).unwrap();
            vec![acc, na, nb]
        },
    );
    b.set_loc(loc(7));
    let c_rows = b.binary(BinaryOp::Mul, v(am), v(n)).unwrap();
    let c_offs = b.binary(BinaryOp::Add, v(c_rows), v(bnn)).unwrap();
    let c_ptrs = b.binary(BinaryOp::Add, v(c), v(c_offs)).unwrap();
    b.store(v(c_ptrs), v(out[0]), None).unwrap();
    b.finish().unwrap()
}
