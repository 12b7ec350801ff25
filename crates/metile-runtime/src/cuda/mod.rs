//! The cuda backend: Tile IR → GPU IR for the detected GPU's [`Target`] → CUDA
//! C++ (`metile_compiler::compile_cuda`) → a cubin from NVRTC (cached in memory
//! and on disk) → launches in the device's primary context (the one torch and
//! CuPy use) on the caller's launch stream ([`crate::stream`]: the framework's
//! current stream when a launch takes its tensors), else on the legacy default
//! stream, so kernels are ordered with the framework's work without extra
//! synchronisation.
//!
//! Buffer arguments are device addresses (metile-py stages host arrays through
//! [`DeviceMemory`]). A fault on the GPU (an illegal address, say) is sticky:
//! the context refuses all later work, and the process must restart to use the
//! GPU again; the error says so and names the last kernel launched.

mod driver;
mod memory;
mod nvrtc;
mod prebuilt;
mod repack;
mod tensor_map;

pub use driver::load_libraries;
pub use prebuilt::{compile_cubin, emit};

use crate::debug::debug_enabled;
use crate::device::{CompileOptions, CompiledKernel, Device, DeviceMemory, KernelResources, Prebuilt};
use crate::disk_cache::{cache_key, DiskCache};
use crate::error::RuntimeError;
use cudarc::driver::sys as cu;
use driver::{check, describe, is_sticky};
use metile_compiler::launch_plan::Repack;
use metile_compiler::{CompileError, CudaKernel, CudaParam, Target};
use metile_interp::{KernelArg, ScalarValue};
use metile_ir::gpu_ir::TensorMapSpec;
use metile_ir::Function;
use repack::{Copies, Repacked, Repacker};
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The primary context of one GPU. Raw driver handles are plain pointers the
/// driver lets any thread use once the context is made current there.
struct Context {
    ctx: cu::CUcontext,
}
// SAFETY: a CUDA context may be used from any thread (each call makes it current).
unsafe impl Send for Context {}
// SAFETY: as above; the driver serialises access internally.
unsafe impl Sync for Context {}

impl Context {
    /// Makes the context current on the calling thread.
    fn bind(&self) -> Result<(), RuntimeError> {
        // SAFETY: the context was retained at open and is never released.
        check(unsafe { cu::cuCtxSetCurrent(self.ctx) }, "context activation")
    }
}

pub struct CudaDevice {
    context: Arc<Context>,
    /// The GPU's index among those the process sees (`cuda:N`).
    ordinal: u32,
    /// How many GPUs the process sees.
    count: u32,
    model: String,
    target: Target,
    nvrtc_version: (i32, i32),
    disk: DiskCache,
    /// Loaded kernels by cache key (source, architecture, NVRTC version).
    loaded: Mutex<HashMap<String, Arc<Loaded>>>,
    /// The name of the last kernel launched, for fault messages.
    last_kernel: Arc<Mutex<Arc<str>>>,
    memory: memory::CudaMemory,
    /// The operand copier, loaded with the first kernel that may need it.
    repacker: OnceLock<Result<Arc<Repacker>, String>>,
}

/// Each GPU opened (or why it could not be), by ordinal.
type Opened = HashMap<u32, Result<Arc<CudaDevice>, String>>;

/// Every GPU opened so far, by ordinal.
fn opened() -> Result<std::sync::MutexGuard<'static, Opened>, RuntimeError> {
    static DEVICES: OnceLock<Mutex<Opened>> = OnceLock::new();
    DEVICES
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .map_err(|_| RuntimeError::Device("the cuda device table is poisoned".into()))
}

/// The calling thread's launch stream ([`crate::stream`]); the null handle,
/// the legacy default stream, outside any scope.
pub(super) fn current_stream() -> cu::CUstream {
    crate::stream::launch_stream().unwrap_or(0) as usize as cu::CUstream
}

/// A loaded module and its kernel function.
struct Loaded {
    function: cu::CUfunction,
}
// SAFETY: module handles are usable from any thread with the context current.
unsafe impl Send for Loaded {}
// SAFETY: as above.
unsafe impl Sync for Loaded {}

impl CudaDevice {
    /// The process's first GPU (GPU 0 of `CUDA_VISIBLE_DEVICES`), opened once.
    pub fn open() -> Result<Arc<CudaDevice>, RuntimeError> {
        CudaDevice::open_ordinal(0)
    }

    /// GPU `ordinal` of those the process sees (`cuda:N`), opened once: one
    /// primary context per GPU, shared with torch and CuPy.
    pub fn open_ordinal(ordinal: u32) -> Result<Arc<CudaDevice>, RuntimeError> {
        opened()?
            .entry(ordinal)
            .or_insert_with(|| {
                CudaDevice::open_at(ordinal)
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .clone()
            .map_err(RuntimeError::Unavailable)
    }

    fn open_at(ordinal: u32) -> Result<CudaDevice, RuntimeError> {
        load_libraries()?;
        let unavailable = |what: &str, code| {
            RuntimeError::Unavailable(format!(
                "the cuda backend cannot start: {what} failed: {}",
                describe(code)
            ))
        };
        // SAFETY: cuInit may be called any number of times.
        let code = unsafe { cu::cuInit(0) };
        if code == cu::CUresult::CUDA_ERROR_NO_DEVICE {
            return Err(RuntimeError::Unavailable(
                "the cuda backend found the NVIDIA driver but no GPU (none is visible to this process)"
                    .into(),
            ));
        }
        if code != cu::CUresult::CUDA_SUCCESS {
            return Err(unavailable("driver initialisation", code));
        }
        let mut count = 0;
        // SAFETY: the driver writes one int.
        let code = unsafe { cu::cuDeviceGetCount(&mut count) };
        if code != cu::CUresult::CUDA_SUCCESS {
            return Err(unavailable("counting GPUs", code));
        }
        if count == 0 {
            return Err(RuntimeError::Unavailable(
                "the cuda backend found the NVIDIA driver but no GPU (none is visible to this process)"
                    .into(),
            ));
        }
        let count = count.max(0) as u32;
        if ordinal >= count {
            return Err(RuntimeError::Unavailable(format!(
                "cuda:{ordinal} does not exist: this process sees {count} GPU{} (cuda:0{}); \
                 CUDA_VISIBLE_DEVICES decides which",
                if count == 1 { "" } else { "s" },
                if count > 1 {
                    format!(" to cuda:{}", count - 1)
                } else {
                    String::new()
                }
            )));
        }
        let mut dev: cu::CUdevice = 0;
        // SAFETY: the ordinal is below the device count.
        check(
            unsafe { cu::cuDeviceGet(&mut dev, ordinal as i32) },
            "device lookup",
        )?;
        let attribute = |a: cu::CUdevice_attribute| -> Result<i32, RuntimeError> {
            let mut v = 0;
            // SAFETY: the driver writes one int for a valid device.
            check(
                unsafe { cu::cuDeviceGetAttribute(&mut v, a, dev) },
                "device query",
            )?;
            Ok(v)
        };
        let major = attribute(cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attribute(cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        let optin = attribute(cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?;
        let mut name = [0 as std::ffi::c_char; 256];
        // SAFETY: the buffer holds 256 bytes; the driver NUL-terminates.
        check(
            unsafe { cu::cuDeviceGetName(name.as_mut_ptr(), 256, dev) },
            "device name",
        )?;
        // SAFETY: NUL-terminated by the driver.
        let gpu_name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let mut ctx: cu::CUcontext = std::ptr::null_mut();
        // SAFETY: retains the device's primary context (shared with torch/CuPy).
        check(
            unsafe { cu::cuDevicePrimaryCtxRetain(&mut ctx, dev) },
            "context creation",
        )?;
        let context = Arc::new(Context { ctx });
        context.bind()?;
        let mut target = Target::nvidia(major.max(0) as u32, minor.max(0) as u32);
        // The device's own opt-in limit wins over the table (a new GPU, MIG...).
        if optin > 0 {
            target.max_threadgroup_bytes = optin as usize;
        }
        let nvrtc_version = nvrtc::version()?;
        Ok(CudaDevice {
            memory: memory::CudaMemory::new(context.clone()),
            context,
            ordinal,
            count,
            model: format!("{gpu_name} (sm_{major}{minor}, cuda:{ordinal})"),
            target,
            nvrtc_version,
            disk: DiskCache::open("cuda"),
            loaded: Mutex::new(HashMap::new()),
            last_kernel: Arc::new(Mutex::new(Arc::from("(none)"))),
            repacker: OnceLock::new(),
        })
    }

    /// The target description lowering uses for this GPU.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Loads `kernel` from `cubin` where given (an ahead-of-time artifact's),
    /// else from the cubin NVRTC makes of its source (through the disk cache).
    fn load(&self, kernel: &CudaKernel, cubin: Option<&[u8]>) -> Result<Arc<Loaded>, RuntimeError> {
        let arch = &kernel.arch;
        let version = format!("{}.{}", self.nvrtc_version.0, self.nvrtc_version.1);
        let key = match cubin {
            Some(bytes) => cache_key(&[b"cubin", bytes, kernel.kernel_name.as_bytes()]),
            None => cache_key(&[kernel.source.as_bytes(), arch.as_bytes(), version.as_bytes()]),
        };
        if let Some(l) = self.loaded.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(l);
        }
        let cubin = match cubin {
            Some(bytes) => bytes.to_vec(),
            None => self.nvrtc(kernel)?,
        };
        self.context.bind()?;
        let mut module: cu::CUmodule = std::ptr::null_mut();
        // SAFETY: `cubin` is a complete cubin image NVRTC produced.
        check(
            unsafe { cu::cuModuleLoadData(&mut module, cubin.as_ptr().cast()) },
            "module load",
        )?;
        let name = CString::new(kernel.kernel_name.as_str())
            .map_err(|_| RuntimeError::Device("kernel name with a NUL byte".into()))?;
        let mut function: cu::CUfunction = std::ptr::null_mut();
        // SAFETY: the module is loaded; the name is NUL-terminated.
        check(
            unsafe { cu::cuModuleGetFunction(&mut function, module, name.as_ptr()) },
            "kernel lookup",
        )?;
        if kernel.shared_bytes > kernel.default_shared_bytes {
            let bytes = i32::try_from(kernel.shared_bytes).unwrap_or(i32::MAX);
            // SAFETY: a valid function; the size is within the device's opt-in limit
            // (lowering refuses more).
            check(
                unsafe {
                    cu::cuFuncSetAttribute(
                        function,
                        cu::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        bytes,
                    )
                },
                "shared-memory opt-in",
            )?;
        }
        let loaded = Arc::new(Loaded { function });
        if let Ok(mut m) = self.loaded.lock() {
            m.insert(key, loaded.clone());
        }
        Ok(loaded)
    }

    /// The cubin NVRTC makes of `kernel`'s source, through the disk cache.
    fn nvrtc(&self, kernel: &CudaKernel) -> Result<Vec<u8>, RuntimeError> {
        let arch = &kernel.arch;
        let file = format!("{}.cu", kernel.kernel_name);
        match nvrtc::compile_cached(&self.disk, &kernel.source, &file, arch, self.nvrtc_version)? {
            Ok(cubin) => Ok(cubin),
            Err(failure) => Err(nvrtc_error(kernel, &failure)),
        }
    }

    fn fault(&self, code: cu::CUresult, what: &str) -> RuntimeError {
        fault_error(code, what, &self.last_kernel)
    }

    /// The device's operand copier (`repack.rs`), compiled on first use.
    fn repacker(&self) -> Result<Arc<Repacker>, RuntimeError> {
        self.repacker
            .get_or_init(|| {
                let kernel = CudaKernel {
                    arch: self.target.arch_name(),
                    source: repack::SOURCE.to_string(),
                    kernel_name: repack::KERNEL_NAME.to_string(),
                    params: Vec::new(),
                    threads_per_group: 256,
                    shared_bytes: 0,
                    default_shared_bytes: self.target.default_threadgroup_bytes,
                    buffer_alignment: 1,
                    repack_operands: false,
                    line_locs: Vec::new(),
                    prints: false,
                };
                // The device the pool keys its workspace by: this one, as
                // launches and split-K see it.
                let device: Arc<dyn Device> =
                    CudaDevice::open_ordinal(self.ordinal).map_err(|e| e.to_string())?;
                self.load(&kernel, None)
                    .map(|loaded| {
                        Arc::new(Repacker::new(
                            self.context.clone(),
                            loaded,
                            Arc::downgrade(&device),
                        ))
                    })
                    .map_err(|e| e.to_string())
            })
            .clone()
            .map_err(RuntimeError::Device)
    }
}

/// A driver failure; a sticky one names the kernel and the process state.
fn fault_error(code: cu::CUresult, what: &str, last_kernel: &Mutex<Arc<str>>) -> RuntimeError {
    if code == cu::CUresult::CUDA_ERROR_ASSERT {
        let kernel = last_kernel.lock().map(|k| k.to_string()).unwrap_or_default();
        return memory::assert_error(&format!(
            "kernel `{kernel}` (the last one launched before this {what})"
        ));
    }
    if is_sticky(code) {
        let kernel = last_kernel.lock().map(|k| k.to_string()).unwrap_or_default();
        RuntimeError::Device(format!(
            "the GPU faulted running kernel `{kernel}` (the last one launched before this {what}): {}. \
             The CUDA context is now unusable: every later GPU call in this process fails; restart the \
             process to use the GPU again",
            describe(code)
        ))
    } else {
        RuntimeError::Device(format!("CUDA {what} failed: {}", describe(code)))
    }
}

/// NVRTC's refusal of a kernel's source, at the kernel line it blames.
fn nvrtc_error(kernel: &CudaKernel, failure: &nvrtc::NvrtcFailure) -> RuntimeError {
    let loc = failure.line.and_then(|l| kernel.loc_of_line(l)).cloned();
    let at = failure
        .line
        .map(|l| format!(" (CUDA line {l})"))
        .unwrap_or_default();
    RuntimeError::Compile {
        message: format!(
            "NVRTC cannot compile the CUDA C++ of `{}`{at} for {}:\n{}",
            kernel.kernel_name, kernel.arch, failure.log
        ),
        loc,
    }
}

fn compile_error(e: CompileError) -> RuntimeError {
    RuntimeError::Compile {
        message: format!("cannot compile `{}` for NVIDIA GPUs: {}", e.op, e.reason),
        loc: (e.loc.line != 0).then_some(e.loc),
    }
}

struct CudaLaunchable {
    context: Arc<Context>,
    loaded: Arc<Loaded>,
    name: Arc<str>,
    params: Vec<CudaParam>,
    threads: u32,
    shared_bytes: u32,
    alignment: usize,
    last_kernel: Arc<Mutex<Arc<str>>>,
    grid_limits: [u32; 3],
    /// The repack step the compiler planned for the kernel, which launch
    /// plans put on its steps.
    repack: Option<Repack>,
    /// Runs repack steps: loaded where the kernel has one.
    repacker: Option<Arc<Repacker>>,
    /// `METILE_DEBUG=repack`: the first launch that copies operands says so
    /// (set at compile time; cleared once said).
    report_repack: AtomicBool,
    /// The kernel prints: each launch is waited for and stdout flushed.
    prints: bool,
}

extern "C" {
    /// C's `fflush`; with a null stream it flushes every output stream,
    /// `printf`'s buffered lines from the GPU included.
    fn fflush(stream: *mut c_void) -> std::ffi::c_int;
}

/// A scalar's bits, low bytes first, as the kernel parameter reads them.
fn scalar_bits(s: &ScalarValue) -> u64 {
    s.bits()
}

/// A launch's tensor maps, in parameter order, passed by value from storage
/// that outlives the launch call.
type Maps = Vec<cu::CUtensorMap>;
/// Each map's spec and whether it could be built (the kernel's flag).
type Built = Vec<(TensorMapSpec, bool)>;

impl CudaLaunchable {
    /// The launch's tensor maps; under a repack step, where the hardware
    /// refuses a candidate's matrix only for its alignment and a copy pays,
    /// the map is of a copy in aligned rows, enqueued here (its workspace
    /// returned, to hold until the kernel is enqueued).
    /// Nothing allocates for a kernel without maps.
    ///
    /// # Safety
    /// Buffer arguments must be live device allocations of their stated length.
    unsafe fn tensor_maps(
        &self,
        args: &[KernelArg],
        grid: [u32; 3],
        repack: Option<&Repack>,
    ) -> Result<(Maps, Built, Option<Repacked>), RuntimeError> {
        let mut maps = Maps::new();
        let mut built = Built::new();
        let mut copies = Copies::default();
        let mut to_copy: Vec<(usize, usize)> = Vec::new();
        let candidates = repack.map_or(&[][..], |r| r.operands.as_slice());
        for p in &self.params {
            let CudaParam::TensorMap(spec) = p else { continue };
            let matrix = tensor_map::matrix(spec, args);
            let map = matrix.and_then(|m| {
                let depth = if spec.stacked {
                    Some(tensor_map::stacked_depth(spec, &m, args)?)
                } else {
                    None
                };
                tensor_map::encode_matrix(spec, &m, depth)
            });
            // `Copies::add` decides, a map of the operand itself included (rows off 32-byte sectors).
            if let (Some(m), Some(_)) = (matrix, &self.repacker) {
                let slot = maps.len();
                let candidate = candidates.iter().any(|o| o.map == slot && o.spec == *spec);
                if candidate && tensor_map::within_buffer(spec, &m, args) {
                    if let Some(copy) = copies.add(spec, &m, grid) {
                        to_copy.push((slot, copy));
                    }
                }
            }
            built.push((*spec, map.is_some()));
            maps.push(map.unwrap_or(cu::CUtensorMap { opaque: [0; 16] }));
        }
        let Some(repacker) = self.repacker.as_ref().filter(|_| !copies.is_empty()) else {
            return Ok((maps, built, None));
        };
        // SAFETY: the copies' sources are buffer arguments (the caller's promise).
        let Some(repacked) = (unsafe { repacker.run(&copies)? }) else {
            return Ok((maps, built, None));
        };
        let report = self.report_repack.swap(false, Ordering::Relaxed);
        for (slot, copy) in to_copy {
            let (spec, to) = (built[slot].0, repacked.matrices[copy]);
            if let Some(map) = tensor_map::encode_matrix(&spec, &to, None) {
                maps[slot] = map;
                built[slot].1 = true;
            }
            if report {
                let from = copies.source(copy);
                eprintln!(
                    "// {}: argument {} ({} x {} {}, rows {} bytes apart) copied into rows {} bytes apart \
                     for its tensor copies",
                    self.name, spec.buffer, from.rows, from.cols, spec.dtype, from.pitch, to.pitch
                );
            }
        }
        Ok((maps, built, Some(repacked)))
    }

    /// Launches the kernel, after the copies of `repack`'s operands that this
    /// launch calls for.
    ///
    /// # Safety
    /// As [`CompiledKernel::launch`].
    unsafe fn launch_step(
        &self,
        repack: Option<&Repack>,
        args: &[KernelArg],
        grid: [u32; 3],
    ) -> Result<(), RuntimeError> {
        let mut values: Vec<u64> = Vec::with_capacity(self.params.len());
        // SAFETY: the caller's promise covers the buffers the copies read.
        let (mut maps, built, repacked) = unsafe { self.tensor_maps(args, grid, repack)? };
        for p in &self.params {
            let (index, is_buffer) = match p {
                CudaParam::Buffer { tile_param_index, .. } => (*tile_param_index, true),
                CudaParam::Scalar { tile_param_index, .. } => (*tile_param_index, false),
                CudaParam::TensorMap(_) => {
                    values.push(0);
                    continue;
                }
                CudaParam::MinusOne => {
                    values.push(u64::from((-1i32) as u32));
                    continue;
                }
                CudaParam::TensorMapReady(spec) => {
                    values.push(u64::from(built.iter().any(|(s, ok)| s == spec && *ok)));
                    continue;
                }
            };
            let value = match (args.get(index), is_buffer) {
                (Some(KernelArg::Buffer { ptr, .. }), true) => {
                    let address = *ptr as u64;
                    if address % self.alignment as u64 != 0 {
                        return Err(RuntimeError::BadArguments(format!(
                            "argument {index} of `{}` starts at device address {address:#x}, which is not \
                             {}-byte aligned as the kernel's vector accesses need; pass a tensor that starts \
                             its allocation (e.g. .clone() a sliced view)",
                            self.name, self.alignment
                        )));
                    }
                    address
                }
                (Some(KernelArg::Scalar(s)), false) => scalar_bits(s),
                _ => {
                    return Err(RuntimeError::BadArguments(format!(
                        "`{}` needs a {} for argument {index}",
                        self.name,
                        if is_buffer { "buffer" } else { "scalar" }
                    )))
                }
            };
            values.push(value);
        }
        let mut next_map = maps.iter_mut();
        let mut pointers: Vec<*mut c_void> = values
            .iter_mut()
            .zip(&self.params)
            .map(|(v, p)| {
                let map = matches!(p, CudaParam::TensorMap(_))
                    .then(|| next_map.next())
                    .flatten();
                match map {
                    Some(map) => (map as *mut cu::CUtensorMap).cast(),
                    None => (v as *mut u64).cast(),
                }
            })
            .collect();
        self.context.bind()?;
        if let Ok(mut last) = self.last_kernel.lock() {
            if !Arc::ptr_eq(&last, &self.name) {
                *last = self.name.clone();
            }
        }
        // SAFETY: every parameter slot points at a live u64 holding the argument's
        // bits, or at a live 128-byte tensor map (the driver reads each
        // parameter's size from the kernel's layout); buffer addresses are
        // device allocations the caller keeps alive.
        let code = unsafe {
            cu::cuLaunchKernel(
                self.loaded.function,
                grid[0],
                grid[1],
                grid[2],
                self.threads,
                1,
                1,
                self.shared_bytes,
                current_stream(),
                pointers.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        // The copies' workspace goes back to the pool now that the kernel
        // reading it is enqueued.
        drop(repacked);
        if code != cu::CUresult::CUDA_SUCCESS {
            return Err(fault_error(code, "launch", &self.last_kernel));
        }
        if self.prints {
            // SAFETY: the context is bound; the driver writes the kernel's
            // printf lines to stdout when it finishes.
            let code = unsafe { cu::cuCtxSynchronize() };
            if code != cu::CUresult::CUDA_SUCCESS {
                return Err(fault_error(code, "launch", &self.last_kernel));
            }
            // SAFETY: flushing every C output stream has no preconditions.
            unsafe { fflush(std::ptr::null_mut()) };
        }
        Ok(())
    }
}

impl CompiledKernel for CudaLaunchable {
    unsafe fn launch(&self, args: &[KernelArg], grid: [u32; 3]) -> Result<(), RuntimeError> {
        // SAFETY: forwarded from the caller's contract.
        unsafe { self.launch_step(None, args, grid) }
    }

    fn repack(&self) -> Option<&Repack> {
        self.repack.as_ref()
    }

    unsafe fn launch_repacking(
        &self,
        repack: &Repack,
        args: &[KernelArg],
        grid: [u32; 3],
    ) -> Result<(), RuntimeError> {
        // SAFETY: forwarded from the caller's contract.
        unsafe { self.launch_step(Some(repack), args, grid) }
    }

    fn max_grid(&self) -> [u32; 3] {
        self.grid_limits
    }

    fn resources(&self) -> KernelResources {
        use cu::CUfunction_attribute::*;
        let attribute = |which| -> Option<u32> {
            let mut value: std::ffi::c_int = 0;
            self.context.bind().ok()?;
            // SAFETY: the function is loaded in the bound context; the driver
            // writes one int.
            let code = unsafe { cu::cuFuncGetAttribute(&mut value, which, self.loaded.function) };
            (code == cu::CUresult::CUDA_SUCCESS)
                .then(|| u32::try_from(value).ok())
                .flatten()
        };
        let static_shared = attribute(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES).unwrap_or(0);
        KernelResources {
            registers: attribute(CU_FUNC_ATTRIBUTE_NUM_REGS),
            local_bytes: attribute(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES),
            shared_bytes: Some(self.shared_bytes as usize + static_shared as usize),
            threads_per_group: Some(self.threads),
        }
    }
}

impl Device for CudaDevice {
    fn compile_target(&self, _options: &CompileOptions) -> Option<metile_compiler::Target> {
        Some(self.target.clone())
    }

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn model(&self) -> String {
        self.model.clone()
    }

    fn compile(
        &self,
        func: Arc<Function>,
        options: &CompileOptions,
    ) -> Result<Arc<dyn CompiledKernel>, RuntimeError> {
        if let Some(arch) = options.apple_arch {
            return Err(RuntimeError::InvalidLaunch(format!(
                "the launch option arch='{}' selects an Apple GPU family, for the msl-emu and metal devices; \
                 the cuda device compiles for its own GPU ({})",
                arch.name(),
                self.target.arch_name()
            )));
        }
        let kernel = emit(&func, options, &self.target)?;
        self.launchable(kernel, None)
    }

    fn load_prebuilt(&self, kernel: Prebuilt) -> Result<Arc<dyn CompiledKernel>, RuntimeError> {
        match kernel {
            Prebuilt::Cuda { kernel, cubin } => {
                self.check_prebuilt(&kernel)?;
                self.launchable(kernel, cubin.as_deref())
            }
            Prebuilt::Msl(_) => Err(RuntimeError::Unavailable(
                "the cuda device runs CUDA C++; this artifact holds MSL (for the msl-emu and metal devices)"
                    .into(),
            )),
        }
    }

    /// Waits for the work of every GPU opened: a launch goes to the GPU its
    /// tensors live on, which need not be this one.
    fn synchronize(&self) -> Result<(), RuntimeError> {
        let devices: Vec<Arc<CudaDevice>> = opened()?.values().filter_map(|d| d.clone().ok()).collect();
        for device in devices.iter().map(Arc::as_ref).chain(std::iter::once(self)) {
            device.context.bind()?;
            // SAFETY: waits for the current context's work.
            let code = unsafe { cu::cuCtxSynchronize() };
            if code != cu::CUresult::CUDA_SUCCESS {
                return Err(device.fault(code, "synchronisation"));
            }
        }
        Ok(())
    }

    fn time_ms(
        &self,
        run: &mut dyn FnMut() -> Result<(), RuntimeError>,
    ) -> Option<Result<f64, RuntimeError>> {
        Some(self.time_with_events(run))
    }

    fn memory(&self) -> Option<&dyn DeviceMemory> {
        Some(&self.memory)
    }

    fn ordinal(&self) -> u32 {
        self.ordinal
    }

    fn count(&self) -> u32 {
        self.count
    }

    fn sibling(&self, ordinal: u32) -> Result<Arc<dyn Device>, RuntimeError> {
        Ok(CudaDevice::open_ordinal(ordinal)?)
    }
}

impl CudaDevice {
    fn time_with_events(
        &self,
        run: &mut dyn FnMut() -> Result<(), RuntimeError>,
    ) -> Result<f64, RuntimeError> {
        self.context.bind()?;
        let event = || -> Result<cu::CUevent, RuntimeError> {
            let mut e: cu::CUevent = std::ptr::null_mut();
            // SAFETY: the driver writes one event handle.
            check(unsafe { cu::cuEventCreate(&mut e, 0) }, "event creation")?;
            Ok(e)
        };
        let (start, end) = (event()?, event()?);
        // The launches `run` makes go on the launch stream current now (or on
        // their framework's, which a caller timing framework work makes current).
        let stream = current_stream();
        let timed = (|| {
            // SAFETY: valid events recorded on a stream of this context.
            check(unsafe { cu::cuEventRecord(start, stream) }, "event record")?;
            run()?;
            self.context.bind()?;
            // SAFETY: as above.
            check(unsafe { cu::cuEventRecord(end, stream) }, "event record")?;
            // SAFETY: waits for the recorded event.
            let code = unsafe { cu::cuEventSynchronize(end) };
            if code != cu::CUresult::CUDA_SUCCESS {
                return Err(self.fault(code, "timing"));
            }
            let mut ms = 0f32;
            // SAFETY: both events have completed.
            check(
                unsafe { driver::event_elapsed_ms(&mut ms, start, end) }?,
                "event timing",
            )?;
            Ok(f64::from(ms))
        })();
        // SAFETY: the events are no longer used.
        unsafe {
            cu::cuEventDestroy_v2(start);
            cu::cuEventDestroy_v2(end);
        }
        timed
    }
}

/// Whether a cuda device can be opened here (driver, NVRTC and a GPU).
pub fn available() -> bool {
    load_libraries().is_ok() && CudaDevice::open().is_ok()
}
