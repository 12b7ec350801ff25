//! The CPU backend: the Tile IR interpreter, program instances in parallel across
//! cores, numpy memory used in place. Launches finish before they return.

use crate::device::{CompileOptions, CompiledKernel, Device};
use crate::error::RuntimeError;
use metile_interp::{ExecError, Executable, KernelArg};
use metile_ir::Function;
use std::sync::Arc;

pub struct CpuDevice;

struct CpuKernel {
    exe: Executable,
}

impl From<ExecError> for RuntimeError {
    fn from(e: ExecError) -> RuntimeError {
        match e {
            ExecError::OutOfBounds { ref loc, .. } => RuntimeError::OutOfBounds {
                message: e.to_string(),
                loc: loc.clone(),
            },
            ExecError::DivisionByZero { ref loc, .. } => RuntimeError::DivisionByZero {
                message: e.to_string(),
                loc: loc.clone(),
            },
            ExecError::InvalidShift { ref loc, .. } => RuntimeError::InvalidShift {
                message: e.to_string(),
                loc: loc.clone(),
            },
            ExecError::Interrupted => RuntimeError::Interrupted,
            ExecError::AssertionFailed { ref loc, .. } => RuntimeError::AssertionFailed {
                message: e.to_string(),
                loc: loc.clone(),
            },
            ExecError::BadArguments(m) => RuntimeError::BadArguments(m),
            other => RuntimeError::Device(other.to_string()),
        }
    }
}

impl CompiledKernel for CpuKernel {
    unsafe fn launch(&self, args: &[KernelArg], grid: [u32; 3]) -> Result<(), RuntimeError> {
        let single_instance = grid.iter().all(|&g| g == 1);
        let args = crate::interrupt::SendSlice(args);
        // SAFETY: forwarded from the caller's contract.
        crate::interrupt::run_interruptible(single_instance, move |stop| unsafe {
            self.exe.launch_interruptible(args.get(), grid, stop)
        })
        .map_err(RuntimeError::from)
    }
}

impl Device for CpuDevice {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn compile(
        &self,
        func: Arc<Function>,
        options: &CompileOptions,
    ) -> Result<Arc<dyn CompiledKernel>, RuntimeError> {
        // The CPU has no L2 to share, so programs are renumbered only on request:
        // then the interpreter checks the GPU targets' numbering.
        let ordered =
            metile_compiler::pipeline::prepare_for_interpreter(&func, &options.passes).map_err(|e| {
                RuntimeError::Compile {
                    message: e.to_string(),
                    loc: None,
                }
            })?;
        let func = ordered.map(Arc::new).unwrap_or(func);
        let exe = Executable::new(func).map_err(|e| RuntimeError::Compile {
            message: e.to_string(),
            loc: None,
        })?;
        Ok(Arc::new(CpuKernel { exe }))
    }

    fn synchronize(&self) -> Result<(), RuntimeError> {
        Ok(())
    }
}
