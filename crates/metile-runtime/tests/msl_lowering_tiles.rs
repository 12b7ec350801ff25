//! The MSL lowering checked against the interpreter (see `msl_lowering.rs`):
//! `dot` (the seed GEMM, chunked staging), `tile_load`/`tile_store`, tile
//! swizzles, 3-D grids and thread-level ops.

mod lowering_support;

use lowering_support::*;
use metile_ir::{BinaryOp, Builder, CmpOp, DType, Function, ParamKind, ReduceOp, SwizzlePattern};

/// The seed's GEMM.
fn gemm_kernel(bm: usize, bn: usize, bk: usize, dtype: DType) -> Function {
    let mut b = Builder::new("gemm");
    let a = b.add_param("A", ParamKind::Pointer(dtype));
    let bb = b.add_param("B", ParamKind::Pointer(dtype));
    let c = b.add_param("C", ParamKind::Pointer(DType::F32));
    let _m = b.add_param("M", ParamKind::Scalar(DType::I32));
    let n = b.add_param("N", ParamKind::Scalar(DType::I32));
    let k = b.add_param("K", ParamKind::Scalar(DType::I32));
    let pid_m = b.program_id(0).unwrap();
    let pid_n = b.program_id(1).unwrap();
    let row = b.binary(BinaryOp::Mul, v(pid_m), int(bm as i64)).unwrap();
    let col = b.binary(BinaryOp::Mul, v(pid_n), int(bn as i64)).unwrap();
    let acc0 = b.full(&[bm, bn], float(0.0), DType::F32).unwrap();
    let acc = for_loop(
        &mut b,
        (int(0), v(k), int(bk as i64)),
        &[acc0],
        |b, kk, carried| {
            let ta = b
                .tile_load(v(a), v(row), v(kk), v(k), (bm as i64, bk as i64))
                .unwrap();
            let tb = b
                .tile_load(v(bb), v(kk), v(col), v(n), (bk as i64, bn as i64))
                .unwrap();
            vec![b.dot(v(ta), v(tb), Some(v(carried[0]))).unwrap()]
        },
    )[0];
    b.tile_store(v(c), v(row), v(col), v(n), v(acc), (bm as i64, bn as i64))
        .unwrap();
    b.finish().unwrap()
}

fn gemm_case(m: usize, n: usize, k: usize, blocks: (usize, usize, usize), dtype: DType, seed: u64) -> Case {
    let mut rng = Rng::new(seed);
    let bufs = vec![
        Buf::random(dtype, m * k, &mut rng),
        Buf::random(dtype, k * n, &mut rng),
        Buf::filled(DType::F32, m * n, 0.0),
    ];
    let grid = [(m / blocks.0) as u32, (n / blocks.1) as u32, 1];
    Case::new(
        gemm_kernel(blocks.0, blocks.1, blocks.2, dtype),
        bufs,
        vec![
            Arg::Buf(0),
            Arg::Buf(1),
            Arg::Buf(2),
            i32_arg(m as i32),
            i32_arg(n as i32),
            i32_arg(k as i32),
        ],
        grid,
    )
    .scale(20.0)
}

#[test]
fn seed_gemm_matches_the_interpreter() {
    gemm_case(64, 64, 64, (32, 32, 16), DType::F32, 100).check();
    gemm_case(64, 96, 48, (32, 32, 16), DType::F16, 101).check();
    gemm_case(32, 64, 32, (16, 32, 8), DType::BF16, 102).check();
    // Odd strides: the tile accesses cannot be vectorised and take the element path.
    gemm_case(48, 40, 24, (16, 8, 8), DType::F32, 103).check();
    gemm_case(64, 64, 32, (64, 64, 32), DType::F32, 104)
        .sgs(4)
        .check();
}

#[test]
fn gemm_whose_operands_exceed_threadgroup_memory_stages_k_in_chunks() {
    // (128 + 128) * 64 f32 = 64 KiB: staged 16 columns of K at a time.
    gemm_case(128, 128, 128, (128, 128, 64), DType::F32, 105).check();
}

/// `B[tile] = A[tile] * 2 + 1` through tile_load/tile_store at (row, col) with a stride.
fn tile_copy_kernel(rows: usize, cols: usize) -> Function {
    let mut b = Builder::new("tile_copy");
    let a = b.add_param("A", ParamKind::Pointer(DType::F32));
    let out = b.add_param("B", ParamKind::Pointer(DType::F32));
    let stride = b.add_param("S", ParamKind::Scalar(DType::I32));
    let pid_m = b.program_id(0).unwrap();
    let pid_n = b.program_id(1).unwrap();
    let row = b.binary(BinaryOp::Mul, v(pid_m), int(rows as i64)).unwrap();
    let col = b.binary(BinaryOp::Mul, v(pid_n), int(cols as i64)).unwrap();
    let t = b
        .tile_load(v(a), v(row), v(col), v(stride), (rows as i64, cols as i64))
        .unwrap();
    let t2 = b.binary(BinaryOp::Mul, v(t), float(2.0)).unwrap();
    let t3 = b.binary(BinaryOp::Add, v(t2), float(1.0)).unwrap();
    b.tile_store(
        v(out),
        v(row),
        v(col),
        v(stride),
        v(t3),
        (rows as i64, cols as i64),
    )
    .unwrap();
    b.finish().unwrap()
}

#[test]
fn tile_load_and_store_match_with_aligned_and_unaligned_strides() {
    for (rows, cols, stride, grid, seed) in [
        (16usize, 32usize, 64usize, [2u32, 2u32], 110u64),
        (16, 32, 67, [2, 2], 111),
        (8, 8, 17, [2, 2], 112),
        (4, 64, 130, [3, 2], 113),
    ] {
        let mut rng = Rng::new(seed);
        let len = stride * rows * grid[0] as usize;
        let bufs = vec![
            Buf::random(DType::F32, len, &mut rng),
            Buf::filled(DType::F32, len, 5.0),
        ];
        Case::new(
            tile_copy_kernel(rows, cols),
            bufs,
            vec![Arg::Buf(0), Arg::Buf(1), i32_arg(stride as i32)],
            [grid[0], grid[1], 1],
        )
        .check();
    }
}

/// `Out[pid_m * GN + pid_n] = (m', n')` for a swizzle.
fn swizzle_kernel(pattern: SwizzlePattern, block: i64) -> Function {
    let mut b = Builder::new("swizzle");
    let out = b.add_param("Out", ParamKind::Pointer(DType::I32));
    let pm = b.program_id(0).unwrap();
    let pn = b.program_id(1).unwrap();
    let gn = b.num_programs(1).unwrap();
    let (sm, sn) = b.swizzle(v(pm), v(pn), pattern, block).unwrap();
    let rank = b.binary(BinaryOp::Mul, v(pm), v(gn)).unwrap();
    let rank = b.binary(BinaryOp::Add, v(rank), v(pn)).unwrap();
    let slot = b.binary(BinaryOp::Mul, v(rank), int(2)).unwrap();
    let p = b.binary(BinaryOp::Add, v(out), v(slot)).unwrap();
    b.store(v(p), v(sm), None).unwrap();
    let p1 = b.binary(BinaryOp::Add, v(p), int(1)).unwrap();
    b.store(v(p1), v(sn), None).unwrap();
    b.finish().unwrap()
}

#[test]
fn tile_swizzles_match_the_interpreter_on_odd_grids() {
    for pattern in [SwizzlePattern::Morton, SwizzlePattern::Diagonal] {
        for (gm, gn, block) in [
            (4u32, 4u32, 1i64),
            (3, 5, 2),
            (7, 2, 1),
            (5, 9, 3),
            (1, 6, 2),
            (8, 8, 16),
        ] {
            let bufs = vec![Buf::filled(DType::I32, (gm * gn * 2) as usize, -1.0)];
            let got = Case::new(
                swizzle_kernel(pattern, block),
                bufs,
                vec![Arg::Buf(0)],
                [gm, gn, 1],
            )
            .check();
            if let Some(got) = got {
                // A bijection over the grid.
                let mut seen = std::collections::HashSet::new();
                for i in 0..(gm * gn) as usize {
                    seen.insert((got[0].get(2 * i) as i64, got[0].get(2 * i + 1) as i64));
                }
                assert_eq!(seen.len(), (gm * gn) as usize);
            }
        }
    }
}

/// Program ids and grid extents on all three axes.
fn grid_kernel() -> Function {
    let mut b = Builder::new("grid3d");
    let out = b.add_param("Out", ParamKind::Pointer(DType::I32));
    let ids: Vec<_> = (0..3).map(|a| b.program_id(a).unwrap()).collect();
    let ns: Vec<_> = (0..3).map(|a| b.num_programs(a).unwrap()).collect();
    // linear = (p2 * n1 + p1) * n0 + p0
    let l = b.binary(BinaryOp::Mul, v(ids[2]), v(ns[1])).unwrap();
    let l = b.binary(BinaryOp::Add, v(l), v(ids[1])).unwrap();
    let l = b.binary(BinaryOp::Mul, v(l), v(ns[0])).unwrap();
    let l = b.binary(BinaryOp::Add, v(l), v(ids[0])).unwrap();
    let code = b.binary(BinaryOp::Mul, v(ids[2]), int(100)).unwrap();
    let c1 = b.binary(BinaryOp::Mul, v(ids[1]), int(10)).unwrap();
    let code = b.binary(BinaryOp::Add, v(code), v(c1)).unwrap();
    let code = b.binary(BinaryOp::Add, v(code), v(ids[0])).unwrap();
    let total = b.binary(BinaryOp::Mul, v(ns[0]), v(ns[1])).unwrap();
    let total = b.binary(BinaryOp::Mul, v(total), v(ns[2])).unwrap();
    let code = b.binary(BinaryOp::Add, v(code), v(total)).unwrap();
    let p = b.binary(BinaryOp::Add, v(out), v(l)).unwrap();
    b.store(v(p), v(code), None).unwrap();
    b.finish().unwrap()
}

#[test]
fn three_dimensional_grids_match() {
    let bufs = vec![Buf::filled(DType::I32, 3 * 4 * 2, -1.0)];
    Case::new(grid_kernel(), bufs, vec![Arg::Buf(0)], [3, 4, 2]).check();
}

/// Thread-level ops against a 64-thread threadgroup.
fn thread_ops_kernel(threads: usize) -> Function {
    let mut b = Builder::new("thread_ops");
    b.set_threads_per_group(threads);
    let x = b.add_param("X", ParamKind::Pointer(DType::F32));
    let out = b.add_param("Out", ParamKind::Pointer(DType::F32));
    let ids = b.add_param("Ids", ParamKind::Pointer(DType::I32));
    let tid = b.thread_id().unwrap();
    let lane = b.simd_lane_id().unwrap();
    let px = b.binary(BinaryOp::Add, v(x), v(tid)).unwrap();
    let xv = b.load(v(px), None, None).unwrap();
    let swapped = b.simd_shuffle_xor(v(xv), int(1)).unwrap();
    let far = b.simd_shuffle_xor(v(xv), int(16 + 32)).unwrap();
    let third = b.simd_broadcast(v(xv), int(3)).unwrap();
    let s = b.shared(threads as i64, DType::F32).unwrap();
    let ps = b.binary(BinaryOp::Add, v(s), v(tid)).unwrap();
    b.store(v(ps), v(xv), None).unwrap();
    b.barrier();
    let rev = b.binary(BinaryOp::Sub, int(threads as i64 - 1), v(tid)).unwrap();
    let pr = b.binary(BinaryOp::Add, v(s), v(rev)).unwrap();
    let reversed = b.load(v(pr), None, None).unwrap();
    let total = b.reduce(ReduceOp::Sum, v(xv), None).unwrap();
    for (k, val) in [swapped, far, third, reversed].into_iter().enumerate() {
        let off = b
            .binary(BinaryOp::Add, v(tid), int((k * threads) as i64))
            .unwrap();
        let p = b.binary(BinaryOp::Add, v(out), v(off)).unwrap();
        b.store(v(p), v(val), None).unwrap();
    }
    let tail = b
        .binary(BinaryOp::Add, v(out), int((4 * threads) as i64))
        .unwrap();
    b.store(v(tail), v(total), None).unwrap();
    let pi = b.binary(BinaryOp::Add, v(ids), v(tid)).unwrap();
    let both = b.binary(BinaryOp::Mul, v(tid), int(100)).unwrap();
    let both = b.binary(BinaryOp::Add, v(both), v(lane)).unwrap();
    let even = b.binary(BinaryOp::Rem, v(tid), int(2)).unwrap();
    let even = b.compare(CmpOp::Eq, v(even), int(0)).unwrap();
    b.store(v(pi), v(both), Some(v(even))).unwrap();
    b.finish().unwrap()
}

#[test]
fn thread_level_ops_match() {
    for threads in [64usize, 128] {
        let mut rng = Rng::new(120 + threads as u64);
        let bufs = vec![
            Buf::random(DType::F32, threads, &mut rng),
            Buf::filled(DType::F32, 4 * threads + 1, 0.0),
            Buf::filled(DType::I32, threads, -5.0),
        ];
        Case::new(
            thread_ops_kernel(threads),
            bufs,
            vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2)],
            [2, 1, 1],
        )
        .scale(4.0)
        .check();
    }
}

/// `simdgroup_role`: each role's simdgroups store their own thread ids. On a GPU
/// only the role's simdgroups run its body, so (unlike the interpreter, which
/// runs every body over the whole threadgroup) each half of the output comes
/// from a different role.
#[test]
fn simdgroup_roles_run_on_their_simdgroups() {
    let threads = 128;
    let mut b = Builder::new("roles");
    b.set_threads_per_group(threads);
    let out = b.add_param("Out", ParamKind::Pointer(DType::I32));
    for role in 0..2u32 {
        b.push_block(&[]);
        let tid = b.thread_id().unwrap();
        let lane = b.simd_lane_id().unwrap();
        // A simdgroup reduction inside the role is fine: its simdgroup runs it whole.
        let lane_sum = b.simd_shuffle_xor(v(lane), int(1)).unwrap();
        let code = b.binary(BinaryOp::Mul, v(tid), int(1000)).unwrap();
        let code = b
            .binary(BinaryOp::Add, v(code), int(i64::from(role) * 100))
            .unwrap();
        let code = b.binary(BinaryOp::Add, v(code), v(lane_sum)).unwrap();
        let p = b.binary(BinaryOp::Add, v(out), v(tid)).unwrap();
        b.store(v(p), v(code), None).unwrap();
        b.yield_values(&[]);
        let body = b.pop_block().unwrap();
        b.finish_simdgroup_role(role, 2, body).unwrap();
    }
    let f = b.finish().unwrap();
    let bufs = vec![Buf::filled(DType::I32, threads, -1.0)];
    if let Some(got) = Case::new(f, bufs, vec![Arg::Buf(0)], [1, 1, 1]).run_emulator() {
        for t in 0..threads {
            let role = if t < threads / 2 { 0 } else { 1 };
            let want = t as f64 * 1000.0 + f64::from(role) * 100.0 + ((t % 32) ^ 1) as f64;
            assert_eq!(got[0].get(t), want, "thread {t}");
        }
    }
}

/// `dot` with operands from pointer loads (not `tile_load`), an f16 accumulator
/// loaded from memory, and the product reduced along a row afterwards.
fn dot_variants_kernel(m: usize, n: usize, k: usize) -> Function {
    let mut b = Builder::new("dot_variants");
    let a = b.add_param("A", ParamKind::Pointer(DType::F16));
    let bb = b.add_param("B", ParamKind::Pointer(DType::F16));
    let c = b.add_param("C", ParamKind::Pointer(DType::F16));
    let out = b.add_param("Out", ParamKind::Pointer(DType::F16));
    let rows = b.add_param("RowSums", ParamKind::Pointer(DType::F32));
    let offsets = |b: &mut Builder, r: usize, cc: usize| {
        let ri = b.arange(0, r as i64).unwrap();
        let ci = b.arange(0, cc as i64).unwrap();
        let r2 = b.expand_dims(ri, 1).unwrap();
        let r2 = b.binary(BinaryOp::Mul, v(r2), int(cc as i64)).unwrap();
        let c2 = b.expand_dims(ci, 0).unwrap();
        b.binary(BinaryOp::Add, v(r2), v(c2)).unwrap()
    };
    let oa = offsets(&mut b, m, k);
    let pa = b.binary(BinaryOp::Add, v(a), v(oa)).unwrap();
    let ta = b.load(v(pa), None, None).unwrap();
    let ob = offsets(&mut b, k, n);
    let pb = b.binary(BinaryOp::Add, v(bb), v(ob)).unwrap();
    let tb = b.load(v(pb), None, None).unwrap();
    let oc = offsets(&mut b, m, n);
    let pc = b.binary(BinaryOp::Add, v(c), v(oc)).unwrap();
    let tc = b.load(v(pc), None, None).unwrap();
    let d = b.dot(v(ta), v(tb), Some(v(tc))).unwrap();
    let po = b.binary(BinaryOp::Add, v(out), v(oc)).unwrap();
    b.store(v(po), v(d), None).unwrap();
    let wide = b.cast(d, DType::F32).unwrap();
    let s = b.reduce(ReduceOp::Max, v(wide), Some(1)).unwrap();
    let ri = b.arange(0, m as i64).unwrap();
    let pr = b.binary(BinaryOp::Add, v(rows), v(ri)).unwrap();
    b.store(v(pr), v(s), None).unwrap();
    b.finish().unwrap()
}

#[test]
fn dot_with_loaded_operands_and_an_f16_accumulator_matches() {
    for (m, n, k, sgs, seed) in [
        (16usize, 16usize, 8usize, None, 130u64),
        (8, 32, 16, Some(2u32), 131),
        (32, 8, 4, Some(4), 132),
    ] {
        let mut rng = Rng::new(seed);
        let bufs = vec![
            Buf::random(DType::F16, m * k, &mut rng),
            Buf::random(DType::F16, k * n, &mut rng),
            Buf::random(DType::F16, m * n, &mut rng),
            Buf::filled(DType::F16, m * n, 0.0),
            Buf::filled(DType::F32, m, 0.0),
        ];
        let mut case = Case::new(
            dot_variants_kernel(m, n, k),
            bufs,
            vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2), Arg::Buf(3), Arg::Buf(4)],
            [1, 1, 1],
        )
        .scale(4.0);
        case.num_sgs = sgs;
        case.check();
    }
}

/// Tile-level work inside roles: each role's simdgroups compute whole tiles
/// (with a reduction inside the role, and a tile loaded before the roles), so
/// the result equals the interpreter's, which runs every body once.
fn tile_roles_kernel(block: usize, threads: usize) -> Function {
    let mut b = Builder::new("tile_roles");
    b.set_threads_per_group(threads);
    let a = b.add_param("A", ParamKind::Pointer(DType::F32));
    let bb = b.add_param("B", ParamKind::Pointer(DType::F32));
    let o1 = b.add_param("Out1", ParamKind::Pointer(DType::F32));
    let o2 = b.add_param("Out2", ParamKind::Pointer(DType::F32));
    let offs = b.arange(0, block as i64).unwrap();
    let pa = b.binary(BinaryOp::Add, v(a), v(offs)).unwrap();
    let before = b.load(v(pa), None, None).unwrap();
    b.push_block(&[]);
    let x = b.binary(BinaryOp::Mul, v(before), float(2.0)).unwrap();
    let p1 = b.binary(BinaryOp::Add, v(o1), v(offs)).unwrap();
    b.store(v(p1), v(x), None).unwrap();
    b.yield_values(&[]);
    let body = b.pop_block().unwrap();
    b.finish_simdgroup_role(0, 2, body).unwrap();
    b.push_block(&[]);
    let pb = b.binary(BinaryOp::Add, v(bb), v(offs)).unwrap();
    let y = b.load(v(pb), None, None).unwrap();
    let m = b.reduce(ReduceOp::Max, v(y), None).unwrap();
    let z = b.binary(BinaryOp::Sub, v(y), v(m)).unwrap();
    let z = b.binary(BinaryOp::Add, v(z), v(before)).unwrap();
    let p2 = b.binary(BinaryOp::Add, v(o2), v(offs)).unwrap();
    b.store(v(p2), v(z), None).unwrap();
    b.yield_values(&[]);
    let body = b.pop_block().unwrap();
    b.finish_simdgroup_role(1, 2, body).unwrap();
    b.finish().unwrap()
}

#[test]
fn tile_work_inside_simdgroup_roles_matches() {
    for (block, threads, seed) in [
        (64usize, 128usize, 140u64),
        (256, 256, 141),
        (16, 64, 142),
        (128, 96, 143),
    ] {
        let mut rng = Rng::new(seed);
        let bufs = vec![
            Buf::random(DType::F32, block, &mut rng),
            Buf::random(DType::F32, block, &mut rng),
            Buf::filled(DType::F32, block, 0.0),
            Buf::filled(DType::F32, block, 0.0),
        ];
        Case::new(
            tile_roles_kernel(block, threads),
            bufs,
            vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2), Arg::Buf(3)],
            [2, 1, 1],
        )
        .check();
    }
}
