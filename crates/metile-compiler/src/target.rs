//! What layout assignment and lowering need to know about a GPU, as a value:
//! one [`Target`] per GPU family, so the lowering stays one generic path and
//! only the numbers here differ between backends.
//!
//! Apple's figures are msl-reference.md §6. NVIDIA's are the CUDA programming
//! guide's per compute capability: warps of 32 threads, 1024 threads per block,
//! 48 KiB of shared memory per block without the opt-in attribute and
//! 163 KiB (sm_80) / 227 KiB (sm_90) with it; grids of 2^31-1 blocks along x and
//! 65535 along y and z.

use crate::atoms::AtomKind;
use metile_ir::Vendor;

/// Program ids are i32 on every target, so no grid axis may exceed this.
pub const MAX_PROGRAM_ID_EXTENT: u32 = i32::MAX as u32;

/// Which family a target belongs to (decides the emitter, never the lowering).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TargetKind {
    /// An Apple GPU of (at least) the given family.
    Apple(AppleArch),
    /// An NVIDIA GPU of compute capability `major.minor`.
    Nvidia { major: u32, minor: u32 },
}

/// The Apple GPU families meTile compiles for differently: the `arch` launch
/// option of the Apple backends. Nothing on Linux can tell which one a Mac
/// has, and Metal 4 tensor ops run (slowly) on GPUs before the M5 too, so
/// the family is the user's choice rather than detected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AppleArch {
    /// Apple7 and later (M1 on): `simdgroup_matrix`, MSL 3.1.
    #[default]
    Apple7,
    /// Apple10 (M5, A19): Metal 4 tensor ops (`matmul2d`) as well, MSL 4.0.
    Apple10,
}

impl AppleArch {
    /// Every family, by its `arch` name.
    pub const ALL: [AppleArch; 2] = [AppleArch::Apple7, AppleArch::Apple10];

    /// The `arch` name: "apple" (the default, Apple7 and later) or "apple10".
    pub fn name(self) -> &'static str {
        match self {
            AppleArch::Apple7 => "apple",
            AppleArch::Apple10 => "apple10",
        }
    }

    /// The family called `name`, if any.
    pub fn parse(name: &str) -> Option<AppleArch> {
        AppleArch::ALL.into_iter().find(|a| a.name() == name)
    }

    /// The names, quoted and joined for messages: `'apple' or 'apple10'`.
    pub fn names_text() -> String {
        let names: Vec<String> = AppleArch::ALL.iter().map(|a| format!("'{}'", a.name())).collect();
        names.join(" or ")
    }

    /// The target of this family.
    pub fn target(self) -> Target {
        match self {
            AppleArch::Apple7 => Target::apple(),
            AppleArch::Apple10 => Target::apple10(),
        }
    }
}

/// One GPU family's hardware facts: limits and the instructions it has
/// (which passes use them is `crate::policy`'s choice).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    pub kind: TargetKind,
    /// Threads per simdgroup (Apple) or warp (NVIDIA).
    pub simd_width: u32,
    /// The most threads one threadgroup (block) may have.
    pub max_threads_per_group: u32,
    /// The most threadgroup (shared) memory one threadgroup may use, in bytes.
    pub max_threadgroup_bytes: usize,
    /// Shared memory above this many bytes needs the backend to raise the
    /// kernel's limit before launch (CUDA's opt-in attribute); equal to
    /// `max_threadgroup_bytes` where no opt-in exists.
    pub default_threadgroup_bytes: usize,
    /// The widest vector memory access: at most this many lanes and bytes.
    pub max_vector_lanes: usize,
    pub max_vector_bytes: usize,
    /// The GPU computes in f64 (Metal has no double).
    pub has_f64: bool,
    /// The default threadgroup-size rule uses at most this many simdgroups.
    pub max_default_simdgroups: u32,
    /// Elements per thread the default rule aims for in the largest tile.
    pub default_elements_per_thread: usize,
    /// The byte alignment the kernels assume for every buffer base address
    /// (the widest vector access); the runtime guarantees or checks it.
    pub buffer_base_alignment: usize,
    /// The most threadgroups along each grid axis (see [`Target::grid_limits`]).
    pub max_grid: [u64; 3],
    /// Whether a thread's position in the grid is a 32-bit value along x
    /// (Metal's `thread_position_in_grid`), so threadgroups × threads < 2^32.
    pub grid_x_counts_threads: bool,
    /// The matrix instructions the target has (`atoms::MatrixAtom` describes
    /// each); `dot` tiles them over the simdgroups (`dot_tiling`).
    pub matrix_atoms: Vec<AtomKind>,
    /// NVIDIA's `ldmatrix` (sm_75 and later) reads 16-bit mma fragments.
    pub ldmatrix: bool,
    /// Global-to-threadgroup copies for `dot` operand rings: asynchronous on
    /// NVIDIA sm_80 and later (`cp.async`), plain copies on Apple GPUs.
    pub async_copy: bool,
    /// NVIDIA's warpgroup MMA (`wgmma.mma_async`), on sm_90 (compiled for sm_90a).
    pub wgmma: bool,
    /// The tensor memory accelerator (`cp.async.bulk.tensor`, sm_90).
    pub tma: bool,
}

impl Target {
    /// Every Apple GPU meTile supports (Apple7 and later).
    pub fn apple() -> Target {
        Target {
            kind: TargetKind::Apple(AppleArch::Apple7),
            simd_width: 32,
            max_threads_per_group: 1024,
            max_threadgroup_bytes: 32 * 1024,
            default_threadgroup_bytes: 32 * 1024,
            max_vector_lanes: 4,
            max_vector_bytes: 16,
            has_f64: false,
            max_default_simdgroups: 8,
            default_elements_per_thread: 4,
            buffer_base_alignment: 16,
            max_grid: [u64::from(u32::MAX), u64::from(u32::MAX), u64::from(u32::MAX)],
            grid_x_counts_threads: true,
            matrix_atoms: vec![AtomKind::AppleSimdgroup8x8],
            ldmatrix: false,
            // Emitted as plain copies (Metal has no asynchronous ones); the
            // ring still needs one barrier per iteration instead of two (the
            // policy table keeps the pass off until measured on a Mac).
            async_copy: true,
            wgmma: false,
            tma: false,
        }
    }

    /// An Apple10 GPU (M5, A19): as [`Target::apple`], with Metal 4's
    /// `matmul2d` preferred for f16 and bf16 `dot`s whose tiles it fits; the
    /// 8x8 simdgroup matrices take the rest (f32, and tiles that are no
    /// multiple of `16 x 32 x 16`).
    pub fn apple10() -> Target {
        Target {
            kind: TargetKind::Apple(AppleArch::Apple10),
            matrix_atoms: vec![AtomKind::AppleMatmul2d16x32x16, AtomKind::AppleSimdgroup8x8],
            ..Target::apple()
        }
    }

    /// An NVIDIA GPU of compute capability `major.minor` (sm_70 and later).
    pub fn nvidia(major: u32, minor: u32) -> Target {
        let max_shared_kib = match (major, minor) {
            (7, 0) | (7, 2) => 96,
            (7, _) => 64,
            (8, 0) | (8, 7) => 163,
            (8, _) | (12, _) => 99,
            (m, _) if m >= 9 => 227,
            _ => 48,
        };
        Target {
            kind: TargetKind::Nvidia { major, minor },
            simd_width: 32,
            max_threads_per_group: 1024,
            max_threadgroup_bytes: max_shared_kib * 1024,
            default_threadgroup_bytes: 48 * 1024,
            // 16 bytes of a 2-byte type; 4-byte types stay at 4 lanes (the byte limit).
            max_vector_lanes: 8,
            max_vector_bytes: 16,
            has_f64: true,
            max_default_simdgroups: 8,
            default_elements_per_thread: 4,
            buffer_base_alignment: 16,
            max_grid: [(1 << 31) - 1, 65535, 65535],
            grid_x_counts_threads: false,
            matrix_atoms: if major >= 8 {
                vec![AtomKind::NvidiaMmaM16N8K16, AtomKind::NvidiaMmaM16N8K8Tf32]
            } else {
                Vec::new()
            },
            ldmatrix: (major, minor) >= (7, 5),
            async_copy: major >= 8,
            wgmma: (major, minor) == (9, 0),
            tma: major >= 9,
        }
    }

    /// The largest grid, per axis, a kernel of `threads_per_group` threads can
    /// be launched over: the target's limits, i32 program ids, and on Apple
    /// GPUs a 32-bit thread position along x.
    pub fn grid_limits(&self, threads_per_group: u32) -> [u32; 3] {
        let mut out = [0u32; 3];
        for (axis, limit) in out.iter_mut().enumerate() {
            let target = u32::try_from(self.max_grid[axis]).unwrap_or(u32::MAX);
            *limit = target.min(MAX_PROGRAM_ID_EXTENT);
        }
        if self.grid_x_counts_threads {
            out[0] = out[0].min(u32::MAX / threads_per_group.max(1));
        }
        out
    }

    /// The target called `name`: an [`AppleArch`] name or `sm_XY` (compute
    /// capability X.Y, from sm_70 on); the inverse of [`Target::arch_name`].
    pub fn parse(name: &str) -> Option<Target> {
        if let Some(apple) = AppleArch::parse(name) {
            return Some(apple.target());
        }
        let digits = name
            .strip_prefix("sm_")
            .filter(|d| d.len() >= 2 && d.chars().all(|c| c.is_ascii_digit()))?;
        let (major, minor) = digits.split_at(digits.len() - 1);
        let (major, minor) = (major.parse::<u32>().ok()?, minor.parse::<u32>().ok()?);
        (major >= 7).then(|| Target::nvidia(major, minor))
    }

    /// The GPU maker, whose ops GPU IR for this target may use (the GPU IR
    /// verifier refuses another vendor's).
    pub fn vendor(&self) -> Vendor {
        match self.kind {
            TargetKind::Apple(_) => Vendor::Apple,
            TargetKind::Nvidia { .. } => Vendor::Nvidia,
        }
    }

    /// `sm_90` for an NVIDIA target, the [`AppleArch`] name of an Apple one
    /// (cache keys, messages).
    pub fn arch_name(&self) -> String {
        match self.kind {
            TargetKind::Apple(arch) => arch.name().to_string(),
            TargetKind::Nvidia { major, minor } => format!("sm_{major}{minor}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvidia_shared_memory_follows_the_compute_capability() {
        assert_eq!(Target::nvidia(9, 0).max_threadgroup_bytes, 227 * 1024);
        assert_eq!(Target::nvidia(8, 0).max_threadgroup_bytes, 163 * 1024);
        assert_eq!(Target::nvidia(8, 6).max_threadgroup_bytes, 99 * 1024);
        assert_eq!(Target::nvidia(9, 0).default_threadgroup_bytes, 48 * 1024);
        assert_eq!(Target::nvidia(9, 0).arch_name(), "sm_90");
        for name in ["apple", "apple10", "sm_80", "sm_90", "sm_120"] {
            assert_eq!(Target::parse(name).map(|t| t.arch_name()).as_deref(), Some(name));
        }
        for name in ["sm_9", "sm_60", "sm_9a", "metal", ""] {
            assert!(Target::parse(name).is_none(), "{name}");
        }
        assert_eq!(
            Target::nvidia(9, 0).grid_limits(1024),
            [2_147_483_647, 65535, 65535]
        );
        assert!(Target::nvidia(9, 0)
            .matrix_atoms
            .contains(&AtomKind::NvidiaMmaM16N8K16));
        assert!(Target::nvidia(7, 5).matrix_atoms.is_empty());
    }

    #[test]
    fn apple_keeps_metal_limits() {
        let t = Target::apple();
        assert_eq!(t.max_threadgroup_bytes, 32 * 1024);
        assert_eq!(t.default_threadgroup_bytes, t.max_threadgroup_bytes);
        assert_eq!(t.arch_name(), "apple");
        assert_eq!(
            t.grid_limits(256),
            [u32::MAX / 256, i32::MAX as u32, i32::MAX as u32]
        );
    }

    #[test]
    fn apple10_adds_matmul2d_before_the_simdgroup_matrices() {
        let t = Target::apple10();
        assert_eq!(t.arch_name(), "apple10");
        assert_eq!(
            t.matrix_atoms,
            vec![AtomKind::AppleMatmul2d16x32x16, AtomKind::AppleSimdgroup8x8]
        );
        assert_eq!(t.max_threadgroup_bytes, Target::apple().max_threadgroup_bytes);
        for arch in AppleArch::ALL {
            assert_eq!(AppleArch::parse(arch.name()), Some(arch));
            assert_eq!(arch.target().kind, TargetKind::Apple(arch));
        }
        assert_eq!(AppleArch::parse("apple9"), None);
        assert_eq!(AppleArch::names_text(), "'apple' or 'apple10'");
    }
}
