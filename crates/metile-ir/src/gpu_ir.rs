//! GPU IR (the seed's "Metal IR"): what one thread of a threadgroup executes.
//!
//! Where the Tile IR talks about whole tiles, the GPU IR is per-thread SSA over
//! scalars and short vectors, plus the few things that make threads cooperate:
//! builtin indices (thread, simdgroup lane and index, threadgroup position and
//! grid extent), threadgroup memory, barriers and simdgroup shuffles/reductions.
//!
//! Design decisions:
//!
//! * **Values are SSA, block scoped.** A value is defined once and visible in its
//!   block and the blocks nested in it. Arithmetic reuses the Tile IR's op enums
//!   and element semantics (`UnaryOp`, `BinaryOp`, `CmpOp`), applied to scalars.
//! * **Mutable state lives in register arrays, never in block arguments.** A
//!   register array (`T rN[len]`, [`RegArray`]) is a per-thread array addressed by
//!   compile-time indices; loops and ifs carry nothing and yield nothing. Values
//!   that flow around a loop or out of an `if` are written to registers and read
//!   back. This keeps regions argument-free (a `for` has only its induction
//!   variable) and maps one-to-one onto MSL locals.
//! * **Pointers are roots.** Pointer-typed values are only kernel buffer
//!   parameters and threadgroup allocations; memory ops take a root and an
//!   element index (`X[i]`), so the emitter knows which parameters are written
//!   (for `device const`) and which address space every access uses.
//! * **Threadgroup memory is declared by the function** ([`TgAlloc`]) with a
//!   dtype and an element count, so the emitter can pass it as `[[threadgroup(i)]]`
//!   parameters and the runtime can size it.
//! * **Control flow is structured**: `for` (with an `i32` induction variable)
//!   and `if`. Barriers and simdgroup operations must sit in control flow that is
//!   uniform over the threadgroup (barriers) or over the simdgroup (simdgroup ops);
//!   the verifier checks this with a uniformity analysis.

use crate::dtype::DType;
use crate::tile_ir::{AtomicOp, BinaryOp, CmpOp, Literal, Loc, MemScope, MemSem, ReduceOp, UnaryOp};
use std::fmt;

#[path = "gpu_ir_values.rs"]
mod values;
pub use crate::gpu_vendor::Vendor;
pub use values::ValueList;

/// An SSA value of a [`GpuFunction`]; an index into [`GpuFunction::values`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GpuValue(pub u32);

impl GpuValue {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for GpuValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

/// A per-thread register array; an index into [`GpuFunction::regs`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegId(pub u32);

impl fmt::Display for RegId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.0)
    }
}

/// Which memory a pointer root addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemSpace {
    Device,
    Threadgroup,
    /// A CUDA tensor map (TMA descriptor) over a device buffer, read only by
    /// [`GpuOpKind::TmaLoad`].
    TensorMap,
}

impl MemSpace {
    pub fn name(self) -> &'static str {
        match self {
            MemSpace::Device => "device",
            MemSpace::Threadgroup => "threadgroup",
            MemSpace::TensorMap => "tensor_map",
        }
    }
}

/// The type of a GPU IR value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GpuType {
    Scalar(DType),
    /// A short vector of 2 to 4 lanes (at most 16 bytes), used by vector memory ops.
    Vector(DType, u8),
    /// A pointer root: a buffer parameter or a threadgroup allocation.
    Ptr(DType, MemSpace),
}

impl GpuType {
    pub fn dtype(self) -> DType {
        match self {
            GpuType::Scalar(d) | GpuType::Vector(d, _) | GpuType::Ptr(d, _) => d,
        }
    }

    pub fn is_scalar(self) -> bool {
        matches!(self, GpuType::Scalar(_))
    }

    /// The type a load of `width` elements produces.
    pub fn loaded(dtype: DType, width: u8) -> GpuType {
        if width <= 1 {
            GpuType::Scalar(dtype)
        } else {
            GpuType::Vector(dtype, width)
        }
    }
}

impl fmt::Display for GpuType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuType::Scalar(d) => write!(f, "{d}"),
            GpuType::Vector(d, n) => write!(f, "{d}x{n}"),
            GpuType::Ptr(d, s) => write!(f, "ptr<{d}, {}>", s.name()),
        }
    }
}

/// Per-thread builtin indices; each reads as an `i32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Builtin {
    /// `thread_index_in_threadgroup`.
    ThreadIndex,
    /// `thread_index_in_simdgroup`.
    SimdLane,
    /// `simdgroup_index_in_threadgroup`.
    SimdgroupIndex,
    /// `threadgroup_position_in_grid`, one axis.
    ThreadgroupPosition(u8),
    /// `threadgroups_per_grid`, one axis.
    ThreadgroupsPerGrid(u8),
}

impl Builtin {
    pub fn name(self) -> String {
        const AXES: [&str; 3] = ["x", "y", "z"];
        let axis = |a: u8| AXES.get(usize::from(a)).copied().unwrap_or("?");
        match self {
            Builtin::ThreadIndex => "thread_index".into(),
            Builtin::SimdLane => "simd_lane".into(),
            Builtin::SimdgroupIndex => "simdgroup_index".into(),
            Builtin::ThreadgroupPosition(a) => format!("threadgroup_position.{}", axis(a)),
            Builtin::ThreadgroupsPerGrid(a) => format!("threadgroups_per_grid.{}", axis(a)),
        }
    }
}

/// How a `wgmma` operand lies in threadgroup memory: NVIDIA's canonical
/// swizzled layouts of a `rows x cols` row-major tile of 16-bit elements.
/// The contiguous axis is split into blocks of `swizzle_bytes` (32, 64 or
/// 128) bytes; a block stores its rows one after the other, and within each
/// aligned group of 8 rows the 16-byte chunks of byte offset `o` are permuted
/// by `o ^ ((o >> 7) & (swizzle_bytes / 16 - 1)) << 4` (on the address,
/// hence 1024-byte aligned tiles). `lbo` and `sbo` are the descriptor's
/// leading and stride byte offsets; `mn_major` when the contiguous axis is M
/// or N (a B stored `k x n` row-major), not K.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WgmmaOperand {
    pub swizzle_bytes: u16,
    pub lbo: u32,
    pub sbo: u32,
    pub mn_major: bool,
}

/// A matrix multiply-accumulate instruction: the spelling of one matrix atom
/// (its fragment layouts are described in `metile-compiler`'s `atoms`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomKind {
    /// `simdgroup_multiply_accumulate` on `simdgroup_matrix<T, 8, 8>`.
    AppleSimdgroup8x8,
    /// Metal 4's `mpp::tensor_ops::matmul2d` over one simdgroup on cooperative
    /// tensors, `matmul2d_descriptor(16, 32, 16)` (Apple10).
    AppleMatmul2d16x32x16,
    /// `mma.sync.aligned.m16n8k16.row.col.f32.{f16|bf16}.{f16|bf16}.f32`.
    NvidiaMmaM16N8K16,
    /// `mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32`.
    NvidiaMmaM16N8K8Tf32,
    /// `wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{f16|bf16}.{f16|bf16}`
    /// over a warpgroup, A and B in threadgroup memory ([`GpuOpKind::Wgmma`]).
    NvidiaWgmmaM64K16 { n: u16 },
    /// `wgmma.mma_async.sync.aligned.m64n{n}k32.f32.{e4m3|e5m2}.{e4m3|e5m2}`
    /// over a warpgroup, A and B in threadgroup memory, both K-major (8-bit
    /// `wgmma` has no transpose) ([`GpuOpKind::Wgmma`] on fp8 operands).
    NvidiaWgmmaM64K32F8 { n: u16 },
    /// `wgmma.mma_async.sync.aligned.m64n{n}k8.f32.tf32.tf32` over a
    /// warpgroup with its A in registers ([`GpuOpKind::WgmmaRegA`]), used on
    /// the transposed product: tf32 `wgmma` reads threadgroup operands only
    /// K-major, so a `dot`'s `k x n` B (N-major) enters as the registers of
    /// `Bᵀ` and its A (K-major) as the threadgroup operand `Aᵀ`, giving `Cᵀ`.
    NvidiaWgmmaM64K8Tf32 { n: u16 },
}

impl AtomKind {
    /// Values one thread holds of A, B and C (= D).
    pub fn fragment_sizes(self) -> (usize, usize, usize) {
        match self {
            AtomKind::AppleSimdgroup8x8 => (2, 2, 2),
            AtomKind::AppleMatmul2d16x32x16 => (8, 16, 16),
            AtomKind::NvidiaMmaM16N8K16 => (8, 4, 4),
            AtomKind::NvidiaMmaM16N8K8Tf32 => (4, 2, 4),
            // A and B stay in threadgroup memory.
            AtomKind::NvidiaWgmmaM64K16 { n } | AtomKind::NvidiaWgmmaM64K32F8 { n } => {
                (0, 0, usize::from(n) / 2)
            }
            // The dot's A stays in threadgroup memory; B's fragment is the
            // wgmma's A, four registers of a 64 x 8 tile.
            AtomKind::NvidiaWgmmaM64K8Tf32 { n } => (0, 4, usize::from(n) / 2),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            AtomKind::AppleSimdgroup8x8 => "simdgroup8x8",
            AtomKind::AppleMatmul2d16x32x16 => "matmul2d16x32x16",
            AtomKind::NvidiaMmaM16N8K16 => "m16n8k16",
            AtomKind::NvidiaMmaM16N8K8Tf32 => "m16n8k8.tf32",
            AtomKind::NvidiaWgmmaM64K16 { .. } => "wgmma.m64k16",
            AtomKind::NvidiaWgmmaM64K32F8 { .. } => "wgmma.m64k32.f8",
            AtomKind::NvidiaWgmmaM64K8Tf32 { .. } => "wgmma.m64k8.tf32",
        }
    }
}

/// What an op does. Operand and result conventions are listed per variant; the
/// verifier checks them.
#[derive(Clone, Debug, PartialEq)]
pub enum GpuOpKind {
    /// `() -> i32`.
    Builtin(Builtin),
    /// `() -> T` scalar; the literal is read as the result's dtype.
    Const(Literal),
    /// `(x) -> x`, scalar, Tile IR element semantics.
    Unary(UnaryOp),
    /// `(a, b) -> a`, scalars of one type, Tile IR element semantics (integer
    /// arithmetic wraps; integer division by zero yields 0).
    Binary(BinaryOp),
    /// `(a, b) -> bool`.
    Compare(CmpOp),
    /// `(a, b, c) -> a`: `a * b + c` rounded once, scalars of one float type.
    Fma,
    /// `(cond: bool, a, b) -> a`.
    Select,
    /// `(x) -> y`: C conversion to the result's scalar type (float to int
    /// truncates and saturates, NaN gives 0).
    Cast,
    /// `(address: i64|u64) -> device T*`: an address read from memory used as a
    /// pointer root (Tile IR `int_to_ptr`).
    IntToPtr,
    /// `(s0, .., sn-1) -> T x n`.
    MakeVector,
    /// `(v: T x n) -> T`: lane `lane`.
    Extract { lane: u8 },
    /// `(ptr, index: int [, mask: bool] [, other]) -> T | T x width`: reads
    /// `width` consecutive elements at `ptr[index]`. A masked-off load touches no
    /// memory and yields `other` (or zero). Vector loads need `index` to be a
    /// multiple of `width`.
    Load {
        width: u8,
        has_mask: bool,
        has_other: bool,
    },
    /// `(ptr, index: int, value [, mask: bool])`: writes `width` consecutive elements.
    Store { width: u8, has_mask: bool },
    /// `() -> T`: element `index` of a register array.
    RegRead { reg: RegId, index: u32 },
    /// `(value: T)`: sets element `index` of a register array.
    RegWrite { reg: RegId, index: u32 },
    /// `(x, mask: i32) -> x`: the value of lane `lane ^ mask` of this simdgroup.
    SimdShuffleXor,
    /// `(x, lane: i32) -> x`: the value of lane `lane` of this simdgroup.
    SimdBroadcast,
    /// `(x) -> x`: the reduction over the simdgroup's 32 lanes, on every lane.
    SimdReduce(ReduceOp),
    /// `(x) -> x`, the value itself: the lowering's promise that every thread
    /// of the threadgroup holds the same bits here, where the verifier cannot
    /// see it (a whole-tile reduction folds the same partials in the same order
    /// on every thread). Control flow may then depend on it. Emits nothing.
    AssumeUniform,
    /// `(a_0 .. a_na, b_0 .. b_nb, c_0 .. c_nc) -> (d_0 .. d_nc)`: one matrix
    /// instruction over the simdgroup, `D = A · B + C`. The operands are this
    /// thread's fragment values in the atom's A, B and C layouts, in value
    /// order (`AtomKind::fragment_sizes`); A and B are scalars of one float
    /// dtype, C and D f32 scalars.
    Mma(AtomKind),
    /// `(ptr: threadgroup, index: int) -> (T x 2) * count`: NVIDIA's `ldmatrix`
    /// over the simdgroup: `count` 8x8 matrices of a 16-bit `T`, lane `8i + r`
    /// giving the index of row `r` of matrix `i` (16-byte aligned); lane
    /// `4g + t` gets elements `(g, 2t)` and `(g, 2t + 1)` of each matrix, or
    /// `(2t, g)` and `(2t + 1, g)` with `trans`.
    LdMatrix { count: u8, trans: bool },
    /// `(ptr: threadgroup, index: int, ld: int) -> (T, T)`: Apple's
    /// `simdgroup_load` of one 8x8 `simdgroup_matrix<T, 8, 8>` (T f16, bf16
    /// or f32) over the simdgroup, element `(r, c)` read from
    /// `ptr[index + r * ld + c]`, or from `ptr[index + c * ld + r]` with
    /// `transpose`; `index` and `ld` are the same on every lane of the
    /// simdgroup. The results are
    /// the lane's two elements (`thread_elements()`): row
    /// `4 * (lane / 16) + (lane / 2) % 4`, columns `c` and `c + 1` with
    /// `c = 4 * ((lane / 8) % 2) + 2 * (lane % 2)`.
    SimdgroupLoad { transpose: bool },
    /// `(dst: threadgroup ptr, dst_index: int, src: device ptr, src_index: int
    /// [, mask: bool] [, inside: bool])`: starts an asynchronous copy of
    /// `bytes` (4, 8 or 16) bytes from `src[src_index]` to `dst[dst_index]`,
    /// both aligned to `bytes` (NVIDIA's `cp.async`, sm_80+); masked off,
    /// nothing is copied. With `zero_fill`, where `inside` is false the
    /// destination gets zeros and `src` is not read. The copy
    /// belongs to the thread's next [`GpuOpKind::AsyncCommit`] group, and its
    /// result may be read only after an [`GpuOpKind::AsyncWait`] that retires
    /// that group and a barrier.
    AsyncCopy {
        bytes: u8,
        has_mask: bool,
        zero_fill: bool,
    },
    /// `()`: closes the thread's asynchronous copies issued since the last
    /// commit into one group (an empty group when there were none).
    AsyncCommit,
    /// `()`: waits until at most `pending` of the thread's committed groups
    /// are still in flight.
    AsyncWait { pending: u8 },
    /// `(a: threadgroup ptr, a_index: int, b: threadgroup ptr, b_index: int)`:
    /// starts NVIDIA's `wgmma.mma_async` (sm_90a) of shape `m64 n k16` over
    /// the warpgroup (four consecutive warps), `acc[first .. first + n/2] +=
    /// A · B` in place on an f32 register array, in the m16n8 accumulator
    /// layout of each warp's 16 rows; A (`64 x 16`) and B (`16 x n`) are read
    /// from threadgroup memory at the indices, laid out as [`WgmmaOperand`]
    /// says. On fp8 arrays (e4m3 or e5m2, A's and B's may differ) the shape
    /// is `m64 n k32`, the same 32 bytes of each row, both K-major (the
    /// op keeps its `k16` name). In place, because the hardware writes the accumulators later:
    /// they may be touched only after a [`GpuOpKind::WgmmaWait`]. Without
    /// `accumulate` the product overwrites the accumulators (the
    /// instruction's scale-d 0): `acc[first ..] = A · B`.
    Wgmma {
        n: u16,
        a: WgmmaOperand,
        b: WgmmaOperand,
        acc: RegId,
        first: u32,
        accumulate: bool,
    },
    /// `(b: threadgroup ptr, b_index: int)`: starts a `wgmma.mma_async`
    /// whose A is in registers of a register array of B's dtype and whose B
    /// is read from threadgroup memory at the index as [`WgmmaOperand`] says;
    /// `acc` as for [`GpuOpKind::Wgmma`].
    ///
    /// * f32 (tf32, shape `m64 n k8`): A (`64 x 8`) is `a[a_first ..
    ///   a_first + 4]`, this thread's four values in the order of the
    ///   hardware's fragment (lane `l` of warp `w` holds rows `16w + l / 4`
    ///   and `+ 8`, columns `l % 4` and `+ 4`, row first); B is K-major.
    ///   The tensor cores read the registers' tf32 bits later too: they may
    ///   be written again only after a [`GpuOpKind::WgmmaWait`] that holds them.
    /// * f16 and bf16 (shape `m64 n k16`): A (`64 x 16`) is `a[a_first ..
    ///   a_first + 8]`, in the order of a 16-bit `wgmma` accumulator's first
    ///   8 values (lane `l` of warp `w`: rows `16w + l / 4` and `+ 8`,
    ///   columns `2 (l % 4)`, `+ 1`, `+ 8`, `+ 9`; pairs along a row first,
    ///   then the row 8 below, then the columns 8 right), which the emitter
    ///   packs into the instruction's four 32-bit registers; B either major.
    WgmmaRegA {
        n: u16,
        b: WgmmaOperand,
        acc: RegId,
        first: u32,
        a: RegId,
        a_first: u32,
    },
    /// `()`: orders this thread's register and threadgroup-memory accesses
    /// before the `wgmma`s that follow (`wgmma.fence`).
    WgmmaFence,
    /// `()`: orders this thread's earlier threadgroup-memory writes before
    /// later reads by the asynchronous proxy (`fence.proxy.async`), i.e.
    /// `wgmma` operands written by ordinary stores or `cp.async`.
    ProxyFence,
    /// `()`: closes this thread's `wgmma`s since the last commit into a group.
    WgmmaCommit,
    /// `()`: waits until at most `pending` `wgmma` groups are in flight; the
    /// first `count` registers of `acc` are accumulators that the completed
    /// groups wrote (no access to them moves above the wait), and `held`
    /// (register array, first, count) register operands they read
    /// ([`GpuOpKind::WgmmaRegA`]), which keep their registers until here.
    WgmmaWait {
        pending: u8,
        acc: RegId,
        count: u32,
        held: Option<(RegId, u32, u32)>,
    },
    /// `(bar: threadgroup i64 ptr, index: int)`: initialises the memory
    /// barrier `bar[index]` to expect `count` arrivals per phase, phase 0
    /// (`mbarrier.init`), and makes that visible to the asynchronous proxy.
    MbarrierInit { count: u32 },
    /// `(bar, index [, bytes: i32])`: one arrival on `bar[index]`; with
    /// `expect_tx`, it also expects `bytes` more bytes of asynchronous copies
    /// to complete on it before its phase can complete.
    MbarrierArrive { expect_tx: bool },
    /// `(bar, index, parity: i32)`: waits until the phase of `bar[index]` of
    /// that parity (0 or 1) has completed; the writes it counted are then
    /// visible to this thread.
    MbarrierWait,
    /// `(dst: threadgroup ptr, dst_index: int, map: tensor map, col: i32, row:
    /// i32, bar: threadgroup i64 ptr, bar_index: int)`: starts an asynchronous
    /// copy of the tensor map's box at `(row, col)` into `dst[dst_index..]`
    /// (1024-byte aligned, laid out and swizzled as the map says; elements
    /// outside the map's extent are zero), its bytes counted on
    /// `bar[bar_index]` (`cp.async.bulk.tensor`, sm_90). A stacked map
    /// (`TensorMapSpec::stacked`) takes an eighth operand, `depth: i32`: the
    /// matrix the box is read from.
    TmaLoad,
    /// `(counts: threadgroup i32 ptr, index: int, value: i32) -> i32`: adds
    /// `value` to `counts[index]` atomically, with acquire and release
    /// semantics at threadgroup scope, and returns the previous count.
    AtomicAdd,
    /// `(ptr: device, index: int [, cmp: T], value: T [, mask: bool]) -> T`:
    /// one atomic read-modify-write of `ptr[index]` (`cmp` for `Cas` only)
    /// with the Tile IR's semantics, returning the old value; masked off it
    /// touches nothing and yields 0. `sem` orders this thread's other memory
    /// accesses around it, as seen by the threads of `scope`.
    Atomic {
        op: AtomicOp,
        sem: MemSem,
        scope: MemScope,
        has_mask: bool,
    },
    /// `()`: threadgroup execution and threadgroup-memory barrier.
    Barrier,
    /// `()`: a [`GpuOpKind::Barrier`] that also orders device memory: every
    /// thread's device accesses before it happen before every thread's after
    /// it (a program's scalar atomic with acquire or release semantics).
    DeviceBarrier,
    /// `(start, end, step: i32)`: region 0 has one argument, the `i32` induction
    /// variable, and runs for `iv = start; step > 0 ? iv < end : iv > end; iv += step`
    /// (no iterations when `step == 0`).
    For,
    /// `(cond: bool)`: region 0 runs when `cond`, region 1 otherwise.
    If,
    /// `()`: a loop on a run-time condition: region 0 runs, ending in a
    /// [`GpuOpKind::Condition`]; while that is true, region 1 runs and then
    /// region 0 again.
    While,
    /// `(cond: bool)`: the last op of a `while`'s region 0: the loop ends when
    /// `cond` is false.
    Condition,
    /// `(values...)`: prints one line: `pieces[0]`, the first value, `pieces[1]`,
    /// ... (one more piece than values); values from `hex_from` on are
    /// integers printed in hexadecimal, the others in decimal (floats as C's `%g`).
    Print {
        pieces: Vec<String>,
        hex_from: Option<usize>,
    },
    /// `(cond: bool)`: where `cond` is false the launch fails, reporting
    /// `message` (which names the kernel line).
    Assert { message: String },
}

impl GpuOpKind {
    pub fn name(&self) -> String {
        match self {
            GpuOpKind::Builtin(b) => format!("builtin {}", b.name()),
            GpuOpKind::Const(_) => "const".into(),
            GpuOpKind::Unary(u) => crate::tile_ir::OpKind::Unary(*u).name().into(),
            GpuOpKind::Binary(b) => crate::tile_ir::OpKind::Binary(*b).name().into(),
            GpuOpKind::Compare(c) => crate::tile_ir::OpKind::Compare(*c).name().into(),
            GpuOpKind::Select => "select".into(),
            GpuOpKind::Cast => "cast".into(),
            GpuOpKind::IntToPtr => "int_to_ptr".into(),
            GpuOpKind::MakeVector => "make_vector".into(),
            GpuOpKind::Extract { lane } => format!("extract.{lane}"),
            GpuOpKind::Load { width, .. } => vector_suffix("load", *width),
            GpuOpKind::Store { width, .. } => vector_suffix("store", *width),
            GpuOpKind::RegRead { .. } => "reg_read".into(),
            GpuOpKind::RegWrite { .. } => "reg_write".into(),
            GpuOpKind::SimdShuffleXor => "simd_shuffle_xor".into(),
            GpuOpKind::SimdBroadcast => "simd_broadcast".into(),
            GpuOpKind::SimdReduce(op) => match op {
                ReduceOp::Sum => "simd_sum".into(),
                ReduceOp::Max => "simd_max".into(),
                ReduceOp::Min => "simd_min".into(),
                ReduceOp::Xor => "simd_xor".into(),
            },
            GpuOpKind::Fma => "fma".into(),
            GpuOpKind::AssumeUniform => "assume_uniform".into(),
            GpuOpKind::Mma(kind) => format!("mma.{}", kind.name()),
            GpuOpKind::LdMatrix { count, trans } => {
                format!("ldmatrix.x{count}{}", if *trans { ".trans" } else { "" })
            }
            GpuOpKind::SimdgroupLoad { transpose } => {
                format!("simdgroup_load{}", if *transpose { ".trans" } else { "" })
            }
            GpuOpKind::AsyncCopy { bytes, .. } => format!("async_copy.b{bytes}"),
            GpuOpKind::Wgmma { n, .. } => format!("wgmma.m64n{n}k16"),
            GpuOpKind::WgmmaRegA { n, .. } => format!("wgmma.m64n{n}k8.tf32.rs"),
            GpuOpKind::WgmmaFence => "wgmma_fence".into(),
            GpuOpKind::ProxyFence => "proxy_fence".into(),
            GpuOpKind::WgmmaCommit => "wgmma_commit".into(),
            GpuOpKind::WgmmaWait { pending, .. } => format!("wgmma_wait.{pending}"),
            GpuOpKind::AsyncCommit => "async_commit".into(),
            GpuOpKind::AsyncWait { pending } => format!("async_wait.{pending}"),
            GpuOpKind::MbarrierInit { count } => format!("mbarrier_init.{count}"),
            GpuOpKind::MbarrierArrive { expect_tx } => {
                if *expect_tx {
                    "mbarrier_arrive.expect_tx".into()
                } else {
                    "mbarrier_arrive".into()
                }
            }
            GpuOpKind::MbarrierWait => "mbarrier_wait".into(),
            GpuOpKind::TmaLoad => "tma_load".into(),
            GpuOpKind::AtomicAdd => "atomic_add".into(),
            GpuOpKind::Atomic { op, .. } => format!("atomic_{}", op.name()),
            GpuOpKind::Barrier => "barrier".into(),
            GpuOpKind::DeviceBarrier => "device_barrier".into(),
            GpuOpKind::For => "for".into(),
            GpuOpKind::If => "if".into(),
            GpuOpKind::While => "while".into(),
            GpuOpKind::Condition => "condition".into(),
            GpuOpKind::Print { .. } => "print".into(),
            GpuOpKind::Assert { .. } => "assert".into(),
        }
    }

    /// Ops that only compute their results; dead-code elimination may drop them.
    pub fn is_pure(&self) -> bool {
        matches!(
            self,
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
                | GpuOpKind::AssumeUniform
                | GpuOpKind::Load { .. }
                | GpuOpKind::RegRead { .. }
        )
    }

    /// Simdgroup-collective ops: every lane of the simdgroup must execute them together.
    pub fn is_simd_collective(&self) -> bool {
        matches!(
            self,
            GpuOpKind::SimdShuffleXor
                | GpuOpKind::SimdBroadcast
                | GpuOpKind::SimdReduce(_)
                | GpuOpKind::Mma(_)
                | GpuOpKind::LdMatrix { .. }
                | GpuOpKind::SimdgroupLoad { .. }
        )
    }
}

fn vector_suffix(base: &str, width: u8) -> String {
    if width <= 1 {
        base.into()
    } else {
        format!("{base}.v{width}")
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct GpuOp {
    pub kind: GpuOpKind,
    pub operands: ValueList,
    pub results: ValueList,
    pub regions: Vec<GpuBlock>,
    /// The Tile IR op this came from.
    pub loc: Loc,
}

/// A straight-line list of ops; `args` are the region's arguments (a `for`'s
/// induction variable).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuBlock {
    pub args: Vec<GpuValue>,
    pub ops: Vec<GpuOp>,
}

/// How a kernel parameter reaches the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GpuParamKind {
    /// A device buffer of this dtype.
    Buffer(DType),
    /// A scalar passed by value (a `constant T&` in MSL).
    Scalar(DType),
    /// A CUDA tensor map the runtime builds at launch over the buffer argument
    /// `TensorMapSpec::buffer` (the parameter's `tile_index` is that buffer's).
    TensorMap(TensorMapSpec),
    /// An `i32`: 1 when the runtime could build the tensor map of the same
    /// spec (the kernel then copies with it), else 0.
    TensorMapReady(TensorMapSpec),
    /// An `i32` the runtime passes as -1, a value the device compiler cannot
    /// see: 32-bit integer negation multiplies by it on NVIDIA GPUs
    /// (`lower/elementwise.rs` says why).
    MinusOne,
}

/// A value the runtime knows at launch: a scalar argument (by Tile IR
/// parameter index) or a constant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LaunchValue {
    Arg(usize),
    Const(i64),
}

/// A 2-D row-major matrix seen by a tensor map, and the box one copy moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TensorMapSpec {
    /// Tile IR parameter index of the buffer.
    pub buffer: usize,
    pub dtype: DType,
    /// The matrix's extent: elements outside read as zero.
    pub rows: LaunchValue,
    pub cols: LaunchValue,
    /// Elements from one row to the next.
    pub stride: LaunchValue,
    /// The box: `box_rows` rows of `box_cols` elements.
    pub box_rows: u16,
    pub box_cols: u16,
    /// 32, 64 or 128: the box lands in shared memory swizzled as `wgmma`
    /// reads it (`box_cols` elements make one swizzle row).
    pub swizzle_bytes: u16,
    /// The buffer holds such matrices one after another (`rows * stride`
    /// elements apart, as the heads of an attention's K): the map has a
    /// third dimension, the matrix a copy reads (`TmaLoad`'s depth
    /// coordinate), and each matrix ends at its own `rows`.
    pub stacked: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct GpuParam {
    pub name: String,
    pub kind: GpuParamKind,
    /// Position of the parameter in the Tile IR function (= the launch argument index).
    pub tile_index: usize,
    /// The value the parameter is read through: a pointer root or the scalar.
    pub value: GpuValue,
}

/// Why a threadgroup allocation exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TgPurpose {
    /// `metile.shared(...)` in the kernel.
    User,
    /// Compiler scratch (reductions, layout conversions, `dot` staging), reused
    /// between barriers.
    Scratch,
    /// The memory of the earlier allocation whose root this is, taken again
    /// (as another element type) once that allocation's users are done; it
    /// must fit in it.
    Alias(GpuValue),
}

#[derive(Clone, Debug, PartialEq)]
pub struct TgAlloc {
    pub dtype: DType,
    /// Elements (not bytes).
    pub len: usize,
    pub purpose: TgPurpose,
    /// The pointer root that addresses it.
    pub value: GpuValue,
}

impl TgAlloc {
    pub fn bytes(&self) -> usize {
        self.len * self.dtype.size_bytes()
    }

    /// Bytes this allocation adds to the threadgroup's memory, rounded up to
    /// 16 (Metal's granularity for threadgroup memory lengths); none for an alias.
    pub fn footprint(&self) -> usize {
        match self.purpose {
            TgPurpose::Alias(_) => 0,
            _ => self.bytes().div_ceil(16) * 16,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct RegArray {
    pub dtype: DType,
    pub len: u32,
}

/// One kernel, as executed by each thread of a threadgroup of `threads_per_group`.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuFunction {
    pub name: String,
    pub params: Vec<GpuParam>,
    pub threadgroup: Vec<TgAlloc>,
    pub regs: Vec<RegArray>,
    pub threads_per_group: u32,
    pub body: GpuBlock,
    /// The type of every value, indexed by [`GpuValue`].
    pub values: Vec<GpuType>,
}

impl GpuFunction {
    pub fn ty(&self, v: GpuValue) -> GpuType {
        self.values[v.index()]
    }

    /// Visits every op, depth first, in program order.
    pub fn walk(&self, f: &mut impl FnMut(&GpuOp)) {
        fn go(block: &GpuBlock, f: &mut impl FnMut(&GpuOp)) {
            for op in &block.ops {
                f(op);
                for r in &op.regions {
                    go(r, f);
                }
            }
        }
        go(&self.body, f)
    }

    /// Total threadgroup memory in bytes ([`TgAlloc::footprint`]).
    pub fn threadgroup_bytes(&self) -> usize {
        self.threadgroup.iter().map(TgAlloc::footprint).sum()
    }
}

/// Builds a [`GpuFunction`]. Ops go to the innermost open block unless a depth is
/// given: lowering uses [`GpuBuilder::emit_at`] to hoist loop-invariant work into
/// an enclosing block (its ops land before the region op that is still being built).
pub struct GpuBuilder {
    func: GpuFunction,
    blocks: Vec<GpuBlock>,
    loc: Loc,
}

impl GpuBuilder {
    pub fn new(name: &str, threads_per_group: u32) -> GpuBuilder {
        GpuBuilder {
            func: GpuFunction {
                name: name.to_string(),
                params: vec![],
                threadgroup: vec![],
                regs: vec![],
                threads_per_group,
                body: GpuBlock::default(),
                values: vec![],
            },
            blocks: vec![GpuBlock::default()],
            loc: Loc::unknown(),
        }
    }

    pub fn set_loc(&mut self, loc: Loc) {
        self.loc = loc;
    }

    pub fn loc(&self) -> &Loc {
        &self.loc
    }

    pub fn ty(&self, v: GpuValue) -> GpuType {
        self.func.ty(v)
    }

    pub fn func(&self) -> &GpuFunction {
        &self.func
    }

    pub fn new_value(&mut self, ty: GpuType) -> GpuValue {
        let id = GpuValue(self.func.values.len() as u32);
        self.func.values.push(ty);
        id
    }

    pub fn add_param(&mut self, name: &str, kind: GpuParamKind, tile_index: usize) -> GpuValue {
        let ty = match kind {
            GpuParamKind::Buffer(d) => GpuType::Ptr(d, MemSpace::Device),
            GpuParamKind::Scalar(d) => GpuType::Scalar(d),
            GpuParamKind::TensorMap(spec) => GpuType::Ptr(spec.dtype, MemSpace::TensorMap),
            GpuParamKind::TensorMapReady(_) | GpuParamKind::MinusOne => GpuType::Scalar(DType::I32),
        };
        let value = self.new_value(ty);
        self.func.params.push(GpuParam {
            name: name.to_string(),
            kind,
            tile_index,
            value,
        });
        value
    }

    /// Declares threadgroup memory and returns its pointer root.
    pub fn add_threadgroup(&mut self, dtype: DType, len: usize, purpose: TgPurpose) -> GpuValue {
        let value = self.new_value(GpuType::Ptr(dtype, MemSpace::Threadgroup));
        self.func.threadgroup.push(TgAlloc {
            dtype,
            len,
            purpose,
            value,
        });
        value
    }

    /// Grows a scratch allocation (created with [`GpuBuilder::add_threadgroup`]).
    pub fn grow_threadgroup(&mut self, root: GpuValue, len: usize) {
        if let Some(a) = self.func.threadgroup.iter_mut().find(|a| a.value == root) {
            a.len = a.len.max(len);
        }
    }

    pub fn add_reg(&mut self, dtype: DType, len: u32) -> RegId {
        self.func.regs.push(RegArray { dtype, len });
        RegId(self.func.regs.len() as u32 - 1)
    }

    /// Number of open blocks (1 = the function body).
    pub fn depth(&self) -> usize {
        self.blocks.len()
    }

    /// Appends an op to the block at `depth` (0-based from the function body).
    pub fn emit_at(
        &mut self,
        depth: usize,
        kind: GpuOpKind,
        operands: impl Into<ValueList>,
        result_types: Vec<GpuType>,
    ) -> Vec<GpuValue> {
        let results: Vec<GpuValue> = result_types.into_iter().map(|t| self.new_value(t)).collect();
        let op = GpuOp {
            kind,
            operands: operands.into(),
            results: ValueList::from_slice(&results),
            regions: vec![],
            loc: self.loc.clone(),
        };
        let index = depth.min(self.blocks.len() - 1);
        self.blocks[index].ops.push(op);
        results
    }

    /// [`GpuBuilder::emit_at`] for an op with one result (most of them),
    /// without the result list.
    pub fn emit1_at(
        &mut self,
        depth: usize,
        kind: GpuOpKind,
        operands: impl Into<ValueList>,
        ty: GpuType,
    ) -> GpuValue {
        let result = self.new_value(ty);
        let op = GpuOp {
            kind,
            operands: operands.into(),
            results: ValueList::from([result]),
            regions: vec![],
            loc: self.loc.clone(),
        };
        let index = depth.min(self.blocks.len() - 1);
        self.blocks[index].ops.push(op);
        result
    }

    /// Appends an op to the innermost block.
    pub fn emit(
        &mut self,
        kind: GpuOpKind,
        operands: impl Into<ValueList>,
        result_types: Vec<GpuType>,
    ) -> Vec<GpuValue> {
        let depth = self.blocks.len() - 1;
        self.emit_at(depth, kind, operands, result_types)
    }

    /// Opens a region block with arguments of the given types.
    pub fn push_block(&mut self, arg_types: &[GpuType]) -> Vec<GpuValue> {
        let args: Vec<GpuValue> = arg_types.iter().map(|&t| self.new_value(t)).collect();
        self.blocks.push(GpuBlock {
            args: args.clone(),
            ops: vec![],
        });
        args
    }

    /// Closes the innermost region block (never the function body).
    pub fn pop_block(&mut self) -> GpuBlock {
        if self.blocks.len() <= 1 {
            return GpuBlock::default();
        }
        self.blocks.pop().unwrap_or_default()
    }

    /// Appends a region op (`for`, `if`) with already built regions.
    pub fn emit_region_op(
        &mut self,
        kind: GpuOpKind,
        operands: impl Into<ValueList>,
        regions: Vec<GpuBlock>,
    ) {
        let op = GpuOp {
            kind,
            operands: operands.into(),
            results: ValueList::new(),
            regions,
            loc: self.loc.clone(),
        };
        if let Some(b) = self.blocks.last_mut() {
            b.ops.push(op);
        }
    }

    /// The finished function; open regions, if any, are discarded.
    pub fn finish(mut self) -> GpuFunction {
        self.blocks.truncate(1);
        self.func.body = self.blocks.pop().unwrap_or_default();
        self.func
    }
}
