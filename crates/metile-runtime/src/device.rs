//! The device interface every backend implements, and the choice of backend.
//!
//! A backend compiles a specialised Tile IR function once (`Device::compile`) and
//! launches the result many times; launches are synchronous on the CPU backends and
//! asynchronous on GPUs, where `Device::synchronize` waits for them.

use crate::error::RuntimeError;
use crate::shared_memory::SharedMemory;
use metile_compiler::launch_plan::Repack;
use metile_interp::KernelArg;
use metile_ir::Function;
use std::sync::Arc;

/// Per-specialisation choices that are not part of the Tile IR.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CompileOptions {
    /// Simdgroups per threadgroup; `None` lets the backend choose.
    pub num_sgs: Option<u32>,
    /// The GEMM passes switched on (all by default).
    pub passes: metile_compiler::Passes,
    /// The Apple GPU family to compile for (the `arch` launch option): the
    /// msl-emu and metal backends compile for it (Apple7 when `None`), the
    /// cpu backend has no use for it, the cuda backend refuses it.
    pub apple_arch: Option<metile_compiler::AppleArch>,
}

/// A kernel emitted ahead of time (an [`crate::aot`] artifact), for a device
/// to load without the Tile IR it came from.
#[derive(Clone, Debug)]
pub enum Prebuilt {
    /// MSL, for msl-emu and metal.
    Msl(metile_compiler::MslKernel),
    /// CUDA C++, for cuda; with the cubin NVRTC made of it, where the artifact has one.
    Cuda {
        kernel: metile_compiler::CudaKernel,
        cubin: Option<Vec<u8>>,
    },
}

/// A kernel ready to launch on one device.
pub trait CompiledKernel: Send + Sync {
    /// Runs the kernel over `grid` program instances.
    ///
    /// # Safety
    /// Buffer arguments must point to live allocations of the stated length that
    /// no one else mutates during the launch.
    unsafe fn launch(&self, args: &[KernelArg], grid: [u32; 3]) -> Result<(), RuntimeError>;

    /// The repack step the compiler planned for this kernel
    /// (`metile_compiler::launch_plan::plan_repack`), which a launch plan
    /// puts on the kernel's steps; none on targets without tensor maps.
    fn repack(&self) -> Option<&Repack> {
        None
    }

    /// Runs a kernel step with a repack step: for each of its operands the
    /// launch's conditions decide whether it is copied into aligned rows
    /// before the kernel runs, which then reads the copies. A target without
    /// tensor maps skips the copies.
    ///
    /// # Safety
    /// As [`CompiledKernel::launch`].
    unsafe fn launch_repacking(
        &self,
        repack: &Repack,
        args: &[KernelArg],
        grid: [u32; 3],
    ) -> Result<(), RuntimeError> {
        let _ = repack;
        // SAFETY: forwarded from the caller's contract.
        unsafe { self.launch(args, grid) }
    }

    /// The largest grid, per axis, this kernel can be launched over on its
    /// target. Program ids are i32, so no axis exceeds 2^31 - 1 anywhere.
    fn max_grid(&self) -> [u32; 3] {
        [metile_compiler::target::MAX_PROGRAM_ID_EXTENT; 3]
    }

    /// What one threadgroup of the kernel uses, as far as the backend knows.
    fn resources(&self) -> KernelResources {
        KernelResources::default()
    }
}

/// A compiled kernel's use of the hardware (`kernel.warmup(...)` reports it,
/// as Triton's compiled kernels report `n_regs` and `metadata.shared`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelResources {
    /// Registers per thread, where the driver reports them (cuda).
    pub registers: Option<u32>,
    /// Thread-local memory per thread in bytes (register spills and local
    /// arrays), where the driver reports it (cuda).
    pub local_bytes: Option<u32>,
    /// Threadgroup (shared) memory per threadgroup in bytes.
    pub shared_bytes: Option<usize>,
    /// Threads per threadgroup.
    pub threads_per_group: Option<u32>,
}

/// Memory of its own on a device whose kernels cannot read host memory (CUDA):
/// on such a device every buffer argument of a launch is a device address.
pub trait DeviceMemory: Send + Sync {
    /// A new allocation of `bytes` bytes, freed when the last reference goes.
    fn alloc(&self, bytes: usize) -> Result<Arc<dyn DeviceAllocation>, RuntimeError>;
    /// Copies host bytes to device memory, ordered after earlier launches.
    ///
    /// # Safety
    /// `src` must be readable for `bytes` bytes and `dst` a device allocation of
    /// at least `bytes` bytes.
    unsafe fn upload(&self, dst: u64, src: *const u8, bytes: usize) -> Result<(), RuntimeError>;
    /// Copies device memory to the host once earlier launches have finished.
    ///
    /// # Safety
    /// `dst` must be writable for `bytes` bytes and `src` a device allocation of
    /// at least `bytes` bytes.
    unsafe fn download(&self, src: u64, dst: *mut u8, bytes: usize) -> Result<(), RuntimeError>;
    /// The ordinal of the device (of this backend) that owns the memory at
    /// `address`, where the backend can tell; `None` for memory every device
    /// reads alike (managed memory) or that it does not know.
    fn owner_of(&self, address: u64) -> Option<u32> {
        let _ = address;
        None
    }
    /// Marks the point the calling thread's launch stream ([`crate::stream`])
    /// has reached: work enqueued on any stream after a [`Fence::wait`] runs
    /// after the work enqueued before the mark. `None` where every launch runs
    /// in the order it was enqueued.
    fn fence(&self) -> Result<Option<Box<dyn Fence>>, RuntimeError> {
        Ok(None)
    }
}

/// A point in one stream's work (see [`DeviceMemory::fence`]).
pub trait Fence: Send + Sync {
    /// Makes the calling thread's launch stream wait for the marked work.
    fn wait(&self) -> Result<(), RuntimeError>;
}

/// A device allocation (see [`DeviceMemory`]).
pub trait DeviceAllocation: Send + Sync {
    /// Its device address.
    fn ptr(&self) -> u64;
    fn bytes(&self) -> usize;
}

/// Checks a launch grid against a kernel's limits: the one grid check every
/// backend relies on. A 0 extent is allowed: the grid is empty, and its caller
/// launches nothing ([`grid_is_empty`]); the other extents are still checked.
pub fn check_grid(grid: [u32; 3], kernel: &dyn CompiledKernel, device: &str) -> Result<(), RuntimeError> {
    let max = kernel.max_grid();
    for (axis, (&g, &m)) in grid.iter().zip(&max).enumerate() {
        if g > m {
            return Err(RuntimeError::InvalidLaunch(format!(
                "grid {grid:?}: extent {g} along axis {axis} is out of range; on the {device} device this \
                 kernel's grid extents must be between 1 and {max:?} (per axis), or 0 for an empty launch"
            )));
        }
    }
    Ok(())
}

/// Whether `grid` has no programs (an extent is 0): such a launch runs nothing.
pub fn grid_is_empty(grid: [u32; 3]) -> bool {
    grid.contains(&0)
}

pub trait Device: Send + Sync {
    /// The name `METILE_DEVICE` uses for this backend.
    fn name(&self) -> &'static str;
    /// The hardware behind the backend (GPU model, compute capability, ...), for
    /// cache keys and reports; the backend's name where there is nothing more to say.
    fn model(&self) -> String {
        self.name().to_string()
    }
    fn compile(
        &self,
        func: Arc<Function>,
        options: &CompileOptions,
    ) -> Result<Arc<dyn CompiledKernel>, RuntimeError>;
    /// Loads a kernel emitted ahead of time; refused by backends that do not run
    /// its language (the cpu backend interprets Tile IR, which an artifact does not hold).
    fn load_prebuilt(&self, kernel: Prebuilt) -> Result<Arc<dyn CompiledKernel>, RuntimeError> {
        let language = match kernel {
            Prebuilt::Msl(_) => "MSL (for the msl-emu and metal devices)",
            Prebuilt::Cuda { .. } => "CUDA C++ (for the cuda device)",
        };
        Err(RuntimeError::Unavailable(format!(
            "the {} device cannot run an ahead-of-time artifact of {language}",
            self.name()
        )))
    }
    /// The compiler target a launch with `options` compiles for; `None` for
    /// backends that run Tile IR themselves (cpu).
    fn compile_target(&self, options: &CompileOptions) -> Option<metile_compiler::Target> {
        let _ = options;
        None
    }
    /// Waits until every launched kernel has finished.
    fn synchronize(&self) -> Result<(), RuntimeError>;
    /// Times the device work `run` launches with the device's own clock (GPU
    /// events or command-buffer timestamps), in milliseconds, waiting for it to
    /// finish. `None` where the device has no clock of its own: callers then time
    /// `run` followed by [`Device::synchronize`] with the wall clock.
    fn time_ms(
        &self,
        run: &mut dyn FnMut() -> Result<(), RuntimeError>,
    ) -> Option<Result<f64, RuntimeError>> {
        let _ = run;
        None
    }
    /// The device's own memory, where kernels cannot read host memory; `None`
    /// where they use host (or unified) memory in place.
    fn memory(&self) -> Option<&dyn DeviceMemory> {
        None
    }
    /// Which device of its backend this is (the GPU index of `cuda:N`); part of
    /// every specialisation key, since a kernel is loaded into one GPU's context.
    fn ordinal(&self) -> u32 {
        0
    }
    /// How many devices of this backend the process sees (GPUs, for cuda). Where
    /// there are several, a launch goes to the one its arguments live on.
    fn count(&self) -> u32 {
        1
    }
    /// The device of this backend numbered `ordinal`.
    fn sibling(&self, ordinal: u32) -> Result<Arc<dyn Device>, RuntimeError> {
        Err(RuntimeError::Unavailable(format!(
            "{} has no device {ordinal}",
            self.name()
        )))
    }
    /// Memory of `bytes` bytes that the host and this device both address (see
    /// `shared_memory`), for `metile.Buffer`; `None` where the backend has none
    /// and a Buffer is plain host memory.
    fn allocate_shared(&self, bytes: usize) -> Option<Result<Arc<dyn SharedMemory>, RuntimeError>> {
        let _ = bytes;
        None
    }
}

/// Every backend name, in the order `METILE_DEVICE` documents them.
pub const DEVICE_NAMES: [&str; 4] = ["cpu", "msl-emu", "metal", "cuda"];

/// Tools that the host found and the runtime cannot look for itself.
#[derive(Clone, Debug, Default)]
pub struct HostTools {
    /// Compilers msl-emu tries after the system's clang++ (metile-py: the
    /// `zig` of the `ziglang` Python package).
    pub emu_compilers: Vec<crate::msl_emu::CompilerCommand>,
}

/// Creates the backend called `name`, or says why it is unavailable here.
pub fn open_device(name: &str) -> Result<Arc<dyn Device>, RuntimeError> {
    open_device_with(name, &HostTools::default())
}

/// [`open_device`], with tools the host found.
pub fn open_device_with(name: &str, tools: &HostTools) -> Result<Arc<dyn Device>, RuntimeError> {
    match name {
        "cpu" => Ok(Arc::new(crate::cpu::CpuDevice)),
        "msl-emu" => Ok(Arc::new(
            crate::msl_emu_device::MslEmuDevice::open_with_fallbacks(&tools.emu_compilers)?,
        )),
        #[cfg(any(target_os = "macos", metile_metal_check))]
        "metal" => Ok(Arc::new(crate::metal::MetalDevice::open()?)),
        #[cfg(not(any(target_os = "macos", metile_metal_check)))]
        "metal" => Err(RuntimeError::Unavailable(
            "the metal backend runs on macOS only; available here: cpu, msl-emu, cuda".to_string(),
        )),
        "cuda" => Ok(crate::cuda::CudaDevice::open()?),
        gpu if gpu.strip_prefix("cuda:").is_some() => {
            let ordinal = gpu["cuda:".len()..].parse::<u32>().map_err(|_| {
                RuntimeError::Unavailable(format!(
                    "'{gpu}' names no GPU: write cuda:N with N the GPU's index (cuda:0, cuda:1, ...)"
                ))
            })?;
            Ok(crate::cuda::CudaDevice::open_ordinal(ordinal)?)
        }
        other => Err(RuntimeError::Unavailable(format!(
            "unknown device '{other}'; choose one of {}",
            DEVICE_NAMES.join(", ")
        ))),
    }
}

/// The default device: `METILE_DEVICE` if set, else the best one present
/// (metal where a Metal device exists, then cuda where an NVIDIA driver, NVRTC
/// and a GPU are, else cpu).
pub fn default_device_name() -> String {
    match std::env::var("METILE_DEVICE") {
        Ok(name) if !name.trim().is_empty() => name.trim().to_string(),
        _ if metal_present() => "metal".to_string(),
        _ if crate::cuda::available() => "cuda".to_string(),
        _ => "cpu".to_string(),
    }
}

#[cfg(any(target_os = "macos", metile_metal_check))]
fn metal_present() -> bool {
    crate::metal::device_present()
}

#[cfg(not(any(target_os = "macos", metile_metal_check)))]
fn metal_present() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel that only has limits.
    struct Limits([u32; 3]);

    impl CompiledKernel for Limits {
        unsafe fn launch(&self, _args: &[KernelArg], _grid: [u32; 3]) -> Result<(), RuntimeError> {
            Ok(())
        }

        fn max_grid(&self) -> [u32; 3] {
            self.0
        }
    }

    #[test]
    fn a_zero_extent_is_an_empty_grid_whose_other_extents_are_still_checked() {
        let kernel = Limits([100, 10, 10]);
        for grid in [[0, 1, 1], [5, 0, 1], [0, 0, 0], [100, 10, 0]] {
            assert!(grid_is_empty(grid));
            assert!(check_grid(grid, &kernel, "test").is_ok());
        }
        assert!(!grid_is_empty([1, 1, 1]));
        let err = check_grid([0, 11, 1], &kernel, "test").unwrap_err().to_string();
        assert!(err.contains("extent 11 along axis 1 is out of range"), "{err}");
        assert!(err.contains("or 0 for an empty launch"), "{err}");
    }
}
