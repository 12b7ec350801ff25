//! Kernel objects and the launch path. `kernel[grid](*args, **constexprs)` binds
//! the arguments, looks the specialisation up (constexpr values, argument kinds
//! and dtypes, launch options, device), traces and compiles on a miss, and
//! dispatches — all in Rust but the trace itself.

use crate::args::{convert_arg, ensure_writable, ArgKind};
use crate::captures::CaptureList;
use crate::compiled::CompiledKernelInfo;
use crate::device_args::{copy_back, ArgContext, Staged};
use crate::device_state::{current_device, runtime_error_to_py, show_runtime_warnings};
use crate::split_launch::{parse_split_k, plan_launch, OPTION_SPLIT_K};
use crate::tracing::PyTileFunction;
use crate::value_key::{value_key, ValueKey, KEYED_VALUES};
use metile_compiler::{AppleArch, Passes};
use metile_interp::KernelArg;
use metile_runtime::launch_plan::CompiledPlan;
use metile_runtime::{
    check_grid, grid_is_empty, interrupt, CompileOptions, CompiledKernel, Device, LaunchStream, RuntimeError,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyList, PyString, PyTuple};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Launch keywords that are options rather than kernel parameters: `num_sgs`,
/// the GEMM pass switches (`Passes::NAMES`) and the Apple GPU family `arch`.
const OPTION_NUM_SGS: &str = "num_sgs";
/// Triton's name for `num_sgs` (a warp is a simdgroup of 32 threads).
const OPTION_NUM_WARPS: &str = "num_warps";
const OPTION_ARCH: &str = "arch";
const MAX_NUM_SGS: i64 = 32;

/// The launch options, listed for messages (the pass switches from the policy table).
fn options_text() -> String {
    format!(
        "the launch options num_sgs, {}, split_k and arch (num_warps is Triton's name for num_sgs)",
        Passes::NAMES.join(", ")
    )
}

/// The launch options of one launch, and which of them were given.
#[derive(Clone, Copy, Debug, Default)]
struct LaunchOptions {
    num_sgs: Option<u32>,
    passes: Passes,
    split_k: Option<u32>,
    arch: Option<AppleArch>,
}

impl LaunchOptions {
    /// Takes `key=value` when `key` names a launch option (false otherwise).
    fn take(&mut self, key: &str, value: &Bound<'_, PyAny>) -> PyResult<bool> {
        if key == OPTION_NUM_SGS || key == OPTION_NUM_WARPS {
            if self.num_sgs.is_some() {
                return Err(PyTypeError::new_err(
                    "num_sgs and num_warps name the same launch option (simdgroups of 32 threads); give one",
                ));
            }
            self.num_sgs = Some(parse_num_sgs(value)?);
            return Ok(true);
        }
        if key == OPTION_SPLIT_K {
            self.split_k = Some(parse_split_k(value)?);
            return Ok(true);
        }
        if key == OPTION_ARCH {
            self.arch = Some(parse_arch(value)?);
            return Ok(true);
        }
        if !Passes::NAMES.contains(&key) {
            return Ok(false);
        }
        let on = value.cast::<PyBool>().map_err(|_| {
            PyTypeError::new_err(format!(
                "the launch option {key} switches a pass on or off and must be True or False, got {}",
                value.repr().map(|r| r.to_string()).unwrap_or_default()
            ))
        })?;
        self.passes.set(key, on.is_true());
        Ok(true)
    }

    /// Adds a launcher's preset options; one given twice is an error.
    fn merge(&mut self, preset: &LaunchOptions, signature: &str) -> PyResult<()> {
        let twice = |name: &str| {
            PyTypeError::new_err(format!(
                "{signature} got multiple values for the launch option {name}: the launcher's configuration \
                 already sets it"
            ))
        };
        if let Some(n) = preset.num_sgs {
            if self.num_sgs.is_some() {
                return Err(twice(OPTION_NUM_SGS));
            }
            self.num_sgs = Some(n);
        }
        if let Some(s) = preset.split_k {
            if self.split_k.is_some() {
                return Err(twice(OPTION_SPLIT_K));
            }
            self.split_k = Some(s);
        }
        if let Some(arch) = preset.arch {
            if self.arch.is_some() {
                return Err(twice(OPTION_ARCH));
            }
            self.arch = Some(arch);
        }
        for name in Passes::NAMES {
            if let Some(on) = preset.passes.given(name) {
                if self.passes.given(name).is_some() {
                    return Err(twice(name));
                }
                self.passes.set(name, on);
            }
        }
        Ok(())
    }
}

/// The key of a constexpr argument (see `value_key`); an object without one is
/// a TypeError naming the parameter.
fn constexpr_key(obj: &Bound<'_, PyAny>, name: &str, kernel: &str) -> PyResult<ValueKey> {
    value_key(obj)?.map_err(|no| {
        PyTypeError::new_err(format!(
            "the constexpr '{name}' of kernel {kernel} is a {}, which cannot be a compile-time constant; \
             a constexpr must be {KEYED_VALUES}",
            no.type_name
        ))
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct SpecKey {
    device: &'static str,
    /// Which GPU of several: a kernel is loaded into one GPU's context.
    ordinal: u32,
    args: Vec<ArgKind>,
    constexprs: Vec<ValueKey>,
    /// The values of the globals and closure variables the kernel reads, and
    /// which list of them they are (`CaptureList::generation`).
    captured: Vec<ValueKey>,
    captures_generation: u64,
    num_sgs: Option<u32>,
    passes: Passes,
    /// 1: no split.
    split_k: u32,
    arch: Option<AppleArch>,
}

struct Specialization {
    /// The compiler's launch plan, compiled by the device: one kernel, or
    /// with `split_k` the partial and finishing kernels and their workspace.
    plan: CompiledPlan,
    /// The runtime arguments (by position among them) the kernel stores through.
    written: Vec<usize>,
}

impl Specialization {
    /// The kernel launched over the launch's grid.
    fn compiled(&self) -> &Arc<dyn CompiledKernel> {
        self.plan.main()
    }

    /// # Safety
    /// As [`CompiledKernel::launch`].
    unsafe fn launch(
        &self,
        args: &[KernelArg],
        grid: [u32; 3],
        device: &Arc<dyn Device>,
    ) -> Result<(), RuntimeError> {
        // SAFETY: forwarded from the caller's contract.
        unsafe { self.plan.launch(args, grid, device) }
    }
}

/// A launch's specialisation, its converted arguments and the device it runs on.
struct Selected {
    spec: Arc<Specialization>,
    args: Vec<KernelArg>,
    device: Arc<dyn Device>,
    /// Host arrays copied to the device for this launch (see `device_args`).
    staged: Vec<Staged>,
    /// The launch's stream (see `placement`), current until the launch ends.
    _stream_scope: LaunchStream,
}

/// Keyword values a launcher supplies on every launch (`kernel[grid].configure(...)`):
/// constexprs by parameter position, and launch options.
#[derive(Default)]
struct Preset {
    values: Vec<(usize, Py<PyAny>)>,
    options: LaunchOptions,
}

#[pyclass(module = "metile._metile", name = "Kernel", frozen)]
pub struct Kernel {
    func: Py<PyAny>,
    name: String,
    params: Vec<String>,
    is_constexpr: Vec<bool>,
    /// The dtype a parameter's annotation declares (`X: metile.float8e4nv`).
    declared: Vec<Option<metile_ir::DType>>,
    /// Positions of the runtime parameters (the kernel's signature order).
    runtime_params: Vec<usize>,
    /// Default values of constexpr parameters, by position.
    defaults: Vec<Option<Py<PyAny>>>,
    specialize: Py<PyAny>,
    /// `(function) -> list` of the globals and closure variables it reads (see
    /// `captures`); `None`: the kernel reads none that matter.
    find_captures: Option<Py<PyAny>>,
    /// The list `find_captures` last returned (found at the first launch).
    captures: Mutex<Option<Arc<CaptureList>>>,
    cache: Mutex<HashMap<SpecKey, Arc<Specialization>>>,
    traces: AtomicUsize,
}

/// Numbers capture lists, so that no two of them share a generation.
static NEXT_CAPTURES_GENERATION: AtomicU64 = AtomicU64::new(1);

/// Arguments after binding, in parameter order.
struct BoundArgs<'py> {
    values: Vec<Option<Bound<'py, PyAny>>>,
    options: LaunchOptions,
}

impl Kernel {
    fn signature_text(&self) -> String {
        format!("{}({})", self.name, self.params.join(", "))
    }

    fn bind<'py>(
        &self,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
        preset: Option<&Preset>,
    ) -> PyResult<BoundArgs<'py>> {
        let n = self.params.len();
        if args.len() > n {
            return Err(PyTypeError::new_err(format!(
                "{} takes {n} arguments but {} were given positionally",
                self.signature_text(),
                args.len()
            )));
        }
        let mut values: Vec<Option<Bound<'py, PyAny>>> = args.iter().map(Some).collect();
        values.resize(n, None);
        let py = args.py();
        let mut options = LaunchOptions::default();
        if let Some(kwargs) = kwargs {
            for (key, value) in kwargs.iter() {
                let key: String = key.extract()?;
                match self.params.iter().position(|p| *p == key) {
                    Some(i) if values[i].is_some() => {
                        return Err(PyTypeError::new_err(format!(
                            "{} got multiple values for argument '{key}'",
                            self.signature_text()
                        )))
                    }
                    Some(i) => values[i] = Some(value),
                    None if options.take(&key, &value)? => {}
                    None => {
                        return Err(PyTypeError::new_err(format!(
                            "{} got an unknown keyword argument '{key}'; its parameters are {} \
                             (and {})",
                            self.signature_text(),
                            self.params.join(", "),
                            options_text()
                        )))
                    }
                }
            }
        }
        if let Some(preset) = preset {
            for (i, value) in &preset.values {
                if values[*i].is_some() {
                    return Err(PyTypeError::new_err(format!(
                        "{} got multiple values for argument '{}': the launcher's configuration already sets it",
                        self.signature_text(),
                        self.params[*i]
                    )));
                }
                values[*i] = Some(value.bind(py).clone());
            }
            options.merge(&preset.options, &self.signature_text())?;
        }
        for (value, default) in values.iter_mut().zip(&self.defaults) {
            if let (None, Some(d)) = (&value, default) {
                *value = Some(d.bind(py).clone());
            }
        }
        if let Some(missing) = values.iter().position(Option::is_none) {
            let name = &self.params[missing];
            let given = args.len() + kwargs.map_or(0, |k| k.len());
            return Err(PyTypeError::new_err(if self.is_constexpr[missing] {
                format!(
                    "{} is missing the constexpr '{name}'; pass it by keyword, e.g. {name}=...",
                    self.signature_text()
                )
            } else {
                format!(
                    "{} is missing the argument '{name}' ({} runtime arguments expected, {given} given)",
                    self.signature_text(),
                    self.runtime_params.len()
                )
            }));
        }
        Ok(BoundArgs { values, options })
    }

    fn trace_and_compile(
        &self,
        py: Python<'_>,
        bound: &BoundArgs<'_>,
        key: &SpecKey,
        device: &Arc<dyn Device>,
    ) -> PyResult<Arc<Specialization>> {
        let runtime = PyList::empty(py);
        for (&i, kind) in self.runtime_params.iter().zip(&key.args) {
            let (k, d) = kind.describe();
            runtime.append((self.params[i].as_str(), k, d, kind.divisibility()))?;
        }
        let constexprs = PyDict::new(py);
        for (i, value) in bound.values.iter().enumerate() {
            if self.is_constexpr[i] {
                constexprs.set_item(&self.params[i], value)?;
            }
        }
        let options = PyDict::new(py);
        options.set_item("threads_per_group", key.num_sgs.unwrap_or(4) * 32)?;
        let traced = self
            .specialize
            .call1(py, (&self.func, runtime, constexprs, options))?;
        let func = traced.bind(py).cast::<PyTileFunction>()?.get().func.clone();
        self.traces.fetch_add(1, Ordering::Relaxed);
        let written = metile_compiler::written_params(&func)
            .iter()
            .enumerate()
            .filter_map(|(slot, &w)| w.then_some(slot))
            .collect();
        let options = CompileOptions {
            num_sgs: key.num_sgs,
            passes: key.passes,
            apple_arch: key.arch,
        };
        let plan = plan_launch(py, &func, key.split_k)?;
        let plan = CompiledPlan::compile(plan, device, &options).map_err(|e| runtime_error_to_py(py, e))?;
        if key.split_k <= 1 {
            crate::portability::check(py, &self.name, &func, &options, device.name())?;
            crate::layout_pictures::draw_if_asked(py, &self.name, &func, &options, device)?;
        }
        Ok(Arc::new(Specialization { plan, written }))
    }

    /// The captured names found by `find_captures` for the kernel as it is now,
    /// as a new list.
    fn find_captures(&self, py: Python<'_>) -> PyResult<CaptureList> {
        let generation = NEXT_CAPTURES_GENERATION.fetch_add(1, Ordering::Relaxed);
        match &self.find_captures {
            None => Ok(CaptureList::empty(generation)),
            Some(find) => {
                let list = find.call1(py, (&self.func,))?;
                CaptureList::from_py(list.bind(py).cast::<PyList>()?, generation)
            }
        }
    }

    /// The captured names, found at the first launch.
    fn capture_list(&self, py: Python<'_>) -> PyResult<Arc<CaptureList>> {
        if let Some(list) = self.captures.lock().ok().and_then(|c| c.clone()) {
            return Ok(list);
        }
        let found = Arc::new(self.find_captures(py)?);
        if let Ok(mut slot) = self.captures.lock() {
            // Another thread may have been first; every launch then uses its list.
            return Ok(slot.get_or_insert(found).clone());
        }
        Ok(found)
    }

    /// After a trace: the key to store the specialisation under. A helper the
    /// kernel calls may have been replaced by one that reads other names, so
    /// the names are found again; when they differ, the new list replaces the
    /// old one and the key is made from it.
    fn key_after_trace(&self, py: Python<'_>, mut key: SpecKey, used: &CaptureList) -> PyResult<SpecKey> {
        let found = self.find_captures(py)?;
        if found.same_as(py, used) {
            return Ok(key);
        }
        key.captured = found.values(py, &self.name)?;
        key.captures_generation = found.generation;
        if let Ok(mut slot) = self.captures.lock() {
            *slot = Some(Arc::new(found));
        }
        Ok(key)
    }

    /// Converts the bound arguments and finds (or traces and compiles) their
    /// specialisation on the current device, which it returns too.
    /// `stage`: copy host arrays to a device with memory of its own (a launch
    /// does; `warmup` only needs the key).
    fn specialization(&self, py: Python<'_>, bound: &BoundArgs<'_>, stage: bool) -> PyResult<Selected> {
        let mut device = current_device(py)?;
        let mut stream = None;
        if device.memory().is_some() {
            let runtime: Vec<(&str, &Bound<'_, PyAny>)> = bound
                .values
                .iter()
                .enumerate()
                .filter(|&(i, _)| !self.is_constexpr[i])
                .filter_map(|(i, v)| Some((self.params[i].as_str(), v.as_ref()?)))
                .collect();
            let placement = crate::placement::placement(&runtime, &device, &self.name)?;
            if let Some(gpu) = placement.gpu {
                if gpu != device.ordinal() {
                    device = device.sibling(gpu).map_err(|e| runtime_error_to_py(py, e))?;
                }
            }
            if let Some(framework) = placement.framework {
                stream = Some(crate::placement::framework_stream(
                    py,
                    framework,
                    device.ordinal(),
                )?);
            }
        }
        // Staging uploads below, and the launch, go on the framework's stream.
        let stream_scope = LaunchStream::enter(stream);
        let mut ctx = ArgContext {
            device: &device,
            memory: device.memory(),
            device_name: device.name(),
            stage,
            staged: Vec::new(),
            index: 0,
            stream: metile_runtime::launch_stream(),
        };
        let mut kinds = Vec::with_capacity(self.runtime_params.len());
        let mut kernel_args = Vec::with_capacity(self.runtime_params.len());
        let mut constexprs = Vec::new();
        for (i, value) in bound.values.iter().enumerate() {
            let Some(value) = value else { continue };
            if self.is_constexpr[i] {
                constexprs.push(constexpr_key(value, &self.params[i], &self.name)?);
            } else {
                ctx.index = kernel_args.len();
                let (kind, arg) = convert_arg(value, &self.params[i], &mut ctx, self.declared[i])?;
                kinds.push(kind);
                kernel_args.push(arg);
            }
        }
        let captures = self.capture_list(py)?;
        let key = SpecKey {
            device: device.name(),
            ordinal: device.ordinal(),
            args: kinds,
            constexprs,
            captured: captures.values(py, &self.name)?,
            captures_generation: captures.generation,
            num_sgs: bound.options.num_sgs,
            passes: bound.options.passes,
            split_k: bound.options.split_k.unwrap_or(1),
            arch: bound.options.arch,
        };
        let cached = self.cache.lock().ok().and_then(|c| c.get(&key).cloned());
        let spec = match cached {
            Some(s) => s,
            None => {
                let s = self.trace_and_compile(py, bound, &key, &device)?;
                let key = self.key_after_trace(py, key, &captures)?;
                if let Ok(mut c) = self.cache.lock() {
                    c.insert(key, s.clone());
                }
                s
            }
        };
        let staged = ctx.staged;
        Ok(Selected {
            spec,
            args: kernel_args,
            device,
            staged,
            _stream_scope: stream_scope,
        })
    }
}

/// A kernel called or launched while another kernel is traced: a
/// `metile.CompilationError` at the calling line (nothing outside a trace).
fn refuse_inside_trace(py: Python<'_>, kernel: &str, how: &str) -> PyResult<()> {
    if !crate::tracing::tracing_active() {
        return Ok(());
    }
    Err(crate::tracing::error_at_caller(
        py,
        &format!(
            "a kernel {how} the kernel {kernel}: kernels cannot call or launch kernels (nor \
             themselves); call a plain Python function as a helper, or launch the kernels one after \
             the other from the host"
        ),
    ))
}

fn parse_num_sgs(value: &Bound<'_, PyAny>) -> PyResult<u32> {
    let n: i64 = if value.is_instance_of::<PyBool>() {
        -1
    } else {
        value.extract().unwrap_or(-1)
    };
    if !(1..=MAX_NUM_SGS).contains(&n) {
        return Err(PyValueError::new_err(format!(
            "num_sgs must be an int from 1 to {MAX_NUM_SGS} (simdgroups of 32 threads), got {}",
            value.repr()?
        )));
    }
    Ok(n as u32)
}

/// The Apple GPU family named by the launch option `arch` (see `AppleArch`).
pub(crate) fn parse_arch(value: &Bound<'_, PyAny>) -> PyResult<AppleArch> {
    let repr = || value.repr().map(|r| r.to_string()).unwrap_or_default();
    let name = value.cast::<PyString>().map_err(|_| {
        PyTypeError::new_err(format!(
            "the launch option arch names an Apple GPU family and must be a str, {}, got {}",
            AppleArch::names_text(),
            repr()
        ))
    })?;
    let name = name.to_str()?;
    AppleArch::parse(name).ok_or_else(|| {
        PyValueError::new_err(format!(
            "the launch option arch must be {} (Apple7 and later, or Apple10 with Metal 4 tensor ops), got {}",
            AppleArch::names_text(),
            repr()
        ))
    })
}

/// Validates `kernel[grid]`: a tuple of 1 to 3 ints, each 0 or more (a 0
/// extent is an empty launch, which does nothing).
fn parse_grid(grid: &Bound<'_, PyAny>) -> PyResult<[u32; 3]> {
    let fail = || -> PyResult<[u32; 3]> {
        Err(PyValueError::new_err(format!(
            "the grid must be a tuple of 1 to 3 ints, each 0 or more (0: an empty launch, which does \
             nothing), e.g. kernel[(n,)] or kernel[(m, n)]; got {}",
            grid.repr().map(|r| r.to_string()).unwrap_or_default()
        )))
    };
    let items: Vec<Bound<'_, PyAny>> = if let Ok(t) = grid.cast::<PyTuple>() {
        t.iter().collect()
    } else if let Ok(l) = grid.cast::<PyList>() {
        l.iter().collect()
    } else {
        return fail();
    };
    if items.is_empty() || items.len() > 3 {
        return fail();
    }
    let mut out = [1u32; 3];
    for (i, item) in items.iter().enumerate() {
        if item.is_instance_of::<PyBool>() || item.is_instance_of::<PyFloat>() {
            return fail();
        }
        match item.call_method0("__index__").and_then(|v| v.extract::<i64>()) {
            Ok(v) if (0..=i64::from(u32::MAX)).contains(&v) => out[i] = v as u32,
            _ => return fail(),
        }
    }
    Ok(out)
}

/// Keeps raw buffer pointers movable to the thread that runs the launch; the
/// Python objects that own the memory stay referenced by the caller meanwhile.
struct SendArgs(Vec<KernelArg>, Vec<Staged>);
// SAFETY: the pointers refer to memory kept alive by the launching Python frame,
// which blocks until the launch returns.
unsafe impl Send for SendArgs {}

#[pymethods]
impl Kernel {
    #[new]
    #[pyo3(signature = (func, name, params, is_constexpr, specialize, defaults=None, captures=None, dtypes=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        func: Py<PyAny>,
        name: String,
        params: Vec<String>,
        is_constexpr: Vec<bool>,
        specialize: Py<PyAny>,
        defaults: Option<&Bound<'_, PyDict>>,
        captures: Option<Py<PyAny>>,
        dtypes: Option<Vec<Option<String>>>,
    ) -> PyResult<Kernel> {
        if params.len() != is_constexpr.len() {
            return Err(PyValueError::new_err("params and is_constexpr differ in length"));
        }
        let declared = crate::declared::parse(dtypes, params.len())?;
        let defaults = params
            .iter()
            .map(|p| -> PyResult<Option<Py<PyAny>>> {
                Ok(match defaults {
                    Some(d) => d.get_item(p)?.map(Bound::unbind),
                    None => None,
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        let runtime_params = (0..params.len()).filter(|&i| !is_constexpr[i]).collect();
        Ok(Kernel {
            func,
            name,
            params,
            is_constexpr,
            declared,
            runtime_params,
            defaults,
            specialize,
            find_captures: captures,
            captures: Mutex::new(None),
            cache: Mutex::new(HashMap::new()),
            traces: AtomicUsize::new(0),
        })
    }

    /// `kernel[grid]`: a launcher over `grid`, a tuple of 1 to 3 ints or a
    /// callable of the launch's arguments (`lambda meta: (cdiv(N, meta["BLOCK"]),)`).
    fn __getitem__(slf: &Bound<'_, Self>, grid: &Bound<'_, PyAny>) -> PyResult<Launcher> {
        refuse_inside_trace(slf.py(), &slf.get().name, "launches")?;
        Ok(Launcher {
            kernel: slf.clone().unbind(),
            grid: GridSpec::new(grid)?,
            preset: Arc::new(Preset::default()),
        })
    }

    /// Traces and compiles the specialisation these arguments select (or finds it
    /// cached) without launching it, and returns it as a
    /// [`CompiledKernelInfo`]: its registers and shared memory (Triton's
    /// `n_regs` and `metadata.shared`) and the pointer parameters it may store
    /// to. `grid=` is accepted (and ignored) as Triton's `warmup` takes one.
    #[pyo3(signature = (*args, **kwargs))]
    fn warmup(
        &self,
        py: Python<'_>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<CompiledKernelInfo> {
        refuse_inside_trace(py, &self.name, "warms up")?;
        let kwargs = match kwargs {
            Some(k) if k.contains("grid")? && !self.params.iter().any(|p| p == "grid") => {
                let rest = k.copy()?;
                rest.del_item("grid")?;
                Some(rest)
            }
            other => other.cloned(),
        };
        let bound = self.bind(args, kwargs.as_ref(), None)?;
        let selected = self.specialization(py, &bound, false)?;
        let written = selected
            .spec
            .written
            .iter()
            .map(|&slot| self.params[self.runtime_params[slot]].clone())
            .collect();
        CompiledKernelInfo::new(
            py,
            &self.name,
            selected.device.name(),
            written,
            selected.spec.compiled().resources(),
        )
    }

    #[pyo3(signature = (*_args, **_kwargs))]
    fn __call__(
        &self,
        py: Python<'_>,
        _args: &Bound<'_, PyTuple>,
        _kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        refuse_inside_trace(py, &self.name, "calls")?;
        Err(PyTypeError::new_err(format!(
            "a kernel is launched over a grid: {}[grid](...), e.g. {}[(n,)](...)",
            self.name, self.name
        )))
    }

    #[getter(r#fn)]
    fn python_function(&self, py: Python<'_>) -> Py<PyAny> {
        self.func.clone_ref(py)
    }

    #[getter]
    fn __name__(&self) -> String {
        self.name.clone()
    }

    #[getter]
    fn params(&self) -> Vec<String> {
        self.params.clone()
    }

    /// `{"traces": n, "specializations": n}`: how often this kernel was traced and
    /// how many specialisations are cached.
    fn cache_info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("traces", self.traces.load(Ordering::Relaxed))?;
        d.set_item("specializations", self.cache.lock().map(|c| c.len()).unwrap_or(0))?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!("<metile.kernel {}>", self.signature_text())
    }
}

/// A launcher's grid: fixed, or computed per launch from the arguments.
enum GridSpec {
    Fixed([u32; 3]),
    Callable(Py<PyAny>),
}

impl GridSpec {
    fn new(grid: &Bound<'_, PyAny>) -> PyResult<GridSpec> {
        let is_sequence = grid.cast::<PyTuple>().is_ok() || grid.cast::<PyList>().is_ok();
        if !is_sequence && grid.is_callable() {
            return Ok(GridSpec::Callable(grid.clone().unbind()));
        }
        parse_grid(grid).map(GridSpec::Fixed)
    }

    fn clone_ref(&self, py: Python<'_>) -> GridSpec {
        match self {
            GridSpec::Fixed(g) => GridSpec::Fixed(*g),
            GridSpec::Callable(f) => GridSpec::Callable(f.clone_ref(py)),
        }
    }

    /// The grid of one launch: a callable gets `meta`, the launch's arguments
    /// by parameter name (constexprs and defaults included) and its `num_sgs`
    /// when set, as Triton's grid functions do.
    fn resolve(&self, py: Python<'_>, kernel: &Kernel, bound: &BoundArgs<'_>) -> PyResult<[u32; 3]> {
        let f = match self {
            GridSpec::Fixed(g) => return Ok(*g),
            GridSpec::Callable(f) => f,
        };
        let meta = PyDict::new(py);
        for (name, value) in kernel.params.iter().zip(&bound.values) {
            meta.set_item(name, value)?;
        }
        if let Some(n) = bound.options.num_sgs {
            meta.set_item(OPTION_NUM_SGS, n)?;
        }
        let grid = f.call1(py, (meta,))?;
        parse_grid(grid.bind(py)).map_err(|e| {
            PyValueError::new_err(format!(
                "the grid function of {} returned an invalid grid: {}",
                kernel.name,
                e.value(py)
            ))
        })
    }
}

#[pyclass(module = "metile._metile", name = "Launcher", frozen)]
pub struct Launcher {
    kernel: Py<Kernel>,
    grid: GridSpec,
    preset: Arc<Preset>,
}

#[pymethods]
impl Launcher {
    #[pyo3(signature = (*args, **kwargs))]
    fn __call__(
        &self,
        py: Python<'_>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let kernel = self.kernel.get();
        refuse_inside_trace(py, &kernel.name, "launches")?;
        let bound = kernel.bind(args, kwargs, Some(&self.preset))?;
        let grid = self.grid.resolve(py, kernel, &bound)?;
        // An empty launch (a 0 extent) checks its arguments and compiles like any
        // other, then runs nothing; there is nothing to copy to a device for it.
        let empty = grid_is_empty(grid);
        let Selected {
            spec,
            args: kernel_args,
            device,
            staged,
            _stream_scope,
        } = kernel.specialization(py, &bound, !empty)?;
        for &slot in &spec.written {
            let i = kernel.runtime_params[slot];
            if let Some(value) = &bound.values[i] {
                ensure_writable(value, &kernel.params[i], &kernel.name)?;
            }
        }
        check_grid(grid, spec.compiled().as_ref(), device.name()).map_err(|e| runtime_error_to_py(py, e))?;
        if empty {
            return Ok(());
        }
        if device.memory().is_some() && staged.is_empty() {
            // A GPU launch only enqueues work: releasing the GIL around it would
            // cost more than the launch itself.
            // SAFETY: every buffer argument is a device address of an object in
            // `args` (the Python tuple), which outlives this call.
            let launched = unsafe { spec.launch(&kernel_args, grid, &device) };
            launched.map_err(|e| runtime_error_to_py(py, e))?;
            return show_runtime_warnings(py);
        }
        let send = SendArgs(kernel_args, staged);
        // A CPU launch can run for long: Python's signals (Ctrl-C) are checked
        // while it runs, and the first exception a handler raises stops it.
        let raised: Mutex<Option<PyErr>> = Mutex::new(None);
        let poll = || match Python::attach(|py| py.check_signals()) {
            Ok(()) => false,
            Err(e) => {
                if let Ok(mut slot) = raised.lock() {
                    slot.get_or_insert(e);
                }
                true
            }
        };
        let result = py.detach(|| {
            let args = send;
            interrupt::with_interrupt_poller(&poll, || {
                // SAFETY: every buffer argument is a live, C-contiguous array owned by
                // objects in `args` (the Python tuple), which outlive this call, or a
                // device allocation staged for it.
                unsafe { spec.launch(&args.0, grid, &device) }?;
                match device.memory() {
                    Some(memory) => copy_back(memory, &args.1, &spec.written),
                    None => Ok(()),
                }
            })
        });
        // A handler's exception wins even over a launch that finished meanwhile:
        // the signal it answered has been consumed.
        if let Some(e) = raised.into_inner().ok().flatten() {
            return Err(e);
        }
        result.map_err(|e| runtime_error_to_py(py, e))?;
        show_runtime_warnings(py)
    }

    /// The grid: a tuple of three extents, or the grid function.
    #[getter]
    fn grid(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match &self.grid {
            GridSpec::Fixed(g) => Ok((g[0], g[1], g[2]).into_pyobject(py)?.into_any().unbind()),
            GridSpec::Callable(f) => Ok(f.clone_ref(py)),
        }
    }

    /// A launcher over the same grid that passes these constexprs (and the
    /// launch options) on every launch: `kernel[grid].configure(**config)`.
    #[pyo3(signature = (**kwargs))]
    fn configure(&self, py: Python<'_>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Launcher> {
        let kernel = self.kernel.get();
        let mut values: Vec<(usize, Py<PyAny>)> = self
            .preset
            .values
            .iter()
            .map(|(i, v)| (*i, v.clone_ref(py)))
            .collect();
        let mut options = self.preset.options;
        for (key, value) in kwargs.into_iter().flat_map(|k| k.iter()) {
            let key: String = key.extract()?;
            match kernel.params.iter().position(|p| *p == key) {
                Some(i) if kernel.is_constexpr[i] => {
                    values.retain(|(j, _)| *j != i);
                    values.push((i, value.unbind()));
                }
                Some(_) => {
                    return Err(PyTypeError::new_err(format!(
                    "configure() takes constexprs and launch options; '{key}' is a runtime argument of {}",
                    kernel.signature_text()
                )))
                }
                None if options.take(&key, &value)? => {}
                None => {
                    return Err(PyTypeError::new_err(format!(
                        "{} has no constexpr '{key}'; configure() takes its constexprs and {}",
                        kernel.signature_text(),
                        options_text()
                    )))
                }
            }
        }
        Ok(Launcher {
            kernel: self.kernel.clone_ref(py),
            grid: self.grid.clone_ref(py),
            preset: Arc::new(Preset { values, options }),
        })
    }
}
