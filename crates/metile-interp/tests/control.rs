//! Loops, ifs, grids, swizzles, thread-level ops, whole kernels, and property tests
//! that lazy and dense execution agree.

mod common;

use common::*;
use metile_interp::ExecError;
use metile_ir::{
    BinaryOp, Builder, CmpOp, DType, Function, Literal, Operand, ParamKind, ReduceOp, SwizzlePattern, Type,
    UnaryOp,
};
use proptest::prelude::*;

/// `acc = init; for i in range(start, end, step): acc = acc * 2 + i` (i32 scalar), and
/// also a tile carried alongside; stores the scalar to Out[0] and the tile to Out[1..5].
fn loop_kernel() -> Function {
    let mut b = Builder::new("loop");
    let out = b.add_param("Out", ParamKind::Pointer(DType::I32));
    let start = b.add_param("start", ParamKind::Scalar(DType::I32));
    let end = b.add_param("end", ParamKind::Scalar(DType::I32));
    let step = b.add_param("step", ParamKind::Scalar(DType::I32));
    b.set_loc(loc(30));
    let init = b.constant(Literal::Int(1), DType::I32);
    let tile_init = b.full(&[4], Operand::Int(0), DType::I32).unwrap();
    let args = b.push_block(&[
        Type::scalar(DType::I32),
        Type::scalar(DType::I32),
        Type::tile(DType::I32, &[4]),
    ]);
    let twice = b.binary(BinaryOp::Mul, args[1].into(), Operand::Int(2)).unwrap();
    let next = b.binary(BinaryOp::Add, twice.into(), args[0].into()).unwrap();
    let ar = b.arange(0, 4).unwrap();
    let t = b.binary(BinaryOp::Add, args[2].into(), ar.into()).unwrap();
    let t = b.binary(BinaryOp::Add, t.into(), args[0].into()).unwrap();
    b.yield_values(&[next, t]);
    let body = b.pop_block().unwrap();
    let res = b.finish_for(start, end, step, &[init, tile_init], body).unwrap();
    b.store(out.into(), res[0].into(), None).unwrap();
    let ar = b.arange(1, 5).unwrap();
    let p = b.binary(BinaryOp::Add, out.into(), ar.into()).unwrap();
    b.store(p.into(), res[1].into(), None).unwrap();
    b.finish().unwrap()
}

fn reference_loop(start: i32, end: i32, step: i32) -> Vec<i32> {
    let (mut acc, mut tile) = (1i32, [0i32; 4]);
    let mut i = start;
    while (step > 0 && i < end) || (step < 0 && i > end) {
        acc = acc.wrapping_mul(2).wrapping_add(i);
        for (k, t) in tile.iter_mut().enumerate() {
            *t += k as i32 + i;
        }
        i += step;
    }
    let mut v = vec![acc];
    v.extend(tile);
    v
}

#[test]
fn loops_carry_values_and_count_like_python_range() {
    for (start, end, step) in [
        (0, 5, 1),
        (2, 11, 3),
        (10, 0, -3),
        (5, 5, 1),
        (5, 0, 1),
        (0, 4, 7),
        (-4, -10, -1),
    ] {
        let out = run1(
            loop_kernel(),
            &[
                Data::zeros(DType::I32, 5),
                scalar_i32(start),
                scalar_i32(end),
                scalar_i32(step),
            ],
        );
        assert_eq!(
            out[0].i32s(),
            reference_loop(start, end, step),
            "range({start}, {end}, {step})"
        );
    }
}

#[test]
fn a_zero_loop_step_is_an_error() {
    let err = try_run(
        loop_kernel(),
        &[
            Data::zeros(DType::I32, 5),
            scalar_i32(0),
            scalar_i32(5),
            scalar_i32(0),
        ],
        [1, 1, 1],
    )
    .unwrap_err();
    assert!(matches!(err, ExecError::InvalidValue { .. }));
    let msg = err.to_string();
    assert!(
        msg.contains("tile_range step must not be zero") && msg.contains("test_kernel.py:30"),
        "{msg}"
    );
}

#[test]
fn loops_may_swap_carried_values() {
    // (a, b) = (b, a) three times: yields block arguments in swapped order.
    let mut b = Builder::new("swap");
    let out = b.add_param("Out", ParamKind::Pointer(DType::F32));
    let zero = b.constant(Literal::Int(0), DType::I32);
    let three = b.constant(Literal::Int(3), DType::I32);
    let one = b.constant(Literal::Int(1), DType::I32);
    let a0 = b.full(&[2], Operand::Float(1.0), DType::F32).unwrap();
    let b0 = b.full(&[2], Operand::Float(2.0), DType::F32).unwrap();
    let t = Type::tile(DType::F32, &[2]);
    let args = b.push_block(&[Type::scalar(DType::I32), t.clone(), t]);
    b.yield_values(&[args[2], args[1]]);
    let body = b.pop_block().unwrap();
    let res = b.finish_for(zero, three, one, &[a0, b0], body).unwrap();
    let ar = b.arange(0, 2).unwrap();
    let p = b.binary(BinaryOp::Add, out.into(), ar.into()).unwrap();
    b.store(p.into(), res[0].into(), None).unwrap();
    let ar2 = b.arange(2, 4).unwrap();
    let q = b.binary(BinaryOp::Add, out.into(), ar2.into()).unwrap();
    b.store(q.into(), res[1].into(), None).unwrap();
    let out = run1(b.finish().unwrap(), &[Data::zeros(DType::F32, 4)]);
    assert_eq!(out[0].f32s(), vec![2.0, 2.0, 1.0, 1.0]);
}

#[test]
fn nested_loops_and_loop_invariant_yields() {
    // total = sum over i < 3, j < 4 of (i * 10 + j); an inner loop yields an outer value unchanged.
    let mut b = Builder::new("nested");
    let out = b.add_param("Out", ParamKind::Pointer(DType::I32));
    let c = |b: &mut Builder, v| b.constant(Literal::Int(v), DType::I32);
    let (zero, three, four, one) = (c(&mut b, 0), c(&mut b, 3), c(&mut b, 4), c(&mut b, 1));
    let s = Type::scalar(DType::I32);
    let outer = b.push_block(&[s.clone(), s.clone()]);
    let inner = b.push_block(&[s.clone(), s.clone(), s.clone()]);
    let i10 = b
        .binary(BinaryOp::Mul, outer[0].into(), Operand::Int(10))
        .unwrap();
    let term = b.binary(BinaryOp::Add, i10.into(), inner[0].into()).unwrap();
    let acc = b.binary(BinaryOp::Add, inner[1].into(), term.into()).unwrap();
    b.yield_values(&[acc, outer[0]]);
    let inner_body = b.pop_block().unwrap();
    let r = b
        .finish_for(zero, four, one, &[outer[1], zero], inner_body)
        .unwrap();
    b.yield_values(&[r[0]]);
    let outer_body = b.pop_block().unwrap();
    let total = b.finish_for(zero, three, one, &[zero], outer_body).unwrap();
    b.store(out.into(), total[0].into(), None).unwrap();
    let out = run1(b.finish().unwrap(), &[Data::zeros(DType::I32, 1)]);
    assert_eq!(
        out[0].i32s(),
        vec![(0..3).flat_map(|i| (0..4).map(move |j| i * 10 + j)).sum::<i32>()]
    );
}

#[test]
fn if_runs_one_region_and_yields_its_values() {
    let mut b = Builder::new("branch");
    let out = b.add_param("Out", ParamKind::Pointer(DType::F32));
    let x = b.add_param("x", ParamKind::Scalar(DType::I32));
    let cond = b.compare(CmpOp::Gt, x.into(), Operand::Int(0)).unwrap();
    let t = Type::tile(DType::F32, &[3]);
    b.push_block(&[]);
    let ar = b.arange(0, 3).unwrap();
    let v = b.cast(ar, DType::F32).unwrap();
    b.yield_values(&[v]);
    let then_b = b.pop_block().unwrap();
    b.push_block(&[]);
    let w = b.full(&[3], Operand::Float(-1.0), DType::F32).unwrap();
    b.yield_values(&[w]);
    let else_b = b.pop_block().unwrap();
    let r = b.finish_if(cond, then_b, else_b, vec![t]);
    let ar = b.arange(0, 3).unwrap();
    let p = b.binary(BinaryOp::Add, out.into(), ar.into()).unwrap();
    b.store(p.into(), r[0].into(), None).unwrap();
    let f = b.finish().unwrap();
    let out = run1(f.clone(), &[Data::zeros(DType::F32, 3), scalar_i32(5)]);
    assert_eq!(out[0].f32s(), vec![0.0, 1.0, 2.0]);
    let out = run1(f, &[Data::zeros(DType::F32, 3), scalar_i32(-5)]);
    assert_eq!(out[0].f32s(), vec![-1.0; 3]);
}

#[test]
fn program_ids_cover_two_and_three_dimensional_grids() {
    // Out[(p2 * G1 + p1) * G0 + p0] = p0 + 100 * p1 + 10000 * p2, computed from num_programs.
    let mut b = Builder::new("grid");
    let out = b.add_param("Out", ParamKind::Pointer(DType::I32));
    let p: Vec<_> = (0..3).map(|a| b.program_id(a).unwrap()).collect();
    let g: Vec<_> = (0..3).map(|a| b.num_programs(a).unwrap()).collect();
    let t = b.binary(BinaryOp::Mul, p[2].into(), g[1].into()).unwrap();
    let t = b.binary(BinaryOp::Add, t.into(), p[1].into()).unwrap();
    let t = b.binary(BinaryOp::Mul, t.into(), g[0].into()).unwrap();
    let idx = b.binary(BinaryOp::Add, t.into(), p[0].into()).unwrap();
    let v1 = b.binary(BinaryOp::Mul, p[1].into(), Operand::Int(100)).unwrap();
    let v2 = b.binary(BinaryOp::Mul, p[2].into(), Operand::Int(10000)).unwrap();
    let v = b.binary(BinaryOp::Add, p[0].into(), v1.into()).unwrap();
    let v = b.binary(BinaryOp::Add, v.into(), v2.into()).unwrap();
    let q = b.binary(BinaryOp::Add, out.into(), idx.into()).unwrap();
    b.store(q.into(), v.into(), None).unwrap();
    let f = b.finish().unwrap();
    for grid in [[3u32, 4, 1], [2, 3, 4], [5, 1, 2], [1, 1, 1], [37, 2, 3]] {
        let n = grid.iter().product::<u32>() as usize;
        let out = run(f.clone(), &[Data::zeros(DType::I32, n)], grid);
        let want: Vec<i32> = (0..n as u32)
            .map(|l| {
                let (p0, p1, p2) = (l % grid[0], (l / grid[0]) % grid[1], l / (grid[0] * grid[1]));
                (p0 + 100 * p1 + 10000 * p2) as i32
            })
            .collect();
        assert_eq!(out[0].i32s(), want, "grid {grid:?}");
    }
}

#[test]
fn the_lowest_failing_instance_is_reported() {
    // Instance p reads X[p * 10]; with 5 elements every instance from 1 on fails.
    let mut b = Builder::new("fail");
    let x = b.add_param("X", ParamKind::Pointer(DType::F32));
    let pid = b.program_id(0).unwrap();
    let off = b.binary(BinaryOp::Mul, pid.into(), Operand::Int(10)).unwrap();
    let p = b.binary(BinaryOp::Add, x.into(), off.into()).unwrap();
    let v = b.load(p.into(), None, None).unwrap();
    b.store(x.into(), v.into(), None).unwrap();
    let err = try_run(b.finish().unwrap(), &[Data::zeros(DType::F32, 5)], [64, 1, 1]).unwrap_err();
    assert!(matches!(err, ExecError::OutOfBounds { index: 10, .. }), "{err:?}");
}

/// Out[pid_m * GN + pid_n] = (m', n') of tile_swizzle, packed as m' * 1000 + n'.
fn swizzle_kernel(pattern: SwizzlePattern, block: i64) -> Function {
    let mut b = Builder::new("swizzle");
    let out = b.add_param("Out", ParamKind::Pointer(DType::I32));
    let pm = b.program_id(0).unwrap();
    let pn = b.program_id(1).unwrap();
    let gn = b.num_programs(1).unwrap();
    let (sm, sn) = b.swizzle(pm.into(), pn.into(), pattern, block).unwrap();
    let idx = b.binary(BinaryOp::Mul, pm.into(), gn.into()).unwrap();
    let idx = b.binary(BinaryOp::Add, idx.into(), pn.into()).unwrap();
    let v = b.binary(BinaryOp::Mul, sm.into(), Operand::Int(1000)).unwrap();
    let v = b.binary(BinaryOp::Add, v.into(), sn.into()).unwrap();
    let p = b.binary(BinaryOp::Add, out.into(), idx.into()).unwrap();
    b.store(p.into(), v.into(), None).unwrap();
    b.finish().unwrap()
}

#[test]
fn swizzles_are_bijections_over_launched_grids() {
    for pattern in [SwizzlePattern::Morton, SwizzlePattern::Diagonal] {
        for (gm, gn) in [(1, 1), (3, 5), (8, 8), (7, 2), (16, 9)] {
            for block in [1, 2, 3, 8] {
                let n = (gm * gn) as usize;
                let out = run(
                    swizzle_kernel(pattern, block),
                    &[Data::zeros(DType::I32, n)],
                    [gm, gn, 1],
                );
                let mut cells: Vec<i32> = out[0].i32s();
                cells.sort_unstable();
                let want: Vec<i32> = (0..gm as i32)
                    .flat_map(|m| (0..gn as i32).map(move |c| m * 1000 + c))
                    .collect();
                assert_eq!(cells, want, "{} {gm}x{gn} block {block}", pattern.name());
            }
        }
    }
    // Morton on a 4x4 grid with block 1 walks the Z curve.
    let out = run(
        swizzle_kernel(SwizzlePattern::Morton, 1),
        &[Data::zeros(DType::I32, 16)],
        [4, 4, 1],
    );
    assert_eq!(&out[0].i32s()[..6], &[0, 1, 1000, 1001, 2, 3]);
}

fn thread_kernel(threads: usize) -> Function {
    // Out[0..T]   = thread_id
    // Out[T..2T]  = simd_lane_id
    // Out[2T..3T] = simd_shuffle_xor(thread_id * 10, 5)
    // Out[3T..4T] = simd_broadcast(thread_id * 10, 3)
    // Out[4T..5T] = shared round trip: shared[(t + 1) % T] = t; barrier; read shared[t]
    let mut b = Builder::new("threads");
    b.set_threads_per_group(threads);
    let out = b.add_param("Out", ParamKind::Pointer(DType::I32));
    let tid = b.thread_id().unwrap();
    let lane = b.simd_lane_id().unwrap();
    let t10 = b.binary(BinaryOp::Mul, tid.into(), Operand::Int(10)).unwrap();
    let shuf = b.simd_shuffle_xor(t10.into(), Operand::Int(5)).unwrap();
    let bc = b.simd_broadcast(t10.into(), Operand::Int(3)).unwrap();
    let sh = b.shared(threads as i64, DType::I32).unwrap();
    let next = b.binary(BinaryOp::Add, tid.into(), Operand::Int(1)).unwrap();
    let next = b
        .binary(BinaryOp::Rem, next.into(), Operand::Int(threads as i64))
        .unwrap();
    let ps = b.binary(BinaryOp::Add, sh.into(), next.into()).unwrap();
    b.store(ps.into(), tid.into(), None).unwrap();
    b.barrier();
    let pr = b.binary(BinaryOp::Add, sh.into(), tid.into()).unwrap();
    let round = b.load(pr.into(), None, None).unwrap();
    for (k, v) in [tid, lane, shuf, bc, round].into_iter().enumerate() {
        let off = b
            .binary(BinaryOp::Add, tid.into(), Operand::Int((k * threads) as i64))
            .unwrap();
        let p = b.binary(BinaryOp::Add, out.into(), off.into()).unwrap();
        b.store(p.into(), v.into(), None).unwrap();
    }
    b.finish().unwrap()
}

#[test]
fn thread_level_ops_follow_simdgroups_of_32() {
    let t = 64usize;
    let out = run1(thread_kernel(t), &[Data::zeros(DType::I32, 5 * t)])[0].i32s();
    for i in 0..t {
        assert_eq!(out[i], i as i32);
        assert_eq!(out[t + i], (i % 32) as i32);
        assert_eq!(out[2 * t + i], (((i & !31) | ((i & 31) ^ 5)) * 10) as i32);
        assert_eq!(out[3 * t + i], (((i & !31) | 3) * 10) as i32);
        assert_eq!(out[4 * t + i], ((i + t - 1) % t) as i32);
    }
    // A partial simdgroup: lanes whose partner is missing keep their own value.
    let t = 40usize;
    let out = run1(thread_kernel(t), &[Data::zeros(DType::I32, 5 * t)])[0].i32s();
    assert_eq!(out[2 * t + 34], 390); // partner 39 exists
    assert_eq!(out[2 * t + 37], 320); // partner 32
    assert_eq!(out[2 * t + 32], 370);
}

#[test]
fn shared_memory_is_bounds_checked_and_per_instance() {
    let mut b = Builder::new("shared_oob");
    b.set_threads_per_group(32);
    let out = b.add_param("Out", ParamKind::Pointer(DType::F32));
    let sh = b.shared(8, DType::F32).unwrap();
    let ar = b.arange(0, 16).unwrap();
    let p = b.binary(BinaryOp::Add, sh.into(), ar.into()).unwrap();
    b.set_loc(loc(77));
    let v = b.load(p.into(), None, None).unwrap();
    let q = b.binary(BinaryOp::Add, out.into(), ar.into()).unwrap();
    b.store(q.into(), v.into(), None).unwrap();
    let err = try_run(b.finish().unwrap(), &[Data::zeros(DType::F32, 16)], [1, 1, 1]).unwrap_err();
    match &err {
        ExecError::OutOfBounds {
            param,
            index,
            len,
            loc,
        } => {
            assert!(param.contains("shared"), "{param}");
            assert_eq!((*index, *len, loc.line), (8, 8, 77));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn simdgroup_role_runs_its_body_once() {
    let mut b = Builder::new("roles");
    b.set_threads_per_group(64);
    let out = b.add_param("Out", ParamKind::Pointer(DType::I32));
    b.push_block(&[]);
    b.store(out.into(), Operand::Int(7), None).unwrap();
    b.yield_values(&[]);
    let body = b.pop_block().unwrap();
    b.finish_simdgroup_role(1, 2, body).unwrap();
    let out = run1(b.finish().unwrap(), &[Data::zeros(DType::I32, 1)]);
    assert_eq!(out[0].i32s(), vec![7]);
}

/// The reference softmax kernel (three passes over column blocks).
fn softmax_kernel(block: usize) -> Function {
    let mut b = Builder::new("softmax");
    let x = b.add_param("X", ParamKind::Pointer(DType::F32));
    let out = b.add_param("Out", ParamKind::Pointer(DType::F32));
    let n = b.add_param("N", ParamKind::Scalar(DType::I32));
    let row = b.program_id(0).unwrap();
    let row_base = b.binary(BinaryOp::Mul, row.into(), n.into()).unwrap();
    let zero = b.constant(Literal::Int(0), DType::I32);
    let step = b.constant(Literal::Int(block as i64), DType::I32);
    let tile = Type::tile(DType::F32, &[block]);
    let pass = |b: &mut Builder,
                carried: Option<metile_ir::ValueId>,
                m: Option<metile_ir::ValueId>,
                s: Option<metile_ir::ValueId>| {
        let mut types = vec![Type::scalar(DType::I32)];
        if carried.is_some() {
            types.push(tile.clone());
        }
        let args = b.push_block(&types);
        let ar = b.arange(0, block as i64).unwrap();
        let cols = b.binary(BinaryOp::Add, args[0].into(), ar.into()).unwrap();
        let mask = b.compare(CmpOp::Lt, cols.into(), n.into()).unwrap();
        let offs = b.binary(BinaryOp::Add, row_base.into(), cols.into()).unwrap();
        let p = b.binary(BinaryOp::Add, x.into(), offs.into()).unwrap();
        let xv = b
            .load(
                p.into(),
                Some(mask.into()),
                Some(Operand::Float(f64::NEG_INFINITY)),
            )
            .unwrap();
        let yields = match (m, s) {
            (None, _) => vec![b.binary(BinaryOp::Max, args[1].into(), xv.into()).unwrap()],
            (Some(m), None) => {
                let d = b.binary(BinaryOp::Sub, xv.into(), m.into()).unwrap();
                let e = b.unary(UnaryOp::Exp, d.into()).unwrap();
                vec![b.binary(BinaryOp::Add, args[1].into(), e.into()).unwrap()]
            }
            (Some(m), Some(s)) => {
                let d = b.binary(BinaryOp::Sub, xv.into(), m.into()).unwrap();
                let e = b.unary(UnaryOp::Exp, d.into()).unwrap();
                let q = b.binary(BinaryOp::Div, e.into(), s.into()).unwrap();
                let po = b.binary(BinaryOp::Add, out.into(), offs.into()).unwrap();
                b.store(po.into(), q.into(), Some(mask.into())).unwrap();
                vec![]
            }
        };
        b.yield_values(&yields);
        let body = b.pop_block().unwrap();
        let inits: Vec<_> = carried.into_iter().collect();
        b.finish_for(zero, n, step, &inits, body).unwrap()
    };
    let m0 = b.full(&[block], Operand::Float(-1e38), DType::F32).unwrap();
    let m = pass(&mut b, Some(m0), None, None);
    let m = b.reduce(ReduceOp::Max, m[0].into(), None).unwrap();
    let s0 = b.full(&[block], Operand::Float(0.0), DType::F32).unwrap();
    let s = pass(&mut b, Some(s0), Some(m), None);
    let s = b.reduce(ReduceOp::Sum, s[0].into(), None).unwrap();
    pass(&mut b, None, Some(m), Some(s));
    b.finish().unwrap()
}

#[test]
fn softmax_matches_a_reference_with_ragged_rows() {
    let (rows, cols, block) = (5usize, 37usize, 16usize);
    let x: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 7919) % 101) as f32 * 0.1 - 5.0)
        .collect();
    let out = run(
        softmax_kernel(block),
        &[
            f32s(&x),
            Data::zeros(DType::F32, rows * cols),
            scalar_i32(cols as i32),
        ],
        [rows as u32, 1, 1],
    );
    let got = out[1].f32s();
    for r in 0..rows {
        let row: Vec<f64> = x[r * cols..(r + 1) * cols]
            .iter()
            .map(|&v| f64::from(v))
            .collect();
        let m = row.iter().copied().fold(f64::MIN, f64::max);
        let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
        for c in 0..cols {
            let want = (row[c] - m).exp() / s;
            assert!((f64::from(got[r * cols + c]) - want).abs() < 1e-6, "[{r},{c}]");
        }
    }
}

#[test]
fn invalid_ir_is_refused_at_prepare() {
    let mut f = loop_kernel();
    f.body.ops.swap(0, 1);
    f.body.ops.remove(0);
    let err = metile_interp::Executable::new(std::sync::Arc::new(f))
        .err()
        .expect("must fail");
    assert!(matches!(err, ExecError::InvalidIr(_)), "{err:?}");
}

/// Loads through `offs = arange(n) * step + start` under `offs CMP c`, with an
/// optional second range condition, and stores to a dense output.
fn affine_kernel(n: usize, step: i64, start: i64, cmp: CmpOp, c: i64, and_lt: Option<i64>) -> Function {
    let mut b = Builder::new("affine");
    let x = b.add_param("X", ParamKind::Pointer(DType::I32));
    let out = b.add_param("Out", ParamKind::Pointer(DType::I32));
    let ar = b.arange(0, n as i64).unwrap();
    let s = b.binary(BinaryOp::Mul, ar.into(), Operand::Int(step)).unwrap();
    let offs = b.binary(BinaryOp::Add, s.into(), Operand::Int(start)).unwrap();
    let mut mask = b.compare(cmp, offs.into(), Operand::Int(c)).unwrap();
    if let Some(limit) = and_lt {
        let m2 = b.compare(CmpOp::Lt, ar.into(), Operand::Int(limit)).unwrap();
        mask = b.binary(BinaryOp::And, mask.into(), m2.into()).unwrap();
    }
    let p = b.binary(BinaryOp::Add, x.into(), offs.into()).unwrap();
    let v = b
        .load(p.into(), Some(mask.into()), Some(Operand::Int(-7)))
        .unwrap();
    let q = b.binary(BinaryOp::Add, out.into(), ar.into()).unwrap();
    b.store(q.into(), v.into(), Some(mask.into())).unwrap();
    let q2 = b.binary(BinaryOp::Add, out.into(), offs.into()).unwrap();
    let off_plus = b.binary(BinaryOp::Add, offs.into(), Operand::Int(1000)).unwrap();
    b.store(q2.into(), off_plus.into(), Some(mask.into())).unwrap();
    b.finish().unwrap()
}

fn cmp_op() -> impl Strategy<Value = CmpOp> {
    prop_oneof![
        Just(CmpOp::Lt),
        Just(CmpOp::Le),
        Just(CmpOp::Gt),
        Just(CmpOp::Ge),
        Just(CmpOp::Eq),
        Just(CmpOp::Ne)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Lazy (affine offsets, range masks, slice copies) and dense execution agree on
    /// results and on errors, whatever the offsets and masks.
    #[test]
    fn lazy_and_dense_execution_agree(
        n in 1usize..40,
        step in -3i64..4,
        start in -20i64..60,
        cmp in cmp_op(),
        c in -10i64..70,
        and_lt in proptest::option::of(0i64..45),
    ) {
        let f = affine_kernel(n, step, start, cmp, c, and_lt);
        let x: Vec<i32> = (0..50).map(|i| i * 3 + 1).collect();
        // try_run asserts the two modes agree; either outcome is fine here.
        let _ = try_run(f, &[i32s(&x), Data::zeros(DType::I32, 50)], [1, 1, 1]);
    }

    #[test]
    fn vector_add_matches_for_any_length(len in 1usize..300, block_log2 in 0u32..7) {
        let block = 1usize << block_log2;
        let mut b = Builder::new("add");
        let x = b.add_param("X", ParamKind::Pointer(DType::F32));
        let y = b.add_param("Y", ParamKind::Pointer(DType::F32));
        let o = b.add_param("Out", ParamKind::Pointer(DType::F32));
        let nn = b.add_param("N", ParamKind::Scalar(DType::I32));
        let pid = b.program_id(0).unwrap();
        let base = b.binary(BinaryOp::Mul, pid.into(), Operand::Int(block as i64)).unwrap();
        let ar = b.arange(0, block as i64).unwrap();
        let offs = b.binary(BinaryOp::Add, base.into(), ar.into()).unwrap();
        let mask = b.compare(CmpOp::Lt, offs.into(), nn.into()).unwrap();
        let px = b.binary(BinaryOp::Add, x.into(), offs.into()).unwrap();
        let py = b.binary(BinaryOp::Add, y.into(), offs.into()).unwrap();
        let xv = b.load(px.into(), Some(mask.into()), None).unwrap();
        let yv = b.load(py.into(), Some(mask.into()), None).unwrap();
        let s = b.binary(BinaryOp::Add, xv.into(), yv.into()).unwrap();
        let po = b.binary(BinaryOp::Add, o.into(), offs.into()).unwrap();
        b.store(po.into(), s.into(), Some(mask.into())).unwrap();
        let xs: Vec<f32> = (0..len).map(|i| i as f32 * 0.25).collect();
        let ys: Vec<f32> = (0..len).map(|i| 100.0 - i as f32).collect();
        let grid = [len.div_ceil(block) as u32, 1, 1];
        let out = run(b.finish().unwrap(), &[f32s(&xs), f32s(&ys), Data::zeros(DType::F32, len), scalar_i32(len as i32)], grid);
        let want: Vec<f32> = xs.iter().zip(&ys).map(|(a, b)| a + b).collect();
        prop_assert_eq!(out[2].f32s(), want);
    }
}

#[test]
fn scalars_loaded_from_memory_drive_loops_and_branches() {
    // n = N[0]; total = sum(range(n)); if total > 5: Out[0] = total else Out[0] = -1.
    let mut b = Builder::new("scalar_load");
    let np = b.add_param("N", ParamKind::Pointer(DType::I32));
    let out = b.add_param("Out", ParamKind::Pointer(DType::I32));
    let n = b.load(np.into(), None, None).unwrap();
    let zero = b.constant(Literal::Int(0), DType::I32);
    let one = b.constant(Literal::Int(1), DType::I32);
    let s = Type::scalar(DType::I32);
    let args = b.push_block(&[s.clone(), s.clone()]);
    let acc = b.binary(BinaryOp::Add, args[1].into(), args[0].into()).unwrap();
    b.yield_values(&[acc]);
    let body = b.pop_block().unwrap();
    let total = b.finish_for(zero, n, one, &[zero], body).unwrap()[0];
    let cond = b.compare(CmpOp::Gt, total.into(), Operand::Int(5)).unwrap();
    b.push_block(&[]);
    b.yield_values(&[total]);
    let then_b = b.pop_block().unwrap();
    b.push_block(&[]);
    let minus = b.constant(Literal::Int(-1), DType::I32);
    b.yield_values(&[minus]);
    let else_b = b.pop_block().unwrap();
    let r = b.finish_if(cond, then_b, else_b, vec![s]);
    b.store(out.into(), r[0].into(), None).unwrap();
    let f = b.finish().unwrap();
    assert_eq!(
        run1(f.clone(), &[i32s(&[5]), Data::zeros(DType::I32, 1)])[1].i32s(),
        vec![10]
    );
    assert_eq!(
        run1(f, &[i32s(&[3]), Data::zeros(DType::I32, 1)])[1].i32s(),
        vec![-1]
    );
}
