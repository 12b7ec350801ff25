//! The msl-emu backend: Tile IR → GPU IR → MSL (the compiler's Apple path), then
//! the emitted MSL, byte for byte, compiled by clang++ against the Metal shim and
//! run on the CPU (see `msl_emu`). It proves the MSL meTile would ship; what it
//! shares with the metal backend lives in `msl_launch`.

use crate::device::{CompileOptions, CompiledKernel, Device, KernelResources, Prebuilt};
use crate::emu_profiling;
use crate::error::RuntimeError;
use crate::msl_emu::{
    Builtin, CompilerCommand, EmuCompiler, EmuError, EmuKernel, EntryParam, EntrySpec, LaunchArg,
    MAX_THREADGROUP_MEMORY_BYTES, MAX_THREADS_PER_GROUP,
};
use crate::msl_launch::{emit, fault_loc, msl_compile_failure, ArgBinding, BoundArg, ThreadgroupLimits};
use crate::shared_memory::{HostPages, SharedMemory};
use metile_compiler::{MslBuiltin, MslKernel, MslParam};
use metile_interp::KernelArg;
use metile_ir::Function;
use std::sync::{Arc, Mutex};

/// The threadgroup limits of the emulator: Metal's.
pub const EMU_LIMITS: ThreadgroupLimits = ThreadgroupLimits {
    max_threads: MAX_THREADS_PER_GROUP,
    max_memory_bytes: MAX_THREADGROUP_MEMORY_BYTES,
};

pub struct MslEmuDevice {
    compiler: EmuCompiler,
}

impl MslEmuDevice {
    pub fn open() -> Result<MslEmuDevice, RuntimeError> {
        Self::open_with_fallbacks(&[])
    }

    /// Opens the device with the first compiler `EmuCompiler::find_with_fallbacks` finds.
    pub fn open_with_fallbacks(fallbacks: &[CompilerCommand]) -> Result<MslEmuDevice, RuntimeError> {
        let compiler = EmuCompiler::find_with_fallbacks(fallbacks).map_err(|e| {
            RuntimeError::Unavailable(format!("the msl-emu backend is unavailable here: {e}"))
        })?;
        Ok(MslEmuDevice { compiler })
    }

    /// The compiler kernels are built with.
    pub fn compiler(&self) -> &EmuCompiler {
        &self.compiler
    }
}

struct MslEmuKernel {
    kernel: EmuKernel,
    /// The emitted kernel, kept to map a faulting MSL line back to the kernel source.
    msl: MslKernel,
    binding: ArgBinding,
    /// What the profiled build is compiled from and with, when profiling asks for it.
    entry: EntrySpec,
    compiler: EmuCompiler,
    profiled: Mutex<Option<Arc<EmuKernel>>>,
}

impl MslEmuKernel {
    /// The profiled build of this kernel (`emu_profiling`), compiled on first use.
    fn profiled(&self) -> Result<Arc<EmuKernel>, RuntimeError> {
        let mut slot = self.profiled.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(kernel) = slot.as_ref() {
            return Ok(kernel.clone());
        }
        let kernel = Arc::new(
            self.compiler
                .clone()
                .with_profiling(true)
                .compile(&self.msl.source, &self.entry)
                .map_err(|e| emu_error(e, &self.msl))?,
        );
        *slot = Some(kernel.clone());
        Ok(kernel)
    }

    /// # Safety
    /// As `EmuKernel::launch`.
    unsafe fn launch_emulated(&self, args: &[LaunchArg], grid: [u32; 3]) -> Result<(), RuntimeError> {
        let threads = self.msl.threads_per_group;
        if !emu_profiling::is_recording() {
            // SAFETY: forwarded from the caller.
            return unsafe { self.kernel.launch(args, grid, threads) }.map_err(|e| emu_error(e, &self.msl));
        }
        let kernel = self.profiled()?;
        // SAFETY: forwarded from the caller.
        let counts =
            unsafe { kernel.launch_profiled(args, grid, threads) }.map_err(|e| emu_error(e, &self.msl))?;
        let site_sources = counts
            .threadgroup_sites
            .iter()
            .map(|site| site.msl_line.and_then(|line| self.msl.loc_of_line(line)).cloned())
            .collect();
        emu_profiling::record(emu_profiling::LaunchProfile {
            kernel: self.msl.kernel_name.clone(),
            grid,
            threads_per_group: threads,
            threadgroup_memory_bytes: kernel.threadgroup_memory_bytes(),
            counts,
            site_sources,
        });
        Ok(())
    }
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

fn emu_error(e: EmuError, msl: &MslKernel) -> RuntimeError {
    match e {
        EmuError::Kernel { ref message, .. } if message.contains("out-of-bounds") => {
            RuntimeError::OutOfBounds {
                loc: fault_loc(message, msl),
                message: e.to_string(),
            }
        }
        EmuError::Kernel { ref message, .. } if message.contains("device_assert failed") => {
            RuntimeError::AssertionFailed {
                loc: fault_loc(message, msl),
                message: e.to_string(),
            }
        }
        EmuError::Compile { ref diagnostics, .. } => msl_compile_failure("clang", diagnostics, msl),
        EmuError::Unsupported(_) | EmuError::BadEntry(_) => RuntimeError::Compile {
            message: e.to_string(),
            loc: None,
        },
        EmuError::BadLaunch(m) => RuntimeError::BadArguments(m),
        EmuError::Interrupted => RuntimeError::Interrupted,
        other => RuntimeError::Device(other.to_string()),
    }
}

impl CompiledKernel for MslEmuKernel {
    fn max_grid(&self) -> [u32; 3] {
        metile_compiler::Target::apple().grid_limits(self.msl.threads_per_group)
    }

    fn resources(&self) -> KernelResources {
        KernelResources {
            shared_bytes: Some(self.kernel.threadgroup_memory_bytes()),
            threads_per_group: Some(self.msl.threads_per_group),
            ..KernelResources::default()
        }
    }

    unsafe fn launch(&self, args: &[KernelArg], grid: [u32; 3]) -> Result<(), RuntimeError> {
        let bound = self.binding.bind(args)?;
        // SAFETY: the caller's contract: live buffers of the stated length.
        let staging = unsafe { AlignedStaging::stage(&bound, self.msl.buffer_alignment)? };
        let launch_args: Vec<LaunchArg> = bound
            .iter()
            .enumerate()
            .map(|(i, a)| match a {
                BoundArg::Buffer { ptr, len_bytes, .. } => LaunchArg::Buffer {
                    ptr: staging.pointer(i).unwrap_or(*ptr),
                    len_bytes: *len_bytes,
                },
                BoundArg::Scalar { bytes, .. } => LaunchArg::Scalar(bytes),
            })
            .collect();
        // SAFETY: forwarded from the caller's contract (live buffers of the stated length).
        let result = unsafe { self.launch_emulated(&launch_args, grid) };
        // SAFETY: as above; the launch has finished with the copies.
        unsafe { staging.copy_back() };
        result
    }
}

/// Aligned copies of the buffers whose base address is not aligned as the
/// kernel's vector accesses assume (a numpy slice such as `a[7:]`), made for
/// one launch and copied back when the kernel may write them, as the cuda
/// backend stages numpy arrays. Buffers whose host ranges overlap share one
/// copy, so in-place kernels keep their meaning.
struct AlignedStaging {
    /// Per bound argument, its pointer into a copy.
    pointers: Vec<Option<*mut u8>>,
    copies: Vec<StagedCopy>,
}

struct StagedCopy {
    host: *mut u8,
    len: usize,
    data: Vec<u128>,
    writable: bool,
}

impl AlignedStaging {
    /// # Safety
    /// Every buffer of `bound` must be valid for reads of its length.
    unsafe fn stage(bound: &[BoundArg], alignment: usize) -> Result<AlignedStaging, RuntimeError> {
        let alignment = alignment.clamp(1, std::mem::align_of::<u128>());
        let mut staging = AlignedStaging {
            pointers: vec![None; bound.len()],
            copies: Vec::new(),
        };
        let buffers: Vec<(usize, usize, usize, bool)> = bound
            .iter()
            .enumerate()
            .filter_map(|(i, a)| match a {
                BoundArg::Buffer {
                    ptr,
                    len_bytes,
                    writable,
                    ..
                } => Some((i, *ptr as usize, *len_bytes, *writable)),
                BoundArg::Scalar { .. } => None,
            })
            .collect();
        if buffers.iter().all(|&(_, start, _, _)| start % alignment == 0) {
            return Ok(staging);
        }
        let mut order = buffers.clone();
        order.sort_by_key(|&(_, start, _, _)| start);
        let mut groups: Vec<Vec<(usize, usize, usize, bool)>> = Vec::new();
        for buffer in order {
            match groups.last_mut() {
                Some(group) if buffer.1 < group.iter().map(|b| b.1 + b.2).max().unwrap_or(0) => {
                    group.push(buffer)
                }
                _ => groups.push(vec![buffer]),
            }
        }
        for group in groups {
            let start = group[0].1;
            if group.iter().all(|&(_, s, _, _)| s % alignment == 0) {
                continue;
            }
            if let Some(&(i, s, _, _)) = group.iter().find(|&&(_, s, _, _)| (s - start) % alignment != 0) {
                let parameter = |position: usize| match &bound[position] {
                    BoundArg::Buffer { index, .. } | BoundArg::Scalar { index, .. } => *index,
                };
                return Err(RuntimeError::BadArguments(format!(
                    "arguments {} and {} overlap at addresses {} bytes apart, which cannot both be \
                     {alignment}-byte aligned as the kernel's vector accesses need",
                    parameter(group[0].0),
                    parameter(i),
                    s - start
                )));
            }
            let end = group.iter().map(|&(_, s, len, _)| s + len).max().unwrap_or(start);
            let len = end - start;
            let mut data = vec![0u128; len.div_ceil(16)];
            // SAFETY: the caller promises the buffers (hence their union) are readable.
            unsafe { std::ptr::copy_nonoverlapping(start as *const u8, data.as_mut_ptr().cast::<u8>(), len) };
            let base = data.as_mut_ptr().cast::<u8>();
            for &(i, s, _, _) in &group {
                staging.pointers[i] = Some(base.wrapping_add(s - start));
            }
            staging.copies.push(StagedCopy {
                host: start as *mut u8,
                len,
                data,
                writable: group.iter().any(|b| b.3),
            });
        }
        Ok(staging)
    }

    fn pointer(&self, argument: usize) -> Option<*mut u8> {
        self.pointers.get(argument).copied().flatten()
    }

    /// # Safety
    /// The staged buffers must still be valid for writes.
    unsafe fn copy_back(&self) {
        for copy in self.copies.iter().filter(|c| c.writable) {
            // SAFETY: the caller's promise; the copy holds `len` bytes.
            unsafe { std::ptr::copy_nonoverlapping(copy.data.as_ptr().cast::<u8>(), copy.host, copy.len) };
        }
    }
}

impl Device for MslEmuDevice {
    fn compile_target(&self, options: &CompileOptions) -> Option<metile_compiler::Target> {
        Some(options.apple_arch.unwrap_or_default().target())
    }

    fn name(&self) -> &'static str {
        "msl-emu"
    }

    fn compile(
        &self,
        func: Arc<Function>,
        options: &CompileOptions,
    ) -> Result<Arc<dyn CompiledKernel>, RuntimeError> {
        let msl = emit(&func, options, &EMU_LIMITS)?;
        self.load_msl(msl)
    }

    fn load_prebuilt(&self, kernel: Prebuilt) -> Result<Arc<dyn CompiledKernel>, RuntimeError> {
        match kernel {
            Prebuilt::Msl(msl) => {
                EMU_LIMITS.check(&msl)?;
                self.load_msl(msl)
            }
            Prebuilt::Cuda { .. } => Err(RuntimeError::Unavailable(
                "the msl-emu device runs MSL; this artifact holds CUDA C++ (for the cuda device)".into(),
            )),
        }
    }

    fn synchronize(&self) -> Result<(), RuntimeError> {
        Ok(())
    }

    /// Page-aligned host memory, as Metal's shared-storage buffers are, so
    /// `metile.Buffer` takes the same path here as on an Apple GPU.
    fn allocate_shared(&self, bytes: usize) -> Option<Result<Arc<dyn SharedMemory>, RuntimeError>> {
        Some(HostPages::zeroed(bytes).map(|m| Arc::new(m) as Arc<dyn SharedMemory>))
    }
}

impl MslEmuDevice {
    /// Compiles emitted MSL, byte for byte, with the emulator's entry wrapper.
    fn load_msl(&self, msl: MslKernel) -> Result<Arc<dyn CompiledKernel>, RuntimeError> {
        let params = msl
            .params
            .iter()
            .map(|p| match p {
                MslParam::Buffer { msl_type, .. } => EntryParam::Buffer {
                    msl_type: msl_type.clone(),
                },
                MslParam::Scalar { msl_type, .. } => EntryParam::Scalar {
                    msl_type: msl_type.clone(),
                },
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
            .map_err(|e| emu_error(e, &msl))?;
        let binding = ArgBinding::new(&msl);
        Ok(Arc::new(MslEmuKernel {
            kernel,
            msl,
            binding,
            entry,
            compiler: self.compiler.clone(),
            profiled: Mutex::new(None),
        }))
    }
}
