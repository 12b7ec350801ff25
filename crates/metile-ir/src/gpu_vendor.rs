//! Which GPU maker's hardware a GPU IR op or parameter needs. Most GPU IR is
//! portable; the ops that spell one vendor's instructions (NVIDIA's `wgmma`,
//! TMA, `mbarrier`, `ldmatrix`, `mma.sync`; Apple's `simdgroup_matrix` and
//! Metal 4 `matmul2d` atoms) belong to that vendor, and the verifier refuses
//! them in GPU IR for another vendor's GPU.

use crate::gpu_ir::{AtomKind, GpuOpKind, GpuParamKind};
use std::fmt;

/// A GPU maker, whose targets share instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Vendor {
    Apple,
    Nvidia,
}

impl Vendor {
    pub fn name(self) -> &'static str {
        match self {
            Vendor::Apple => "Apple",
            Vendor::Nvidia => "NVIDIA",
        }
    }
}

impl fmt::Display for Vendor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl AtomKind {
    /// The vendor whose matrix instruction this atom is.
    pub fn vendor(self) -> Vendor {
        match self {
            AtomKind::AppleSimdgroup8x8 | AtomKind::AppleMatmul2d16x32x16 => Vendor::Apple,
            AtomKind::NvidiaMmaM16N8K16
            | AtomKind::NvidiaMmaM16N8K8Tf32
            | AtomKind::NvidiaWgmmaM64K16 { .. }
            | AtomKind::NvidiaWgmmaM64K32F8 { .. }
            | AtomKind::NvidiaWgmmaM64K8Tf32 { .. } => Vendor::Nvidia,
        }
    }
}

impl GpuOpKind {
    /// The only vendor whose GPUs have this op, or `None` for an op every
    /// target spells (asynchronous copies included: on Apple GPUs they are
    /// copies done at once).
    pub fn vendor(&self) -> Option<Vendor> {
        match self {
            GpuOpKind::Mma(kind) => Some(kind.vendor()),
            GpuOpKind::SimdgroupLoad { .. } => Some(Vendor::Apple),
            GpuOpKind::LdMatrix { .. }
            | GpuOpKind::Wgmma { .. }
            | GpuOpKind::WgmmaRegA { .. }
            | GpuOpKind::WgmmaFence
            | GpuOpKind::ProxyFence
            | GpuOpKind::WgmmaCommit
            | GpuOpKind::WgmmaWait { .. }
            | GpuOpKind::MbarrierInit { .. }
            | GpuOpKind::MbarrierArrive { .. }
            | GpuOpKind::MbarrierWait
            | GpuOpKind::TmaLoad
            | GpuOpKind::AtomicAdd => Some(Vendor::Nvidia),
            GpuOpKind::Builtin(_)
            | GpuOpKind::Const(_)
            | GpuOpKind::Unary(_)
            | GpuOpKind::Binary(_)
            | GpuOpKind::Compare(_)
            | GpuOpKind::Fma
            | GpuOpKind::Select
            | GpuOpKind::Cast
            | GpuOpKind::IntToPtr
            | GpuOpKind::MakeVector
            | GpuOpKind::Extract { .. }
            | GpuOpKind::Load { .. }
            | GpuOpKind::Store { .. }
            | GpuOpKind::RegRead { .. }
            | GpuOpKind::RegWrite { .. }
            | GpuOpKind::SimdShuffleXor
            | GpuOpKind::SimdBroadcast
            | GpuOpKind::SimdReduce(_)
            | GpuOpKind::AssumeUniform
            | GpuOpKind::AsyncCopy { .. }
            | GpuOpKind::AsyncCommit
            | GpuOpKind::AsyncWait { .. }
            | GpuOpKind::Atomic { .. }
            | GpuOpKind::Barrier
            | GpuOpKind::DeviceBarrier
            | GpuOpKind::For
            | GpuOpKind::If
            | GpuOpKind::While
            | GpuOpKind::Condition
            | GpuOpKind::Print { .. }
            | GpuOpKind::Assert { .. } => None,
        }
    }
}

impl GpuParamKind {
    /// The only vendor whose launches pass this parameter (NVIDIA's tensor
    /// maps and the values that go with them), or `None`.
    pub fn vendor(self) -> Option<Vendor> {
        match self {
            GpuParamKind::TensorMap(_) | GpuParamKind::TensorMapReady(_) | GpuParamKind::MinusOne => {
                Some(Vendor::Nvidia)
            }
            GpuParamKind::Buffer(_) | GpuParamKind::Scalar(_) => None,
        }
    }
}
