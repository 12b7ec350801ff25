//! What every backend that runs the emitted MSL shares (msl-emu on any OS, metal
//! on macOS): emitting the kernel, checking it against the device's limits,
//! binding launch arguments to the MSL signature, and mapping MSL line numbers
//! in compiler diagnostics and faults back to the kernel's source line.
//!
//! Both backends run exactly the text [`emit`] returns, so what the emulator
//! proves about it holds for the GPU.

use crate::debug::{compile_reporting, debug_enabled};
use crate::device::CompileOptions;
use crate::error::RuntimeError;
use metile_compiler::{CompileError, Kernel, MslKernel, MslParam};
use metile_interp::{KernelArg, ScalarValue};
use metile_ir::{Function, Loc};

/// The MSL for `func`, refused if its threadgroup exceeds `limits`;
/// `METILE_DEBUG` prints the stages it names (`crate::debug`).
pub fn emit(
    func: &Function,
    options: &CompileOptions,
    limits: &ThreadgroupLimits,
) -> Result<MslKernel, RuntimeError> {
    let target = options.apple_arch.unwrap_or_default().target();
    let compiled = compile_reporting(func, options, &target).map_err(compile_error)?;
    let Kernel::Msl(kernel) = compiled.kernel else {
        return Err(compile_error(CompileError::new(
            "kernel",
            "internal compiler error: an Apple target gave no MSL",
            Loc::unknown(),
        )));
    };
    if debug_enabled("msl") {
        eprintln!("// MSL of {}\n{}", func.name, kernel.source);
    }
    limits.check(&kernel)?;
    Ok(kernel)
}

fn compile_error(e: CompileError) -> RuntimeError {
    let message = format!("cannot compile `{}` for Apple GPUs: {}", e.op, e.reason);
    RuntimeError::Compile {
        message,
        loc: (e.loc.line != 0).then_some(e.loc),
    }
}

/// The longest kernel name a source file name carries whole.
const MAX_SOURCE_STEM: usize = 64;

/// The name the MSL source gets when compiled: compiler diagnostics and debug
/// line tables name it, so it carries the kernel's name; a longer name is cut
/// and ends with a hash of the whole, as file names are limited (255 bytes).
pub fn source_file_name(kernel_name: &str) -> String {
    let stem: String = kernel_name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if stem.len() <= MAX_SOURCE_STEM {
        return format!("{stem}.metal");
    }
    let hash = crate::disk_cache::cache_key(&[kernel_name.as_bytes()]);
    format!("{}_{}.metal", &stem[..MAX_SOURCE_STEM - 17], &hash[..16])
}

/// A device's limits on one threadgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadgroupLimits {
    pub max_threads: u32,
    pub max_memory_bytes: usize,
}

impl ThreadgroupLimits {
    /// Refuses a kernel whose threadgroup is larger than the device allows.
    pub fn check(&self, msl: &MslKernel) -> Result<(), RuntimeError> {
        let memory: usize = threadgroup_lengths(msl).iter().sum();
        if memory > self.max_memory_bytes {
            return Err(RuntimeError::Compile {
                message: format!(
                    "kernel `{}` needs {memory} bytes of threadgroup memory; this device allows {}",
                    msl.kernel_name, self.max_memory_bytes
                ),
                loc: None,
            });
        }
        if msl.threads_per_group == 0 || msl.threads_per_group > self.max_threads {
            return Err(RuntimeError::Compile {
                message: format!(
                    "kernel `{}` needs {} threads per threadgroup; this device allows 1 to {}",
                    msl.kernel_name, msl.threads_per_group, self.max_threads
                ),
                loc: None,
            });
        }
        Ok(())
    }
}

/// The byte length of each `[[threadgroup(i)]]` parameter, in index order.
pub fn threadgroup_lengths(msl: &MslKernel) -> Vec<usize> {
    msl.params
        .iter()
        .filter_map(|p| match p {
            MslParam::Threadgroup { bytes, .. } => Some(*bytes),
            _ => None,
        })
        .collect()
}

/// One launch argument as the MSL signature takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BoundArg {
    /// `device T*` at `[[buffer(index)]]`.
    Buffer {
        index: usize,
        ptr: *mut u8,
        len_bytes: usize,
        writable: bool,
    },
    /// `constant T&` at `[[buffer(index)]]`: the value's bytes as the kernel reads them.
    Scalar { index: usize, bytes: Vec<u8> },
}

/// How the Tile IR arguments map onto the buffer/scalar parameters of an MSL
/// signature, in signature order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgBinding {
    kernel_name: String,
    /// `(tile parameter index, is a scalar, writable)` per buffer/scalar parameter.
    params: Vec<(usize, bool, bool)>,
}

impl ArgBinding {
    pub fn new(msl: &MslKernel) -> ArgBinding {
        let params = msl
            .params
            .iter()
            .filter_map(|p| match p {
                MslParam::Buffer {
                    msl_type,
                    tile_param_index,
                } => Some((*tile_param_index, false, !msl_type.contains("const"))),
                MslParam::Scalar { tile_param_index, .. } => Some((*tile_param_index, true, false)),
                _ => None,
            })
            .collect();
        ArgBinding {
            kernel_name: msl.kernel_name.clone(),
            params,
        }
    }

    /// The arguments of one launch, in signature order; the `[[buffer(i)]]`
    /// index of each is its Tile IR parameter index.
    pub fn bind(&self, args: &[KernelArg]) -> Result<Vec<BoundArg>, RuntimeError> {
        self.params
            .iter()
            .map(|&(index, is_scalar, writable)| {
                let arg = args.get(index).ok_or_else(|| {
                    RuntimeError::BadArguments(format!(
                        "kernel `{}` needs argument {index}, {} were given",
                        self.kernel_name,
                        args.len()
                    ))
                })?;
                match (arg, is_scalar) {
                    (KernelArg::Buffer { ptr, len, dtype }, false) => Ok(BoundArg::Buffer {
                        index,
                        ptr: *ptr,
                        len_bytes: len * dtype.size_bytes(),
                        writable,
                    }),
                    (KernelArg::Scalar(s), true) => Ok(BoundArg::Scalar {
                        index,
                        bytes: scalar_bytes(s),
                    }),
                    (_, expected_scalar) => Err(RuntimeError::BadArguments(format!(
                        "kernel `{}`: argument {index} must be {}",
                        self.kernel_name,
                        if expected_scalar { "a scalar" } else { "a buffer" }
                    ))),
                }
            })
            .collect()
    }
}

/// A scalar's bytes as the kernel's `constant T&` reads them.
pub fn scalar_bytes(s: &ScalarValue) -> Vec<u8> {
    s.to_ne_bytes()
}

/// The MSL line a fault message names ("... at line 16 of add.metal").
pub fn faulting_line(message: &str) -> Option<u32> {
    let rest = &message[message.rfind(" at line ")? + " at line ".len()..];
    rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// The MSL line of the first error in compiler diagnostics, which clang and
/// Apple's Metal compiler both print as `FILE:LINE:COLUMN: error: ...` (the
/// file is `NAME.metal`, or `program_source` for `newLibraryWithSource`).
pub fn diagnostic_line(diagnostics: &str) -> Option<u32> {
    let line = diagnostics.lines().find(|l| l.contains(": error:"))?;
    let position = &line[..line.find(": error:")?];
    let mut parts = position.rsplitn(3, ':');
    let _column = parts.next()?;
    parts.next()?.trim().parse().ok()
}

/// A compiler's rejection of emitted MSL as a compile error: names the MSL line
/// and carries the kernel source line it was emitted for, when known.
pub fn msl_compile_failure(what: &str, diagnostics: &str, msl: &MslKernel) -> RuntimeError {
    let line = diagnostic_line(diagnostics);
    let loc = line.and_then(|l| msl.loc_of_line(l)).cloned();
    let at = line.map(|l| format!(" (MSL line {l})")).unwrap_or_default();
    RuntimeError::Compile {
        message: format!(
            "{what} rejected the MSL of kernel `{}`{at}; this is a meTile bug, please report it:\n{}",
            msl.kernel_name,
            diagnostics.trim_end()
        ),
        loc,
    }
}

/// The kernel location of a fault message that names an MSL line.
pub fn fault_loc(message: &str, msl: &MslKernel) -> Loc {
    faulting_line(message)
        .and_then(|line| msl.loc_of_line(line))
        .cloned()
        .unwrap_or_else(Loc::unknown)
}

/// Milliseconds from the first start to the last end of device work intervals
/// given in seconds (Metal command buffers' GPU start/end times); `None` when
/// no interval has a valid clock reading.
pub fn span_ms(intervals: impl IntoIterator<Item = (f64, f64)>) -> Option<f64> {
    let (start, end) = intervals
        .into_iter()
        .filter(|&(start, end)| start > 0.0 && end >= start)
        .fold(None, |acc: Option<(f64, f64)>, (s, e)| match acc {
            None => Some((s, e)),
            Some((s0, e0)) => Some((s0.min(s), e0.max(e))),
        })?;
    Some((end - start) * 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;
    use metile_ir::DType;

    #[test]
    fn source_file_names_are_bounded() {
        assert_eq!(source_file_name("add_kernel"), "add_kernel.metal");
        let long = "k".repeat(300);
        let name = source_file_name(&long);
        assert_eq!(name.len(), MAX_SOURCE_STEM + ".metal".len());
        assert!(name.starts_with("kkkk"));
        let other = source_file_name(&format!("{}x", "k".repeat(299)));
        assert_ne!(name, other, "names cut alike stay apart");
    }

    fn kernel() -> MslKernel {
        MslKernel {
            source: String::new(),
            kernel_name: "scale".into(),
            params: vec![
                MslParam::Buffer {
                    msl_type: "device const float*".into(),
                    tile_param_index: 0,
                },
                MslParam::Buffer {
                    msl_type: "device float*".into(),
                    tile_param_index: 1,
                },
                MslParam::Scalar {
                    msl_type: "constant int&".into(),
                    tile_param_index: 2,
                },
                MslParam::Threadgroup {
                    msl_type: "threadgroup float*".into(),
                    bytes: 512,
                },
                MslParam::Threadgroup {
                    msl_type: "threadgroup float*".into(),
                    bytes: 64,
                },
            ],
            threads_per_group: 128,
            buffer_alignment: 16,
            language_version: Default::default(),
            line_locs: vec![
                (1, Loc::unknown()),
                (
                    10,
                    Loc {
                        file: "k.py".into(),
                        line: 7,
                    },
                ),
            ],
        }
    }

    #[test]
    fn the_faulting_msl_line_is_read_from_the_emulator_message() {
        let message = "out-of-bounds access to buffer argument 0 (device const float*) at byte offset 400; \
                       the buffer has 400 bytes at line 16 of copy.metal";
        assert_eq!(faulting_line(message), Some(16));
        assert_eq!(faulting_line("a wild pointer"), None);
        assert_eq!(fault_loc(message, &kernel()).line, 7);
    }

    #[test]
    fn diagnostics_name_the_msl_line_and_the_kernel_line() {
        let clang =
            "add.metal:12:7: warning: unused\nadd.metal:14:3: error: use of undeclared identifier 'q'\n";
        assert_eq!(diagnostic_line(clang), Some(14));
        let metal = "program_source:3:9: error: expected ';'";
        assert_eq!(diagnostic_line(metal), Some(3));
        assert_eq!(diagnostic_line("no errors here"), None);
        match msl_compile_failure("the Metal compiler", clang, &kernel()) {
            RuntimeError::Compile { message, loc } => {
                assert!(message.contains("kernel `scale` (MSL line 14)"), "{message}");
                assert!(message.contains("undeclared identifier"), "{message}");
                assert_eq!(loc.map(|l| l.line), Some(7));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn arguments_bind_in_signature_order_with_their_bytes() {
        let binding = ArgBinding::new(&kernel());
        let mut a = [0f32; 4];
        let mut b = [0f32; 8];
        let args = [
            KernelArg::Buffer {
                ptr: a.as_mut_ptr().cast(),
                len: 4,
                dtype: DType::F32,
            },
            KernelArg::Buffer {
                ptr: b.as_mut_ptr().cast(),
                len: 8,
                dtype: DType::F32,
            },
            KernelArg::Scalar(ScalarValue::I32(-2)),
        ];
        let bound = binding.bind(&args).unwrap();
        assert_eq!(
            bound,
            vec![
                BoundArg::Buffer {
                    index: 0,
                    ptr: a.as_mut_ptr().cast(),
                    len_bytes: 16,
                    writable: false
                },
                BoundArg::Buffer {
                    index: 1,
                    ptr: b.as_mut_ptr().cast(),
                    len_bytes: 32,
                    writable: true
                },
                BoundArg::Scalar {
                    index: 2,
                    bytes: (-2i32).to_ne_bytes().to_vec()
                },
            ]
        );
        let err = binding.bind(&args[..2]).unwrap_err().to_string();
        assert_eq!(err, "kernel `scale` needs argument 2, 2 were given");
        let swapped = [args[2], args[1], args[0]];
        let err = binding.bind(&swapped).unwrap_err().to_string();
        assert_eq!(err, "kernel `scale`: argument 0 must be a buffer");
    }

    #[test]
    fn threadgroup_limits_refuse_oversized_kernels() {
        let k = kernel();
        assert_eq!(threadgroup_lengths(&k), vec![512, 64]);
        let roomy = ThreadgroupLimits {
            max_threads: 1024,
            max_memory_bytes: 32768,
        };
        assert!(roomy.check(&k).is_ok());
        let small = ThreadgroupLimits {
            max_threads: 64,
            max_memory_bytes: 512,
        };
        let err = small.check(&k).unwrap_err().to_string();
        assert_eq!(
            err,
            "kernel `scale` needs 576 bytes of threadgroup memory; this device allows 512"
        );
        let err = ThreadgroupLimits {
            max_memory_bytes: 1024,
            ..small
        }
        .check(&k)
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "kernel `scale` needs 128 threads per threadgroup; this device allows 1 to 64"
        );
    }

    #[test]
    fn spans_run_from_the_first_start_to_the_last_end() {
        assert_eq!(span_ms([(1.0, 1.5), (1.25, 2.0)]), Some(1000.0));
        assert_eq!(span_ms([(0.0, 0.0)]), None);
        assert_eq!(span_ms(Vec::new()), None);
    }
}
