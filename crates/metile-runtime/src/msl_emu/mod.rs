//! MSL emulator: runs the Metal Shading Language that meTile emits on the CPU.
//!
//! The exact MSL text is compiled, unchanged, by clang++ against a Metal shim
//! (`msl_emu_shim/`, embedded in this crate and written into each compile's work folder)
//! with a generated entry wrapper appended after it (only threadgroup variables
//! declared inside a kernel, which meTile never emits, are rewritten in place,
//! line for line). The resulting shared object runs each threadgroup on one
//! worker thread, with every GPU thread a fiber; SIMD-group functions,
//! `simdgroup_matrix` and barriers behave as on an Apple GPU (32-lane
//! simdgroups, hardware matrix lane layout, returned threads leave barriers),
//! and threadgroup memory starts poisoned. By default every device, constant
//! and threadgroup access is checked against the buffer or allocation its
//! pointer came from (`instrument`, `extents`, `checks.h`). See
//! `docs/msl-emu.md`.
//!
//! ```no_run
//! use metile_runtime::msl_emu::*;
//! let compiler = EmuCompiler::find()?;
//! let entry = EntrySpec {
//!     kernel_name: "add".into(),
//!     params: vec![
//!         EntryParam::Buffer { msl_type: "device float*".into() },
//!         EntryParam::Builtin(Builtin::ThreadIndexInThreadgroup),
//!     ],
//! };
//! let msl = "#include <metal_stdlib>\nusing namespace metal;\n\
//!            kernel void add(device float* x [[buffer(0)]], uint tid [[thread_index_in_threadgroup]])\n\
//!            { x[tid] += 1.0f; }\n";
//! let kernel = compiler.compile(msl, &entry)?;
//! let mut data = vec![0.0f32; 64];
//! let args = [LaunchArg::Buffer { ptr: data.as_mut_ptr().cast(), len_bytes: 256 }];
//! unsafe { kernel.launch(&args, [1, 1, 1], 64)? };
//! # Ok::<(), EmuError>(())
//! ```

mod access_report;
mod compiler;
mod extents;
mod ffi;
mod instrument;
mod kernel;
mod profile;
mod shim;
mod stacks;
mod symbolize;
mod threadgroup_vars;
mod toolchain;
mod trap;
mod wrapper;

pub use compiler::{EmuCompiler, CHECKS_ENV};
pub use kernel::{EmuKernel, LaunchArg, MAX_THREADGROUP_MEMORY_BYTES, MAX_THREADS_PER_GROUP};
pub use profile::{EmuProfile, ThreadgroupSite};
pub use toolchain::{ClangVersion, CompilerCommand, COMPILER_ENV, MIN_CLANG_MAJOR};
pub use wrapper::{Builtin, EntryParam, EntrySpec};

use std::path::PathBuf;

/// Everything that can go wrong between MSL text and a finished launch.
#[derive(Debug, thiserror::Error)]
pub enum EmuError {
    /// No clang++ was found, or the one named by `METILE_CXX` does not run.
    #[error("MSL emulator: no usable C++ compiler: {0}")]
    CompilerNotFound(String),
    /// The compiler runs but cannot build the shim (too old, or not clang).
    #[error("MSL emulator: unsuitable C++ compiler {compiler}: {reason}")]
    CompilerUnsuitable { compiler: String, reason: String },
    /// clang rejected the kernel; `diagnostics` is clang's own output.
    #[error("MSL emulator: kernel `{kernel}` failed to compile:\n{diagnostics}")]
    Compile { kernel: String, diagnostics: String },
    /// Metal-legal MSL that the emulator cannot run faithfully.
    #[error("MSL emulator: unsupported MSL: {0}")]
    Unsupported(String),
    /// The entry description is malformed.
    #[error("MSL emulator: bad entry description: {0}")]
    BadEntry(String),
    /// Launch arguments or geometry do not fit the kernel.
    #[error("MSL emulator: bad launch: {0}")]
    BadLaunch(String),
    /// The kernel failed while running: deadlock, divergent barrier or SIMD-group
    /// call, out-of-bounds access, fault.
    #[error("MSL emulator: kernel `{kernel}` failed: {message}")]
    Kernel { kernel: String, message: String },
    /// The host asked the launch to stop (see `crate::interrupt`); the
    /// threadgroups not yet started did not run.
    #[error("MSL emulator: the launch was interrupted")]
    Interrupted,
    /// The compiled library could not be loaded or lacks the entry symbols.
    #[error("MSL emulator: cannot load {}: {message}", path.display())]
    Load { path: PathBuf, message: String },
    #[error("MSL emulator: {context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl EmuError {
    fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        EmuError::Io {
            context: context.into(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_and_compilers_cross_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<EmuKernel>();
        send_sync::<EmuCompiler>();
        send_sync::<EmuError>();
    }
}
