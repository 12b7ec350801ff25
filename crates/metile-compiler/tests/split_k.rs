//! Split-K and the L2 program order on the seed GEMM: the shape of the derived
//! kernels, that both compile for every target, and what is refused.

mod common;

use common::{for_loop, int, loc, v};
use metile_compiler::split_k::{split_k, WORKSPACE_PARAM};
use metile_compiler::{
    compile_cuda, compile_msl, l2_order, optimize_tile_ir, CompileOptions, Passes, Target,
};
use metile_ir::{verify, Builder, DType, Function, OpKind, Operand, ParamKind};

fn gemm() -> Function {
    optimize_tile_ir(common::gemm(32, 32, 16, DType::F16)).unwrap()
}

fn count(f: &Function, pred: impl Fn(&OpKind) -> bool) -> usize {
    let mut n = 0;
    f.walk(&mut |op| n += usize::from(pred(&op.kind)));
    n
}

#[test]
fn the_partial_kernel_stores_partial_tiles_and_the_finishing_one_sums_them() {
    let f = gemm();
    let s = split_k(&f, 4).unwrap();
    common::round_trips(s.partial.clone());
    common::round_trips(s.finish.clone());
    for k in [&s.partial, &s.finish] {
        verify(k).unwrap();
        assert_eq!(k.params.len(), f.params.len() + 1);
        assert_eq!(k.params.last().map(|p| p.name.as_str()), Some(WORKSPACE_PARAM));
    }
    assert_eq!(s.tile_elems, 32 * 32);
    let dot = |k: &OpKind| matches!(k, OpKind::Dot);
    let tile_store = |k: &OpKind| matches!(k, OpKind::TileStore { .. });
    let tile_load = |k: &OpKind| matches!(k, OpKind::TileLoad { .. });
    // The partial kernel: the loop's dot, one store (to the workspace), nothing after.
    assert_eq!((count(&s.partial, dot), count(&s.partial, tile_store)), (1, 1));
    let store = s.partial.body.ops.last().unwrap();
    assert!(tile_store(&store.kind));
    assert_eq!(store.operands[0], s.partial.params.last().unwrap().value);
    // The finishing kernel: no dot, the user's store, the partial tiles read.
    assert_eq!((count(&s.finish, dot), count(&s.finish, tile_store)), (0, 1));
    assert_eq!(
        count(&s.finish, tile_load),
        2,
        "the first tile, then a loop over the rest"
    );
}

#[test]
fn both_kernels_compile_for_every_target() {
    let s = split_k(&gemm(), 3).unwrap();
    let options = CompileOptions::default();
    for k in [&s.partial, &s.finish] {
        let msl = compile_msl(k, &options).unwrap().kernel.source;
        assert!(!msl.is_empty());
        let cuda = compile_cuda(k, &options, &Target::nvidia(9, 0))
            .unwrap()
            .kernel
            .source;
        assert!(!cuda.is_empty());
    }
    let cuda = compile_cuda(&s.partial, &options, &Target::nvidia(9, 0))
        .unwrap()
        .kernel
        .source;
    assert!(cuda.contains("mma.sync"));
}

#[test]
fn one_split_is_refused() {
    let e = split_k(&gemm(), 1).unwrap_err();
    assert_eq!(e.op, "split_k");
}

/// A GEMM adding two products per iteration (`acc = dot(a, b, dot(a, b, acc))`),
/// or, with `two_accumulators`, keeping them in two carried tiles.
fn double_gemm(two_accumulators: bool) -> Function {
    let mut b = Builder::new("double");
    let a = b.add_param("A", ParamKind::Pointer(DType::F32));
    let c = b.add_param("C", ParamKind::Pointer(DType::F32));
    let k = b.add_param("K", ParamKind::Scalar(DType::I32));
    b.set_loc(loc(3));
    let acc0 = b.full(&[16, 16], Operand::Float(0.0), DType::F32).unwrap();
    let inits = if two_accumulators {
        vec![acc0, acc0]
    } else {
        vec![acc0]
    };
    let out = for_loop(&mut b, (int(0), v(k), int(16)), &inits, |b, kk, carried| {
        b.set_loc(loc(5));
        let t = b.tile_load(v(a), int(0), v(kk), v(k), (16, 16)).unwrap();
        let first = b.dot(v(t), v(t), Some(v(carried[0]))).unwrap();
        if two_accumulators {
            let second = b.dot(v(t), v(t), Some(v(carried[1]))).unwrap();
            vec![first, second]
        } else {
            vec![b.dot(v(t), v(t), Some(v(first))).unwrap()]
        }
    });
    b.set_loc(loc(8));
    b.tile_store(v(c), int(0), int(0), int(16), v(out[0]), (16, 16))
        .unwrap();
    if two_accumulators {
        b.tile_store(v(c), int(16), int(0), int(16), v(out[1]), (16, 16))
            .unwrap();
    }
    common::round_trips(optimize_tile_ir(common::round_trips(b.finish().unwrap())).unwrap())
}

#[test]
fn a_chain_of_dots_is_one_accumulation() {
    let s = split_k(&double_gemm(false), 2).unwrap();
    assert_eq!(count(&s.partial, |k| matches!(k, OpKind::Dot)), 2);
}

#[test]
fn two_accumulators_are_refused_at_the_loop() {
    let e = split_k(&double_gemm(true), 2).unwrap_err();
    assert!(
        e.reason.contains("more than one loop-carried value"),
        "{}",
        e.reason
    );
    assert_ne!(e.loc.line, 0, "the loop's line");
}

#[test]
fn l2_order_renumbers_gemm_grids_only() {
    let mut f = gemm();
    assert!(l2_order::order_programs(&mut f));
    verify(&f).unwrap();
    let f = optimize_tile_ir(f).unwrap();
    // The remapped ids come from one program_id per axis, divided by the grid.
    assert_eq!(count(&f, |k| matches!(k, OpKind::ProgramId { .. })), 2);
    assert_eq!(count(&f, |k| matches!(k, OpKind::NumPrograms { .. })), 2);
    let mut add = optimize_tile_ir(common::add(256, DType::F32)).unwrap();
    assert!(!l2_order::order_programs(&mut add));
    // A switched-off pass leaves the kernel as traced.
    let off = CompileOptions {
        passes: {
            let mut p = Passes::default();
            p.set("l2_order", false);
            p
        },
        ..CompileOptions::default()
    };
    let msl = |o: &CompileOptions| compile_msl(&gemm(), o).unwrap().kernel.source;
    assert_ne!(msl(&off), msl(&CompileOptions::default()));
    // The prologue on CUDA: the grid's extents, the band arithmetic in 64 bits.
    let cuda = compile_cuda(&gemm(), &CompileOptions::default(), &Target::nvidia(9, 0))
        .unwrap()
        .kernel
        .source;
    assert!(cuda.contains("gridDim") && cuda.contains("long"), "{cuda}");
    let msl = msl(&CompileOptions::default());
    assert!(
        msl.contains("threadgroups_per_grid") && msl.contains("long"),
        "{msl}"
    );
}

#[test]
fn a_split_launch_plans_the_partial_kernel_then_the_finishing_one() {
    use metile_compiler::launch_plan::{plan_launch, Step, StepGrid, Workspace};
    let f = gemm();
    let single = plan_launch(&f, 1).unwrap();
    assert_eq!(single.kernels, vec![f.clone()]);
    assert_eq!(
        single.steps,
        vec![Step {
            kernel: 0,
            grid: StepGrid::Launch
        }]
    );
    assert_eq!((single.workspace, single.main_kernel()), (None, 0));
    let plan = plan_launch(&f, 4).unwrap();
    let s = split_k(&f, 4).unwrap();
    assert_eq!(plan.kernels, vec![s.partial, s.finish]);
    assert_eq!(
        plan.steps,
        vec![
            Step {
                kernel: 0,
                grid: StepGrid::SplitAxis2 { splits: 4 }
            },
            Step {
                kernel: 1,
                grid: StepGrid::Launch
            },
        ]
    );
    let tiles = Workspace::PartialTiles {
        splits: 4,
        tile_elems: 32 * 32,
    };
    assert_eq!(plan.workspace, Some(tiles));
    assert_eq!(tiles.elems(6), 6 * 4 * 32 * 32);
    assert_eq!(tiles.elems(u64::MAX), u64::MAX, "saturates");
    assert_eq!(
        plan.main_kernel(),
        1,
        "the finishing kernel runs over the launch's grid"
    );
    // A kernel split-K cannot split is refused with split-K's reason.
    let e = plan_launch(&double_gemm(true), 2).unwrap_err();
    assert!(
        e.reason.contains("more than one loop-carried value"),
        "{}",
        e.reason
    );
}
