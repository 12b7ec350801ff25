//! What the lowering needs to know about Apple GPUs (see msl-reference.md §6):
//! simdgroup width, threadgroup limits and the widest vector memory access.

/// Threads per simdgroup on every Apple GPU.
pub const SIMD_WIDTH: u32 = 32;
/// Metal's limit on threads per threadgroup.
pub const MAX_THREADS_PER_GROUP: u32 = 1024;
/// Metal's limit on threadgroup memory per threadgroup, in bytes.
pub const MAX_THREADGROUP_BYTES: usize = 32 * 1024;
/// The widest vector access: 4 lanes and at most 16 bytes.
pub const MAX_VECTOR_LANES: usize = 4;
pub const MAX_VECTOR_BYTES: usize = 16;
/// Simdgroups per threadgroup chosen by the default rule: at most this many.
pub const MAX_DEFAULT_SIMDGROUPS: u32 = 8;
/// Elements per thread the default rule aims for in the largest tile.
pub const DEFAULT_ELEMENTS_PER_THREAD: usize = 4;
/// The byte alignment the kernels assume for every buffer base address (the
/// widest vector access); the runtime guarantees it.
pub const BUFFER_BASE_ALIGNMENT: usize = 16;

/// Program ids are i32 on every target, so no grid axis may exceed this.
pub const MAX_PROGRAM_ID_EXTENT: u32 = i32::MAX as u32;

/// The largest grid, per axis, that a kernel of `threads_per_group` threads can
/// be launched over on an Apple GPU: a thread's position in the grid is a
/// 32-bit `uint` along x (threadgroups × threads must stay below 2^32), and
/// program ids are i32 on every axis.
pub fn max_grid(threads_per_group: u32) -> [u32; 3] {
    let x = u32::MAX / threads_per_group.max(1);
    [
        x.min(MAX_PROGRAM_ID_EXTENT),
        MAX_PROGRAM_ID_EXTENT,
        MAX_PROGRAM_ID_EXTENT,
    ]
}
