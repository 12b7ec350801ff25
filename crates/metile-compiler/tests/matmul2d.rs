//! Apple10's Metal 4 `matmul2d` atom: when `dot` takes it (and when it falls
//! back to the 8x8 simdgroup matrices or the generic path), how it tiles over
//! simdgroups, and the golden MSL 4.0 of a GEMM on it.

mod common;

use metile_compiler::dot_tiling::{self, AtomTiling, DotReport};
use metile_compiler::{compile_msl_for, AppleArch, CompileOptions, MslVersion, Switches, Target};

use metile_ir::gpu_ir::AtomKind;
use metile_ir::DType;

/// [`dot_tiling::plan`] with the policy's default switches on `t`.
fn plan(t: &Target, shape: (usize, usize, usize), dtype: DType, threads: usize) -> Option<AtomTiling> {
    dot_tiling::plan(t, &Switches::defaults(t), shape, dtype, threads)
}

/// [`dot_tiling::report`] with the policy's default switches on `t`.
fn report(t: &Target, shape: (usize, usize, usize), dtype: DType, threads: usize) -> Option<DotReport> {
    dot_tiling::report(t, &Switches::defaults(t), shape, dtype, threads)
}

fn compile(
    f: &metile_ir::Function,
    num_sgs: Option<u32>,
    arch: AppleArch,
) -> metile_compiler::MslCompilation {
    let options = CompileOptions {
        num_sgs,
        keep_gpu_ir: false,
        ..Default::default()
    };
    let f =
        metile_compiler::optimize_tile_ir(common::round_trips(f.clone())).unwrap_or_else(|e| panic!("{e}"));
    compile_msl_for(&f, &options, arch).unwrap_or_else(|e| panic!("{e}"))
}

/// Every element of C is held once per replica, and each thread's A and B
/// fragment values belong to the rows and columns of its C tile.
fn check_tiling(p: &AtomTiling, threads: usize) {
    let (m, n, _) = p.shape;
    let (am, an, ak) = p.atom.shape;
    let (na, nb, nc) = p.atom.values_per_thread();
    let mut seen = vec![0usize; m * n];
    for t in 0..threads {
        let lane = t % 32;
        for mi in 0..p.reps.0 {
            for ni in 0..p.reps.1 {
                for j in 0..nc {
                    let e = p.c.element(t, j + nc * (ni + p.reps.1 * mi)) as usize;
                    seen[e] += 1;
                    let (ar, ac) = p.atom.c_coord(lane, j).unwrap();
                    let (r0, c0) = (e / n - ar, e % n - ac);
                    assert_eq!((r0 % am, c0 % an), (0, 0), "thread {t}");
                    for ja in 0..na {
                        let ea = p.a.element(t, ja + na * mi) as usize;
                        let (xr, xc) = p.atom.a_coord(lane, ja).unwrap();
                        assert_eq!((ea / ak - xr, ea % ak - xc), (r0, 0), "A of thread {t}");
                    }
                    for jb in 0..nb {
                        let eb = p.b.element(t, jb + nb * ni) as usize;
                        let (xr, xc) = p.atom.b_coord(lane, jb).unwrap();
                        assert_eq!((eb / n - xr, eb % n - xc), (0, c0), "B of thread {t}");
                    }
                }
            }
        }
    }
    let replicas = threads / 32 / (p.warps.0 * p.warps.1);
    assert!(
        seen.iter().all(|&s| s == replicas),
        "every element of C once per replica"
    );
}

#[test]
fn f16_and_bf16_dots_tile_matmul2d_over_the_simdgroups() {
    let t = Target::apple10();
    for (shape, dtype, threads) in [
        ((16, 32, 16), DType::F16, 32),
        ((64, 64, 32), DType::F16, 128),
        ((64, 64, 32), DType::BF16, 256),
        ((32, 96, 48), DType::BF16, 96),
        ((16, 32, 16), DType::F16, 256),
        ((128, 128, 32), DType::F16, 256),
    ] {
        let p = plan(&t, shape, dtype, threads).unwrap_or_else(|| panic!("{shape:?}"));
        assert_eq!(p.atom.kind, AtomKind::AppleMatmul2d16x32x16, "{shape:?} {dtype}");
        check_tiling(&p, threads);
    }
    let p = plan(&t, (64, 64, 32), DType::F16, 128).unwrap();
    assert_eq!((p.warps, p.reps), ((2, 2), (2, 1)));
}

#[test]
fn dots_the_atom_does_not_fit_take_the_simdgroup_matrices_or_the_generic_path() {
    let t = Target::apple10();
    let atom = |shape, dtype, threads| plan(&t, shape, dtype, threads).map(|p| p.atom.kind);
    // f32 (relaxed precision would change it), N not a multiple of 32, K of 16, M of 16.
    assert_eq!(
        atom((64, 64, 32), DType::F32, 128),
        Some(AtomKind::AppleSimdgroup8x8)
    );
    assert_eq!(
        atom((64, 48, 32), DType::F16, 128),
        Some(AtomKind::AppleSimdgroup8x8)
    );
    assert_eq!(
        atom((64, 64, 8), DType::BF16, 128),
        Some(AtomKind::AppleSimdgroup8x8)
    );
    assert_eq!(
        atom((8, 32, 16), DType::F16, 32),
        Some(AtomKind::AppleSimdgroup8x8)
    );
    assert_eq!(atom((12, 8, 8), DType::F16, 64), None);
    // Without the arch, the same f16 tile stays on the 8x8 matrices.
    assert_eq!(
        plan(&Target::apple(), (64, 64, 32), DType::F16, 128).map(|p| p.atom.kind),
        Some(AtomKind::AppleSimdgroup8x8)
    );
    let r = report(&t, (64, 64, 32), DType::F16, 128).unwrap();
    assert_eq!(r.atom, "matmul2d16x32x16");
}

#[test]
fn only_kernels_on_the_atom_are_msl_4() {
    let f32_gemm = common::gemm(32, 32, 16, DType::F32);
    let apple = compile(&f32_gemm, Some(2), AppleArch::Apple7);
    let apple10 = compile(&f32_gemm, Some(2), AppleArch::Apple10);
    assert_eq!(apple.kernel.source, apple10.kernel.source);
    assert_eq!(apple10.kernel.language_version, MslVersion::V3_1);
    let f16 = compile(&common::gemm(32, 32, 16, DType::F16), Some(2), AppleArch::Apple10);
    assert_eq!(f16.kernel.language_version, MslVersion::V4_0);
    assert!(f16.kernel.source.contains("#include <metal_tensor>"));
    assert!(!f16.kernel.source.contains("simdgroup_multiply_accumulate"));
}

#[test]
fn gemm_f16_apple10_msl() {
    let c = compile(&common::gemm(32, 32, 16, DType::F16), Some(2), AppleArch::Apple10);
    assert_eq!(c.kernel.threads_per_group, 64);
    insta::assert_snapshot!("gemm_f16_apple10_msl", c.kernel.source);
}
