//! The msl-emu backend: Tile IR → GPU IR → MSL (the compiler's Apple path), then
//! the emitted MSL, byte for byte, compiled by clang++ against the Metal shim and
//! run on the CPU (see `msl_emu`). It proves the MSL meTile would ship.

use crate::debug::debug_enabled;
use crate::device::{CompileOptions, CompiledKernel, Device};
use crate::error::RuntimeError;
use crate::msl_emu::{Builtin, EmuCompiler, EmuError, EmuKernel, EntryParam, EntrySpec, LaunchArg};
use metile_compiler::{compile_msl, CompileError, MslBuiltin, MslKernel, MslOptions, MslParam};
use metile_interp::{KernelArg, ScalarValue};
use metile_ir::Function;
use std::sync::Arc;

pub struct MslEmuDevice {
    compiler: EmuCompiler,
}

impl MslEmuDevice {
    pub fn open() -> Result<MslEmuDevice, RuntimeError> {
        let compiler = EmuCompiler::find().map_err(|e| {
            RuntimeError::Unavailable(format!(
                "the msl-emu backend needs clang++ 18 or newer (set METILE_CXX or install clang-19): {e}"
            ))
        })?;
        Ok(MslEmuDevice { compiler })
    }
}

struct MslEmuKernel {
    kernel: EmuKernel,
    /// The emitted kernel, kept to map a faulting MSL line back to the kernel source.
    msl: MslKernel,
    /// For each Buffer/Scalar parameter of the MSL signature, the Tile IR parameter it binds.
    arg_order: Vec<usize>,
    threads_per_group: u32,
}

fn builtin(b: MslBuiltin) -> Builtin {
    match b {
        MslBuiltin::ThreadgroupPositionInGrid => Builtin::ThreadgroupPositionInGrid,
        MslBuiltin::ThreadgroupsPerGrid => Builtin::ThreadgroupsPerGrid,
        MslBuiltin::ThreadIndexInThreadgroup => Builtin::ThreadIndexInThreadgroup,
        MslBuiltin::ThreadIndexInSimdgroup => Builtin::ThreadIndexInSimdgroup,
        MslBuiltin::SimdgroupIndexInThreadgroup => Builtin::SimdgroupIndexInThreadgroup,
    }
}

fn compile_error(e: CompileError) -> RuntimeError {
    let message = format!("cannot compile `{}` for Apple GPUs: {}", e.op, e.reason);
    RuntimeError::Compile {
        message,
        loc: (e.loc.line != 0).then_some(e.loc),
    }
}

/// The MSL line a fault message names ("... at line 16 of add.metal").
fn faulting_line(message: &str) -> Option<u32> {
    let rest = &message[message.rfind(" at line ")? + " at line ".len()..];
    rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

fn emu_error(e: EmuError, msl: Option<&MslKernel>) -> RuntimeError {
    match e {
        EmuError::Kernel { ref message, .. } if message.contains("out-of-bounds") => {
            let loc = faulting_line(message)
                .and_then(|line| msl.and_then(|m| m.loc_of_line(line)))
                .cloned()
                .unwrap_or_else(metile_ir::Loc::unknown);
            RuntimeError::OutOfBounds {
                message: e.to_string(),
                loc,
            }
        }
        EmuError::Compile { .. } | EmuError::Unsupported(_) | EmuError::BadEntry(_) => {
            RuntimeError::Compile {
                message: e.to_string(),
                loc: None,
            }
        }
        EmuError::BadLaunch(m) => RuntimeError::BadArguments(m),
        other => RuntimeError::Device(other.to_string()),
    }
}

/// A scalar's bytes as the kernel's `constant T&` reads them.
fn scalar_bytes(s: &ScalarValue) -> Vec<u8> {
    match *s {
        ScalarValue::Bool(b) => vec![u8::from(b)],
        ScalarValue::I32(v) => v.to_ne_bytes().to_vec(),
        ScalarValue::U32(v) => v.to_ne_bytes().to_vec(),
        ScalarValue::I64(v) => v.to_ne_bytes().to_vec(),
        ScalarValue::F32(v) => v.to_ne_bytes().to_vec(),
        ScalarValue::F16(v) => v.to_bits().to_ne_bytes().to_vec(),
        ScalarValue::BF16(v) => v.to_bits().to_ne_bytes().to_vec(),
    }
}

impl CompiledKernel for MslEmuKernel {
    fn max_grid(&self) -> [u32; 3] {
        metile_compiler::Target::apple().grid_limits(self.threads_per_group)
    }

    unsafe fn launch(&self, args: &[KernelArg], grid: [u32; 3]) -> Result<(), RuntimeError> {
        let scalars: Vec<Option<Vec<u8>>> = args
            .iter()
            .map(|a| match a {
                KernelArg::Scalar(s) => Some(scalar_bytes(s)),
                KernelArg::Buffer { .. } => None,
            })
            .collect();
        let mut launch_args = Vec::with_capacity(self.arg_order.len());
        for &i in &self.arg_order {
            let arg = args.get(i).ok_or_else(|| {
                RuntimeError::BadArguments(format!(
                    "the kernel needs argument {i}, {} were given",
                    args.len()
                ))
            })?;
            launch_args.push(match (arg, &scalars[i]) {
                (KernelArg::Buffer { ptr, len, dtype }, _) => LaunchArg::Buffer {
                    ptr: *ptr,
                    len_bytes: len * dtype.size_bytes(),
                },
                (KernelArg::Scalar(_), Some(bytes)) => LaunchArg::Scalar(bytes),
                (KernelArg::Scalar(_), None) => unreachable!("scalar bytes are computed for every scalar"),
            });
        }
        // SAFETY: forwarded from the caller's contract (live buffers of the stated length).
        unsafe { self.kernel.launch(&launch_args, grid, self.threads_per_group) }
            .map_err(|e| emu_error(e, Some(&self.msl)))
    }
}

impl Device for MslEmuDevice {
    fn name(&self) -> &'static str {
        "msl-emu"
    }

    fn compile(
        &self,
        func: Arc<Function>,
        options: &CompileOptions,
    ) -> Result<Arc<dyn CompiledKernel>, RuntimeError> {
        let msl_options = MslOptions {
            num_sgs: options.num_sgs,
            keep_gpu_ir: debug_enabled("gpu_ir"),
        };
        let compiled = compile_msl(&func, &msl_options).map_err(compile_error)?;
        if let Some(gpu_ir) = &compiled.gpu_ir {
            eprintln!("// GPU IR of {}\n{gpu_ir}", func.name);
        }
        let msl = compiled.kernel;
        if debug_enabled("msl") {
            eprintln!("// MSL of {}\n{}", func.name, msl.source);
        }
        let mut arg_order = Vec::new();
        let params = msl
            .params
            .iter()
            .map(|p| match p {
                MslParam::Buffer {
                    msl_type,
                    tile_param_index,
                } => {
                    arg_order.push(*tile_param_index);
                    EntryParam::Buffer {
                        msl_type: msl_type.clone(),
                    }
                }
                MslParam::Scalar {
                    msl_type,
                    tile_param_index,
                } => {
                    arg_order.push(*tile_param_index);
                    EntryParam::Scalar {
                        msl_type: msl_type.clone(),
                    }
                }
                MslParam::Threadgroup { msl_type, bytes } => EntryParam::Threadgroup {
                    msl_type: msl_type.clone(),
                    bytes: *bytes,
                },
                MslParam::Builtin(b) => EntryParam::Builtin(builtin(*b)),
            })
            .collect();
        let entry = EntrySpec {
            kernel_name: msl.kernel_name.clone(),
            params,
        };
        let kernel = self
            .compiler
            .compile(&msl.source, &entry)
            .map_err(|e| emu_error(e, None))?;
        let threads_per_group = msl.threads_per_group;
        Ok(Arc::new(MslEmuKernel {
            kernel,
            msl,
            arg_order,
            threads_per_group,
        }))
    }

    fn synchronize(&self) -> Result<(), RuntimeError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::faulting_line;

    #[test]
    fn the_faulting_msl_line_is_read_from_the_emulator_message() {
        let message = "out-of-bounds access to buffer argument 0 (device const float*) at byte offset 400; \
                       the buffer has 400 bytes at line 16 of copy.metal";
        assert_eq!(faulting_line(message), Some(16));
        assert_eq!(faulting_line("a wild pointer"), None);
    }
}
