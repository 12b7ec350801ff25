//! A loaded emulator kernel and its launch: every threadgroup of the grid runs
//! on a rayon worker, threadgroups in parallel across cores.

use super::access_report::AccessReport;
use super::extents::{self, LaunchTags};
use super::ffi::{self, AccessRecord, LaunchDesc};
use super::profile::{self, EmuProfile, ProfileState, RawSites};
use super::stacks::with_worker_memory;
use super::trap::{self, ActiveGroup, Fault};
use super::wrapper::EntryLayout;
use super::EmuError;
use rayon::prelude::*;
use std::ffi::{c_uint, c_void};
use std::path::{Path, PathBuf};

/// Metal's limit on threads per threadgroup.
pub const MAX_THREADS_PER_GROUP: u32 = 1024;
/// Metal's limit on threadgroup memory per threadgroup (32 KiB on Apple GPUs).
pub const MAX_THREADGROUP_MEMORY_BYTES: usize = 32 * 1024;

const ERROR_CAPACITY: usize = 1024;

/// One launch argument, matching the kernel's Buffer/Scalar parameters in order.
#[derive(Clone, Copy, Debug)]
pub enum LaunchArg<'a> {
    /// Base pointer and length of a buffer the kernel may read and write.
    Buffer { ptr: *mut u8, len_bytes: usize },
    /// The bytes of a `constant T&` parameter (copied before the launch).
    Scalar(&'a [u8]),
}

/// A compiled kernel, loaded and ready to launch from any thread.
pub struct EmuKernel {
    kernel_name: String,
    layout: EntryLayout,
    scalar_bytes: Vec<usize>,
    /// Built with memory checks: arguments and threadgroup memory get tagged pointers.
    checked: bool,
    /// Built with the profile counters (`EmuCompiler::with_profiling`).
    profiled: bool,
    /// `(offset, bytes)` of each threadgroup allocation (parameters, then variables).
    threadgroup_allocations: Vec<(usize, usize)>,
    /// Threadgroup memory per group, each allocation at a multiple of 16 bytes.
    threadgroup_bytes: usize,
    /// This process's private copy of the library, the file that was loaded.
    library_path: PathBuf,
    /// The disk cache entry the library came from or was stored to.
    cache_entry: Option<PathBuf>,
    /// Name of the MSL source at compile time, as the line tables record it.
    source_file: String,
    from_disk_cache: bool,
    run_group: ffi::RunGroupFn,
    scratch_bytes: ffi::ScratchBytesFn,
    abort_after_fault: ffi::AbortAfterFaultFn,
    // Declared last: dropped after the function pointers above stop being used.
    _library: libloading::Library,
}

impl std::fmt::Debug for EmuKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmuKernel")
            .field("kernel_name", &self.kernel_name)
            .field("library_path", &self.library_path)
            .finish_non_exhaustive()
    }
}

/// Launch-wide values shared by the workers (raw pointers, read-only during the launch).
struct SharedLaunch {
    args: Vec<*const c_void>,
    grid: [u32; 3],
    threads: u32,
}

// The pointers are only read, and the caller of `launch` guarantees the memory
// behind them stays valid and is not used elsewhere during the launch.
unsafe impl Sync for SharedLaunch {}

impl EmuKernel {
    pub(crate) fn load(
        path: &Path,
        kernel_name: String,
        layout: EntryLayout,
        from_disk_cache: bool,
    ) -> Result<Self, EmuError> {
        let load_error = |message: String| EmuError::Load {
            path: path.to_path_buf(),
            message,
        };
        // SAFETY: the library was built by this module from the shim; its
        // initialisers only set up constants.
        let library = unsafe { libloading::Library::new(path) }
            .map_err(|e| load_error(format!("{e} (entry symbols missing)")))?;
        // SAFETY: the symbol types match the definitions the wrapper generates.
        let (
            run_group,
            scratch_bytes,
            abi,
            scalar_fn,
            abort_after_fault,
            checked,
            allocation_count,
            allocation_fn,
            profile_counters,
        ) = unsafe {
            let run: libloading::Symbol<ffi::RunGroupFn> = library
                .get(ffi::RUN_GROUP_SYMBOL)
                .map_err(|e| load_error(format!("{e} (entry symbols missing)")))?;
            let scratch: libloading::Symbol<ffi::ScratchBytesFn> = library
                .get(ffi::SCRATCH_BYTES_SYMBOL)
                .map_err(|e| load_error(format!("{e} (entry symbols missing)")))?;
            let abi: libloading::Symbol<ffi::AbiVersionFn> = library
                .get(ffi::ABI_VERSION_SYMBOL)
                .map_err(|e| load_error(format!("{e} (entry symbols missing)")))?;
            let scalar: libloading::Symbol<ffi::ScalarBytesFn> = library
                .get(ffi::SCALAR_BYTES_SYMBOL)
                .map_err(|e| load_error(format!("{e} (entry symbols missing)")))?;
            let abort: libloading::Symbol<ffi::AbortAfterFaultFn> = library
                .get(ffi::ABORT_AFTER_FAULT_SYMBOL)
                .map_err(|e| load_error(format!("{e} (entry symbols missing)")))?;
            let checks: libloading::Symbol<ffi::ChecksFn> = library
                .get(ffi::CHECKS_SYMBOL)
                .map_err(|e| load_error(format!("{e} (entry symbols missing)")))?;
            let checked = checks() != 0;
            if checked {
                let set_table: libloading::Symbol<ffi::SetExtentTableFn> = library
                    .get(ffi::SET_EXTENT_TABLE_SYMBOL)
                    .map_err(|e| load_error(format!("{e} (entry symbols missing)")))?;
                set_table(extents::table_address());
            }
            let count: libloading::Symbol<ffi::AllocationCountFn> = library
                .get(ffi::THREADGROUP_ALLOCATION_COUNT_SYMBOL)
                .map_err(|e| load_error(format!("{e} (entry symbols missing)")))?;
            let allocation: libloading::Symbol<ffi::AllocationFn> = library
                .get(ffi::THREADGROUP_ALLOCATION_SYMBOL)
                .map_err(|e| load_error(format!("{e} (entry symbols missing)")))?;
            let profile_counters: libloading::Symbol<ffi::ProfileCounterCountFn> = library
                .get(ffi::PROFILE_COUNTER_COUNT_SYMBOL)
                .map_err(|e| load_error(format!("{e} (entry symbols missing)")))?;
            (
                *run,
                *scratch,
                abi(),
                *scalar,
                *abort,
                checked,
                count(),
                *allocation,
                profile_counters(),
            )
        };
        if abi != ffi::ABI_VERSION {
            return Err(load_error(format!(
                "ABI version {abi}, expected {}",
                ffi::ABI_VERSION
            )));
        }
        let profiled = profile_counters != 0;
        if profiled && profile_counters as usize != profile::COUNTER_COUNT {
            return Err(load_error(format!(
                "{profile_counters} profile counters, expected {}",
                profile::COUNTER_COUNT
            )));
        }
        let scalar_bytes = (0..layout.arg_is_scalar.len())
            // SAFETY: pure function generated by the wrapper.
            .map(|i| unsafe { scalar_fn(i as c_uint) } as usize)
            .collect();
        let threadgroup_allocations: Vec<(usize, usize)> = (0..allocation_count)
            .map(|i| {
                let (mut offset, mut bytes) = (0, 0);
                // SAFETY: pure function generated by the wrapper; i is below its count.
                unsafe { allocation_fn(i, &mut offset, &mut bytes) };
                (offset as usize, bytes as usize)
            })
            .collect();
        let threadgroup_bytes = threadgroup_allocations
            .iter()
            .map(|&(offset, bytes)| offset.saturating_add(bytes.saturating_add(15) & !15))
            .max()
            .unwrap_or(0);
        Ok(EmuKernel {
            source_file: super::compiler::source_file_name(&kernel_name),
            kernel_name,
            layout,
            scalar_bytes,
            checked,
            profiled,
            threadgroup_allocations,
            threadgroup_bytes,
            library_path: path.to_path_buf(),
            cache_entry: None,
            from_disk_cache,
            run_group,
            scratch_bytes,
            abort_after_fault,
            _library: library,
        })
    }

    pub fn kernel_name(&self) -> &str {
        &self.kernel_name
    }

    /// The shared object this kernel was loaded from: a private copy, made by
    /// this process, of what the compiler produced or the disk cache held.
    pub fn library_path(&self) -> &Path {
        &self.library_path
    }

    pub(crate) fn with_cache_entry(mut self, entry: Option<PathBuf>) -> Self {
        self.cache_entry = entry;
        self
    }

    /// The disk cache entry this kernel was read from or stored to; `None`
    /// when the disk cache is off or could not be written.
    pub fn cache_entry(&self) -> Option<&Path> {
        self.cache_entry.as_deref()
    }

    /// True when `compile` found the shared object in the disk cache and did not run clang.
    pub fn from_disk_cache(&self) -> bool {
        self.from_disk_cache
    }

    /// Threadgroup memory each threadgroup gets, in bytes: the parameters'
    /// and the variables declared in the kernel.
    pub fn threadgroup_memory_bytes(&self) -> usize {
        self.threadgroup_bytes
    }

    /// Whether the kernel was built with memory checks (`EmuCompiler::with_checks`).
    pub fn is_checked(&self) -> bool {
        self.checked
    }

    /// Whether the kernel was built to count its work (`EmuCompiler::with_profiling`).
    pub fn is_profiled(&self) -> bool {
        self.profiled
    }

    /// [`launch`](Self::launch), counting what the threadgroups did: memory
    /// accesses by space, threadgroup access instructions and their bank
    /// conflicts, matrix operations, barriers (see [`EmuProfile`]). Only a
    /// kernel built with `EmuCompiler::with_profiling` counts; any other is
    /// refused with `BadLaunch`. A launch that fails returns its error and no counts.
    ///
    /// # Safety
    /// As [`launch`](Self::launch).
    pub unsafe fn launch_profiled(
        &self,
        args: &[LaunchArg],
        grid: [u32; 3],
        threads_per_group: u32,
    ) -> Result<EmuProfile, EmuError> {
        if !self.profiled {
            return Err(EmuError::BadLaunch(format!(
                "kernel `{}` was not built for profiling (EmuCompiler::with_profiling)",
                self.kernel_name
            )));
        }
        let prepared = self.prepare(args, grid, threads_per_group)?;
        let total = std::sync::Mutex::new((EmuProfile::default(), RawSites::new()));
        self.run_all(&prepared, grid, threads_per_group, Some(&total))?;
        let (mut counts, sites) = total.into_inner().unwrap_or_else(|p| p.into_inner());
        counts.set_sites(&sites, |addresses| {
            super::symbolize::kernel_lines_of_call_chains(&self.library_path, addresses, &self.source_file)
        });
        Ok(counts)
    }

    /// Runs every threadgroup of `grid` with `threads_per_group` threads each
    /// (1-D threadgroups); threadgroups run in parallel across cores, each
    /// thread a fiber. Returns once all threadgroups have finished, or with the
    /// first error: a deadlock, a divergent barrier or SIMD-group call, an
    /// access outside a buffer or threadgroup allocation (checked kernels), or
    /// a fault in kernel code.
    ///
    /// A checked kernel (the default, see `EmuCompiler::with_checks`) checks
    /// every device, constant and threadgroup access against the extent of
    /// the argument or allocation its pointer came from, and reports the
    /// argument, the byte offset, the thread and the MSL line. On Linux
    /// (x86-64, AArch64) fiber stack overflows, wild addresses and integer
    /// division by zero are reported too; elsewhere they have their usual
    /// effect on the process, as does any bad access of an unchecked kernel.
    ///
    /// # Safety
    /// Every `Buffer` must point to `len_bytes` bytes valid for reads and
    /// writes for the whole launch and not accessed by anyone else meanwhile.
    pub unsafe fn launch(
        &self,
        args: &[LaunchArg],
        grid: [u32; 3],
        threads_per_group: u32,
    ) -> Result<(), EmuError> {
        let prepared = self.prepare(args, grid, threads_per_group)?;
        self.run_all(&prepared, grid, threads_per_group, None)
    }

    /// Runs every threadgroup; with `profile`, each counts into it.
    fn run_all(
        &self,
        prepared: &PreparedLaunch,
        grid: [u32; 3],
        threads_per_group: u32,
        profile: Option<&std::sync::Mutex<(EmuProfile, RawSites)>>,
    ) -> Result<(), EmuError> {
        let group_count = grid.iter().map(|&g| u64::from(g)).product::<u64>();
        if group_count == 0 {
            return Ok(());
        }
        // SAFETY: the wrapper's function is safe to call with any thread count.
        let scratch_bytes = unsafe { (self.scratch_bytes)(threads_per_group) };
        let printed = Printed::default();
        let result = if group_count == 1 {
            // No hand-off to the pool: the caller's thread stays warm across launches.
            // (Nor a way to interrupt it: a threadgroup runs to its end.)
            self.run_counted(prepared, 0, scratch_bytes, &printed, profile)
        } else {
            // Between threadgroups the launch can be interrupted by the host.
            crate::interrupt::run_interruptible(false, |stop| {
                (0..group_count).into_par_iter().try_for_each(|linear| {
                    if stop() {
                        return Err(EmuError::Interrupted);
                    }
                    self.run_counted(prepared, linear, scratch_bytes, &printed, profile)
                })
            })
        };
        printed.write_out();
        result
    }

    /// Checks the arguments against the entry description and copies scalars
    /// into aligned storage that lives as long as the returned value.
    fn prepare(&self, args: &[LaunchArg], grid: [u32; 3], threads: u32) -> Result<PreparedLaunch, EmuError> {
        if threads == 0 || threads > MAX_THREADS_PER_GROUP {
            return Err(EmuError::BadLaunch(format!(
                "threads per threadgroup must be 1..={MAX_THREADS_PER_GROUP}, got {threads}"
            )));
        }
        if self.threadgroup_bytes > MAX_THREADGROUP_MEMORY_BYTES {
            return Err(EmuError::BadLaunch(format!(
                "kernel `{}` needs {} bytes of threadgroup memory; Metal allows {MAX_THREADGROUP_MEMORY_BYTES}",
                self.kernel_name, self.threadgroup_bytes
            )));
        }
        if args.len() != self.layout.arg_is_scalar.len() {
            return Err(EmuError::BadLaunch(format!(
                "kernel `{}` takes {} buffer/scalar arguments, got {}",
                self.kernel_name,
                self.layout.arg_is_scalar.len(),
                args.len()
            )));
        }
        let mut scalars: Vec<Vec<u128>> = Vec::new();
        let mut pointers = Vec::with_capacity(args.len());
        let mut extents = Vec::with_capacity(args.len());
        for (index, (arg, &is_scalar)) in args.iter().zip(&self.layout.arg_is_scalar).enumerate() {
            match (arg, is_scalar) {
                (LaunchArg::Buffer { ptr, len_bytes }, false) => {
                    if ptr.is_null() {
                        return Err(EmuError::BadLaunch(format!(
                            "argument {index}: null buffer pointer"
                        )));
                    }
                    pointers.push(ptr.cast_const().cast::<c_void>());
                    extents.push((ptr.cast_const(), *len_bytes));
                }
                (LaunchArg::Scalar(bytes), true) => {
                    let expected = self.scalar_bytes[index];
                    if bytes.len() != expected {
                        return Err(EmuError::BadLaunch(format!(
                            "argument {index}: scalar of {} bytes, the kernel's parameter has {expected}",
                            bytes.len()
                        )));
                    }
                    // 16-byte aligned copy: the kernel reads it as its declared type.
                    let mut storage = vec![0u128; bytes.len().div_ceil(16).max(1)];
                    // SAFETY: storage holds at least bytes.len() bytes.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            bytes.as_ptr(),
                            storage.as_mut_ptr().cast(),
                            bytes.len(),
                        )
                    };
                    pointers.push(storage.as_ptr().cast::<c_void>());
                    extents.push((storage.as_ptr().cast::<u8>(), bytes.len()));
                    scalars.push(storage);
                }
                (_, expected_scalar) => {
                    let expected = if expected_scalar { "a scalar" } else { "a buffer" };
                    return Err(EmuError::BadLaunch(format!(
                        "argument {index}: expected {expected}"
                    )));
                }
            }
        }
        let tags = if self.checked {
            let (tags, tagged) = LaunchTags::register(&extents)?;
            pointers = tagged.into_iter().map(|p| p.cast::<c_void>()).collect();
            Some(tags)
        } else {
            None
        };
        Ok(PreparedLaunch {
            launch: SharedLaunch {
                args: pointers,
                grid,
                threads,
            },
            _scalars: scalars,
            tags,
        })
    }

    /// `run_one`, with this worker's profile state when `profile` is given,
    /// whose counts are then added to it.
    fn run_counted(
        &self,
        prepared: &PreparedLaunch,
        linear: u64,
        scratch_bytes: usize,
        printed: &Printed,
        profile: Option<&std::sync::Mutex<(EmuProfile, RawSites)>>,
    ) -> Result<(), EmuError> {
        let Some(total) = profile else {
            return self.run_one(prepared, linear, scratch_bytes, printed, std::ptr::null_mut());
        };
        let threads = prepared.launch.threads as usize;
        let mut sites = RawSites::new();
        let ((), counts) = profile::with_profile_state(threads, &mut sites, |state| {
            self.run_one(prepared, linear, scratch_bytes, printed, state)
        })?;
        let mut total = total.lock().unwrap_or_else(|p| p.into_inner());
        total.0.add(&counts);
        for (key, value) in sites {
            let entry = total.1.entry(key).or_default();
            for (sum, add) in entry.iter_mut().zip(value) {
                *sum += add;
            }
        }
        Ok(())
    }

    fn run_one(
        &self,
        prepared: &PreparedLaunch,
        linear: u64,
        scratch_bytes: usize,
        printed: &Printed,
        profile: *mut ProfileState,
    ) -> Result<(), EmuError> {
        let shared = &prepared.launch;
        let [gx, gy, _] = shared.grid.map(u64::from);
        let position = [
            (linear % gx) as u32,
            ((linear / gx) % gy) as u32,
            (linear / (gx * gy)) as u32,
        ];
        let threadgroup_bytes = self.threadgroup_bytes;
        with_worker_memory(
            shared.threads as usize,
            scratch_bytes,
            threadgroup_bytes,
            |memory| {
                let mut message = [0u8; ERROR_CAPACITY];
                let mut access = AccessRecord::default();
                let threadgroup_tag_base = if self.checked {
                    extents::tag_threadgroup_memory(
                        memory.threadgroup.as_mut_ptr(),
                        &self.threadgroup_allocations,
                    )?
                } else {
                    0
                };
                let mut lines: Vec<u8> = Vec::new();
                let desc = LaunchDesc {
                    abi_version: ffi::ABI_VERSION,
                    threads_per_group: shared.threads,
                    grid: shared.grid,
                    threadgroup_tag_base,
                    args: shared.args.as_ptr(),
                    stacks: memory.stacks.base(),
                    stack_stride: memory.stacks.stride,
                    threadgroup_memory: memory.threadgroup.as_mut_ptr(),
                    threadgroup_memory_bytes: threadgroup_bytes,
                    scratch: memory.scratch.as_mut_ptr(),
                    scratch_bytes: memory.scratch.len(),
                    error_message: message.as_mut_ptr().cast(),
                    error_capacity: ERROR_CAPACITY,
                    access_record: &mut access,
                    print: Some(collect_line),
                    print_context: (&mut lines as *mut Vec<u8>).cast(),
                    profile,
                };
                let active = ActiveGroup {
                    resume_at: self.abort_after_fault as usize,
                    spare_stack_top: memory.stacks.spare_top(),
                    fiber_base: memory.stacks.base() as usize,
                    fiber_stride: memory.stacks.stride,
                    fiber_guard: memory.stacks.guard,
                    fiber_count: memory.stacks.count,
                    fault: std::cell::Cell::new(None),
                    fault_pc: std::cell::Cell::new(0),
                };
                // SAFETY: desc describes live memory sized as the library asked;
                // buffer validity is the caller's promise (see `launch`).
                let status = trap::with_active(&active, || unsafe {
                    (self.run_group)(&desc, position[0], position[1], position[2])
                });
                printed.add(linear, std::mem::take(&mut lines));
                if status == ffi::STATUS_OK {
                    return Ok(());
                }
                if status == ffi::STATUS_ACCESS {
                    let report = AccessReport {
                        record: &access,
                        launch_tags: prepared.tags.as_ref(),
                        threadgroup_tag_base,
                        layout: &self.layout,
                        library: &self.library_path,
                        source_file: &self.source_file,
                    };
                    return Err(EmuError::Kernel {
                        kernel: self.kernel_name.clone(),
                        message: format!(
                            "threadgroup ({}, {}, {}): {}",
                            position[0],
                            position[1],
                            position[2],
                            report.describe()
                        ),
                    });
                }
                if status == ffi::STATUS_FAULT {
                    let fault = active.fault.get();
                    let line = super::symbolize::kernel_line(
                        &self.library_path,
                        active.fault_pc.get(),
                        &self.source_file,
                    );
                    return Err(self.fault_error(position, fault, line));
                }
                let end = message.iter().position(|&b| b == 0).unwrap_or(ERROR_CAPACITY);
                Err(EmuError::Kernel {
                    kernel: self.kernel_name.clone(),
                    message: String::from_utf8_lossy(&message[..end]).into_owned(),
                })
            },
        )
    }
}

impl EmuKernel {
    fn fault_error(&self, position: [u32; 3], fault: Option<Fault>, line: Option<u32>) -> EmuError {
        let [x, y, z] = position;
        let what = match fault {
            Some(Fault::StackOverflow { thread }) => format!(
                "thread {thread} overflowed its {} KiB fiber stack (large local arrays or deep recursion)",
                super::stacks::FIBER_STACK_BYTES / 1024
            ),
            Some(Fault::BadAddress { address }) => {
                format!(
                    "invalid memory access at address {address:#x} (a wild pointer, or far out of bounds)"
                )
            }
            Some(Fault::Arithmetic) => "integer division by zero (or overflow) trapped".to_string(),
            None => "fault in kernel code".to_string(),
        };
        let at = line
            .map(|l| format!(" at line {l} of {}", self.source_file))
            .unwrap_or_default();
        EmuError::Kernel {
            kernel: self.kernel_name.clone(),
            message: format!("threadgroup ({x}, {y}, {z}): {what}{at}"),
        }
    }
}

/// Appends one line a kernel logged to the `Vec<u8>` behind `context`.
unsafe extern "C" fn collect_line(
    context: *mut std::ffi::c_void,
    text: *const std::ffi::c_char,
    length: usize,
) {
    if context.is_null() || text.is_null() {
        return;
    }
    // SAFETY: `context` is the running group's line buffer (set in `run_one`,
    // which outlives the group), and the shim passes `length` valid bytes.
    let (lines, text) = unsafe {
        (
            &mut *context.cast::<Vec<u8>>(),
            std::slice::from_raw_parts(text.cast::<u8>(), length),
        )
    };
    lines.extend_from_slice(text);
    lines.push(b'\n');
}

/// What a launch's threadgroups logged (`device_print`), by threadgroup:
/// written to stdout after the launch in threadgroup order, as the CPU
/// backend writes in program order.
#[derive(Default)]
struct Printed(std::sync::Mutex<Vec<(u64, Vec<u8>)>>);

impl Printed {
    fn add(&self, group: u64, lines: Vec<u8>) {
        if !lines.is_empty() {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((group, lines));
        }
    }

    fn write_out(self) {
        let mut groups = self.0.into_inner().unwrap_or_else(|p| p.into_inner());
        if groups.is_empty() {
            return;
        }
        groups.sort_by_key(|(group, _)| *group);
        let mut out = std::io::stdout().lock();
        for (_, lines) in groups {
            let _ = std::io::Write::write_all(&mut out, &lines);
        }
        let _ = std::io::Write::flush(&mut out);
    }
}

/// The shared launch values plus the scalar copies and the tags its pointers refer to.
struct PreparedLaunch {
    launch: SharedLaunch,
    _scalars: Vec<Vec<u128>>,
    /// Held until the launch ends (checked kernels).
    tags: Option<LaunchTags>,
}
