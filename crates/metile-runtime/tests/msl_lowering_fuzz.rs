//! Differential fuzzing of the MSL lowering: random kernels mixing 2-D tiles,
//! row and column vectors (`[R,1]`, `[1,C]`), scalars, broadcasts, element-wise
//! ops, comparisons/selects and axis reductions, over random shapes and
//! threadgroup sizes, run on the interpreter and through `compile_msl` + the
//! MSL emulator. The ops chosen are exactly rounded (no reordered float sums,
//! no transcendental functions), so any difference is a lowering bug.

mod lowering_support;

use lowering_support::*;
use metile_ir::{BinaryOp, Builder, CmpOp, DType, Function, ParamKind, ReduceOp, UnaryOp, ValueId};

/// What a pool value is, shape-wise.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Full,
    Row,
    Col,
    Scalar,
}

struct Gen {
    rng: Rng,
    rows: usize,
    cols: usize,
    /// (value, kind, is_int)
    pool: Vec<(ValueId, Kind, bool)>,
}

impl Gen {
    fn pick(&mut self, int_only: Option<bool>) -> (ValueId, Kind, bool) {
        let candidates: Vec<_> = self
            .pool
            .iter()
            .copied()
            .filter(|&(_, _, i)| int_only.is_none_or(|want| want == i))
            .collect();
        candidates[self.rng.int(0, candidates.len() as i64) as usize]
    }

    fn step(&mut self, b: &mut Builder) {
        let choice = self.rng.int(0, 10);
        let (x, kx, ix) = self.pick(None);
        let result = match choice {
            0..=3 => {
                let (y, ky, _) = self.pick(Some(ix));
                let ops = [
                    BinaryOp::Add,
                    BinaryOp::Sub,
                    BinaryOp::Mul,
                    BinaryOp::Max,
                    BinaryOp::Min,
                ];
                let op = ops[self.rng.int(0, ops.len() as i64) as usize];
                let r = b.binary(op, v(x), v(y)).unwrap();
                Some((r, join(kx, ky), ix))
            }
            4 => {
                let op = [UnaryOp::Neg, UnaryOp::Abs][self.rng.int(0, 2) as usize];
                Some((b.unary(op, v(x)).unwrap(), kx, ix))
            }
            5 => {
                let (y, ky, _) = self.pick(Some(ix));
                let c = b.compare(CmpOp::Lt, v(x), v(y)).unwrap();
                Some((b.select(v(c), v(y), v(x)).unwrap(), join(kx, ky), ix))
            }
            6 | 7 if kx == Kind::Full => {
                // An axis reduction, kept as a row or column vector.
                let axis = self.rng.int(0, 2);
                let op = if ix {
                    [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min][self.rng.int(0, 3) as usize]
                } else {
                    [ReduceOp::Max, ReduceOp::Min][self.rng.int(0, 2) as usize]
                };
                let r = b.reduce(op, v(x), Some(axis)).unwrap();
                let r = b.expand_dims(r, axis).unwrap();
                Some((r, if axis == 0 { Kind::Col } else { Kind::Row }, ix))
            }
            8 if kx != Kind::Scalar => {
                let op = if ix { ReduceOp::Sum } else { ReduceOp::Max };
                Some((b.reduce(op, v(x), None).unwrap(), Kind::Scalar, ix))
            }
            9 if ix => {
                // Integer to float and back into the float pool.
                Some((b.cast(x, DType::F32).unwrap(), kx, false))
            }
            _ => None,
        };
        if let Some(r) = result {
            self.pool.push(r);
        }
    }

    fn shape_of(&self, k: Kind) -> Vec<usize> {
        match k {
            Kind::Full => vec![self.rows, self.cols],
            Kind::Row => vec![self.rows, 1],
            Kind::Col => vec![1, self.cols],
            Kind::Scalar => vec![],
        }
    }
}

fn join(a: Kind, b: Kind) -> Kind {
    match (a, b) {
        (x, y) if x == y => x,
        (Kind::Scalar, x) | (x, Kind::Scalar) => x,
        _ => Kind::Full,
    }
}

/// A random kernel over `[rows, cols]` inputs: one f32 and one i32 tile, a
/// masked load, `steps` random ops, every pool value stored (broadcast to the
/// full tile) into its own slice of the outputs.
fn random_kernel(seed: u64, rows: usize, cols: usize, steps: usize) -> (Function, usize) {
    let mut b = Builder::new("fuzz");
    let xf = b.add_param("XF", ParamKind::Pointer(DType::F32));
    let xi = b.add_param("XI", ParamKind::Pointer(DType::I32));
    let out_f = b.add_param("OutF", ParamKind::Pointer(DType::F32));
    let out_i = b.add_param("OutI", ParamKind::Pointer(DType::I32));
    let n = b.add_param("N", ParamKind::Scalar(DType::I32));
    let r = b.arange(0, rows as i64).unwrap();
    let c = b.arange(0, cols as i64).unwrap();
    let r2 = b.expand_dims(r, 1).unwrap();
    let r2 = b.binary(BinaryOp::Mul, v(r2), int(cols as i64)).unwrap();
    let c2 = b.expand_dims(c, 0).unwrap();
    let offs = b.binary(BinaryOp::Add, v(r2), v(c2)).unwrap();
    let mask = b.compare(CmpOp::Lt, v(offs), v(n)).unwrap();
    let pf = b.binary(BinaryOp::Add, v(xf), v(offs)).unwrap();
    let f0 = b.load(v(pf), Some(v(mask)), Some(float(0.25))).unwrap();
    let pi = b.binary(BinaryOp::Add, v(xi), v(offs)).unwrap();
    let i0 = b.load(v(pi), None, None).unwrap();
    let mut g = Gen {
        rng: Rng::new(seed),
        rows,
        cols,
        pool: vec![(f0, Kind::Full, false), (i0, Kind::Full, true)],
    };
    let one = b.arange(0, cols as i64).unwrap();
    let one = b.expand_dims(one, 0).unwrap();
    g.pool.push((one, Kind::Col, true));
    // Masked loads without `other=`: their masked-off lanes are absent, so the
    // reductions, selects and stores that use them exercise the absent-lane rules.
    let f1 = b.load(v(pf), Some(v(mask)), None).unwrap();
    let i1 = b.load(v(pi), Some(v(mask)), None).unwrap();
    g.pool.push((f1, Kind::Full, false));
    g.pool.push((i1, Kind::Full, true));
    for _ in 0..steps {
        g.step(&mut b);
    }
    // Carried values fed by masked loads whose mask shrinks every iteration:
    // the carried lanes past the mask keep their previous value.
    for (ptr, is_int) in [(pf, false), (pi, true)] {
        let (init, _, _) = g.pick(Some(is_int));
        let init = b.broadcast_to(init, &g.shape_of(Kind::Full)).unwrap();
        let ops = [BinaryOp::Add, BinaryOp::Max, BinaryOp::Min];
        let op = ops[g.rng.int(0, ops.len() as i64) as usize];
        let shrink = g.rng.int(1, (rows * cols) as i64 / 2 + 2);
        let carried = for_loop(&mut b, (int(0), int(3), int(1)), &[init], |b, i, acc| {
            let cut = b.binary(BinaryOp::Mul, v(i), int(shrink)).unwrap();
            let limit = b.binary(BinaryOp::Sub, v(n), v(cut)).unwrap();
            let m = b.compare(CmpOp::Lt, v(offs), v(limit)).unwrap();
            let x = b.load(v(ptr), Some(v(m)), None).unwrap();
            vec![b.binary(op, v(acc[0]), v(x)).unwrap()]
        })[0];
        g.pool.push((carried, Kind::Full, is_int));
    }
    let full = g.shape_of(Kind::Full);
    let (mut nf, mut ni) = (0usize, 0usize);
    let pool = g.pool.clone();
    for (val, _, is_int) in pool {
        let val = b.broadcast_to(val, &full).unwrap();
        let (base, slot) = if is_int {
            ni += 1;
            (out_i, ni - 1)
        } else {
            nf += 1;
            (out_f, nf - 1)
        };
        let o = b
            .binary(BinaryOp::Add, v(offs), int((slot * rows * cols) as i64))
            .unwrap();
        let p = b.binary(BinaryOp::Add, v(base), v(o)).unwrap();
        b.store(v(p), v(val), None).unwrap();
    }
    (b.finish().unwrap(), nf.max(ni))
}

#[test]
fn random_kernels_match_the_interpreter() {
    let shapes = [
        (1usize, 8usize),
        (4, 4),
        (8, 32),
        (32, 8),
        (3, 7),
        (16, 16),
        (2, 64),
        (64, 2),
        (5, 12),
        (16, 64),
    ];
    let sgs = [None, Some(1u32), Some(2), Some(4), Some(8)];
    // METILE_FUZZ_CASES raises the count for a longer local run.
    let cases: u64 = std::env::var("METILE_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    for case in 0..cases {
        let (rows, cols) = shapes[case as usize % shapes.len()];
        let (f, slots) = random_kernel(1000 + case, rows, cols, 8 + (case % 3) as usize * 6);
        let mut rng = Rng::new(5000 + case);
        let n = rows * cols;
        let bufs = vec![
            Buf::random(DType::F32, n, &mut rng),
            Buf::random(DType::I32, n, &mut rng),
            Buf::filled(DType::F32, n * slots, 0.0),
            Buf::filled(DType::I32, n * slots, 0.0),
        ];
        let valid = rng.int(n as i64 / 2, n as i64 + 1) as i32;
        let mut c = Case::new(
            f,
            bufs,
            vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2), Arg::Buf(3), i32_arg(valid)],
            [1, 1, 1],
        );
        c.num_sgs = sgs[case as usize % sgs.len()];
        c.check();
    }
}

/// `C = max(dot(A, B, C0), C0)` over one `m x k` by `k x n` tile, `k` walked in
/// `bk` steps (a loop, so the prefetch pass and chunked staging take part).
fn dot_kernel(m: usize, n: usize, k: usize, bk: usize, dtype: DType) -> Function {
    let mut b = Builder::new("dot_fuzz");
    let a = b.add_param("A", ParamKind::Pointer(dtype));
    let bb = b.add_param("B", ParamKind::Pointer(dtype));
    let c = b.add_param("C", ParamKind::Pointer(DType::F32));
    let kk = b.add_param("K", ParamKind::Scalar(DType::I32));
    let c0 = b
        .tile_load(v(c), int(0), int(0), int(n as i64), (m as i64, n as i64))
        .unwrap();
    let acc = for_loop(
        &mut b,
        (int(0), v(kk), int(bk as i64)),
        &[c0],
        |b, k0, carried| {
            let ta = b
                .tile_load(v(a), int(0), v(k0), int(k as i64), (m as i64, bk as i64))
                .unwrap();
            let tb = b
                .tile_load(v(bb), v(k0), int(0), int(n as i64), (bk as i64, n as i64))
                .unwrap();
            vec![b.dot(v(ta), v(tb), Some(v(carried[0]))).unwrap()]
        },
    )[0];
    let out = b.binary(BinaryOp::Max, v(acc), v(c0)).unwrap();
    b.tile_store(v(c), int(0), int(0), int(n as i64), v(out), (m as i64, n as i64))
        .unwrap();
    b.finish().unwrap()
}

#[test]
fn random_dot_shapes_match_the_interpreter() {
    // Atom-sized and not (the generic path), one to several atom tiles per
    // simdgroup, more simdgroups than tiles, every operand dtype.
    let dims = [8usize, 16, 24, 32, 40, 64, 12, 20];
    let dtypes = [DType::F32, DType::F16, DType::BF16];
    let sgs = [None, Some(1u32), Some(2), Some(3), Some(4), Some(8)];
    let cases: u64 = std::env::var("METILE_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(12, |c: u64| c.min(200));
    for case in 0..cases {
        let mut rng = Rng::new(7000 + case);
        let mut pick = |xs: &[usize]| xs[rng.int(0, xs.len() as i64) as usize];
        let (m, n, bk) = (pick(&dims), pick(&dims), pick(&dims[..6]));
        let k = bk * (1 + case as usize % 3);
        let dtype = dtypes[case as usize % dtypes.len()];
        let mut c = dot_case((m, n, k, bk), dtype, 9000 + case);
        c.num_sgs = sgs[case as usize % sgs.len()];
        // Every other case keeps the operands in a ring of threadgroup stages.
        c.passes.set("async_copy", case % 2 == 1);
        c.check();
    }
}

/// One `dot_kernel` case with random operands drawn from `seed`.
fn dot_case((m, n, k, bk): (usize, usize, usize, usize), dtype: DType, seed: u64) -> Case {
    let mut rng = Rng::new(seed);
    let bufs = vec![
        Buf::random(dtype, m * k, &mut rng),
        Buf::random(dtype, k * n, &mut rng),
        Buf::random(DType::F32, m * n, &mut rng),
    ];
    Case::new(
        dot_kernel(m, n, k, bk, dtype),
        bufs,
        vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2), i32_arg(k as i32)],
        [1, 1, 1],
    )
    .scale(20.0)
}

#[test]
fn random_dot_shapes_match_the_interpreter_on_apple10() {
    // Apple10's matmul2d (16 x 32 x 16) where the tile is a multiple of it and
    // the operands f16/bf16; the 8x8 simdgroup matrices or the generic path
    // elsewhere (f32, and the dims that are no multiple of the atom).
    let dims = [16usize, 32, 48, 64, 96, 8, 24];
    let cols = [32usize, 64, 96, 32, 64, 16, 24, 48];
    let dtypes = [DType::F16, DType::BF16, DType::F16, DType::F32];
    let sgs = [None, Some(1u32), Some(2), Some(3), Some(4), Some(8)];
    let cases: u64 = std::env::var("METILE_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(12, |c: u64| c.min(200));
    let mut on_matmul2d = 0;
    for case in 0..cases {
        let mut rng = Rng::new(11000 + case);
        let mut pick = |xs: &[usize]| xs[rng.int(0, xs.len() as i64) as usize];
        let (m, n, bk) = (pick(&dims[..5]), pick(&cols), pick(&dims[..4]));
        let k = bk * (1 + case as usize % 3);
        let dtype = dtypes[case as usize % dtypes.len()];
        let mut c = dot_case((m, n, k, bk), dtype, 13000 + case);
        c.num_sgs = sgs[case as usize % sgs.len()];
        c.apple_arch = Some(metile_compiler::AppleArch::Apple10);
        let msl = msl_for(&c.func, c.num_sgs, metile_compiler::AppleArch::Apple10);
        on_matmul2d += usize::from(msl.contains("matmul2d<"));
        c.check();
    }
    assert!(
        on_matmul2d * 3 >= cases as usize,
        "{on_matmul2d} of {cases} cases ran matmul2d"
    );
}
