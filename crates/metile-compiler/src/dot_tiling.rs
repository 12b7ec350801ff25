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
use crate::policy::Switches;
use crate::prefetch::RingOperands;
use crate::target::Target;
use metile_ir::DType;
use metile_layout::{Layout, LayoutError};
use rustc_hash::FxHashSet;

mod k_major;

pub use k_major::{
    b_fragments_are_simdgroup_matrices, k_major_b_conflicts, k_major_b_layout, simdgroup_matrix_coord,
    BPlacement,
};

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

/// Where one operand lives in threadgroup scratch: element `(row, col)` at
/// `base + row * ld + col`, or with `swizzle` in NVIDIA's swizzled layout
/// for `wgmma` (see [`Swizzle`]), `ld` then being the columns of one block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Staged {
    pub base: usize,
    pub ld: usize,
    pub swizzle: Option<Swizzle>,
}

/// The swizzled layout of a `rows x cols` row-major tile that `wgmma` reads
/// (`metile_ir::gpu_ir::WgmmaOperand`): the columns in blocks of `bytes`
/// (32, 64 or 128) bytes, each block's `rows` rows one after the other, the
/// 16-byte chunks of byte offset `o` in a block moved to `o ^ ((o >> 7) &
/// (bytes / 16 - 1)) << 4`. Tiles start 1024-byte aligned, as the hardware
/// swizzles addresses, not offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Swizzle {
    pub bytes: usize,
    pub rows: usize,
}

impl Staged {
    /// A plain row-major placement.
    pub fn rows(base: usize, ld: usize) -> Staged {
        Staged {
            base,
            ld,
            swizzle: None,
        }
    }

    /// The index of element `(row, col)` of 16-bit or wider elements of
    /// `elem_bytes` bytes.
    pub fn index(&self, row: usize, col: usize, elem_bytes: usize) -> usize {
        match self.swizzle {
            None => self.base + row * self.ld + col,
            Some(s) => {
                let o = (row * self.ld + col % self.ld) * elem_bytes;
                let o = o ^ (((o >> 7) & (s.bytes / 16 - 1)) << 4);
                self.base + (col / self.ld) * s.rows * self.ld + o / elem_bytes
            }
        }
    }
}

/// Scratch for `kc` columns of `a` (`M x kc`) and rows of `b` (`kc x N`, or
/// `N x kc` K-major), their rows padded by `pads` elements (`a`'s, `b`'s),
/// `b` starting 16-byte aligned. Returns both placements and the elements
/// needed.
pub fn staging(
    m: usize,
    n: usize,
    kc: usize,
    dtype: DType,
    pads: (usize, usize),
    placement: BPlacement,
) -> (Staged, Staged, usize) {
    let per16 = (16 / dtype.size_bytes()).max(1);
    let a = Staged::rows(0, kc + pads.0);
    let base = (m * a.ld).div_ceil(per16) * per16;
    let (b, rows) = match placement {
        BPlacement::NMajor => (Staged::rows(base, n + pads.1), kc),
        BPlacement::KMajor { .. } => (Staged::rows(base, kc + pads.1), n),
    };
    (a, b, b.base + rows * b.ld)
}

/// The swizzle of a `wgmma` operand whose rows are `row_bytes` long: blocks
/// of 128 bytes, or of the whole row when it is 32 or 64 bytes.
fn wgmma_swizzle_bytes(row_bytes: usize) -> Option<usize> {
    let bytes = row_bytes.min(128);
    (matches!(bytes, 32 | 64 | 128) && row_bytes % bytes == 0).then_some(bytes)
}

/// Scratch for a `wgmma` plan's whole `a` (`M x K`, K-major) and `b` (`K x
/// N`, N-major), each swizzled and 1024-byte aligned; the length in elements
/// is a multiple of 1024 bytes, so ring stages stay aligned. fp8 `wgmma`
/// reads only K-major operands, so an fp8 plan's `b` is placed as its
/// transpose (`N x K`, swizzled as `a`), element `(k, n)` at `index(n, k)`.
pub fn wgmma_staging(plan: &AtomTiling, dtype: DType) -> Option<(Staged, Staged, usize)> {
    if !plan.atom.reads_shared_memory() {
        return None;
    }
    let (m, n, k) = plan.shape;
    let size = dtype.size_bytes();
    let align = 1024 / size;
    let sa = wgmma_swizzle_bytes(k * size)?;
    let a = Staged {
        base: 0,
        ld: sa / size,
        swizzle: Some(Swizzle { bytes: sa, rows: m }),
    };
    let base = (m * k).div_ceil(align) * align;
    let b = if plan.atom.operand.is_fp8() {
        Staged {
            base,
            ld: a.ld,
            swizzle: Some(Swizzle { bytes: sa, rows: n }),
        }
    } else {
        let sb = wgmma_swizzle_bytes(n * size)?;
        Staged {
            base,
            ld: sb / size,
            swizzle: Some(Swizzle { bytes: sb, rows: k }),
        }
    };
    Some((a, b, (b.base + k * n).div_ceil(align) * align))
}

/// Whether `b` may be read K-major: 16-bit operands on the shared-memory
/// `wgmma` (tf32 reads `b` from registers).
pub fn reads_k_major_b(plan: &AtomTiling) -> bool {
    matches!(plan.atom.kind, AtomKind::NvidiaWgmmaM64K16 { .. })
}

/// `b` (`K x N`) placed K-major: as its transpose, `N x K`, swizzled as `a`
/// is, where the N-major placement `sb` was (same start, same length `K * N`).
pub fn k_major_b(sa: Staged, sb: Staged, (_, n, _): (usize, usize, usize)) -> Staged {
    let swizzle = sa.swizzle.map(|s| Swizzle {
        bytes: s.bytes,
        rows: n,
    });
    Staged {
        base: sb.base,
        ld: sa.ld,
        swizzle,
    }
}

/// The layout in which a 16-bit `wgmma` `dot` of `plan` reads its `a` from
/// registers: the accumulator layout of an `m x k` `wgmma` product with the
/// same warpgroups along M, so that the values of a chained product's
/// accumulator (attention's `p = exp2(q k^T - m)`, rounded to 16 bits) are
/// the next product's A fragments as they are, `8` per `k16` step. `None`
/// where the plan's warpgroups also split N (each would need all of `a`'s
/// rows) or no such product exists.
pub fn wgmma_register_a(
    plan: &AtomTiling,
    target: &Target,
    switches: &Switches,
    threads: usize,
) -> Option<DistLayout> {
    let AtomKind::NvidiaWgmmaM64K16 { .. } = plan.atom.kind else {
        return None;
    };
    let (m, _, k) = plan.shape;
    if plan.warps.1 != 1 || plan.reps.1 == 0 {
        return None;
    }
    let atom = MatrixAtom::nvidia_wgmma_m64k16(plan.atom.operand, k)?;
    let producer = plan_on(target, switches, (m, k, atom.shape.2), atom, threads)?;
    (producer.warps == plan.warps && producer.reps.0 == plan.reps.0 && producer.reps.1 == 1)
        .then_some(producer.c)
}

/// Threadgroup bytes of a `dot`'s tiles in one ring stage, for `dot` of
/// `shape` and `dtype` on `threads` threads, and its accumulators per thread
/// (`prefetch::StageBytes`). `None` without a matrix-atom plan, or where the
/// ring would hold `b` K-major (the transpose of the loaded tile) or `b` alone
/// (`a` read from elsewhere) and the plan's atom is not a 16-bit `wgmma`,
/// which reads both operands from memory; for an fp8 `wgmma` plan, wherever
/// the ring would not hold both operands K-major.
pub fn ring_stage_bytes(
    (target, switches, threads): (&Target, &Switches, usize),
    shape: (usize, usize, usize),
    dtype: DType,
    held: RingOperands,
) -> Option<(usize, usize)> {
    let plan = plan(target, switches, shape, dtype, threads)?;
    // fp8 `wgmma` reads both operands K-major: only a pair whose `b` is the
    // transpose of its loaded tile (`dot(x, w.T)`) can sit in a ring as loaded.
    if plan.atom.operand.is_fp8() {
        if !(held.a && held.b_transposed) {
            return None;
        }
    } else if (held.b_transposed || !held.a) && !reads_k_major_b(&plan) {
        return None;
    }
    let elems = match held.a {
        true => ring_stage(&plan, target, switches, dtype).2,
        false => b_alone_stage(&plan, dtype)?.1,
    };
    Some((elems * dtype.size_bytes(), plan.c.values()))
}

/// A ring stage that holds only `b` (a 16-bit `wgmma` plan): `b`'s swizzled
/// placement at the stage's start and the stage's length in elements, a
/// whole number of 1024-byte swizzle periods.
pub fn b_alone_stage(plan: &AtomTiling, dtype: DType) -> Option<(Staged, usize)> {
    let (_, sb, _) = wgmma_staging(plan, dtype)?;
    let (_, n, k) = plan.shape;
    let period = 1024 / dtype.size_bytes();
    Some((Staged { base: 0, ..sb }, (k * n).div_ceil(period) * period))
}

/// One stage of an asynchronous operand ring (`lower/async_ring.rs`): the
/// whole `k` of `a` and `b`, placed and padded like [`staging`], and the
/// stage's length in elements (a multiple of 16 bytes, so every stage starts
/// aligned for 16-byte copies).
pub fn ring_stage(
    plan: &AtomTiling,
    target: &Target,
    switches: &Switches,
    dtype: DType,
) -> (Staged, Staged, usize) {
    if let Some(staged) = wgmma_staging(plan, dtype) {
        return staged;
    }
    let (m, n, k) = plan.shape;
    let pads = choose_pads(plan, target, switches, dtype, usize::MAX / 4, BPlacement::NMajor);
    let (sa, sb, len) = staging(m, n, k, dtype, pads, BPlacement::NMajor);
    let per16 = (16 / dtype.size_bytes()).max(1);
    (sa, sb, len.div_ceil(per16) * per16)
}

/// How many `k` columns to stage at once: `K` when everything fits in
/// `capacity` elements, else the largest multiple of the atom's `k` dividing `K`
/// that fits.
pub fn staged_k(
    plan: &AtomTiling,
    dtype: DType,
    pads: (usize, usize),
    capacity: usize,
    placement: BPlacement,
) -> Option<usize> {
    let (m, n, k) = plan.shape;
    let ak = plan.atom.shape.2;
    (1..=k / ak)
        .rev()
        .map(|steps| steps * ak)
        .find(|&kc| k % kc == 0 && staging(m, n, kc, dtype, pads, placement).2 <= capacity)
}

/// The row padding (in elements, for `a` and for `b`) whose fragment reads
/// have the fewest bank conflicts: each of 0, 16, 32, 48 and 64 bytes is
/// tried (for a K-major `b`, every multiple of its `align` up to 64 bytes),
/// computed from the layouts (`bank_conflicts`, `k_major_b_conflicts`), the
/// smallest of the best kept. No padding when the `pad_dot_scratch` pass is
/// off.
pub fn choose_pads(
    plan: &AtomTiling,
    target: &Target,
    switches: &Switches,
    dtype: DType,
    capacity: usize,
    placement: BPlacement,
) -> (usize, usize) {
    if !switches.pad_dot_scratch {
        return (0, 0);
    }
    let size = dtype.size_bytes();
    let candidates: Vec<usize> = [0, 16, 32, 48, 64].iter().map(|b| b / size).collect();
    let b_candidates: Vec<usize> = match placement {
        BPlacement::NMajor => candidates.clone(),
        BPlacement::KMajor { align } => (0..=64 / size).step_by(align.max(1)).collect(),
    };
    let cost = |pads: (usize, usize)| -> Option<(usize, usize)> {
        let kc = staged_k(plan, dtype, pads, capacity, placement)?;
        let (sa, sb, _) = staging(plan.shape.0, plan.shape.1, kc, dtype, pads, placement);
        let reads = fragment_reads(plan, target, dtype, (sa, sb));
        let b = match placement {
            BPlacement::NMajor => bank_conflicts(reads.b_layout, sb, &reads.b, size),
            BPlacement::KMajor { .. } => k_major_b_conflicts(plan, target, dtype, sb),
        };
        Some((bank_conflicts(reads.a_layout, sa, &reads.a, size), b))
    };
    let best = |candidates: &[usize], conflicts: &dyn Fn(usize) -> Option<usize>| {
        candidates
            .iter()
            .filter_map(|&p| conflicts(p).map(|c| (c, p)))
            .min()
            .map_or(0, |(_, p)| p)
    };
    let pad_a = best(&candidates, &|p| cost((p, 0)).map(|c| c.0));
    let pad_b = best(&b_candidates, &|p| cost((pad_a, p)).map(|c| c.1));
    (pad_a, pad_b)
}

/// The fragment reads of one `k` step: `(first value, width)` runs of the
/// layouts the reads go through (the fragment layouts, or the `ldmatrix`
/// address layouts, one 16-byte row per lane).
pub struct FragmentReads<'p> {
    pub a: Vec<(usize, usize)>,
    pub b: Vec<(usize, usize)>,
    pub a_layout: &'p DistLayout,
    pub b_layout: &'p DistLayout,
}

pub fn fragment_reads<'p>(
    p: &'p AtomTiling,
    target: &Target,
    dtype: DType,
    (sa, sb): (Staged, Staged),
) -> FragmentReads<'p> {
    let size = dtype.size_bytes();
    match &p.ldmatrix {
        Some(ld) => {
            let rows = |l: &DistLayout| (0..l.values()).map(|v| (v, 16 / size)).collect::<Vec<_>>();
            FragmentReads {
                a: rows(&ld.a),
                b: rows(&ld.b),
                a_layout: &ld.a,
                b_layout: &ld.b,
            }
        }
        None => {
            let max_w = target.max_vector_lanes.min(target.max_vector_bytes / size).max(1);
            let ak = p.atom.shape.2;
            let (oa, sa_strides) = fragment_offsets(&p.a, sa, ak);
            let (ob, sb_strides) = fragment_offsets(&p.b, sb, ak * sb.ld);
            FragmentReads {
                a: vector_runs(&oa, &sa_strides, max_w),
                b: vector_runs(&ob, &sb_strides, max_w),
                a_layout: &p.a,
                b_layout: &p.b,
            }
        }
    }
}

/// Groups consecutive fragment values into vector reads: `(first value,
/// width)` runs, a run of `w` needing consecutive, `w`-aligned offsets and
/// every per-thread stride a multiple of `w`, up to `max_width`.
pub fn vector_runs(offsets: &[i64], thread_strides: &[i64], max_width: usize) -> Vec<(usize, usize)> {
    let mut runs = vec![];
    let mut v = 0;
    while v < offsets.len() {
        let mut w = 1;
        let mut next = 2;
        while next <= max_width
            && v + next <= offsets.len()
            && (1..next).all(|i| offsets[v + i] == offsets[v] + i as i64)
            && offsets[v] % next as i64 == 0
            && thread_strides.iter().all(|s| s % next as i64 == 0)
        {
            w = next;
            next *= 2;
        }
        runs.push((v, w));
        v += w;
    }
    runs
}

/// The `(scratch offset of each value, per-thread strides)` of a fragment
/// layout placed at `at`, `step` elements added per `k` step.
pub fn fragment_offsets(l: &DistLayout, at: Staged, step: usize) -> (Vec<i64>, Vec<i64>) {
    let ld = at.ld as i64;
    let offsets = (0..l.values())
        .map(|v| {
            let c = l.value_coords(v);
            c[0] * ld + c[1]
        })
        .collect();
    let strides = l
        .thread_coord_terms(0)
        .iter()
        .map(|t| t.stride * ld)
        .chain(l.thread_coord_terms(1).iter().map(|t| t.stride))
        .chain([at.base as i64, step as i64])
        .collect();
    (offsets, strides)
}

/// The most accesses one bank serves in one simdgroup read of fragment
/// layout `l` at `at` (1: conflict free), over every read of a `k` step, for
/// 32 banks of 4 bytes. A `w`-element read of `bytes` bytes per lane runs in
/// `ceil(lanes * bytes / 128)` phases of consecutive lanes, as on NVIDIA GPUs
/// (an assumption for Apple's, which do not document their banks).
pub fn bank_conflicts(l: &DistLayout, at: Staged, reads: &[(usize, usize)], elem_bytes: usize) -> usize {
    let cols = l.shape()[1] as i64;
    let mut worst = 1;
    // Conflicts do not change when every lane's address moves by the same
    // amount, so each pattern of lane addresses is counted once.
    let mut patterns: FxHashSet<[i64; 32]> = FxHashSet::default();
    let lane_offsets: [i64; 32] = std::array::from_fn(|lane| l.thread_offset(lane));
    let mut words: Vec<i64> = Vec::with_capacity(128);
    for &(v, w) in reads {
        let bytes = w * elem_bytes;
        let value_offset = l.element(0, v) - lane_offsets[0];
        let first_words: [i64; 32] = std::array::from_fn(|lane| {
            let e = lane_offsets[lane] + value_offset;
            let index = at.index((e / cols) as usize, (e % cols) as usize, elem_bytes);
            index as i64 * elem_bytes as i64 / 4
        });
        let pattern: [i64; 32] = std::array::from_fn(|lane| first_words[lane] - first_words[0]);
        if !patterns.insert(pattern) {
            continue;
        }
        let words_per_lane = bytes.div_ceil(4) as i64;
        let lanes_per_phase = (128 / bytes.max(4)).clamp(1, 32);
        for phase in first_words.chunks(lanes_per_phase) {
            words.clear();
            words.extend(phase.iter().flat_map(|&first| first..first + words_per_lane));
            words.sort_unstable();
            words.dedup();
            let mut per_bank = [0usize; 32];
            for &word in &words {
                per_bank[word.rem_euclid(32) as usize] += 1;
            }
            worst = worst.max(per_bank.into_iter().max().unwrap_or(1));
        }
    }
    worst
}

/// What a `dot` plan amounts to, for tables (`metile._metile.dot_plan`).
#[derive(Clone, Debug, PartialEq)]
pub struct DotReport {
    pub atom: &'static str,
    pub warps: (usize, usize),
    pub reps: (usize, usize),
    /// Columns of `a` / rows of `b` staged at once, and the scratch they take.
    pub staged_k: usize,
    pub staged_bytes: usize,
    /// Row padding of the staged `a` and `b`, in bytes.
    pub pad_bytes: (usize, usize),
    /// The worst bank conflict of the A and B fragment reads (1: none).
    pub conflicts: (usize, usize),
    /// Fragment read instructions per matrix instruction.
    pub reads_per_mma: f64,
}

/// The report of [`plan`] on `target` with `switches` in force.
pub fn report(
    target: &Target,
    switches: &Switches,
    shape: (usize, usize, usize),
    operand: DType,
    threads: usize,
) -> Option<DotReport> {
    let p = plan(target, switches, shape, operand, threads)?;
    let size = operand.size_bytes();
    if let Some((_, sb, len)) = wgmma_staging(&p, operand) {
        // The tensor cores read the swizzled tiles themselves, in layouts of
        // the hardware's own; tf32 has the threads read b's fragments.
        let per_mma = p.atom.kind.fragment_sizes().1;
        let b_reads: Vec<(usize, usize)> = (0..p.b.values()).map(|v| (v, 1)).collect();
        let b_conflicts = match per_mma {
            0 => 1,
            _ => bank_conflicts(&p.b, sb, &b_reads, size),
        };
        return Some(DotReport {
            atom: p.atom.kind.name(),
            warps: p.warps,
            reps: p.reps,
            staged_k: shape.2,
            staged_bytes: len * size,
            pad_bytes: (0, 0),
            conflicts: (1, b_conflicts),
            reads_per_mma: per_mma as f64,
        });
    }
    let capacity = target.max_threadgroup_bytes / size;
    let pads = choose_pads(&p, target, switches, operand, capacity, BPlacement::NMajor);
    let kc = staged_k(&p, operand, pads, capacity, BPlacement::NMajor)?;
    let (sa, sb, len) = staging(shape.0, shape.1, kc, operand, pads, BPlacement::NMajor);
    let reads = fragment_reads(&p, target, operand, (sa, sb));
    let (a_reads, b_reads, la, lb) = (&reads.a, &reads.b, reads.a_layout, reads.b_layout);
    let mmas = (p.reps.0 * p.reps.1) as f64;
    Some(DotReport {
        atom: p.atom.kind.name(),
        warps: p.warps,
        reps: p.reps,
        staged_k: kc,
        staged_bytes: len * size,
        pad_bytes: (pads.0 * size, pads.1 * size),
        conflicts: (
            bank_conflicts(la, sa, a_reads, size),
            bank_conflicts(lb, sb, b_reads, size),
        ),
        reads_per_mma: (a_reads.len() + b_reads.len()) as f64 / mmas,
    })
}

/// The atom that `dot` on `operand` tiles uses on `target`, if any. The tf32
/// atom changes f32 results (inputs are rounded to 10-bit mantissas), so f32
/// `dot` takes it only when the `tf32` pass is switched on.
pub fn atom_for(target: &Target, switches: &Switches, operand: DType) -> Option<MatrixAtom> {
    atoms_for(target, switches, operand).next()
}

/// Every atom that `dot` on `operand` may use on `target`, in the target's
/// order of preference (`plan` takes the first whose shape fits the tile);
/// none with the `matrix_atoms` pass off.
pub fn atoms_for<'a>(
    target: &'a Target,
    switches: &'a Switches,
    operand: DType,
) -> impl Iterator<Item = MatrixAtom> + 'a {
    let atoms: &[AtomKind] = if switches.matrix_atoms {
        &target.matrix_atoms
    } else {
        &[]
    };
    let tf32 = switches.tf32 && operand == DType::F32;
    atoms.iter().filter_map(move |&kind| match kind {
        AtomKind::NvidiaWgmmaM64K16 { n } => MatrixAtom::nvidia_wgmma_m64k16(operand, usize::from(n)),
        AtomKind::NvidiaWgmmaM64K32F8 { n } => MatrixAtom::nvidia_wgmma_m64k32_f8(operand, usize::from(n)),
        AtomKind::NvidiaWgmmaM64K8Tf32 { n } => tf32
            .then(|| MatrixAtom::nvidia_wgmma_m64k8_tf32(usize::from(n)))
            .flatten(),
        AtomKind::AppleSimdgroup8x8 => MatrixAtom::apple_simdgroup_8x8(operand),
        AtomKind::AppleMatmul2d16x32x16 => MatrixAtom::apple_matmul2d_16x32x16(operand),
        AtomKind::NvidiaMmaM16N8K16 => MatrixAtom::nvidia_mma_m16n8k16(operand),
        AtomKind::NvidiaMmaM16N8K8Tf32 => tf32.then(MatrixAtom::nvidia_mma_m16n8k8_tf32),
    })
}

/// The plan for `dot` of an `m x k` by `k x n` tile of `operand` over `threads`
/// threads on the first of the target's atoms that fits, or `None` when none
/// does (the generic path then runs).
pub fn plan(
    target: &Target,
    switches: &Switches,
    shape: (usize, usize, usize),
    operand: DType,
    threads: usize,
) -> Option<AtomTiling> {
    wgmma_plan(target, switches, shape, operand, threads).or_else(|| {
        atoms_for(target, switches, operand).find_map(|atom| plan_on(target, switches, shape, atom, threads))
    })
}

/// The `wgmma` plan (sm_90a, `wgmma` pass on) of an f16, bf16 or fp8
/// `dot`, or of an f32 one with the `tf32` pass on: the atom's width that
/// keeps the most warpgroups busy, the widest among those. f16 and bf16
/// atoms span `n` columns, each a whole number of swizzle blocks of the
/// staged `b`; fp8 ones any multiple of 8 (their `b` is staged K-major, in
/// rows); the tf32 atom (the transposed product) spans `n` rows and 64
/// columns.
fn wgmma_plan(
    target: &Target,
    switches: &Switches,
    (m, n, k): (usize, usize, usize),
    operand: DType,
    threads: usize,
) -> Option<AtomTiling> {
    if !(target.wgmma && switches.wgmma && switches.matrix_atoms) {
        return None;
    }
    let size = operand.size_bytes();
    wgmma_swizzle_bytes(k * size)?;
    let (tf32, fp8) = (operand == DType::F32, operand.is_fp8());
    let block = match fp8 {
        true => 8,
        false => wgmma_swizzle_bytes(n * size)? / size,
    };
    if (tf32 && !switches.tf32) || (fp8 && !switches.fp8_wgmma) {
        return None;
    }
    let (span, unit) = if tf32 { (m, 8) } else { (n, block) };
    (1..=256.min(span) / 8)
        .rev()
        .map(|i| 8 * i)
        .filter(|&w| span % w == 0 && w % unit == 0)
        .filter_map(|w| {
            let atom = match (tf32, fp8) {
                (true, _) => MatrixAtom::nvidia_wgmma_m64k8_tf32(w)?,
                (_, true) => MatrixAtom::nvidia_wgmma_m64k32_f8(operand, w)?,
                _ => MatrixAtom::nvidia_wgmma_m64k16(operand, w)?,
            };
            plan_on(target, switches, (m, n, k), atom, threads)
        })
        .max_by_key(|p| {
            let width = if tf32 { p.atom.shape.0 } else { p.atom.shape.1 };
            (p.warps.0 * p.warps.1, width)
        })
}

/// [`plan`] on one atom.
fn plan_on(
    target: &Target,
    switches: &Switches,
    (m, n, k): (usize, usize, usize),
    atom: MatrixAtom,
    threads: usize,
) -> Option<AtomTiling> {
    let (am, an, ak) = atom.shape;
    let simd = target.simd_width as usize;
    // Atoms of several simdgroups (a warpgroup) tile like one simdgroup.
    if m % am != 0 || n % an != 0 || k % ak != 0 || atom.threads % simd != 0 || threads % atom.threads != 0 {
        return None;
    }
    let warps_total = threads / atom.threads;
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
        let ldmatrix = if target.ldmatrix && switches.ldmatrix && atom.kind == AtomKind::NvidiaMmaM16N8K16 {
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

    /// A target and the switches a test runs it with (the policy's defaults
    /// unless the test changes them).
    struct On {
        target: Target,
        switches: Switches,
    }

    fn on(target: Target) -> On {
        let switches = Switches::defaults(&target);
        On { target, switches }
    }

    /// `target` with the opt-in fp8 `wgmma` on.
    fn fp8_on(target: Target) -> On {
        let mut t = on(target);
        t.switches.fp8_wgmma = t.target.wgmma;
        t
    }

    fn plan(t: &On, shape: (usize, usize, usize), operand: DType, threads: usize) -> Option<AtomTiling> {
        super::plan(&t.target, &t.switches, shape, operand, threads)
    }

    fn report(t: &On, shape: (usize, usize, usize), operand: DType, threads: usize) -> Option<DotReport> {
        super::report(&t.target, &t.switches, shape, operand, threads)
    }

    /// The H100 with `mma.sync` only (the `wgmma` pass off).
    fn mma_sync_target() -> On {
        let mut t = on(Target::nvidia(9, 0));
        t.switches.wgmma = false;
        t
    }

    /// Every element of C is held, and each (simdgroup block, atom tile) pairs
    /// with the A rows and B columns of the same tile.
    fn check(target: &On, shape: (usize, usize, usize), dtype: DType, threads: usize) {
        let p = plan(target, shape, dtype, threads).unwrap();
        // Reductions, transposes and splits of a `dot`'s result read coordinates per axis.
        assert!(p.c.is_separable(), "{}", p.c);
        let (m, n, _) = shape;
        let (am, an, ak) = p.atom.shape;
        let (na, nb, nc) = p.atom.values_per_thread();
        let mut seen = vec![false; m * n];
        for t in 0..threads {
            let lane = t % p.atom.threads;
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
                        if p.atom.reads_shared_memory() {
                            continue;
                        }
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
        let nv = mma_sync_target();
        check(&nv, (128, 128, 32), DType::F16, 256);
        check(&nv, (64, 32, 16), DType::BF16, 128);
        check(&nv, (16, 8, 16), DType::F16, 256);
        check(&nv, (48, 24, 32), DType::F16, 64);
        let apple = on(Target::apple());
        check(&apple, (64, 64, 16), DType::F32, 256);
        let h100 = on(Target::nvidia(9, 0));
        for (shape, threads) in [
            ((128, 128, 64), 256),
            ((128, 256, 32), 256),
            ((256, 128, 64), 128),
            ((64, 64, 16), 256),
        ] {
            check(&h100, shape, DType::F16, threads);
        }
        check(&apple, (8, 8, 8), DType::F16, 128);
        check(&apple, (32, 24, 8), DType::BF16, 96);
    }

    /// Simulates `ldmatrix` on the planned lane addresses: every lane must get
    /// exactly its fragment values, in order.
    fn check_ldmatrix(shape: (usize, usize, usize), threads: usize) {
        let p = plan(&mma_sync_target(), shape, DType::F16, threads).unwrap();
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
        assert!(plan(&on(Target::apple()), (64, 64, 32), DType::F16, 128)
            .unwrap()
            .ldmatrix
            .is_none());
    }

    #[test]
    fn padding_removes_the_bank_conflicts_of_fragment_reads() {
        let mut nv = mma_sync_target();
        let r = report(&nv, (128, 128, 32), DType::F16, 256).unwrap();
        assert_eq!((r.atom, r.conflicts, r.staged_k), ("m16n8k16", (1, 1), 32));
        nv.switches.pad_dot_scratch = false;
        let r = report(&nv, (128, 128, 32), DType::F16, 256).unwrap();
        assert!(r.conflicts.0 >= 4 && r.conflicts.1 >= 4, "{:?}", r.conflicts);
        let mut apple = on(Target::apple());
        let r = report(&apple, (64, 64, 32), DType::F32, 128).unwrap();
        assert_eq!(r.conflicts, (1, 1));
        apple.switches.pad_dot_scratch = false;
        assert!(report(&apple, (64, 64, 32), DType::F32, 128).unwrap().conflicts.0 > 1);
    }

    #[test]
    fn vector_runs_need_consecutive_aligned_offsets() {
        assert_eq!(vector_runs(&[0, 1, 8, 9], &[2, 4], 8), vec![(0, 2), (2, 2)]);
        assert_eq!(vector_runs(&[0, 1, 2, 3], &[4], 8), vec![(0, 4)]);
        assert_eq!(vector_runs(&[0, 1, 2, 3], &[2], 8), vec![(0, 2), (2, 2)]);
        assert_eq!(vector_runs(&[1, 2], &[2], 8), vec![(0, 1), (1, 1)]);
    }

    #[test]
    fn the_grid_keeps_simdgroups_busy_and_square() {
        let p = plan(&mma_sync_target(), (128, 128, 32), DType::F16, 256).unwrap();
        assert_eq!(p.warps.0 * p.warps.1, 8);
        assert_eq!(p.reps.0 * p.reps.1, 16);
        let p = plan(&on(Target::apple()), (64, 64, 32), DType::F32, 128).unwrap();
        assert_eq!((p.warps, p.reps), ((2, 2), (4, 4)));
    }

    #[test]
    fn shapes_and_dtypes_without_an_atom_have_no_plan() {
        let nv = mma_sync_target();
        assert!(plan(&nv, (128, 128, 32), DType::F32, 256).is_none());
        assert!(plan(&nv, (100, 128, 32), DType::F16, 256).is_none());
        assert!(plan(&nv, (128, 128, 24), DType::F16, 256).is_none());
        assert!(plan(&on(Target::nvidia(7, 5)), (128, 128, 32), DType::F16, 256).is_none());
        assert!(plan(&on(Target::apple()), (12, 8, 8), DType::F32, 64).is_none());
    }

    #[test]
    fn wgmma_plans_keep_warpgroups_busy_with_whole_swizzle_blocks() {
        let h100 = on(Target::nvidia(9, 0));
        let p = plan(&h100, (128, 128, 64), DType::F16, 256).unwrap();
        assert_eq!(
            (p.atom.kind, p.warps, p.reps),
            (AtomKind::NvidiaWgmmaM64K16 { n: 128 }, (2, 1), (1, 1))
        );
        // Two warpgroups on 64 x 128: each takes 64 columns (one 128-byte block).
        let p = plan(&h100, (64, 128, 32), DType::BF16, 256).unwrap();
        assert_eq!((p.atom.shape.1, p.warps), (64, (1, 2)));
        // 48-byte rows of b swizzle in no block size: mma.sync takes the tile.
        let p = plan(&h100, (64, 24, 32), DType::F16, 128).unwrap();
        assert_eq!(p.atom.kind, AtomKind::NvidiaMmaM16N8K16);
        // Not on fewer threads than a warpgroup, nor on f32 (tf32), nor when switched off.
        assert_eq!(
            plan(&h100, (64, 64, 32), DType::F16, 64).unwrap().atom.kind,
            AtomKind::NvidiaMmaM16N8K16
        );
        assert!(plan(&h100, (64, 64, 32), DType::F32, 128).is_none());
        assert_eq!(
            plan(&mma_sync_target(), (128, 128, 64), DType::F16, 256)
                .unwrap()
                .atom
                .kind,
            AtomKind::NvidiaMmaM16N8K16
        );
        assert!(!plan(&on(Target::nvidia(8, 0)), (128, 128, 64), DType::F16, 256)
            .unwrap()
            .atom
            .reads_shared_memory());
    }

    /// fp8 `wgmma` steps 32 along `k` and places `b` K-major (rows of `k`,
    /// swizzled as `a`), so `n` needs only be a multiple of 8; fp8 has no
    /// other atom.
    #[test]
    fn fp8_wgmma_plans_k32_steps_with_b_k_major() {
        let h100 = fp8_on(Target::nvidia(9, 0));
        for dtype in [DType::F8E4M3, DType::F8E5M2] {
            let p = plan(&h100, (128, 128, 128), dtype, 256).unwrap();
            assert_eq!(
                (p.atom.kind, p.atom.shape, p.warps),
                (AtomKind::NvidiaWgmmaM64K32F8 { n: 128 }, (64, 128, 32), (2, 1))
            );
            let (sa, sb, len) = wgmma_staging(&p, dtype).unwrap();
            assert_eq!((sa.ld, sa.swizzle.unwrap().bytes), (128, 128));
            assert_eq!((sb.base, sb.ld, sb.swizzle.unwrap().rows), (128 * 128, 128, 128));
            assert_eq!(len, 2 * 128 * 128);
            assert_eq!(
                report(&h100, (128, 128, 128), dtype, 256).unwrap().atom,
                "wgmma.m64k32.f8"
            );
        }
        // 24 columns: one 64 x 24 atom (no N-major swizzle block to fill).
        let p = plan(&h100, (64, 24, 64), DType::F8E4M3, 128).unwrap();
        assert_eq!(p.atom.shape, (64, 24, 32));
        // k must be 32, 64 or a multiple of 128 bytes; no mma.sync for fp8.
        assert!(plan(&h100, (64, 64, 16), DType::F8E4M3, 128).is_none());
        assert!(plan(&h100, (64, 64, 32), DType::F8E4M3, 64).is_none());
        assert!(plan(&mma_sync_target(), (64, 64, 32), DType::F8E4M3, 128).is_none());
    }

    /// tf32 `wgmma` is planned on the transposed product: atoms of `n` rows
    /// of C and 64 columns, b's fragments read by the threads from its
    /// swizzled N-major staging.
    #[test]
    fn tf32_wgmma_plans_the_transposed_product() {
        let mut h100 = on(Target::nvidia(9, 0));
        assert!(plan(&h100, (128, 128, 32), DType::F32, 256).is_none());
        h100.switches.tf32 = true;
        let p = plan(&h100, (256, 128, 32), DType::F32, 256).unwrap();
        assert_eq!(
            (p.atom.kind, p.atom.shape, p.warps, p.reps),
            (
                AtomKind::NvidiaWgmmaM64K8Tf32 { n: 256 },
                (256, 64, 8),
                (1, 2),
                (1, 1)
            )
        );
        let r = report(&h100, (256, 128, 32), DType::F32, 256).unwrap();
        assert_eq!(
            (r.atom, r.conflicts, r.reads_per_mma),
            ("wgmma.m64k8.tf32", (1, 2), 4.0)
        );
        // Columns must come in 64s; rows in 8s.
        assert!(plan(&h100, (128, 96, 32), DType::F32, 256)
            .is_none_or(|p| p.atom.kind == AtomKind::NvidiaMmaM16N8K8Tf32));
        h100.switches.wgmma = false;
        assert_eq!(
            plan(&h100, (256, 128, 32), DType::F32, 256).unwrap().atom.kind,
            AtomKind::NvidiaMmaM16N8K8Tf32
        );
    }

    /// The swizzled index is a permutation within each 8-row group that keeps
    /// 16-byte chunks whole, and matches the canonical formula.
    #[test]
    fn swizzled_placements_permute_16_byte_chunks_within_8_rows() {
        for (rows, cols) in [(64, 64), (128, 32), (32, 128), (16, 16)] {
            let p = plan(
                &on(Target::nvidia(9, 0)),
                (rows.max(64), cols, 16),
                DType::F16,
                128,
            );
            let Some(p) = p else { continue };
            let (_, sb, _) = wgmma_staging(&p, DType::F16).unwrap();
            let k = 16;
            let mut seen = vec![false; k * cols];
            for r in 0..k {
                for c in 0..cols {
                    let i = sb.index(r, c, 2) - sb.base;
                    assert!(!seen[i], "{rows}x{cols}: ({r}, {c}) lands on a taken slot");
                    seen[i] = true;
                    // Chunks stay whole and stay in their row's 8-row group.
                    assert_eq!(i % 8, c % 8);
                    let block = c / sb.ld;
                    assert_eq!((i - block * k * sb.ld) / sb.ld / 8, r / 8);
                }
            }
        }
        let p = plan(&on(Target::nvidia(9, 0)), (64, 128, 64), DType::F16, 128).unwrap();
        let (sa, sb, len) = wgmma_staging(&p, DType::F16).unwrap();
        assert_eq!((sa.ld, sb.ld, sb.base * 2 % 1024, len * 2 % 1024), (64, 64, 0, 0));
        // Row 3, chunk 2 of a 128-byte swizzle: chunk 2 ^ 3 = 1.
        assert_eq!(sa.index(3, 16, 2), 3 * 64 + 8);
    }

    /// fp8 operands swizzle bytes as 16-bit ones do: a 128-byte row block
    /// holds 128 elements, `b`'s transpose (row `n`, column `k`) is placed
    /// like `a`, and each row's 16-byte chunks (16 consecutive `k`) stay
    /// whole, chunk `c` moved to `c ^ line % (bytes / 16)`, `line` the
    /// 128-byte line of the row's start (the row itself for 128-byte rows).
    #[test]
    fn fp8_placements_swizzle_bytes_like_16_bit_ones() {
        let h100 = fp8_on(Target::nvidia(9, 0));
        for (n, k) in [(128, 128), (64, 256), (32, 64), (24, 32)] {
            let p = plan(&h100, (64, n, k), DType::F8E4M3, 128).unwrap();
            let (sa, sb, len) = wgmma_staging(&p, DType::F8E4M3).unwrap();
            assert_eq!((sb.ld, sb.base % 1024, len % 1024), (sa.ld, 0, 0));
            let bytes = sa.swizzle.unwrap().bytes;
            let mut seen = vec![false; n * k];
            for row in 0..n {
                for col in 0..k {
                    let i = sb.index(row, col, 1) - sb.base;
                    assert!(!seen[i], "{n}x{k}: ({row}, {col}) lands on a taken slot");
                    seen[i] = true;
                    let (block, within) = (col / sb.ld, col % sb.ld);
                    // The row's byte offset in its block, bits 7.. (one
                    // 128-byte line), picks the chunk permutation.
                    let chunk = (within / 16) ^ (((row * sb.ld) >> 7) & (bytes / 16 - 1));
                    assert_eq!(i, block * n * sb.ld + row * sb.ld + chunk * 16 + within % 16);
                }
            }
        }
    }
}
