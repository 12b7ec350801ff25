//! The C ABI between this module and a compiled kernel library. Mirrors
//! `MetileEmuLaunch` in `msl_emu_shim/metile_emu/runtime_impl.h`.

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void};

/// Bumped together with `metile_emu::abi_version` in the shim.
pub(crate) const ABI_VERSION: u32 = 3;

#[repr(C)]
pub(crate) struct LaunchDesc {
    pub abi_version: c_uint,
    pub threads_per_group: c_uint,
    pub grid: [c_uint; 3],
    pub reserved: c_uint,
    pub args: *const *const c_void,
    pub stacks: *mut u8,
    pub stack_stride: usize,
    pub threadgroup_memory: *mut u8,
    pub threadgroup_memory_bytes: usize,
    pub scratch: *mut u8,
    pub scratch_bytes: usize,
    pub error_message: *mut c_char,
    pub error_capacity: usize,
    pub print: Option<PrintFn>,
    pub print_context: *mut c_void,
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

pub(crate) const RUN_GROUP_SYMBOL: &[u8] = b"metile_emu_run_group\0";
pub(crate) const SCRATCH_BYTES_SYMBOL: &[u8] = b"metile_emu_scratch_bytes\0";
pub(crate) const ABI_VERSION_SYMBOL: &[u8] = b"metile_emu_abi_version\0";
pub(crate) const SCALAR_BYTES_SYMBOL: &[u8] = b"metile_emu_scalar_param_bytes\0";
pub(crate) const ABORT_AFTER_FAULT_SYMBOL: &[u8] = b"metile_emu_abort_after_fault\0";
