//! Repack steps of launch plans: which operands of a compiled kernel a launch
//! may copy into aligned rows (the `repack_operands` pass), derived without a GPU.

mod common;

use metile_compiler::launch_plan::{plan_launch, plan_repack, LaunchPlan, RepackStep, Workspace};
use metile_compiler::split_k::split_k;
use metile_compiler::{compile_cuda, optimize_tile_ir, CompileOptions, CudaKernel, CudaParam, Target};
use metile_ir::gpu_ir::LaunchValue;
use metile_ir::{DType, Function};

fn cuda(f: &Function, options: &CompileOptions) -> CudaKernel {
    compile_cuda(f, options, &Target::nvidia(9, 0))
        .unwrap_or_else(|e| panic!("{e}"))
        .kernel
}

/// The seed GEMM with tiles the sm_90 ring fills with tensor copies (two
/// warpgroups, 128 bytes of K an iteration).
fn gemm() -> Function {
    optimize_tile_ir(common::gemm(128, 128, 64, DType::F16)).unwrap_or_else(|e| panic!("{e}"))
}

fn two_warpgroups() -> CompileOptions {
    CompileOptions {
        num_sgs: Some(8),
        ..common::without_l2_order()
    }
}

/// The buffers of the kernel's tensor maps, in order.
fn mapped_buffers(k: &CudaKernel) -> Vec<usize> {
    k.params
        .iter()
        .filter_map(|p| match p {
            CudaParam::TensorMap(spec) => Some(spec.buffer),
            _ => None,
        })
        .collect()
}

#[test]
fn the_seed_gemm_on_sm90_may_repack_both_operands_never_c() {
    let k = cuda(&gemm(), &two_warpgroups());
    let buffers = mapped_buffers(&k);
    assert!(buffers.contains(&0) && buffers.contains(&1), "{buffers:?}");
    let repack = plan_repack(&k).expect("a repack step");
    assert_eq!(repack.workspace, Workspace::AlignedRows);
    let mut got: Vec<(usize, usize)> = repack
        .operands
        .iter()
        .map(|o| (o.buffer(), o.element_bytes()))
        .collect();
    got.sort_unstable();
    got.dedup();
    assert_eq!(got, [(0, 2), (1, 2)]);
    // Each candidate names its own map; A's rows are unbounded (the seed's
    // `tile_load` has no `bounds=`), K columns K apart (argument 5).
    for o in &repack.operands {
        let CudaParam::TensorMap(spec) = k
            .params
            .iter()
            .filter(|p| matches!(p, CudaParam::TensorMap(_)))
            .nth(o.map)
            .expect("the candidate's map")
        else {
            unreachable!()
        };
        assert_eq!(*spec, o.spec);
    }
    let a = repack.operands.iter().find(|o| o.buffer() == 0).expect("A");
    assert_eq!(
        (a.spec.rows, a.spec.cols, a.spec.stride),
        (
            LaunchValue::Const(i64::from(i32::MAX)),
            LaunchValue::Arg(5),
            LaunchValue::Arg(5)
        )
    );
}

#[test]
fn no_repack_step_with_the_switch_off_or_without_tensor_maps() {
    let mut off = two_warpgroups();
    off.passes.set("repack_operands", false);
    let k = cuda(&gemm(), &off);
    assert!(!mapped_buffers(&k).is_empty());
    assert_eq!(plan_repack(&k), None);
    // Without TMA the kernel has no tensor maps, so nothing to copy for.
    let mut no_tma = two_warpgroups();
    no_tma.passes.set("tma", false);
    no_tma.passes.set("wgmma", false);
    assert_eq!(plan_repack(&cuda(&gemm(), &no_tma)), None);
    let add = optimize_tile_ir(common::add(256, DType::F32)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(plan_repack(&cuda(&add, &common::without_l2_order())), None);
    // sm_80 has no tensor memory accelerator.
    let a100 = compile_cuda(&gemm(), &two_warpgroups(), &Target::nvidia(8, 0))
        .unwrap_or_else(|e| panic!("{e}"))
        .kernel;
    assert_eq!(plan_repack(&a100), None);
}

#[test]
fn a_split_plan_repacks_before_the_partial_kernel_only() {
    let f = gemm();
    let mut plan = plan_launch(&f, 4).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        plan.repacks.is_empty(),
        "no repack step before the kernels are compiled"
    );
    let options = two_warpgroups();
    let compiled: Vec<CudaKernel> = plan.kernels.iter().map(|k| cuda(k, &options)).collect();
    plan.add_repack_steps(|k| plan_repack(&compiled[k]));
    assert_eq!(plan.repacks.len(), 1, "{:?}", plan.repacks);
    let RepackStep { kernel, repack } = &plan.repacks[0];
    assert_eq!(*kernel, 0, "the partial kernel reads A and B with tensor copies");
    assert_eq!(plan.repack_of(1), None, "the finishing kernel has no dot");
    // The partial kernel writes the workspace, its last parameter: never a candidate.
    let partial = split_k(&f, 4).unwrap_or_else(|e| panic!("{e}")).partial;
    assert!(repack
        .operands
        .iter()
        .all(|o| o.buffer() + 1 < partial.params.len()));
    // A one-kernel plan gets its kernel's step; the step is replaced, not added to.
    let mut single = LaunchPlan::single(f.clone());
    let k = cuda(&f, &options);
    single.add_repack_steps(|_| plan_repack(&k));
    single.add_repack_steps(|_| plan_repack(&k));
    assert_eq!(single.repacks.len(), 1);
    assert_eq!(single.repack_of(0), plan_repack(&k).as_ref());
}
