//! Atomics through the compiler: the GPU IR of a tile atomic (one per element,
//! by its owner) and of a program's lock (`while atomic_cas(...) == 1`, a
//! broadcast through threadgroup memory, barriers that order device memory),
//! the MSL (fences, Metal 3.2) and CUDA (`atom.<sem>.<scope>`) they print as,
//! and what each target refuses.

mod common;

use common::{int, loc, v};
use metile_compiler::{compile_cuda, AppleArch, CompileOptions, MslVersion, Target};
use metile_ir::gpu_ir::GpuOpKind;
use metile_ir::{
    AtomicFlags, AtomicOp, BinaryOp, Builder, CmpOp, DType, Function, MemScope, MemSem, Operand, ParamKind,
};

fn flags(sem: MemSem, scope: MemScope) -> AtomicFlags {
    AtomicFlags { sem, scope }
}

/// `atomic_<op>(H + load(X + offs), 1, mask=offs < N)` over `block` elements.
fn histogram(block: usize, op: AtomicOp, dtype: DType, sem: MemSem) -> Function {
    let mut b = Builder::new("histogram");
    let x = b.add_param("X", ParamKind::Pointer(DType::I32));
    let h = b.add_param("H", ParamKind::Pointer(dtype));
    let n = b.add_param("N", ParamKind::Scalar(DType::I32));
    b.set_loc(loc(2));
    let pid = b.program_id(0).unwrap();
    let base = b.binary(BinaryOp::Mul, v(pid), int(block as i64)).unwrap();
    let ar = b.arange(0, block as i64).unwrap();
    let offs = b.binary(BinaryOp::Add, v(base), v(ar)).unwrap();
    let mask = b.compare(CmpOp::Lt, v(offs), v(n)).unwrap();
    b.set_loc(loc(3));
    let px = b.binary(BinaryOp::Add, v(x), v(offs)).unwrap();
    let bins = b.load(v(px), Some(v(mask)), None).unwrap();
    b.set_loc(loc(4));
    let ph = b.binary(BinaryOp::Add, v(h), v(bins)).unwrap();
    b.atomic(op, v(ph), None, int(1), Some(v(mask)), flags(sem, MemScope::Gpu))
        .unwrap();
    b.finish().unwrap()
}

/// Triton's layer-norm lock: spin on `atomic_cas(Lock, 0, 1)`, bump a counter
/// with plain accesses, release with `atomic_xchg(Lock, 0)`.
fn spin_lock() -> Function {
    let mut b = Builder::new("spin_lock");
    let lock = b.add_param("Lock", ParamKind::Pointer(DType::I32));
    let count = b.add_param("Count", ParamKind::Pointer(DType::I32));
    let acq_rel = flags(MemSem::AcqRel, MemScope::Gpu);
    b.set_loc(loc(2));
    let cond_block = b.push_block(&[]);
    assert!(cond_block.is_empty());
    let old = b
        .atomic(AtomicOp::Cas, v(lock), Some(int(0)), int(1), None, acq_rel)
        .unwrap();
    let held = b.compare(CmpOp::Eq, v(old), int(1)).unwrap();
    b.yield_values(&[held]);
    let cond = b.pop_block().unwrap();
    b.push_block(&[]);
    b.yield_values(&[]);
    let body = b.pop_block().unwrap();
    b.finish_while(&[], cond, body);
    b.set_loc(loc(4));
    let c = b.load(v(count), None, None).unwrap();
    let c1 = b.binary(BinaryOp::Add, v(c), int(1)).unwrap();
    b.store(v(count), v(c1), None).unwrap();
    b.set_loc(loc(5));
    b.atomic(AtomicOp::Xchg, v(lock), None, int(0), None, acq_rel)
        .unwrap();
    b.finish().unwrap()
}

fn optimized(f: Function) -> Function {
    common::round_trips(
        metile_compiler::optimize_tile_ir(common::round_trips(f)).unwrap_or_else(|e| panic!("{e}")),
    )
}

fn msl(
    f: &Function,
    target: AppleArch,
) -> Result<metile_compiler::MslCompilation, metile_compiler::CompileError> {
    let options = CompileOptions {
        keep_gpu_ir: true,
        ..common::without_l2_order()
    };
    metile_compiler::compile_msl_for(&optimized(f.clone()), &options, target)
}

fn cuda(f: &Function) -> metile_compiler::CudaKernel {
    compile_cuda(
        &optimized(f.clone()),
        &common::without_l2_order(),
        &Target::nvidia(8, 0),
    )
    .unwrap_or_else(|e| panic!("{e}"))
    .kernel
}

#[test]
fn tile_atomics_print_as_fenced_metal_atomics() {
    let c = msl(
        &histogram(256, AtomicOp::Add, DType::I32, MemSem::AcqRel),
        AppleArch::Apple7,
    )
    .unwrap();
    assert_eq!(c.kernel.language_version, MslVersion::V3_2);
    assert!(
        c.kernel.source.contains("device int* H [[buffer(1)]]"),
        "an atomic writes its buffer"
    );
    insta::assert_snapshot!("histogram_msl", c.kernel.source);
    insta::assert_snapshot!("histogram_gpu_ir", c.gpu_ir.unwrap_or_default());
}

#[test]
fn relaxed_atomics_need_no_fence_and_stay_in_metal_3_1() {
    let c = msl(
        &histogram(256, AtomicOp::Add, DType::I32, MemSem::Relaxed),
        AppleArch::Apple7,
    )
    .unwrap();
    assert_eq!(c.kernel.language_version, MslVersion::V3_1);
    assert!(!c.kernel.source.contains("atomic_thread_fence"));
    assert!(c
        .kernel
        .source
        .contains("atomic_fetch_add_explicit((device atomic_int*)"));
}

#[test]
fn float_max_is_a_compare_and_swap_loop_in_both_languages() {
    let f = histogram(128, AtomicOp::Max, DType::F32, MemSem::Relaxed);
    let m = msl(&f, AppleArch::Apple7).unwrap().kernel.source;
    assert!(m.contains("atomic_compare_exchange_weak_explicit((device atomic_uint*)"));
    let k = cuda(&f);
    assert!(k.source.contains("atom.relaxed.gpu.global.cas.b32"));
    assert!(!k.source.contains("fence.acq_rel"), "relaxed needs no fence");
}

#[test]
fn cuda_atomics_carry_their_ordering_and_scope() {
    let k = cuda(&histogram(256, AtomicOp::Add, DType::U32, MemSem::Release));
    assert!(k.source.contains("atom.release.gpu.global.add.u32 %0, [%1], %2;"));
    let k = cuda(&histogram(256, AtomicOp::Min, DType::I32, MemSem::Acquire));
    assert!(k.source.contains("atom.acquire.gpu.global.min.s32"));
    let k = cuda(&histogram(256, AtomicOp::Add, DType::BF16, MemSem::AcqRel));
    assert!(k.source.contains("fence.acq_rel.gpu;"));
    assert!(k.source.contains("atom.relaxed.gpu.global.cas.b16"));
    let k = cuda(&histogram(256, AtomicOp::Add, DType::F16, MemSem::AcqRel));
    assert!(k.source.contains("atom.acq_rel.gpu.global.add.noftz.f16"));
    insta::assert_snapshot!("spin_lock_cuda", cuda(&spin_lock()).source);
}

#[test]
fn a_program_lock_is_one_atomic_broadcast_between_device_barriers() {
    let c = msl(&spin_lock(), AppleArch::Apple7).unwrap();
    let gpu_ir = c.gpu_ir.clone().unwrap_or_default();
    insta::assert_snapshot!("spin_lock_msl", c.kernel.source);
    insta::assert_snapshot!("spin_lock_gpu_ir", gpu_ir);
    // Two atomics in all: one compare-and-swap per spin, one release.
    let f = metile_compiler::compile_gpu_ir(
        &optimized(spin_lock()),
        &CompileOptions::default(),
        &Target::apple(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut atomics = 0;
    let mut device_barriers = 0;
    f.walk(&mut |op| match op.kind {
        GpuOpKind::Atomic { .. } => atomics += 1,
        GpuOpKind::DeviceBarrier => device_barriers += 1,
        _ => {}
    });
    assert_eq!(atomics, 2);
    // Before and after the compare-and-swap, before and after the release.
    assert_eq!(device_barriers, 4);
}

#[test]
fn apple_gpus_refuse_half_and_wide_atomics_and_system_scope() {
    let err = msl(
        &histogram(64, AtomicOp::Add, DType::F16, MemSem::Relaxed),
        AppleArch::Apple7,
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(
        err.contains("atomic_add on f16 is not available on Apple GPUs: Metal has no 16-bit float atomics"),
        "{err}"
    );
    assert!(err.contains("kernels.py:4"), "{err}");
    let err = msl(
        &histogram(64, AtomicOp::Max, DType::I64, MemSem::Relaxed),
        AppleArch::Apple10,
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(
        err.contains("atomic_max on i64 is not available on Apple GPUs"),
        "{err}"
    );
    assert!(!err.contains("internal"), "{err}");

    let mut b = Builder::new("system");
    let x = b.add_param("X", ParamKind::Pointer(DType::I32));
    b.set_loc(loc(7));
    let ar = b.arange(0, 32).unwrap();
    let p = b.binary(BinaryOp::Add, v(x), v(ar)).unwrap();
    b.atomic(
        AtomicOp::Or,
        v(p),
        None,
        int(1),
        None,
        flags(MemSem::Relaxed, MemScope::Sys),
    )
    .unwrap();
    let f = b.finish().unwrap();
    let err = msl(&f, AppleArch::Apple7)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("scope=\"sys\" is not available on Apple GPUs"),
        "{err}"
    );
    assert!(cuda(&f).source.contains("atom.relaxed.sys.global.or.b32"));
}

#[test]
fn the_builder_types_atomics_like_stores() {
    let mut b = Builder::new("typing");
    let x = b.add_param("X", ParamKind::Pointer(DType::F32));
    let ar = b.arange(0, 16).unwrap();
    let p = b.binary(BinaryOp::Add, v(x), v(ar)).unwrap();
    let relaxed = flags(MemSem::Relaxed, MemScope::Gpu);
    // An int operand is converted to the pointee; a scalar pointer broadcasts.
    let old = b
        .atomic(AtomicOp::Add, v(p), None, int(2), None, relaxed)
        .unwrap();
    assert_eq!(b.ty(old).to_string(), "f32[16]");
    let scalar = b
        .atomic(AtomicOp::Xchg, v(x), None, v(ar), None, relaxed)
        .unwrap();
    assert_eq!(b.ty(scalar).to_string(), "f32[16]");
    let err = b
        .atomic(AtomicOp::And, v(p), None, int(1), None, relaxed)
        .unwrap_err();
    assert_eq!(
        err.0,
        "atomic_and is not defined on f32 pointers; it takes i32, u32 or i64"
    );
    let err = b
        .atomic(AtomicOp::Add, Operand::Float(1.0), None, int(1), None, relaxed)
        .unwrap_err();
    assert!(err.0.starts_with("atomic_add needs a pointer"), "{}", err.0);
    let err = b
        .atomic(AtomicOp::Add, v(p), Some(int(1)), int(1), None, relaxed)
        .unwrap_err();
    assert!(err
        .0
        .contains("internal: atomic_add takes a comparand exactly when it is atomic_cas"));
    let err = b
        .atomic(AtomicOp::Add, v(p), None, int(1), Some(v(old)), relaxed)
        .unwrap_err();
    assert!(
        err.0.contains("the mask of atomic_add must be a bool tile"),
        "{}",
        err.0
    );
}
