//! meTile's CPU backend: executes Tile IR directly, and defines the semantics every
//! GPU backend is checked against.
//!
//! # Execution model
//!
//! [`Executable::new`] verifies the function and *prepares* it once per
//! specialisation: every SSA value gets a register slot (its `ValueId`), every op
//! becomes an instruction whose kernel is already chosen for its dtype, regions
//! become nested instruction lists. [`Executable::launch`] then runs every program
//! instance of the grid; instances are split into chunks that run in parallel on
//! rayon's pool, each chunk on a worker whose register file and scratch buffers are
//! reused across instances and launches, so the hot path does not allocate.
//!
//! Within an instance, tile ops execute one after another on whole tiles
//! ("lockstep"): a thread-level value of shape `[T]` holds one element per thread of
//! the `T`-thread threadgroup, so `barrier` has nothing to wait for.
//!
//! Values are held lazily where that is exact and cheaper (see `value.rs`): a splat,
//! an affine integer tile (`start + step * i`, what `arange` arithmetic produces) or a
//! range mask (`offs < n`). A load or store through unit-step affine offsets under a
//! range mask is one bounds check and a slice copy; a fully active such load whose
//! uses are all element-wise ops or reductions placed before the next store is not
//! even copied (its consumers read the buffer in place). Every op also has a plain
//! dense path; [`ExecOptions::lazy_values`] turns the lazy forms off, and the tests
//! check both modes agree.
//!
//! Element-wise loops are compiled for the baseline target and for AVX2, chosen at
//! run time; the two give bit-identical results (no FMA contraction), and `exp` uses
//! a branch-free polynomial ([`exp_f32`], under 1 ulp in tests) so it vectorises.
//!
//! # Semantics
//!
//! * Integer arithmetic wraps. Integer `//` truncates toward zero and `%` takes the
//!   dividend's sign (C); `MIN // -1` wraps to `MIN`; `>>` is arithmetic on signed
//!   types. An integer `div` (only hand-built IR has one; the builder makes `/` float)
//!   truncates like `//`. Division or remainder by zero and shifts by a count outside
//!   `[0, bits)` compute what the GPU backends' guarded code gives (0; the count
//!   modulo the width) and *poison* the lane: using a poisoned lane (storing it,
//!   addressing memory with it, reducing it, branching or looping on it, ...) fails
//!   with [`ExecError::DivisionByZero`] or [`ExecError::InvalidShift`], naming the
//!   faulting op and the use; lanes never used are no error (see `poison.rs`).
//! * [`Executable::launch_interruptible`] asks a stop function between instances and
//!   at every loop iteration, so a long launch can be abandoned.
//! * f16/bf16 ops compute in f32 and round the result to the type (nearest-even).
//!   Float `//` is `trunc(a / b)`, `%` is `fmod`; `max`/`min` are `fmax`/`fmin`
//!   (a NaN operand yields the other), and so are max/min reductions.
//! * Casts: float to int truncates toward zero and saturates, NaN becomes 0; int to
//!   float rounds to nearest-even once (also for f16/bf16); int to int wraps/extends
//!   as in C; to bool is `!= 0` (so NaN is true).
//! * Sums of floats accumulate in f32 (blocked and pairwise along the reduced axis
//!   when it is contiguous) and round once to the result type; `dot` is
//!   `acc + a @ b` with every product accumulated in f32.
//! * Memory: every accessed element is bounds-checked; masked-off lanes are not
//!   accessed (loads give `other` or 0). A store checks all its lanes before writing
//!   any. `tile_load`/`tile_store` address element `(r, c)` at
//!   `offset + (row + r) * stride + col + c`.
//! * `for` follows Python's `range`: a negative step counts down, a zero step is an
//!   error. `simdgroup_role` runs its whole body once (all roles' work happens in
//!   program order). `shared` gives each execution a zero-filled buffer private to
//!   the program instance. `simd_shuffle_xor` / `simd_broadcast` follow
//!   `x[(i & !31) | ((i & 31) ^ (m & 31))]` and `x[(i & !31) | (l & 31)]`; a lane
//!   whose source would lie beyond the threadgroup (partial simdgroup) keeps its own
//!   value.
//! * `tile_swizzle` formulas are documented in `swizzle.rs`.
//! * Program ids: instance `l` of the launch runs with `pid0 = l % g0`,
//!   `pid1 = (l / g0) % g1`, `pid2 = l / (g0 * g1)`. Instances that write the same
//!   element race, as on a GPU. When several instances fail, the error of the
//!   lowest-numbered failing instance is reported.

mod atomic;
mod debug;
mod elem;
mod elementwise;
mod error;
mod exec;
mod functions;
mod math;
mod memory;
mod poison;
mod prepare;
mod reduce;
mod scan_sort;
mod simd;
mod swizzle;
mod taint;
mod value;

pub use error::ExecError;
pub use math::exp_f32;

use exec::{Machine, Worker};
use memory::Region;
use metile_ir::{DType, Function, ParamKind};
use prepare::Program;
use rayon::prelude::*;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use value::{Repr, Val};

/// A scalar kernel argument.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ScalarValue {
    Bool(bool),
    I8(i8),
    U8(u8),
    I16(i16),
    U16(u16),
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    /// An fp8 e4m3 value, as its bits.
    F8E4M3(u8),
    /// An fp8 e5m2 value, as its bits.
    F8E5M2(u8),
    F32(f32),
    F16(half::f16),
    BF16(half::bf16),
    F64(f64),
}

impl ScalarValue {
    pub fn dtype(self) -> DType {
        match self {
            ScalarValue::Bool(_) => DType::Bool,
            ScalarValue::I8(_) => DType::I8,
            ScalarValue::U8(_) => DType::U8,
            ScalarValue::I16(_) => DType::I16,
            ScalarValue::U16(_) => DType::U16,
            ScalarValue::I32(_) => DType::I32,
            ScalarValue::U32(_) => DType::U32,
            ScalarValue::I64(_) => DType::I64,
            ScalarValue::U64(_) => DType::U64,
            ScalarValue::F8E4M3(_) => DType::F8E4M3,
            ScalarValue::F8E5M2(_) => DType::F8E5M2,
            ScalarValue::F32(_) => DType::F32,
            ScalarValue::F16(_) => DType::F16,
            ScalarValue::BF16(_) => DType::BF16,
            ScalarValue::F64(_) => DType::F64,
        }
    }

    /// The value's bit pattern in the low `dtype().size_bytes()` bytes (bool as 0/1).
    pub fn bits(self) -> u64 {
        use elem::Element;
        match self {
            ScalarValue::Bool(v) => v.to_bits(),
            ScalarValue::I8(v) => v.to_bits(),
            ScalarValue::U8(v) | ScalarValue::F8E4M3(v) | ScalarValue::F8E5M2(v) => v.to_bits(),
            ScalarValue::I16(v) => v.to_bits(),
            ScalarValue::U16(v) => v.to_bits(),
            ScalarValue::I32(v) => v.to_bits(),
            ScalarValue::U32(v) => v.to_bits(),
            ScalarValue::I64(v) => v.to_bits(),
            ScalarValue::U64(v) => v.to_bits(),
            ScalarValue::F32(v) => Element::to_bits(v),
            ScalarValue::F16(v) => Element::to_bits(v),
            ScalarValue::BF16(v) => Element::to_bits(v),
            ScalarValue::F64(v) => Element::to_bits(v),
        }
    }

    /// The value's `size_bytes` bytes in the host's byte order.
    pub fn to_ne_bytes(self) -> Vec<u8> {
        let bits = self.bits();
        match self.dtype().size_bytes() {
            1 => vec![bits as u8],
            2 => (bits as u16).to_ne_bytes().to_vec(),
            4 => (bits as u32).to_ne_bytes().to_vec(),
            _ => bits.to_ne_bytes().to_vec(),
        }
    }
}

/// One launch argument, in `Function::params` order.
#[derive(Clone, Copy, Debug)]
pub enum KernelArg {
    /// `len` elements of `dtype` at `ptr` (a null `ptr` is allowed when `len` is 0).
    Buffer {
        ptr: *mut u8,
        len: usize,
        dtype: DType,
    },
    Scalar(ScalarValue),
}

/// Knobs for testing and debugging.
#[derive(Clone, Copy, Debug)]
pub struct ExecOptions {
    /// Keep splat / affine / range tiles lazy (the default). Off, every tile result is
    /// materialised immediately, which exercises only the dense paths.
    pub lazy_values: bool,
}

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions { lazy_values: true }
    }
}

/// The memory regions of a launch's pointer parameters (by parameter position) and
/// the initial value of every parameter's register slot.
type BoundArgs = (Vec<Region>, Vec<(usize, Val)>);

/// A kernel prepared for execution; prepare once per specialisation, launch many times.
pub struct Executable {
    func: Arc<Function>,
    program: Program,
    options: ExecOptions,
    /// Idle workers, kept so their buffers are reused by the next launch.
    workers: Mutex<Vec<Worker>>,
}

/// Grids up to this many instances run on the calling thread.
const SERIAL_INSTANCES: u64 = 1;

impl Executable {
    pub fn new(func: Arc<Function>) -> Result<Executable, ExecError> {
        Self::with_options(func, ExecOptions::default())
    }

    pub fn with_options(func: Arc<Function>, options: ExecOptions) -> Result<Executable, ExecError> {
        let program = prepare::prepare(&func)?;
        Ok(Executable {
            func,
            program,
            options,
            workers: Mutex::new(Vec::new()),
        })
    }

    pub fn function(&self) -> &Arc<Function> {
        &self.func
    }

    /// Runs every program instance of `grid` (each extent in `1..=i32::MAX`).
    ///
    /// # Safety
    /// Every `Buffer` must point to `len` valid, initialised elements of its dtype that
    /// stay alive and are not accessed by anything else for the duration of the call
    /// (the same buffer may be passed for several parameters).
    pub unsafe fn launch(&self, args: &[KernelArg], grid: [u32; 3]) -> Result<(), ExecError> {
        // SAFETY: forwarded from the caller's contract.
        unsafe { self.launch_interruptible(args, grid, &|| false) }
    }

    /// `launch`, asking `stop` between program instances and at every loop
    /// iteration whether to give up: once it returns true, the instances not yet
    /// finished are abandoned and the launch fails with `ExecError::Interrupted`
    /// (buffers then hold whatever the finished instances wrote). `stop` is called
    /// from the pool's worker threads, and from the calling thread too when the
    /// grid has a single instance.
    ///
    /// # Safety
    /// As `launch`.
    pub unsafe fn launch_interruptible(
        &self,
        args: &[KernelArg],
        grid: [u32; 3],
        stop: &(dyn Fn() -> bool + Sync),
    ) -> Result<(), ExecError> {
        let (globals, param_values) = self.bind(args)?;
        if let Some(&g) = grid.iter().find(|&&g| g == 0 || g > i32::MAX as u32) {
            return Err(ExecError::BadArguments(format!(
                "grid {grid:?}: every extent must be between 1 and {}, got {g}",
                i32::MAX
            )));
        }
        let stopped = AtomicBool::new(false);
        let should_stop = || {
            if stopped.load(Ordering::Relaxed) {
                return true;
            }
            let now = stop();
            if now {
                stopped.store(true, Ordering::Relaxed);
            }
            now
        };
        let machine = Machine {
            program: &self.program,
            globals: &globals,
            grid,
            lazy: self.options.lazy_values,
            stop: &should_stop,
        };
        let total = grid.iter().map(|&g| u64::from(g)).product::<u64>();
        let pid_of = |l: u64| {
            let (g0, g1) = (u64::from(grid[0]), u64::from(grid[1]));
            [(l % g0) as u32, ((l / g0) % g1) as u32, (l / (g0 * g1)) as u32]
        };
        // Lowest failing instance so far; instances above it are skipped.
        let first_failure = AtomicU64::new(u64::MAX);
        let failure: Mutex<Option<(u64, ExecError)>> = Mutex::new(None);
        // What each instance printed, written in program order after the launch.
        let printed: Mutex<Vec<(u64, String)>> = Mutex::new(Vec::new());
        let run_chunk = |range: std::ops::Range<u64>| {
            let mut worker = self.take_worker();
            for (slot, v) in &param_values {
                worker.regs[*slot].assign_from(v);
            }
            for l in range {
                if l > first_failure.load(Ordering::Relaxed) || should_stop() {
                    break;
                }
                let result = machine.run_instance(&mut worker, pid_of(l));
                if !worker.printed.is_empty() {
                    let lines = std::mem::take(&mut worker.printed);
                    printed.lock().unwrap_or_else(|p| p.into_inner()).push((l, lines));
                }
                if let Err(e) = result {
                    first_failure.fetch_min(l, Ordering::Relaxed);
                    let mut f = failure.lock().unwrap_or_else(|p| p.into_inner());
                    if f.as_ref().is_none_or(|(at, _)| l < *at) {
                        *f = Some((l, e));
                    }
                    break;
                }
            }
            self.return_worker(worker);
        };
        if total <= SERIAL_INSTANCES {
            run_chunk(0..total);
        } else {
            // Enough chunks to balance uneven instances, few enough that per-chunk
            // costs (taking a worker) stay negligible.
            let chunks = (rayon::current_num_threads() as u64 * 8).clamp(1, total);
            let chunk_len = total.div_ceil(chunks);
            (0..chunks).into_par_iter().for_each(|c| {
                let lo = c * chunk_len;
                run_chunk(lo..(lo + chunk_len).min(total));
            });
        }
        let failure = failure.into_inner().unwrap_or_else(|p| p.into_inner());
        let mut printed = printed.into_inner().unwrap_or_else(|p| p.into_inner());
        if !printed.is_empty() {
            // Instances past a failure ran or not depending on timing: their
            // lines are dropped, so what is printed does not depend on it.
            let last = failure.as_ref().map_or(u64::MAX, |(at, _)| *at);
            printed.retain(|(l, _)| *l <= last);
            printed.sort_by_key(|(l, _)| *l);
            let mut out = std::io::stdout().lock();
            for (_, lines) in &printed {
                let _ = out.write_all(lines.as_bytes());
            }
            let _ = out.flush();
        }
        if stopped.load(Ordering::Relaxed) {
            // Instances were skipped: no failure found is the lowest one.
            return Err(ExecError::Interrupted);
        }
        match failure {
            Some((_, e)) => Err(e),
            None => Ok(()),
        }
    }

    fn take_worker(&self) -> Worker {
        let pooled = self.workers.lock().unwrap_or_else(|p| p.into_inner()).pop();
        pooled.unwrap_or_else(|| Worker::new(&self.program))
    }

    fn return_worker(&self, worker: Worker) {
        self.workers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(worker);
    }

    /// Checks `args` against the parameters: the memory regions of pointer
    /// parameters (by parameter position) and the initial register of every parameter.
    fn bind(&self, args: &[KernelArg]) -> Result<BoundArgs, ExecError> {
        let params = &self.func.params;
        if args.len() != params.len() {
            let names: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
            return Err(ExecError::BadArguments(format!(
                "kernel `{}` takes {} arguments ({}), got {}",
                self.func.name,
                params.len(),
                names.join(", "),
                args.len()
            )));
        }
        let mut regions = Vec::with_capacity(params.len());
        let mut values = Vec::with_capacity(params.len());
        for (i, (param, arg)) in params.iter().zip(args).enumerate() {
            let slot = param.value.index();
            let (region, val) = match (param.kind, *arg) {
                (ParamKind::Pointer(want), KernelArg::Buffer { ptr, len, dtype }) => {
                    if dtype != want {
                        return Err(ExecError::BadArguments(format!(
                            "argument `{}` is a buffer of {dtype}, but the kernel was specialised for {want}",
                            param.name
                        )));
                    }
                    if ptr.is_null() && len > 0 {
                        return Err(ExecError::BadArguments(format!(
                            "argument `{}` is a null pointer with {len} elements",
                            param.name
                        )));
                    }
                    let val = Val {
                        mem: i as u32,
                        repr: Repr::Splat(0),
                        poison: None,
                    };
                    (Region { ptr, len }, val)
                }
                (ParamKind::Scalar(want), KernelArg::Scalar(s)) => {
                    if s.dtype() != want {
                        return Err(ExecError::BadArguments(format!(
                            "argument `{}` must be a {want} scalar, got a {} scalar",
                            param.name,
                            s.dtype()
                        )));
                    }
                    let val = Val {
                        mem: 0,
                        repr: Repr::Splat(s.bits()),
                        poison: None,
                    };
                    (
                        Region {
                            ptr: std::ptr::null_mut(),
                            len: 0,
                        },
                        val,
                    )
                }
                (ParamKind::Pointer(want), KernelArg::Scalar(s)) => {
                    return Err(ExecError::BadArguments(format!(
                        "argument `{}` must be a buffer of {want}, got a {} scalar",
                        param.name,
                        s.dtype()
                    )))
                }
                (ParamKind::Scalar(want), KernelArg::Buffer { dtype, .. }) => {
                    return Err(ExecError::BadArguments(format!(
                        "argument `{}` must be a {want} scalar, got a buffer of {dtype}",
                        param.name
                    )))
                }
            };
            if slot >= self.program.num_slots {
                return Err(ExecError::InvalidIr(format!(
                    "parameter `{}` has no value",
                    param.name
                )));
            }
            regions.push(region);
            values.push((slot, val));
        }
        Ok((regions, values))
    }
}

// The raw pointers of a launch live only inside `launch`; everything an Executable
// holds is plain data.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Executable>();
};
