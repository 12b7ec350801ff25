//! The MSL lowering checked against the interpreter (see `msl_lowering.rs`):
//! layout conversions through threadgroup memory (including ones larger than
//! it, moved in chunks), reductions and conversions inside loops and ifs,
//! loop-carried pointers, i64 offsets, bool tiles in memory, masks constant along
//! rows.

mod lowering_support;

use lowering_support::*;
use metile_ir::{BinaryOp, Builder, CmpOp, DType, Function, ParamKind, ReduceOp, Type};

/// Offsets of a row-major `[rows, cols]` tile.
fn offsets_2d(b: &mut Builder, rows: usize, cols: usize) -> metile_ir::ValueId {
    let r = b.arange(0, rows as i64).unwrap();
    let c = b.arange(0, cols as i64).unwrap();
    let r2 = b.expand_dims(r, 1).unwrap();
    let r2 = b.binary(BinaryOp::Mul, v(r2), int(cols as i64)).unwrap();
    let c2 = b.expand_dims(c, 0).unwrap();
    b.binary(BinaryOp::Add, v(r2), v(c2)).unwrap()
}

/// `Out = X + sum(Y, axis=2)`: the sum's slice layout differs from `X`'s blocked
/// layout, so it is converted through threadgroup memory (in chunks when the
/// tile is larger than 32 KiB).
fn conversion_kernel(rows: usize, cols: usize) -> Function {
    let mut b = Builder::new("conversion");
    let x = b.add_param("X", ParamKind::Pointer(DType::F32));
    let y = b.add_param("Y", ParamKind::Pointer(DType::F32));
    let out = b.add_param("Out", ParamKind::Pointer(DType::F32));
    let offs = offsets_2d(&mut b, rows, cols);
    let px = b.binary(BinaryOp::Add, v(x), v(offs)).unwrap();
    let xv = b.load(v(px), None, None).unwrap();
    // Y is [rows, cols, 2]: element (r, c, k) at 2 * (r * cols + c) + k.
    let o3 = b.expand_dims(offs, 2).unwrap();
    let o3 = b.binary(BinaryOp::Mul, v(o3), int(2)).unwrap();
    let k = b.arange(0, 2).unwrap();
    let k = b.expand_dims(k, 0).unwrap();
    let k = b.expand_dims(k, 0).unwrap();
    let o3 = b.binary(BinaryOp::Add, v(o3), v(k)).unwrap();
    let py = b.binary(BinaryOp::Add, v(y), v(o3)).unwrap();
    let yv = b.load(v(py), None, None).unwrap();
    let s = b.reduce(ReduceOp::Sum, v(yv), Some(2)).unwrap();
    let sum = b.binary(BinaryOp::Add, v(xv), v(s)).unwrap();
    let po = b.binary(BinaryOp::Add, v(out), v(offs)).unwrap();
    b.store(v(po), v(sum), None).unwrap();
    b.finish().unwrap()
}

#[test]
fn layout_conversions_through_threadgroup_memory_match_including_chunked_ones() {
    for (rows, cols, sgs, seed) in [
        (16usize, 32usize, Some(4u32), 200u64),
        (64, 256, Some(8), 201),
        (8, 8, Some(1), 202),
    ] {
        let mut rng = Rng::new(seed);
        let n = rows * cols;
        let bufs = vec![
            Buf::random(DType::F32, n, &mut rng),
            Buf::random(DType::F32, 2 * n, &mut rng),
            Buf::filled(DType::F32, n, 0.0),
        ];
        let mut case = Case::new(
            conversion_kernel(rows, cols),
            bufs,
            vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2)],
            [1, 1, 1],
        );
        case.num_sgs = sgs;
        case.check();
    }
}

/// Per program: a loop over row blocks whose body reduces each block along its
/// rows and accumulates into a carried 1-D tile; a pointer advanced by the
/// loop; an `if` whose branch holds a reduction.
fn loop_reduction_kernel(rows: usize, cols: usize, blocks: usize) -> Function {
    let mut b = Builder::new("loop_reduce");
    let x = b.add_param("X", ParamKind::Pointer(DType::F32));
    let out = b.add_param("Out", ParamKind::Pointer(DType::F32));
    let pid = b.program_id(0).unwrap();
    let per_program = (rows * cols * blocks) as i64;
    let start = b.binary(BinaryOp::Mul, v(pid), int(per_program)).unwrap();
    let base = b.binary(BinaryOp::Add, v(x), v(start)).unwrap();
    let offs = offsets_2d(&mut b, rows, cols);
    let ptrs0 = b.broadcast_to(base, &[rows, cols]).unwrap();
    let ptrs0 = b.binary(BinaryOp::Add, v(ptrs0), v(offs)).unwrap();
    let acc0 = b.full(&[cols], float(0.0), DType::F32).unwrap();
    let res = for_loop(
        &mut b,
        (int(0), int(blocks as i64), int(1)),
        &[acc0, ptrs0],
        |b, _i, carried| {
            let t = b.load(v(carried[1]), None, None).unwrap();
            let colmax = b.reduce(ReduceOp::Max, v(t), Some(0)).unwrap();
            let acc = b.binary(BinaryOp::Add, v(carried[0]), v(colmax)).unwrap();
            let next = b
                .binary(BinaryOp::Add, v(carried[1]), int((rows * cols) as i64))
                .unwrap();
            vec![acc, next]
        },
    );
    let acc = res[0];
    let parity = b.binary(BinaryOp::Rem, v(pid), int(2)).unwrap();
    let even = b.compare(CmpOp::Eq, v(parity), int(0)).unwrap();
    let total = if_else(
        &mut b,
        v(even),
        &[Type::scalar(DType::F32)],
        |b| vec![b.reduce(ReduceOp::Sum, v(acc), None).unwrap()],
        |b| vec![b.reduce(ReduceOp::Min, v(acc), None).unwrap()],
    )[0];
    let c = b.arange(0, cols as i64).unwrap();
    let slot = b.binary(BinaryOp::Mul, v(pid), int(cols as i64 + 1)).unwrap();
    let pc = b.binary(BinaryOp::Add, v(out), v(slot)).unwrap();
    let pcs = b.binary(BinaryOp::Add, v(pc), v(c)).unwrap();
    b.store(v(pcs), v(acc), None).unwrap();
    let pt = b.binary(BinaryOp::Add, v(pc), int(cols as i64)).unwrap();
    b.store(v(pt), v(total), None).unwrap();
    b.finish().unwrap()
}

#[test]
fn reductions_in_loops_and_ifs_and_carried_pointers_match() {
    for (rows, cols, blocks, seed) in [(8usize, 64usize, 3usize, 210u64), (32, 32, 2, 211)] {
        let mut rng = Rng::new(seed);
        let programs = 3;
        let bufs = vec![
            Buf::random(DType::F32, rows * cols * blocks * programs, &mut rng),
            Buf::filled(DType::F32, (cols + 1) * programs, 0.0),
        ];
        Case::new(
            loop_reduction_kernel(rows, cols, blocks),
            bufs,
            vec![Arg::Buf(0), Arg::Buf(1)],
            [programs as u32, 1, 1],
        )
        .scale(8.0)
        .check();
    }
}

/// i64 offsets, bool tiles loaded and stored, and a 2-D mask that is constant
/// along each row (`rows < M`), which guards whole vector runs.
fn memory_kernel(rows: usize, cols: usize) -> Function {
    let mut b = Builder::new("memory_corners");
    let x = b.add_param("X", ParamKind::Pointer(DType::F32));
    let flags = b.add_param("Flags", ParamKind::Pointer(DType::Bool));
    let out = b.add_param("Out", ParamKind::Pointer(DType::F32));
    let out_flags = b.add_param("OutFlags", ParamKind::Pointer(DType::Bool));
    let m = b.add_param("M", ParamKind::Scalar(DType::I32));
    let offs = offsets_2d(&mut b, rows, cols);
    let offs64 = b.cast(offs, DType::I64).unwrap();
    let r = b.arange(0, rows as i64).unwrap();
    let r2 = b.expand_dims(r, 1).unwrap();
    let row_ok = b.compare(CmpOp::Lt, v(r2), v(m)).unwrap();
    let row_ok = b.broadcast_to(row_ok, &[rows, cols]).unwrap();
    let px = b.binary(BinaryOp::Add, v(x), v(offs64)).unwrap();
    let xv = b.load(v(px), Some(v(row_ok)), Some(float(3.5))).unwrap();
    let pf = b.binary(BinaryOp::Add, v(flags), v(offs)).unwrap();
    let fv = b.load(v(pf), None, None).unwrap();
    let neg = b.binary(BinaryOp::Sub, float(0.0), v(xv)).unwrap();
    let chosen = b.select(v(fv), v(xv), v(neg)).unwrap();
    let po = b.binary(BinaryOp::Add, v(out), v(offs64)).unwrap();
    b.store(v(po), v(chosen), Some(v(row_ok))).unwrap();
    let positive = b.compare(CmpOp::Gt, v(chosen), float(0.0)).unwrap();
    let flipped = b.binary(BinaryOp::Xor, v(positive), v(fv)).unwrap();
    let pof = b.binary(BinaryOp::Add, v(out_flags), v(offs)).unwrap();
    b.store(v(pof), v(flipped), None).unwrap();
    b.finish().unwrap()
}

#[test]
fn i64_offsets_bool_tiles_and_row_masks_match() {
    for (rows, cols, m, seed) in [
        (16usize, 32usize, 11i32, 220u64),
        (8, 4, 8, 221),
        (32, 64, 0, 222),
    ] {
        let mut rng = Rng::new(seed);
        let n = rows * cols;
        let bufs = vec![
            Buf::random(DType::F32, n, &mut rng),
            Buf::random(DType::Bool, n, &mut rng),
            Buf::filled(DType::F32, n, 9.0),
            Buf::filled(DType::Bool, n, 1.0),
        ];
        Case::new(
            memory_kernel(rows, cols),
            bufs,
            vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2), Arg::Buf(3), i32_arg(m)],
            [1, 1, 1],
        )
        .check();
    }
}
