//! Shared helpers for the MSL emulator tests: finding clang (tests skip, not
//! fail, without it), entry descriptions and launch arguments.
#![allow(dead_code)]

use metile_runtime::msl_emu::{Builtin, EmuCompiler, EmuKernel, EntryParam, EntrySpec, LaunchArg};

/// The compiler with a cache folder private to this test build, or `None`
/// (after saying why) when no suitable clang is installed.
pub fn compiler() -> Option<EmuCompiler> {
    match EmuCompiler::find() {
        Ok(c) => {
            Some(c.with_cache_dir(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("msl-emu-cache")))
        }
        Err(e) => {
            eprintln!("skipping MSL emulator test: {e}");
            None
        }
    }
}

/// Returns from the test when no clang is available.
#[macro_export]
macro_rules! require_compiler {
    () => {
        match msl_emu_support::compiler() {
            Some(c) => c,
            None => return,
        }
    };
}

pub fn buffer(msl_type: &str) -> EntryParam {
    EntryParam::Buffer {
        msl_type: msl_type.into(),
    }
}

pub fn scalar(msl_type: &str) -> EntryParam {
    EntryParam::Scalar {
        msl_type: msl_type.into(),
    }
}

pub fn threadgroup(msl_type: &str, bytes: usize) -> EntryParam {
    EntryParam::Threadgroup {
        msl_type: msl_type.into(),
        bytes,
    }
}

pub fn builtin(b: Builtin) -> EntryParam {
    EntryParam::Builtin(b)
}

pub fn entry(name: &str, params: Vec<EntryParam>) -> EntrySpec {
    EntrySpec {
        kernel_name: name.into(),
        params,
    }
}

pub fn buf<T>(data: &mut [T]) -> LaunchArg<'static> {
    LaunchArg::Buffer {
        ptr: data.as_mut_ptr().cast(),
        len_bytes: std::mem::size_of_val(data),
    }
}

pub fn bytes_of<T: Copy>(value: &T) -> LaunchArg<'_> {
    // SAFETY: reading the bytes of a plain Copy value.
    LaunchArg::Scalar(unsafe {
        std::slice::from_raw_parts((value as *const T).cast::<u8>(), std::mem::size_of::<T>())
    })
}

pub fn compile(compiler: &EmuCompiler, msl: &str, spec: &EntrySpec) -> EmuKernel {
    match compiler.compile(msl, spec) {
        Ok(k) => k,
        Err(e) => panic!("{e}"),
    }
}

/// Launches, panicking with the emulator's message on error.
pub fn run(kernel: &EmuKernel, args: &[LaunchArg], grid: [u32; 3], threads: u32) {
    // SAFETY: tests pass buffers that outlive the launch and kernels that stay in bounds.
    if let Err(e) = unsafe { kernel.launch(args, grid, threads) } {
        panic!("{e}");
    }
}

pub const HEADER: &str = "#include <metal_stdlib>\nusing namespace metal;\n\n";
