//! The Triton matmul tutorial as Triton users write it (pointer tiles built
//! from `arange` broadcasts, advanced with `a_ptrs += BLOCK_K * stride_ak`,
//! a masked K edge, GROUP_SIZE_M ordering): its `dot` operands must go
//! through the asynchronous operand ring on sm_80 (`cp.async`), sm_90
//! (`cp.async` into `wgmma`'s stages) and Apple GPUs, like `tile_load`'s.

mod common;

use common::{int, loc, v};
use metile_compiler::{compile_cuda, compile_msl, MslParam, Target};
use metile_ir::{BinaryOp, Builder, CmpOp, DType, Function, Operand, ParamKind};

const BLOCK_M: i64 = 64;
const BLOCK_N: i64 = 64;
const BLOCK_K: i64 = 32;
const GROUP_M: i64 = 8;

fn cdiv(b: &mut Builder, x: Operand, by: i64) -> Operand {
    let up = b.binary(BinaryOp::Add, x, int(by - 1)).unwrap();
    v(b.binary(BinaryOp::FloorDiv, v(up), int(by)).unwrap())
}

/// `base[:, None] * stride0 + cols[None, :] * stride1` over `rows x cols`.
fn grid_offsets(
    b: &mut Builder,
    rows: metile_ir::ValueId,
    stride0: Operand,
    cols: metile_ir::ValueId,
    stride1: Operand,
) -> metile_ir::ValueId {
    let r = b.expand_dims(rows, 1).unwrap();
    let r = b.binary(BinaryOp::Mul, v(r), stride0).unwrap();
    let c = b.expand_dims(cols, 0).unwrap();
    let c = b.binary(BinaryOp::Mul, v(c), stride1).unwrap();
    b.binary(BinaryOp::Add, v(r), v(c)).unwrap()
}

/// The tutorial kernel, traced as the frontend does for a launch whose unit
/// strides (`stride_ak`, `stride_bn`, `stride_cn`) are specialised to the
/// constant 1 and whose sizes are multiples of 16.
fn tutorial(dtype: DType) -> Function {
    let mut b = Builder::new("matmul_kernel");
    let a_ptr = b.add_param("a_ptr", ParamKind::Pointer(dtype));
    let b_ptr = b.add_param("b_ptr", ParamKind::Pointer(dtype));
    let c_ptr = b.add_param("c_ptr", ParamKind::Pointer(dtype));
    let sized = |b: &mut Builder, name: &str| {
        let p = b.add_param(name, ParamKind::Scalar(DType::I32));
        b.set_param_divisibility(p, 16);
        p
    };
    let m = sized(&mut b, "M");
    let n = sized(&mut b, "N");
    let k = sized(&mut b, "K");
    let stride_am = sized(&mut b, "stride_am");
    b.add_param("stride_ak", ParamKind::Scalar(DType::I32));
    let stride_bk = sized(&mut b, "stride_bk");
    b.add_param("stride_bn", ParamKind::Scalar(DType::I32));
    let stride_cm = sized(&mut b, "stride_cm");
    b.add_param("stride_cn", ParamKind::Scalar(DType::I32));
    b.set_loc(loc(2));
    let pid = b.program_id(0).unwrap();
    let num_pid_m = cdiv(&mut b, v(m), BLOCK_M);
    let num_pid_n = cdiv(&mut b, v(n), BLOCK_N);
    let in_group = b.binary(BinaryOp::Mul, int(GROUP_M), num_pid_n).unwrap();
    let group_id = b.binary(BinaryOp::FloorDiv, v(pid), v(in_group)).unwrap();
    let first_m = b.binary(BinaryOp::Mul, v(group_id), int(GROUP_M)).unwrap();
    let rows_left = b.binary(BinaryOp::Sub, num_pid_m, v(first_m)).unwrap();
    let group_size = b.binary(BinaryOp::Min, v(rows_left), int(GROUP_M)).unwrap();
    let in_this = b.binary(BinaryOp::Rem, v(pid), v(in_group)).unwrap();
    let dm = b.binary(BinaryOp::Rem, v(in_this), v(group_size)).unwrap();
    let pid_m = b.binary(BinaryOp::Add, v(first_m), v(dm)).unwrap();
    let pid_n = b.binary(BinaryOp::FloorDiv, v(in_this), v(group_size)).unwrap();
    b.set_loc(loc(3));
    let wrapped = |b: &mut Builder, pid: metile_ir::ValueId, block: i64, size: metile_ir::ValueId| {
        let start = b.binary(BinaryOp::Mul, v(pid), int(block)).unwrap();
        let ar = b.arange(0, block).unwrap();
        let offs = b.binary(BinaryOp::Add, v(start), v(ar)).unwrap();
        b.binary(BinaryOp::Rem, v(offs), v(size)).unwrap()
    };
    let offs_am = wrapped(&mut b, pid_m, BLOCK_M, m);
    let offs_bn = wrapped(&mut b, pid_n, BLOCK_N, n);
    let offs_k = b.arange(0, BLOCK_K).unwrap();
    let a_offsets = grid_offsets(&mut b, offs_am, v(stride_am), offs_k, int(1));
    let a_ptrs = b.binary(BinaryOp::Add, v(a_ptr), v(a_offsets)).unwrap();
    let b_offsets = grid_offsets(&mut b, offs_k, v(stride_bk), offs_bn, int(1));
    let b_ptrs = b.binary(BinaryOp::Add, v(b_ptr), v(b_offsets)).unwrap();
    let acc = b
        .full(
            &[BLOCK_M as usize, BLOCK_N as usize],
            Operand::Float(0.0),
            DType::F32,
        )
        .unwrap();
    b.set_loc(loc(4));
    let trips = cdiv(&mut b, v(k), BLOCK_K);
    let results = common::for_loop(
        &mut b,
        (int(0), trips, int(1)),
        &[acc, a_ptrs, b_ptrs],
        |b, kk, c| {
            b.set_loc(loc(5));
            let done = b.binary(BinaryOp::Mul, v(kk), int(BLOCK_K)).unwrap();
            let left = b.binary(BinaryOp::Sub, v(k), v(done)).unwrap();
            let ka = b.expand_dims(offs_k, 0).unwrap();
            let mask_a = b.compare(CmpOp::Lt, v(ka), v(left)).unwrap();
            let ta = b
                .load(v(c[1]), Some(v(mask_a)), Some(Operand::Float(0.0)))
                .unwrap();
            let kb = b.expand_dims(offs_k, 1).unwrap();
            let mask_b = b.compare(CmpOp::Lt, v(kb), v(left)).unwrap();
            let tb = b
                .load(v(c[2]), Some(v(mask_b)), Some(Operand::Float(0.0)))
                .unwrap();
            b.set_loc(loc(6));
            let d = b.dot(v(ta), v(tb), Some(v(c[0]))).unwrap();
            b.set_loc(loc(7));
            let step_a = b.binary(BinaryOp::Mul, int(BLOCK_K), int(1)).unwrap();
            let next_a = b.binary(BinaryOp::Add, v(c[1]), v(step_a)).unwrap();
            let step_b = b.binary(BinaryOp::Mul, int(BLOCK_K), v(stride_bk)).unwrap();
            let next_b = b.binary(BinaryOp::Add, v(c[2]), v(step_b)).unwrap();
            vec![d, next_a, next_b]
        },
    );
    b.set_loc(loc(8));
    let out = b.cast(results[0], dtype).unwrap();
    let offs_cm = {
        let s = b.binary(BinaryOp::Mul, v(pid_m), int(BLOCK_M)).unwrap();
        let ar = b.arange(0, BLOCK_M).unwrap();
        b.binary(BinaryOp::Add, v(s), v(ar)).unwrap()
    };
    let offs_cn = {
        let s = b.binary(BinaryOp::Mul, v(pid_n), int(BLOCK_N)).unwrap();
        let ar = b.arange(0, BLOCK_N).unwrap();
        b.binary(BinaryOp::Add, v(s), v(ar)).unwrap()
    };
    let c_offsets = grid_offsets(&mut b, offs_cm, v(stride_cm), offs_cn, int(1));
    let c_ptrs = b.binary(BinaryOp::Add, v(c_ptr), v(c_offsets)).unwrap();
    let rows = b.expand_dims(offs_cm, 1).unwrap();
    let rows = b.compare(CmpOp::Lt, v(rows), v(m)).unwrap();
    let cols = b.expand_dims(offs_cn, 0).unwrap();
    let cols = b.compare(CmpOp::Lt, v(cols), v(n)).unwrap();
    let mask = b.binary(BinaryOp::And, v(rows), v(cols)).unwrap();
    b.store(v(c_ptrs), v(out), Some(v(mask))).unwrap();
    metile_compiler::optimize_tile_ir(b.finish().unwrap()).unwrap_or_else(|e| panic!("{e}"))
}

fn cuda(arch: (u32, u32), dtype: DType) -> String {
    compile_cuda(
        &tutorial(dtype),
        &common::without_l2_order(),
        &Target::nvidia(arch.0, arch.1),
    )
    .unwrap_or_else(|e| panic!("{e}"))
    .kernel
    .source
}

#[test]
fn tutorial_matmul_sm80_copies_operands_into_a_ring() {
    let src = cuda((8, 0), DType::F16);
    assert!(src.contains("cp.async"), "{src}");
    assert!(src.contains("cp.async.wait_group"), "{src}");
    assert!(src.contains("mma.sync"), "{src}");
    insta::assert_snapshot!("tutorial_matmul_sm80_cuda", src);
}

#[test]
fn tutorial_matmul_sm90_feeds_wgmma_from_a_ring() {
    let src = cuda((9, 0), DType::BF16);
    assert!(src.contains("cp.async"), "{src}");
    assert!(src.contains("mbarrier"), "{src}");
    assert!(src.contains("wgmma.mma_async"), "{src}");
    insta::assert_snapshot!("tutorial_matmul_sm90_cuda", src);
}

/// The Apple ring (plain copies: Metal has no asynchronous copy into
/// threadgroup memory) is off by default there; switched on, the tutorial's
/// operands take it: the stages need more threadgroup memory than the
/// registers-only prefetch that the default applies.
#[test]
fn tutorial_matmul_apple_ring() {
    let compile = |ring: bool| {
        let mut options = common::without_l2_order();
        options.passes.set("async_copy", ring);
        compile_msl(&tutorial(DType::F16), &options)
            .unwrap_or_else(|e| panic!("{e}"))
            .kernel
    };
    let threadgroup_bytes = |k: &metile_compiler::MslKernel| -> usize {
        k.params
            .iter()
            .map(|p| match p {
                MslParam::Threadgroup { bytes, .. } => *bytes,
                _ => 0,
            })
            .sum()
    };
    let (ring, registers) = (compile(true), compile(false));
    assert!(
        ring.source.contains("simdgroup_multiply_accumulate"),
        "{}",
        ring.source
    );
    assert!(
        threadgroup_bytes(&ring) >= 2 * threadgroup_bytes(&registers),
        "{} against {}",
        threadgroup_bytes(&ring),
        threadgroup_bytes(&registers)
    );
    insta::assert_snapshot!("tutorial_matmul_apple_msl", ring.source);
}
