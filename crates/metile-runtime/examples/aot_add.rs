//! Launches an ahead-of-time artifact of `add_kernel` from Rust, without Python:
//!
//! ```text
//! python -m metile compile crates/metile-runtime/tests/aot/kernels.py:add_kernel \
//!     -s "X:*fp32,Y:*fp32,Out:*fp32,N:i32,BLOCK:256" -g "cdiv(N, BLOCK)" -t apple -o /tmp/add
//! cargo run -p metile-runtime --example aot_add -- /tmp/add 1000
//! ```
//!
//! An MSL artifact runs on msl-emu (metal on macOS), a CUDA one (`-t sm_90`) on
//! the cuda device. Without arguments it runs the artifact the tests use.

use metile_interp::{KernelArg, ScalarValue};
use metile_ir::DType;
use metile_runtime::aot::{Artifact, Language};
use metile_runtime::{open_device, Device, RuntimeError};
use std::path::PathBuf;

fn main() {
    if let Err(e) = run() {
        eprintln!("aot_add: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), RuntimeError> {
    let mut argv = std::env::args().skip(1);
    let dir = argv.next().map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/aot/add_apple"),
        PathBuf::from,
    );
    let n: usize = match argv.next() {
        Some(text) => text
            .parse()
            .map_err(|_| RuntimeError::BadArguments(format!("'{text}' is not a number of elements")))?,
        None => 1000,
    };
    let artifact = Artifact::load(&dir)?;
    let manifest = artifact.manifest();
    let device_name = match manifest.language {
        Language::Msl if cfg!(target_os = "macos") => "metal",
        Language::Msl => "msl-emu",
        Language::Cuda => "cuda",
    };
    let device = open_device(device_name)?;
    println!(
        "{} for {} ({} threads per threadgroup) on {}",
        manifest.kernel,
        manifest.target,
        manifest.threads_per_group,
        device.model()
    );
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let y: Vec<f32> = (0..n).map(|i| 2.0 * i as f32 + 0.5).collect();
    let out = match device.memory() {
        None => add_in_host_memory(&artifact, device.as_ref(), x.clone(), y.clone())?,
        Some(_) => add_in_device_memory(&artifact, device.as_ref(), &x, &y)?,
    };
    let max_error = (0..n)
        .map(|i| (out[i] - (x[i] + y[i])).abs())
        .fold(0f32, f32::max);
    println!("n = {n}: max |out - (x + y)| = {max_error}");
    if max_error != 0.0 {
        return Err(RuntimeError::Device("wrong result".into()));
    }
    Ok(())
}

fn add_in_host_memory(
    artifact: &Artifact,
    device: &dyn Device,
    mut x: Vec<f32>,
    mut y: Vec<f32>,
) -> Result<Vec<f32>, RuntimeError> {
    let mut out = vec![0f32; x.len()];
    let n = x.len();
    let buffer = |v: &mut Vec<f32>| KernelArg::Buffer {
        ptr: v.as_mut_ptr().cast(),
        len: v.len(),
        dtype: DType::F32,
    };
    let args = [
        buffer(&mut x),
        buffer(&mut y),
        buffer(&mut out),
        KernelArg::Scalar(ScalarValue::I32(n as i32)),
    ];
    let grid = artifact.grid(&args)?;
    // SAFETY: the buffers are live vectors of the stated lengths, used by nothing else.
    unsafe { artifact.launch(device, grid, &args)? };
    device.synchronize()?;
    Ok(out)
}

fn add_in_device_memory(
    artifact: &Artifact,
    device: &dyn Device,
    x: &[f32],
    y: &[f32],
) -> Result<Vec<f32>, RuntimeError> {
    let memory = device
        .memory()
        .ok_or_else(|| RuntimeError::Device("no device memory".into()))?;
    let n = x.len();
    let bytes = std::mem::size_of_val(x);
    let (dx, dy, dout) = (memory.alloc(bytes)?, memory.alloc(bytes)?, memory.alloc(bytes)?);
    // SAFETY: the host slices hold `bytes` bytes; the allocations as many.
    unsafe {
        memory.upload(dx.ptr(), x.as_ptr().cast(), bytes)?;
        memory.upload(dy.ptr(), y.as_ptr().cast(), bytes)?;
    }
    let buffer = |ptr: u64| KernelArg::Buffer {
        ptr: ptr as *mut u8,
        len: n,
        dtype: DType::F32,
    };
    let args = [
        buffer(dx.ptr()),
        buffer(dy.ptr()),
        buffer(dout.ptr()),
        KernelArg::Scalar(ScalarValue::I32(n as i32)),
    ];
    let grid = artifact.grid(&args)?;
    // SAFETY: device allocations of `n` elements, alive until the download below.
    unsafe { artifact.launch(device, grid, &args)? };
    let mut out = vec![0f32; n];
    // SAFETY: `out` is writable for `bytes` bytes.
    unsafe { memory.download(dout.ptr(), out.as_mut_ptr().cast(), bytes)? };
    Ok(out)
}
