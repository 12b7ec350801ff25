//! How `dot` tiles a matrix atom over the simdgroups of a threadgroup.
//!
//! `dot(a[M,K], b[K,N], acc[M,N])` on a target with a matrix atom of shape
//! `(am, an, ak)` for the operands' dtype splits the `M/am x N/an` atom tiles of
//! the result over a `wm x wn` grid of simdgroups (warps); each simdgroup owns a
//! block of `reps_m x reps_n` atom tiles and keeps their accumulators in
//! registers, in the atom's C layout. Simdgroups beyond `wm * wn` (a tile with
//! fewer atom tiles than simdgroups) repeat the work of the first ones, so every
//! threadgroup size works.
//!
//! Everything the lowering needs is expressed as three distributed layouts
//! built from the atom's thread-value layouts (`atoms.rs`):
//! * `c` over `[M, N]`: the result's layout; register `j + nc * (ni + reps_n * mi)`
//!   is value `j` of the accumulator of atom tile `(mi, ni)` of the simdgroup;
//! * `a` over `[M, ak]`: the A fragments of one `k` step; register `j + na * mi`
//!   is value `j` of the fragment of row block `mi`;
//! * `b` over `[ak, N]`: the B fragments; register `j + nb * ni`.
//!
//! The simdgroup grid is the one that keeps every simdgroup busy and, among
//! those, reads the fewest fragment rows and columns per `k` step (the most
//! square per-simdgroup block).

use crate::atoms::{AtomKind, MatrixAtom};
use crate::dist_layout::{DistLayout, Leaf};
use crate::target::Target;
use metile_ir::DType;
use metile_layout::{Layout, LayoutError};

/// The plan of one `dot` on a matrix atom.
#[derive(Clone, Debug, PartialEq)]
pub struct AtomTiling {
    pub atom: MatrixAtom,
    /// `(M, N, K)` of the `dot`.
    pub shape: (usize, usize, usize),
    /// Simdgroups along M and along N.
    pub warps: (usize, usize),
    /// Atom tiles per simdgroup along M and along N.
    pub reps: (usize, usize),
    pub c: DistLayout,
    pub a: DistLayout,
    pub b: DistLayout,
    /// Where the fragments come from `ldmatrix` instead of element reads.
    pub ldmatrix: Option<LdMatrixPlan>,
}

/// The lane addresses of NVIDIA's `ldmatrix` for an m16n8k16 atom's fragments:
/// lane `l` names row `l % 8` of 8x8 matrix `l / 8`. `a` over `[M, ak]` (one
/// `x4` per row block, registers in A fragment order); `b` over `[ak, N]`
/// (`x4.trans` for two column blocks, or `x2.trans` for one, registers in B
/// fragment order, column block after column block).
#[derive(Clone, Debug, PartialEq)]
pub struct LdMatrixPlan {
    pub a: DistLayout,
    pub b: DistLayout,
    /// Matrices per B `ldmatrix`: 4 (two column blocks) or 2.
    pub b_count: u8,
}

/// The atom that `dot` on `operand` tiles uses on `target`, if any. The tf32
/// atom changes f32 results (inputs are rounded to 10-bit mantissas), so f32
/// `dot` takes it only when the `tf32` pass is switched on.
pub fn atom_for(target: &Target, operand: DType) -> Option<MatrixAtom> {
    target.matrix_atoms.iter().find_map(|&kind| match kind {
        AtomKind::AppleSimdgroup8x8 => MatrixAtom::apple_simdgroup_8x8(operand),
        AtomKind::NvidiaMmaM16N8K16 => MatrixAtom::nvidia_mma_m16n8k16(operand),
        AtomKind::NvidiaMmaM16N8K8Tf32 => {
            (target.default_passes.tf32 && operand == DType::F32).then(MatrixAtom::nvidia_mma_m16n8k8_tf32)
        }
    })
}

/// The plan for `dot` of an `m x k` by `k x n` tile of `operand` over `threads`
/// threads, or `None` when no atom fits (the generic path then runs).
pub fn plan(
    target: &Target,
    (m, n, k): (usize, usize, usize),
    operand: DType,
    threads: usize,
) -> Option<AtomTiling> {
    let atom = atom_for(target, operand)?;
    let (am, an, ak) = atom.shape;
    let simd = target.simd_width as usize;
    if m % am != 0 || n % an != 0 || k % ak != 0 || threads % simd != 0 || atom.threads != simd {
        return None;
    }
    let warps_total = threads / simd;
    let (tm, tn) = (m / am, n / an);
    let mut best: Option<((usize, usize), (usize, usize))> = None;
    for wm in (1..=tm).filter(|w| tm % w == 0 && warps_total % w == 0) {
        for wn in (1..=tn).filter(|w| tn % w == 0 && (warps_total / wm) % w == 0) {
            // More simdgroups at work first, then fewer fragment loads per k step.
            let score = (usize::MAX - wm * wn, (tm / wm) * am + (tn / wn) * an);
            if best.is_none_or(|(s, _)| score < s) {
                best = Some((score, (wm, wn)));
            }
        }
    }
    let (_, (wm, wn)) = best?;
    let replicas = warps_total / (wm * wn);
    let (reps_m, reps_n) = (tm / wm, tn / wn);
    let build = || -> Result<AtomTiling, LayoutError> {
        let warp_leaves = |stride_n: i64, stride_m: i64| {
            vec![
                Leaf {
                    extent: wn as i64,
                    stride: stride_n,
                },
                Leaf {
                    extent: wm as i64,
                    stride: stride_m,
                },
                Leaf {
                    extent: replicas as i64,
                    stride: 0,
                },
            ]
        };
        let (n_i, k_i) = (n as i64, ak as i64);
        let (am_i, an_i) = (am as i64, an as i64);
        let c = tiled(
            &[m, n],
            &atom.c,
            am,
            warp_leaves(reps_n as i64 * an_i, reps_m as i64 * am_i * n_i),
            &[
                Leaf {
                    extent: reps_n as i64,
                    stride: an_i,
                },
                Leaf {
                    extent: reps_m as i64,
                    stride: am_i * n_i,
                },
            ],
        )?;
        let a = tiled(
            &[m, ak],
            &atom.a,
            am,
            warp_leaves(0, reps_m as i64 * am_i * k_i),
            &[Leaf {
                extent: reps_m as i64,
                stride: am_i * k_i,
            }],
        )?;
        let b = tiled(
            &[ak, n],
            &atom.b,
            ak,
            warp_leaves(reps_n as i64 * an_i, 0),
            &[Leaf {
                extent: reps_n as i64,
                stride: an_i,
            }],
        )?;
        let ldmatrix = if target.ldmatrix
            && target.default_passes.ldmatrix
            && atom.kind == AtomKind::NvidiaMmaM16N8K16
        {
            let b_blocks: usize = if reps_n % 2 == 0 { 2 } else { 1 };
            let lanes = |first: Leaf, second: Leaf, third: Leaf| vec![first, second, third];
            let mut a_threads = lanes(
                Leaf {
                    extent: 8,
                    stride: k_i,
                },
                Leaf {
                    extent: 2,
                    stride: 8 * k_i,
                },
                Leaf { extent: 2, stride: 8 },
            );
            a_threads.extend(warp_leaves(0, reps_m as i64 * am_i * k_i));
            let mut b_threads = lanes(
                Leaf {
                    extent: 8,
                    stride: n_i,
                },
                Leaf {
                    extent: 2,
                    stride: 8 * n_i,
                },
                Leaf {
                    extent: 2,
                    stride: if b_blocks == 2 { an_i } else { 0 },
                },
            );
            b_threads.extend(warp_leaves(reps_n as i64 * an_i, 0));
            let keep = |v: Vec<Leaf>| v.into_iter().filter(|l| l.extent > 1).collect::<Vec<_>>();
            Some(LdMatrixPlan {
                a: DistLayout::from_leaves(
                    &[m, ak],
                    &keep(a_threads),
                    &keep(vec![Leaf {
                        extent: reps_m as i64,
                        stride: am_i * k_i,
                    }]),
                )?,
                b: DistLayout::from_leaves(
                    &[ak, n],
                    &keep(b_threads),
                    &keep(vec![Leaf {
                        extent: (reps_n / b_blocks) as i64,
                        stride: b_blocks as i64 * an_i,
                    }]),
                )?,
                b_count: 2 * b_blocks as u8,
            })
        } else {
            None
        };
        Ok(AtomTiling {
            ldmatrix,
            atom: atom.clone(),
            shape: (m, n, k),
            warps: (wm, wn),
            reps: (reps_m, reps_n),
            c,
            a,
            b,
        })
    };
    build().ok()
}

/// A distributed layout over `shape` (row-major, 2-D) whose threads are the
/// atom's lanes followed by `warps`, and whose values are the atom's values
/// followed by `repeats`. `tv` indexes the atom's `rows x _` matrix column-major.
fn tiled(
    shape: &[usize],
    tv: &Layout,
    rows: usize,
    warps: Vec<Leaf>,
    repeats: &[Leaf],
) -> Result<DistLayout, LayoutError> {
    let row_stride = shape[1] as i64;
    let convert = |mode: Layout| -> Vec<Leaf> {
        mode.shape()
            .leaves()
            .into_iter()
            .zip(mode.stride().leaves())
            .filter(|&(extent, _)| extent > 1)
            .map(|(extent, stride)| {
                let rows = rows as i64;
                // The atom tables keep each leaf inside one axis (checked in tests).
                let tile_stride = if stride < rows {
                    stride * row_stride
                } else {
                    stride / rows
                };
                Leaf {
                    extent,
                    stride: tile_stride,
                }
            })
            .collect()
    };
    let mut thread = convert(tv.mode(0)?);
    thread.extend(warps.into_iter().filter(|l| l.extent > 1));
    let mut value = convert(tv.mode(1)?);
    value.extend(repeats.iter().copied().filter(|l| l.extent > 1));
    DistLayout::from_leaves(shape, &thread, &value)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every element of C is held, and each (simdgroup block, atom tile) pairs
    /// with the A rows and B columns of the same tile.
    fn check(target: &Target, shape: (usize, usize, usize), dtype: DType, threads: usize) {
        let p = plan(target, shape, dtype, threads).unwrap();
        let (m, n, _) = shape;
        let (am, an, ak) = p.atom.shape;
        let (na, nb, nc) = p.atom.values_per_thread();
        let mut seen = vec![false; m * n];
        for t in 0..threads {
            let (lane, _) = (t % 32, t / 32);
            for mi in 0..p.reps.0 {
                for ni in 0..p.reps.1 {
                    for j in 0..nc {
                        let e = p.c.element(t, j + nc * (ni + p.reps.1 * mi)) as usize;
                        seen[e] = true;
                        let (r, c) = (e / n, e % n);
                        let (ar, ac) = p.atom.c_coord(lane, j).unwrap();
                        // The tile origin this accumulator belongs to.
                        let (r0, c0) = (r - ar, c - ac);
                        assert_eq!((r0 % am, c0 % an), (0, 0));
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
        assert!(seen.iter().all(|&s| s), "every element of C is computed");
    }

    #[test]
    fn atoms_tile_over_simdgroups() {
        let nv = Target::nvidia(9, 0);
        check(&nv, (128, 128, 32), DType::F16, 256);
        check(&nv, (64, 32, 16), DType::BF16, 128);
        check(&nv, (16, 8, 16), DType::F16, 256);
        check(&nv, (48, 24, 32), DType::F16, 64);
        let apple = Target::apple();
        check(&apple, (64, 64, 16), DType::F32, 256);
        check(&apple, (8, 8, 8), DType::F16, 128);
        check(&apple, (32, 24, 8), DType::BF16, 96);
    }

    /// Simulates `ldmatrix` on the planned lane addresses: every lane must get
    /// exactly its fragment values, in order.
    fn check_ldmatrix(shape: (usize, usize, usize), threads: usize) {
        let p = plan(&Target::nvidia(9, 0), shape, DType::F16, threads).unwrap();
        let ld = p.ldmatrix.as_ref().unwrap();
        let n = shape.1;
        let (na, nb, _) = p.atom.values_per_thread();
        for t in 0..threads {
            let (warp, lane) = (t / 32, t % 32);
            let (g, tq) = (lane / 4, lane % 4);
            let addr = |l: &DistLayout, matrix: usize, row: usize, v: usize| {
                l.element(warp * 32 + 8 * matrix + row, v)
            };
            for mi in 0..p.reps.0 {
                for i in 0..4 {
                    for j in 0..2 {
                        let got = addr(&ld.a, i, g, mi) + (2 * tq + j) as i64;
                        assert_eq!(
                            got,
                            p.a.element(t, 2 * i + j + na * mi),
                            "A thread {t} matrix {i}"
                        );
                    }
                }
            }
            let blocks = usize::from(ld.b_count) / 2;
            for bi in 0..p.reps.1 / blocks {
                for i in 0..usize::from(ld.b_count) {
                    for j in 0..2 {
                        let got = addr(&ld.b, i, 2 * tq + j, bi) + g as i64;
                        let ni = bi * blocks + i / 2;
                        let want = p.b.element(t, 2 * (i % 2) + j + nb * ni);
                        assert_eq!(
                            (got / n as i64, got % n as i64),
                            (want / n as i64, want % n as i64),
                            "B thread {t}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn ldmatrix_addresses_give_every_lane_its_fragments() {
        check_ldmatrix((128, 128, 32), 256);
        check_ldmatrix((64, 24, 16), 128);
        check_ldmatrix((16, 8, 16), 64);
        assert!(plan(&Target::apple(), (64, 64, 32), DType::F16, 128)
            .unwrap()
            .ldmatrix
            .is_none());
    }

    #[test]
    fn the_grid_keeps_simdgroups_busy_and_square() {
        let p = plan(&Target::nvidia(9, 0), (128, 128, 32), DType::F16, 256).unwrap();
        assert_eq!(p.warps.0 * p.warps.1, 8);
        assert_eq!(p.reps.0 * p.reps.1, 16);
        let p = plan(&Target::apple(), (64, 64, 32), DType::F32, 128).unwrap();
        assert_eq!((p.warps, p.reps), ((2, 2), (4, 4)));
    }

    #[test]
    fn shapes_and_dtypes_without_an_atom_have_no_plan() {
        let nv = Target::nvidia(9, 0);
        assert!(plan(&nv, (128, 128, 32), DType::F32, 256).is_none());
        assert!(plan(&nv, (100, 128, 32), DType::F16, 256).is_none());
        assert!(plan(&nv, (128, 128, 24), DType::F16, 256).is_none());
        assert!(plan(&Target::nvidia(7, 5), (128, 128, 32), DType::F16, 256).is_none());
        assert!(plan(&Target::apple(), (12, 8, 8), DType::F32, 64).is_none());
    }
}
