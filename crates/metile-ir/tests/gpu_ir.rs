//! GPU IR: builder, printer and verifier, including the uniformity rule for
//! barriers and simdgroup operations.

use metile_ir::gpu_ir::*;
use metile_ir::{
    parse_gpu_function, print_gpu_function, verify_gpu, BinaryOp, CmpOp, DType, Literal, ReduceOp, Vendor,
};

const I32: GpuType = GpuType::Scalar(DType::I32);
const F32: GpuType = GpuType::Scalar(DType::F32);
const BOOL: GpuType = GpuType::Scalar(DType::Bool);

fn constant(b: &mut GpuBuilder, value: i64) -> GpuValue {
    b.emit(GpuOpKind::Const(Literal::Int(value)), vec![], vec![I32])[0]
}

/// `out[tid] = x[tid] + 1` with a vector load and a loop-carried register.
fn small_kernel() -> GpuFunction {
    let mut b = GpuBuilder::new("k", 64);
    let x = b.add_param("X", GpuParamKind::Buffer(DType::F32), 0);
    let out = b.add_param("Out", GpuParamKind::Buffer(DType::F32), 1);
    let n = b.add_param("N", GpuParamKind::Scalar(DType::I32), 2);
    let tid = b.emit(GpuOpKind::Builtin(Builtin::ThreadIndex), vec![], vec![I32])[0];
    let four = constant(&mut b, 4);
    let idx = b.emit(GpuOpKind::Binary(BinaryOp::Mul), vec![tid, four], vec![I32])[0];
    let v = b.emit(
        GpuOpKind::Load {
            width: 4,
            has_mask: false,
            has_other: false,
        },
        vec![x, idx],
        vec![GpuType::Vector(DType::F32, 4)],
    )[0];
    let lane0 = b.emit(GpuOpKind::Extract { lane: 0 }, vec![v], vec![F32])[0];
    let acc = b.add_reg(DType::F32, 1);
    b.emit(GpuOpKind::RegWrite { reg: acc, index: 0 }, vec![lane0], vec![]);
    let zero = constant(&mut b, 0);
    let one = constant(&mut b, 1);
    let iv = b.push_block(&[I32])[0];
    let cur = b.emit(GpuOpKind::RegRead { reg: acc, index: 0 }, vec![], vec![F32])[0];
    let fiv = b.emit(GpuOpKind::Cast, vec![iv], vec![F32])[0];
    let next = b.emit(GpuOpKind::Binary(BinaryOp::Add), vec![cur, fiv], vec![F32])[0];
    b.emit(GpuOpKind::RegWrite { reg: acc, index: 0 }, vec![next], vec![]);
    let body = b.pop_block();
    b.emit_region_op(GpuOpKind::For, vec![zero, n, one], vec![body]);
    let total = b.emit(GpuOpKind::RegRead { reg: acc, index: 0 }, vec![], vec![F32])[0];
    let sum = b.emit(GpuOpKind::SimdReduce(ReduceOp::Sum), vec![total], vec![F32])[0];
    let in_range = b.emit(GpuOpKind::Compare(CmpOp::Lt), vec![tid, n], vec![BOOL])[0];
    b.emit(
        GpuOpKind::Store {
            width: 1,
            has_mask: true,
        },
        vec![out, tid, sum, in_range],
        vec![],
    );
    b.finish()
}

#[test]
fn a_well_formed_kernel_verifies_and_prints() {
    let f = small_kernel();
    verify_gpu(&f, Vendor::Apple).unwrap();
    let text = print_gpu_function(&f);
    assert!(
        text.starts_with("gpu.func @k(%0: ptr<f32, device> /*X*/"),
        "{text}"
    );
    assert!(text.contains("load.v4 %0, %5 : f32x4"), "{text}");
    assert!(text.contains("reg r0: f32[1]"), "{text}");
    assert!(text.contains("for %"), "{text}");
    assert!(text.contains("simd_sum"), "{text}");
    assert_eq!(text, print_gpu_function(&small_kernel()));
}

#[test]
fn barrier_under_thread_dependent_control_flow_is_rejected() {
    let mut b = GpuBuilder::new("k", 64);
    let tid = b.emit(GpuOpKind::Builtin(Builtin::ThreadIndex), vec![], vec![I32])[0];
    let zero = constant(&mut b, 0);
    let c = b.emit(GpuOpKind::Compare(CmpOp::Eq), vec![tid, zero], vec![BOOL])[0];
    b.push_block(&[]);
    b.emit(GpuOpKind::Barrier, vec![], vec![]);
    let then_b = b.pop_block();
    b.push_block(&[]);
    let else_b = b.pop_block();
    b.emit_region_op(GpuOpKind::If, vec![c], vec![then_b, else_b]);
    let err = verify_gpu(&b.finish(), Vendor::Apple).unwrap_err().to_string();
    assert!(err.contains("barrier under control flow"), "{err}");
}

#[test]
fn simd_ops_may_run_per_simdgroup_but_barriers_may_not() {
    // A branch on the simdgroup index is fine for a simd reduction.
    let build = |with_barrier: bool| {
        let mut b = GpuBuilder::new("k", 64);
        let sg = b.emit(GpuOpKind::Builtin(Builtin::SimdgroupIndex), vec![], vec![I32])[0];
        let zero = constant(&mut b, 0);
        let c = b.emit(GpuOpKind::Compare(CmpOp::Eq), vec![sg, zero], vec![BOOL])[0];
        b.push_block(&[]);
        let x = b.emit(GpuOpKind::Cast, vec![sg], vec![F32])[0];
        b.emit(GpuOpKind::SimdReduce(ReduceOp::Max), vec![x], vec![F32]);
        if with_barrier {
            b.emit(GpuOpKind::Barrier, vec![], vec![]);
        }
        let then_b = b.pop_block();
        b.push_block(&[]);
        let else_b = b.pop_block();
        b.emit_region_op(GpuOpKind::If, vec![c], vec![then_b, else_b]);
        b.finish()
    };
    verify_gpu(&build(false), Vendor::Apple).unwrap();
    assert!(verify_gpu(&build(true), Vendor::Apple).is_err());
}

#[test]
fn a_value_assumed_uniform_may_decide_a_barrier() {
    // A butterfly over the lanes gives every lane the same bits, which the
    // verifier cannot see; the lowering says so with `assume_uniform`.
    let build = |assume: bool| {
        let mut b = GpuBuilder::new("k", 64);
        let tid = b.emit(GpuOpKind::Builtin(Builtin::ThreadIndex), vec![], vec![I32])[0];
        let x = b.emit(GpuOpKind::Cast, vec![tid], vec![F32])[0];
        let one = constant(&mut b, 1);
        let other = b.emit(GpuOpKind::SimdShuffleXor, vec![x, one], vec![F32])[0];
        let mut total = b.emit(GpuOpKind::Binary(BinaryOp::Max), vec![x, other], vec![F32])[0];
        if assume {
            total = b.emit(GpuOpKind::AssumeUniform, vec![total], vec![F32])[0];
        }
        let zero = b.emit(GpuOpKind::Const(Literal::Float(0.0)), vec![], vec![F32])[0];
        let c = b.emit(GpuOpKind::Compare(CmpOp::Lt), vec![zero, total], vec![BOOL])[0];
        b.push_block(&[]);
        b.emit(GpuOpKind::Barrier, vec![], vec![]);
        let then_b = b.pop_block();
        b.push_block(&[]);
        let else_b = b.pop_block();
        b.emit_region_op(GpuOpKind::If, vec![c], vec![then_b, else_b]);
        b.finish()
    };
    let err = verify_gpu(&build(false), Vendor::Apple).unwrap_err().to_string();
    assert!(err.contains("barrier under control flow"), "{err}");
    let f = build(true);
    verify_gpu(&f, Vendor::Apple).unwrap();
    assert!(print_gpu_function(&f).contains("assume_uniform"));
}

#[test]
fn assume_uniform_keeps_its_operand_type() {
    let mut b = GpuBuilder::new("k", 64);
    let zero = constant(&mut b, 0);
    b.emit(GpuOpKind::AssumeUniform, vec![zero], vec![F32]);
    let err = verify_gpu(&b.finish(), Vendor::Apple).unwrap_err().to_string();
    assert!(err.contains("(x) -> x on scalars"), "{err}");
}

#[test]
fn varying_registers_taint_loop_bounds() {
    // A register written with the thread index makes a loop bound read from it
    // varying, so a barrier in that loop is rejected.
    let mut b = GpuBuilder::new("k", 64);
    let reg = b.add_reg(DType::I32, 1);
    let zero = constant(&mut b, 0);
    let one = constant(&mut b, 1);
    b.emit(GpuOpKind::RegWrite { reg, index: 0 }, vec![zero], vec![]);
    let end = b.emit(GpuOpKind::RegRead { reg, index: 0 }, vec![], vec![I32])[0];
    b.push_block(&[I32]);
    b.emit(GpuOpKind::Barrier, vec![], vec![]);
    let body = b.pop_block();
    b.emit_region_op(GpuOpKind::For, vec![zero, end, one], vec![body]);
    let tid = b.emit(GpuOpKind::Builtin(Builtin::ThreadIndex), vec![], vec![I32])[0];
    b.emit(GpuOpKind::RegWrite { reg, index: 0 }, vec![tid], vec![]);
    let err = verify_gpu(&b.finish(), Vendor::Apple).unwrap_err().to_string();
    assert!(err.contains("barrier under control flow"), "{err}");
}

#[test]
fn type_errors_are_reported_with_the_op() {
    let mut b = GpuBuilder::new("k", 32);
    let x = b.add_param("X", GpuParamKind::Buffer(DType::F32), 0);
    let i = constant(&mut b, 0);
    // A 4-wide load declared as a scalar result.
    b.emit(
        GpuOpKind::Load {
            width: 4,
            has_mask: false,
            has_other: false,
        },
        vec![x, i],
        vec![F32],
    );
    let err = verify_gpu(&b.finish(), Vendor::Apple).unwrap_err().to_string();
    assert!(err.contains("load.v4"), "{err}");

    let mut b = GpuBuilder::new("k", 32);
    let reg = b.add_reg(DType::F32, 2);
    b.emit(GpuOpKind::RegRead { reg, index: 2 }, vec![], vec![F32]);
    let err = verify_gpu(&b.finish(), Vendor::Apple).unwrap_err().to_string();
    assert!(err.contains("outside r0[2]"), "{err}");
}

#[test]
fn values_do_not_escape_their_region() {
    let mut b = GpuBuilder::new("k", 32);
    let zero = constant(&mut b, 0);
    let one = constant(&mut b, 1);
    let iv = b.push_block(&[I32])[0];
    let body = b.pop_block();
    b.emit_region_op(GpuOpKind::For, vec![zero, one, one], vec![body]);
    b.emit(GpuOpKind::Binary(BinaryOp::Add), vec![iv, one], vec![I32]);
    let err = verify_gpu(&b.finish(), Vendor::Apple).unwrap_err().to_string();
    assert!(err.contains("outside the scope"), "{err}");
}

/// A tensor copy into threadgroup memory completing on a memory barrier.
fn tensor_copy_kernel(from_buffer: bool, barrier_dtype: DType) -> GpuFunction {
    let mut b = GpuBuilder::new("k", 128);
    let a = b.add_param("A", GpuParamKind::Buffer(DType::F16), 0);
    let spec = TensorMapSpec {
        buffer: 0,
        dtype: DType::F16,
        rows: LaunchValue::Const(64),
        cols: LaunchValue::Arg(1),
        stride: LaunchValue::Arg(1),
        box_rows: 64,
        box_cols: 64,
        swizzle_bytes: 128,
        stacked: false,
    };
    let map = b.add_param("A_tma0", GpuParamKind::TensorMap(spec), 0);
    b.add_param("A_tma0_ready", GpuParamKind::TensorMapReady(spec), 0);
    let tile = b.add_threadgroup(DType::F16, 64 * 64, TgPurpose::Scratch);
    let bars = b.add_threadgroup(barrier_dtype, 2, TgPurpose::Scratch);
    let zero = constant(&mut b, 0);
    let bytes = constant(&mut b, 8192);
    b.emit(GpuOpKind::MbarrierInit { count: 1 }, vec![bars, zero], vec![]);
    b.emit(
        GpuOpKind::MbarrierArrive { expect_tx: true },
        vec![bars, zero, bytes],
        vec![],
    );
    let src = if from_buffer { a } else { map };
    b.emit(
        GpuOpKind::TmaLoad,
        vec![tile, zero, src, zero, zero, bars, zero],
        vec![],
    );
    b.emit(GpuOpKind::MbarrierWait, vec![bars, zero, zero], vec![]);
    b.finish()
}

#[test]
fn tensor_copies_read_tensor_maps_and_complete_on_i64_barriers() {
    let f = tensor_copy_kernel(false, DType::I64);
    verify_gpu(&f, Vendor::Nvidia).unwrap();
    let text = print_gpu_function(&f);
    assert!(
        text.contains("tma_load") && text.contains("mbarrier_arrive.expect_tx"),
        "{text}"
    );
    let err = verify_gpu(&tensor_copy_kernel(true, DType::I64), Vendor::Nvidia)
        .unwrap_err()
        .to_string();
    assert!(err.contains("tensor map"), "{err}");
    let err = verify_gpu(&tensor_copy_kernel(false, DType::F32), Vendor::Nvidia)
        .unwrap_err()
        .to_string();
    assert!(err.contains("i64"), "{err}");
}

/// Release counts: an atomic add on a threadgroup i32 array returns each
/// thread's own previous count.
#[test]
fn release_counts_are_threadgroup_i32_and_vary_per_thread() {
    let count_kernel = |dtype: DType, add_i64: bool| {
        let mut b = GpuBuilder::new("k", 64);
        let counts = b.add_threadgroup(dtype, 4, TgPurpose::Scratch);
        let zero = constant(&mut b, 0);
        let one = if add_i64 {
            b.emit(
                GpuOpKind::Const(Literal::Int(1)),
                vec![],
                vec![GpuType::Scalar(DType::I64)],
            )[0]
        } else {
            constant(&mut b, 1)
        };
        b.emit(GpuOpKind::AtomicAdd, vec![counts, zero, one], vec![I32]);
        b.finish()
    };
    let f = count_kernel(DType::I32, false);
    verify_gpu(&f, Vendor::Nvidia).unwrap();
    assert!(print_gpu_function(&f).contains("atomic_add"));
    for bad in [count_kernel(DType::F32, false), count_kernel(DType::I32, true)] {
        let err = verify_gpu(&bad, Vendor::Nvidia).unwrap_err().to_string();
        assert!(err.contains("threadgroup i32 ptr"), "{err}");
    }
}

#[test]
fn an_alias_takes_memory_only_from_an_earlier_allocation_it_fits_in() {
    let kernel = |len: usize, of_alias: bool| {
        let mut b = GpuBuilder::new("k", 64);
        let ring = b.add_threadgroup(DType::F16, 1024, TgPurpose::Scratch);
        let mut of = ring;
        if of_alias {
            of = b.add_threadgroup(DType::F32, 16, TgPurpose::Alias(ring));
        }
        b.add_threadgroup(DType::F32, len, TgPurpose::Alias(of));
        b.finish()
    };
    let f = kernel(512, false);
    verify_gpu(&f, Vendor::Apple).unwrap();
    // Its bytes are the ring's: the threadgroup's memory does not grow.
    assert_eq!(f.threadgroup_bytes(), 2048);
    assert!(print_gpu_function(&f).contains("reusing"));
    for bad in [kernel(513, false), kernel(16, true)] {
        let err = verify_gpu(&bad, Vendor::Apple).unwrap_err().to_string();
        assert!(err.contains("no earlier allocation it fits in"), "{err}");
    }
}

/// An f16 8x8 simdgroup product (Apple) and a fence before `wgmma`s
/// (NVIDIA), each in an otherwise portable kernel.
const APPLE_MMA: &str = "gpu.func @k(%0: ptr<f32, device> /*Out*/) threads 32 {
  %1 = const 1.0 : f16  // k.py:2
  %2 = const 0.0 : f32  // k.py:3
  %3, %4 = mma.simdgroup8x8 %1, %1, %1, %1, %2, %2 : f32, f32  // k.py:4
  %5 = builtin thread_index : i32  // k.py:5
  store %0, %5, %3  // k.py:5
}
";

const NVIDIA_FENCE: &str = "gpu.func @k(%0: ptr<f32, device> /*Out*/) threads 128 {
  %1 = const 1.0 : f32  // k.py:2
  barrier  // k.py:3
  wgmma_fence  // k.py:4
  %2 = builtin thread_index : i32  // k.py:5
  store %0, %2, %1  // k.py:5
}
";

#[test]
fn an_op_of_one_vendor_is_refused_in_gpu_ir_for_the_other() {
    let parse = |text: &str| parse_gpu_function(text).unwrap_or_else(|e| panic!("{e}"));
    let (apple, nvidia) = (parse(APPLE_MMA), parse(NVIDIA_FENCE));
    verify_gpu(&apple, Vendor::Apple).unwrap();
    verify_gpu(&nvidia, Vendor::Nvidia).unwrap();
    assert_eq!(
        verify_gpu(&nvidia, Vendor::Apple).unwrap_err().to_string(),
        "invalid GPU IR at k.py:4 (wgmma_fence): the op is NVIDIA only, and this function is for an Apple GPU"
    );
    assert_eq!(
        verify_gpu(&apple, Vendor::Nvidia).unwrap_err().to_string(),
        "invalid GPU IR at k.py:4 (mma.simdgroup8x8): the matrix atom simdgroup8x8 is Apple only, and this \
         function is for an NVIDIA GPU"
    );
    // Every NVIDIA-only op and parameter is refused for Apple GPUs.
    let f = tensor_copy_kernel(false, DType::I64);
    let err = verify_gpu(&f, Vendor::Apple).unwrap_err().to_string();
    assert_eq!(
        err,
        "invalid GPU IR: parameter A_tma0 is for NVIDIA GPUs only, and this function is for an Apple GPU"
    );
    let mut portable_params = f.clone();
    portable_params.params.truncate(1);
    let err = verify_gpu(&portable_params, Vendor::Apple)
        .unwrap_err()
        .to_string();
    assert!(err.contains("(mbarrier_init.1): the op is NVIDIA only"), "{err}");
}

#[test]
fn ops_every_target_spells_belong_to_no_vendor() {
    let portable = [
        GpuOpKind::Barrier,
        GpuOpKind::AsyncCommit,
        GpuOpKind::AsyncWait { pending: 1 },
        GpuOpKind::SimdReduce(ReduceOp::Sum),
    ];
    assert!(portable.iter().all(|k| k.vendor().is_none()));
    assert_eq!(GpuOpKind::TmaLoad.vendor(), Some(Vendor::Nvidia));
    assert_eq!(
        GpuOpKind::Mma(AtomKind::AppleMatmul2d16x32x16).vendor(),
        Some(Vendor::Apple)
    );
    assert_eq!(
        GpuOpKind::Mma(AtomKind::NvidiaMmaM16N8K16).vendor(),
        Some(Vendor::Nvidia)
    );
}

/// A transposed `simdgroup_load` of the 8x8 matrix at `tg0[INDEX]`, rows of 72.
fn simdgroup_load_kernel(index: &str, element: &str) -> String {
    format!(
        "gpu.func @k(%0: ptr<f32, device> /*Out*/) threads 64 {{
  threadgroup tg0 %1 = {element}[1152] /*scratch, 2304 bytes*/
  %2 = builtin {index} : i32  // k.py:2
  %3 = const 8 : i32  // k.py:2
  %4 = mul %2, %3 : i32  // k.py:2
  %5 = const 72 : i32  // k.py:3
  %6, %7 = simdgroup_load.trans %1, %4, %5 : {element}, {element}  // k.py:3
  %8 = builtin thread_index : i32  // k.py:4
  %9 = cast %6 : f32  // k.py:4
  store %0, %8, %9  // k.py:4
}}
"
    )
}

#[test]
fn a_simdgroup_load_reads_one_matrix_per_simdgroup_on_apple_gpus() {
    let parse = |text: &str| parse_gpu_function(text).unwrap_or_else(|e| panic!("{e}"));
    let text = simdgroup_load_kernel("simdgroup_index", "f16");
    let f = parse(&text);
    verify_gpu(&f, Vendor::Apple).unwrap();
    assert_eq!(print_gpu_function(&f), text);
    assert_eq!(
        verify_gpu(&f, Vendor::Nvidia).unwrap_err().to_string(),
        "invalid GPU IR at k.py:3 (simdgroup_load.trans): the op is Apple only, and this function is for an \
         NVIDIA GPU"
    );
    // The matrix's address must be one for the whole simdgroup.
    let err = verify_gpu(
        &parse(&simdgroup_load_kernel("thread_index", "f16")),
        Vendor::Apple,
    )
    .unwrap_err()
    .to_string();
    assert_eq!(
        err,
        "invalid GPU IR at k.py:3 (simdgroup_load.trans): a simdgroup_load whose address or row length differs \
         between lanes of the simdgroup"
    );
    // simdgroup matrices hold f16, bf16 or f32.
    let err = verify_gpu(
        &parse(&simdgroup_load_kernel("simdgroup_index", "i32")),
        Vendor::Apple,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("-> 2 elements"), "{err}");
}

/// A stacked map's copy names the matrix (an eighth operand, an i32); a
/// depth of another type is refused.
#[test]
fn a_stacked_maps_copy_takes_an_i32_depth() {
    let with_depth = |dtype: DType| {
        let mut f = tensor_copy_kernel(false, DType::I64);
        let mut b = GpuBuilder::new("depth", 128);
        let depth = b.add_param("d", GpuParamKind::Scalar(dtype), 1);
        let n = f.values.len();
        f.values.push(b.finish().values[depth.index()]);
        let depth = GpuValue(n as u32);
        f.params.push(metile_ir::gpu_ir::GpuParam {
            name: "d".into(),
            kind: GpuParamKind::Scalar(dtype),
            tile_index: 1,
            value: depth,
        });
        for op in f.body.ops.iter_mut() {
            if matches!(op.kind, GpuOpKind::TmaLoad) {
                op.operands = op.operands.iter().copied().chain([depth]).collect();
            }
        }
        verify_gpu(&f, Vendor::Nvidia)
    };
    with_depth(DType::I32).unwrap();
    let err = with_depth(DType::F32).unwrap_err().to_string();
    assert!(err.contains("depth"), "{err}");
}
