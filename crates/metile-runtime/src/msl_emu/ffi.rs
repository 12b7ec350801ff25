//! The C ABI between this module and a compiled kernel library. Mirrors
//! `MetileEmuLaunch` in `msl_emu_shim/metile_emu/runtime_impl.h`.

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void};

/// Bumped together with `metile_emu::abi_version` in the shim.
pub(crate) const ABI_VERSION: u32 = 5;

#[repr(C)]
pub(crate) struct LaunchDesc {
    pub abi_version: c_uint,
    pub threads_per_group: c_uint,
    pub grid: [c_uint; 3],
    /// Tag of threadgroup allocation 0 (then 1, 2, ...) for this worker; 0 leaves them untagged.
    pub threadgroup_tag_base: c_uint,
    pub args: *const *const c_void,
    pub stacks: *mut u8,
    pub stack_stride: usize,
    pub threadgroup_memory: *mut u8,
    pub threadgroup_memory_bytes: usize,
    pub scratch: *mut u8,
    pub scratch_bytes: usize,
    pub error_message: *mut c_char,
    pub error_capacity: usize,
    /// Filled by a failed access check (status `STATUS_ACCESS`).
    pub access_record: *mut AccessRecord,
    pub print: Option<PrintFn>,
    pub print_context: *mut c_void,
    /// Where a profiled build counts (`profile.rs`); null otherwise.
    pub profile: *mut super::profile::ProfileState,
}

/// Return addresses an access record keeps.
pub(crate) const ACCESS_FRAMES: usize = 16;
/// `access_write` and the space bits of `metile_emu::AccessRecord::flags`.
pub(crate) const ACCESS_WRITE: u32 = 1;
pub(crate) const ACCESS_SPACE_SHIFT: u32 = 1;

/// Mirrors `metile_emu::AccessRecord` (checks.h): a failed access check.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct AccessRecord {
    /// The tagged pointer the kernel accessed.
    pub pointer: u64,
    pub bytes: u64,
    pub flags: u32,
    pub thread_index: u32,
    /// Return addresses on the fiber's stack, innermost first; 0 past the last.
    pub frames: [u64; ACCESS_FRAMES],
}

/// Receives one logged line (without its newline) for `context`.
pub(crate) type PrintFn = unsafe extern "C" fn(context: *mut c_void, text: *const c_char, length: usize);

pub(crate) type RunGroupFn = unsafe extern "C" fn(*const LaunchDesc, c_uint, c_uint, c_uint) -> c_int;
pub(crate) type ScratchBytesFn = unsafe extern "C" fn(c_uint) -> usize;
pub(crate) type AbiVersionFn = unsafe extern "C" fn() -> c_uint;
pub(crate) type ScalarBytesFn = unsafe extern "C" fn(c_uint) -> c_ulong;
/// Never returns; entered by redirecting a faulting thread (see `trap.rs`).
pub(crate) type AbortAfterFaultFn = unsafe extern "C" fn();

/// `run_group` statuses.
pub(crate) const STATUS_OK: i32 = 0;
pub(crate) const STATUS_FAULT: i32 = 2;
pub(crate) const STATUS_ACCESS: i32 = 3;

pub(crate) const RUN_GROUP_SYMBOL: &[u8] = b"metile_emu_run_group\0";
pub(crate) const SCRATCH_BYTES_SYMBOL: &[u8] = b"metile_emu_scratch_bytes\0";
pub(crate) const ABI_VERSION_SYMBOL: &[u8] = b"metile_emu_abi_version\0";
pub(crate) const SCALAR_BYTES_SYMBOL: &[u8] = b"metile_emu_scalar_param_bytes\0";
pub(crate) const ABORT_AFTER_FAULT_SYMBOL: &[u8] = b"metile_emu_abort_after_fault\0";
pub(crate) const CHECKS_SYMBOL: &[u8] = b"metile_emu_checks\0";
pub(crate) const SET_EXTENT_TABLE_SYMBOL: &[u8] = b"metile_emu_set_extent_table\0";
pub(crate) const THREADGROUP_ALLOCATION_COUNT_SYMBOL: &[u8] = b"metile_emu_threadgroup_allocation_count\0";
pub(crate) const THREADGROUP_ALLOCATION_SYMBOL: &[u8] = b"metile_emu_threadgroup_allocation\0";
pub(crate) const PROFILE_COUNTER_COUNT_SYMBOL: &[u8] = b"metile_emu_profile_counter_count\0";

pub(crate) type ChecksFn = unsafe extern "C" fn() -> c_int;
pub(crate) type SetExtentTableFn = unsafe extern "C" fn(*mut c_void);
pub(crate) type AllocationCountFn = unsafe extern "C" fn() -> c_uint;
/// The number of profile counters of a profiled build; 0 for any other.
pub(crate) type ProfileCounterCountFn = unsafe extern "C" fn() -> c_uint;
pub(crate) type AllocationFn = unsafe extern "C" fn(c_uint, *mut c_ulong, *mut c_ulong);
