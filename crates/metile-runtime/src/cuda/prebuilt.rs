//! The cuda backend's two halves apart: emitting CUDA C++ for a target (no GPU
//! needed: what a launch compiles, and what an ahead-of-time artifact holds),
//! and loading emitted CUDA C++, or an artifact's cubin, as a launchable kernel.

use super::{compile_error, debug_enabled, load_libraries, nvrtc, nvrtc_error, CudaDevice, CudaLaunchable};
use crate::debug::compile_reporting;
use crate::device::{CompileOptions, CompiledKernel};
use crate::error::RuntimeError;
use metile_compiler::launch_plan::plan_repack;
use metile_compiler::{CompileError, CudaKernel, Kernel, Target, TargetKind};
use metile_ir::Function;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// The cubin NVRTC makes of `kernel`'s source without a GPU, for an
/// ahead-of-time artifact; `None` where NVRTC (or the driver it is loaded
/// with) is not installed.
pub fn compile_cubin(kernel: &CudaKernel) -> Result<Option<Vec<u8>>, RuntimeError> {
    if load_libraries().is_err() {
        return Ok(None);
    }
    let file = format!("{}.cu", kernel.kernel_name);
    match nvrtc::compile(&kernel.source, &file, &kernel.arch)? {
        Ok(cubin) => Ok(Some(cubin)),
        Err(failure) => Err(nvrtc_error(kernel, &failure)),
    }
}

/// The CUDA C++ the cuda backend compiles `func` to for `target`: what a
/// launch runs, and what an ahead-of-time artifact holds.
/// `METILE_DEBUG=gpu_ir,cuda` print the stages.
pub fn emit(func: &Function, options: &CompileOptions, target: &Target) -> Result<CudaKernel, RuntimeError> {
    let compiled = compile_reporting(func, options, target).map_err(compile_error)?;
    let Kernel::Cuda(kernel) = compiled.kernel else {
        return Err(compile_error(CompileError::new(
            "kernel",
            "internal compiler error: an NVIDIA target gave no CUDA C++",
            metile_ir::Loc::unknown(),
        )));
    };
    if debug_enabled("cuda") {
        eprintln!("// CUDA C++ of {}\n{}", func.name, kernel.source);
    }
    Ok(kernel)
}

impl CudaDevice {
    /// A launchable kernel of emitted CUDA C++ (from `cubin` where given).
    pub(super) fn launchable(
        &self,
        kernel: CudaKernel,
        cubin: Option<&[u8]>,
    ) -> Result<Arc<dyn CompiledKernel>, RuntimeError> {
        let loaded = self.load(&kernel, cubin)?;
        let repack = plan_repack(&kernel);
        let repacker = repack.is_some().then(|| self.repacker()).transpose()?;
        Ok(Arc::new(CudaLaunchable {
            context: self.context.clone(),
            loaded,
            name: Arc::from(kernel.kernel_name.as_str()),
            params: kernel.params,
            threads: kernel.threads_per_group,
            shared_bytes: u32::try_from(kernel.shared_bytes).unwrap_or(u32::MAX),
            alignment: kernel.buffer_alignment.max(1),
            last_kernel: self.last_kernel.clone(),
            grid_limits: self.target.grid_limits(kernel.threads_per_group),
            repack,
            repacker,
            report_repack: AtomicBool::new(debug_enabled("repack")),
            prints: kernel.prints,
        }))
    }

    /// Refuses an artifact this GPU cannot run: one for another major
    /// architecture, a newer minor one, an `sm_XYa` kernel on another GPU, or
    /// more shared memory than the GPU has.
    pub(super) fn check_prebuilt(&self, kernel: &CudaKernel) -> Result<(), RuntimeError> {
        let here = self.target.arch_name();
        let wanted = kernel.arch.trim_end_matches('a');
        let compatible = match (Target::parse(wanted).map(|t| t.kind), self.target.kind) {
            (Some(TargetKind::Nvidia { major, minor }), TargetKind::Nvidia { major: m, minor: n }) => {
                major == m && minor <= n && (!kernel.arch.ends_with('a') || minor == n)
            }
            _ => false,
        };
        if !compatible {
            return Err(RuntimeError::Unavailable(format!(
                "the artifact `{}` was compiled for {}; this GPU ({}) is {here}: compile the kernel for {here} \
                 (python -m metile compile ... --target {here})",
                kernel.kernel_name, kernel.arch, self.model
            )));
        }
        if kernel.shared_bytes > self.target.max_threadgroup_bytes {
            return Err(RuntimeError::Unavailable(format!(
                "the artifact `{}` needs {} bytes of shared memory per block; this GPU allows {}",
                kernel.kernel_name, kernel.shared_bytes, self.target.max_threadgroup_bytes
            )));
        }
        Ok(())
    }
}
