//! A `b = x.T` staged K-major for the matrix atoms whose fragments the
//! threads read (Apple's): `x`'s rows of K are stored as they are, in
//! vectors, and `b`'s fragments read transposed, where staging `b` itself
//! (`K x N`) would take one store per element of `x`, many-way bank
//! conflicted (attention's `dot(q, k.T)`).

use super::{bank_conflicts, fragment_offsets, vector_runs, AtomTiling, Staged};
use crate::atoms::AtomKind;
use crate::dist_layout::DistLayout;
use crate::target::Target;
use metile_ir::DType;

/// How the `b` (`K x N`) of a `dot` on a matrix atom whose fragments the
/// threads read is staged, and its fragments read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BPlacement {
    /// As it is: `kc` rows of `N` (N-major).
    NMajor,
    /// `b = x.T` staged as `x` is, `N` rows of `kc` (K-major): the threads
    /// store `x`'s runs of K whole, and read `b`'s fragments transposed, with
    /// one `simdgroup_load` per 8x8 matrix where the plan's fragments are
    /// those matrices ([`b_fragments_are_simdgroup_matrices`]), element by
    /// element otherwise. Row paddings are multiples of `align` elements
    /// (the width of `x`'s vector stores), so that the stores stay whole.
    KMajor { align: usize },
}

/// `b`'s fragment layout over `[N, ak]`, as a K-major `b` is placed.
pub fn k_major_b_layout(plan: &AtomTiling) -> Option<DistLayout> {
    plan.b.permuted(&[1, 0])
}

/// Whether the `b` fragments of `plan` are, atom tile by atom tile, the
/// elements `simdgroup_load` gives each lane of an 8x8 `simdgroup_matrix`
/// (the Apple 8x8 atom, its lane leaves inside a simdgroup): each tile can
/// then be read as one matrix.
pub fn b_fragments_are_simdgroup_matrices(plan: &AtomTiling) -> bool {
    if plan.atom.kind != AtomKind::AppleSimdgroup8x8 {
        return false;
    }
    let l = &plan.b;
    let simd = 32;
    if l.thread_base() % simd != 0
        || l.threads() % simd != 0
        || l.thread_terms().iter().any(|t| {
            let (position, extent) = (t.position as usize, t.extent as usize);
            position < simd && position * extent > simd
        })
    {
        return false;
    }
    let cols = l.shape()[1] as i64;
    let per_tile = plan.atom.values_per_thread().1;
    (0..plan.reps.1).all(|ni| {
        let origin = l.element(0, per_tile * ni);
        (0..simd).all(|lane| {
            let (row, col) = simdgroup_matrix_coord(lane);
            (0..per_tile).all(|j| l.element(lane, per_tile * ni + j) - origin == row * cols + col + j as i64)
        })
    })
}

/// The row and first column that lane `lane` holds of an 8x8
/// `simdgroup_matrix` (it holds that column and the next).
pub fn simdgroup_matrix_coord(lane: usize) -> (i64, i64) {
    let lane = lane as i64;
    (
        4 * (lane / 16) + (lane / 2) % 4,
        4 * ((lane / 8) % 2) + 2 * (lane % 2),
    )
}

/// The most accesses one bank serves in one simdgroup's read of a `k`
/// step's fragments of a K-major `b` placed at `at` (`N` rows): of each 8x8
/// matrix (both elements of every lane in one access, as msl-emu's profiler
/// counts a `simdgroup_load`) where they are `simdgroup_load`s, else of
/// each fragment read (`bank_conflicts`).
pub fn k_major_b_conflicts(plan: &AtomTiling, target: &Target, dtype: DType, at: Staged) -> usize {
    let Some(l) = k_major_b_layout(plan) else {
        return usize::MAX;
    };
    let size = dtype.size_bytes();
    if !b_fragments_are_simdgroup_matrices(plan) {
        let max_w = target.max_vector_lanes.min(target.max_vector_bytes / size).max(1);
        let (offsets, strides) = fragment_offsets(&l, at, plan.atom.shape.2);
        return bank_conflicts(&l, at, &vector_runs(&offsets, &strides, max_w), size);
    }
    let per_tile = plan.atom.values_per_thread().1;
    let cols = l.shape()[1];
    let mut worst = 1;
    for ni in 0..plan.reps.1 {
        let mut words: Vec<usize> = (0..32)
            .flat_map(|lane| (0..per_tile).map(move |j| (lane, per_tile * ni + j)))
            .flat_map(|(lane, v)| {
                let e = l.element(lane, v) as usize;
                let first = at.index(e / cols, e % cols, size) * size;
                first / 4..(first + size).div_ceil(4)
            })
            .collect();
        words.sort_unstable();
        words.dedup();
        let mut per_bank = [0usize; 32];
        for &word in &words {
            per_bank[word % 32] += 1;
        }
        worst = worst.max(per_bank.into_iter().max().unwrap_or(1));
    }
    worst
}

#[cfg(test)]
mod tests {
    use super::super::{choose_pads, plan, staged_k, staging};
    use super::*;
    use crate::policy::Switches;

    fn apple_plan(target: &Target, shape: (usize, usize, usize), dtype: DType, threads: usize) -> AtomTiling {
        plan(target, &Switches::defaults(target), shape, dtype, threads).expect("an atom plan")
    }

    /// The conflicts of the K-major `b` reads with the chosen padding and without any.
    fn conflicts(target: &Target, p: &AtomTiling, dtype: DType, align: usize) -> (usize, usize) {
        let placement = BPlacement::KMajor { align };
        let capacity = target.max_threadgroup_bytes / dtype.size_bytes();
        let (m, n, _) = p.shape;
        let at = |pads| {
            let kc = staged_k(p, dtype, pads, capacity, placement).expect("fits");
            staging(m, n, kc, dtype, pads, placement).1
        };
        let pads = choose_pads(p, target, &Switches::defaults(target), dtype, capacity, placement);
        assert_eq!(pads.1 % align, 0, "the padding keeps the stores' vectors whole");
        (
            k_major_b_conflicts(p, target, dtype, at(pads)),
            k_major_b_conflicts(p, target, dtype, at((pads.0, 0))),
        )
    }

    #[test]
    fn apple_8x8_b_fragments_are_simdgroup_matrices() {
        let apple = Target::apple();
        for (shape, dtype, threads) in [
            ((64, 64, 64), DType::F16, 128),
            ((32, 32, 128), DType::F16, 128),
            ((64, 32, 32), DType::F32, 64),
            ((32, 64, 16), DType::BF16, 256),
        ] {
            let p = apple_plan(&apple, shape, dtype, threads);
            assert!(b_fragments_are_simdgroup_matrices(&p), "{shape:?} {dtype:?}");
        }
        // The lanes of one 8x8 matrix cover it, two columns each.
        let mut seen: Vec<(i64, i64)> = (0..32)
            .flat_map(|lane| {
                let (row, col) = simdgroup_matrix_coord(lane);
                [(row, col), (row, col + 1)]
            })
            .collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 64);
        // Fragments of other layouts are not.
        let m2d = apple_plan(&Target::apple10(), (64, 64, 64), DType::F16, 128);
        assert!(!b_fragments_are_simdgroup_matrices(&m2d));
        let sm80 = apple_plan(&Target::nvidia(8, 0), (64, 64, 64), DType::F16, 128);
        assert!(!b_fragments_are_simdgroup_matrices(&sm80));
    }

    #[test]
    fn padding_spreads_transposed_reads_over_the_banks() {
        // The attention forward's first products (q @ k.T, hd64 and hd128) and an f32 tile:
        // unpadded, the rows of x that one matrix reads fall into the same banks; padded, each
        // bank serves the least it can (one word of a 16-bit matrix's 32, two of an f32 one's 64).
        let apple = Target::apple();
        for (shape, dtype, threads, align) in [
            ((64, 64, 64), DType::F16, 128, 4),
            ((32, 32, 128), DType::F16, 128, 8),
            ((64, 64, 32), DType::F32, 128, 4),
        ] {
            let p = apple_plan(&apple, shape, dtype, threads);
            let least = 64 * dtype.size_bytes() / 128;
            let (padded, bare) = conflicts(&apple, &p, dtype, align);
            assert_eq!(padded, least, "{shape:?} {dtype:?}");
            assert!(bare > least, "{shape:?} {dtype:?}");
        }
        // matmul2d reads its fragments element by element: 8-byte steps of padding reach them.
        let apple10 = Target::apple10();
        let p = apple_plan(&apple10, (64, 64, 64), DType::F16, 128);
        let (padded, bare) = conflicts(&apple10, &p, DType::F16, 4);
        assert_eq!(padded, 1);
        assert!(bare > 1);
    }
}
