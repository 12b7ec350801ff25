//! Looking at compilation stages from Python without launching: the MSL (and GPU
//! IR) or the CUDA C++ a traced kernel compiles to. Used by the benchmarks and by people tuning
//! kernels; `METILE_DEBUG` prints the same text during normal launches.

use std::sync::OnceLock;

use crate::errors::compilation_error;
use crate::tracing::PyTileFunction;
use metile_compiler::{compile, AppleArch, CompileError, CompileOptions, Kernel, MslKernel, MslVersion};
use metile_ir::gpu_ir::GpuFunction;
use pyo3::exceptions::PyKeyError;
use pyo3::prelude::*;
use pyo3::types::PyString;

const KEYS: [&str; 6] = [
    "msl",
    "kernel_name",
    "threads_per_group",
    "threadgroup_bytes",
    "gpu_ir",
    "language_version",
];

/// The result of `compile_msl`: a read-only mapping with the keys "msl",
/// "kernel_name", "threads_per_group", "threadgroup_bytes", "gpu_ir" and
/// "language_version" (the MSL version, "3.1" or "4.0"). The GPU IR is printed
/// the first time it is asked for (most callers only want the MSL).
#[pyclass(module = "metile._metile", name = "MslCompilation", frozen, mapping)]
pub struct PyMslCompilation {
    kernel: MslKernel,
    gpu: GpuFunction,
    gpu_ir: OnceLock<String>,
}

impl PyMslCompilation {
    fn gpu_ir(&self) -> &str {
        self.gpu_ir
            .get_or_init(|| metile_ir::print_gpu_function(&self.gpu))
    }
}

#[pymethods]
impl PyMslCompilation {
    fn __getitem__(&self, py: Python<'_>, key: &str) -> PyResult<Py<PyAny>> {
        Ok(match key {
            "msl" => PyString::new(py, &self.kernel.source).into_any().unbind(),
            "kernel_name" => PyString::new(py, &self.kernel.kernel_name).into_any().unbind(),
            "threads_per_group" => self
                .kernel
                .threads_per_group
                .into_pyobject(py)?
                .into_any()
                .unbind(),
            "threadgroup_bytes" => self
                .gpu
                .threadgroup_bytes()
                .into_pyobject(py)?
                .into_any()
                .unbind(),
            "gpu_ir" => PyString::new(py, self.gpu_ir()).into_any().unbind(),
            "language_version" => {
                let version = match self.kernel.language_version {
                    MslVersion::V3_1 => "3.1",
                    MslVersion::V3_2 => "3.2",
                    MslVersion::V4_0 => "4.0",
                };
                PyString::new(py, version).into_any().unbind()
            }
            _ => return Err(PyKeyError::new_err(key.to_string())),
        })
    }

    fn __len__(&self) -> usize {
        KEYS.len()
    }

    fn __contains__(&self, key: &Bound<'_, PyAny>) -> bool {
        key.extract::<&str>().is_ok_and(|k| KEYS.contains(&k))
    }

    fn __iter__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.keys().into_pyobject(py)?.try_iter()?.into_any().unbind())
    }

    fn keys(&self) -> Vec<&'static str> {
        KEYS.to_vec()
    }

    #[pyo3(signature = (key, default=None))]
    fn get(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        default: Option<Py<PyAny>>,
    ) -> PyResult<Option<Py<PyAny>>> {
        match key.extract::<&str>() {
            Ok(k) if KEYS.contains(&k) => self.__getitem__(py, k).map(Some),
            _ => Ok(default),
        }
    }

    fn __repr__(&self) -> String {
        format!("<metile MslCompilation {}>", self.kernel.kernel_name)
    }
}

/// `{"msl": str, "kernel_name": str, "threads_per_group": int, "gpu_ir": str, ...}`
/// (as a read-only mapping) for a traced kernel (`metile._frontend.specialize(...)`'s
/// result), compiled for the Apple GPU family `arch` ("apple" or "apple10").
#[pyfunction]
#[pyo3(name = "compile_msl", signature = (func, num_sgs=None, arch=None, **passes))]
pub fn compile_msl_py(
    py: Python<'_>,
    func: &Bound<'_, PyTileFunction>,
    num_sgs: Option<u32>,
    arch: Option<&Bound<'_, PyAny>>,
    passes: Option<&Bound<'_, pyo3::types::PyDict>>,
) -> PyResult<PyMslCompilation> {
    let target = match arch {
        Some(a) if !a.is_none() => crate::kernel::parse_arch(a)?.target(),
        _ => AppleArch::default().target(),
    };
    let f = func.get().func.clone();
    let options = CompileOptions {
        num_sgs,
        passes: parse_passes(passes)?,
        ..Default::default()
    };
    let compiled = py.detach(|| -> Result<_, CompileError> {
        let compiled = compile(&f, &options, &target)?;
        match compiled.kernel {
            Kernel::Msl(kernel) => Ok(PyMslCompilation {
                kernel,
                gpu: compiled.gpu,
                gpu_ir: OnceLock::new(),
            }),
            Kernel::Cuda(_) => Err(CompileError::new(
                "kernel",
                "internal compiler error: an Apple target gave no MSL",
                metile_ir::Loc::unknown(),
            )),
        }
    });
    compiled.map_err(|e| {
        compilation_error(
            py,
            &format!("cannot compile `{}` for Apple GPUs: {}", e.op, e.reason),
            &e.loc,
        )
    })
}

/// Pass switches given by keyword (`prefetch=False`, ...).
fn parse_passes(kwargs: Option<&Bound<'_, pyo3::types::PyDict>>) -> PyResult<metile_compiler::Passes> {
    let mut passes = metile_compiler::Passes::default();
    for (key, value) in kwargs.into_iter().flat_map(|k| k.iter()) {
        let key: String = key.extract()?;
        let on = value.cast::<pyo3::types::PyBool>().map_err(|_| {
            pyo3::exceptions::PyTypeError::new_err(format!(
                "the pass {key} is switched on or off with True or False, got {}",
                value.repr().map(|r| r.to_string()).unwrap_or_default()
            ))
        })?;
        if !passes.set(&key, on.is_true()) {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "unknown pass '{key}'; the passes are {}",
                metile_compiler::Passes::NAMES.join(", ")
            )));
        }
    }
    Ok(passes)
}

/// `dot_plan(m, n, k, dtype, num_sgs, arch="apple", **passes)` (`arch`: "apple",
/// "apple10" or "sm_XY"): how `dot` of
/// an `m x k` by `k x n` tile of `dtype` runs on `num_sgs` simdgroups, as a
/// dict (atom, simdgroup grid, atom tiles per simdgroup, staged `k`, scratch
/// bytes, row padding, bank conflicts of the fragment reads, reads per matrix
/// instruction), or `None` where the generic path runs.
#[pyfunction]
#[pyo3(name = "dot_plan", signature = (m, n, k, dtype, num_sgs, arch="apple", **passes))]
#[allow(clippy::too_many_arguments)]
pub fn dot_plan_py<'py>(
    py: Python<'py>,
    m: usize,
    n: usize,
    k: usize,
    dtype: &str,
    num_sgs: usize,
    arch: &str,
    passes: Option<&Bound<'_, pyo3::types::PyDict>>,
) -> PyResult<Option<Bound<'py, pyo3::types::PyDict>>> {
    let target = match AppleArch::parse(arch) {
        Some(apple) => apple.target(),
        None => nvidia_target(arch)?,
    };
    let switches = parse_passes(passes)?.resolve(&target);
    let dtype = metile_ir::DType::parse(dtype).ok_or_else(|| {
        pyo3::exceptions::PyValueError::new_err(format!(
            "unknown dtype '{dtype}'; dot takes f32, f16 or bf16"
        ))
    })?;
    let Some(r) = metile_compiler::dot_tiling::report(&target, &switches, (m, n, k), dtype, num_sgs * 32)
    else {
        return Ok(None);
    };
    let d = pyo3::types::PyDict::new(py);
    d.set_item("atom", r.atom)?;
    d.set_item("warps", r.warps)?;
    d.set_item("reps", r.reps)?;
    d.set_item("staged_k", r.staged_k)?;
    d.set_item("staged_bytes", r.staged_bytes)?;
    d.set_item("pad_bytes", r.pad_bytes)?;
    d.set_item("bank_conflicts", r.conflicts)?;
    d.set_item("reads_per_mma", r.reads_per_mma)?;
    Ok(Some(d))
}

/// The NVIDIA target named `sm_XY` (compute capability X.Y).
fn nvidia_target(arch: &str) -> PyResult<metile_compiler::Target> {
    match metile_compiler::Target::parse(arch) {
        Some(t) if matches!(t.kind, metile_compiler::TargetKind::Nvidia { .. }) => Ok(t),
        _ => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "arch must name an NVIDIA architecture from sm_70 on, such as 'sm_80' or 'sm_90', got '{arch}'"
        ))),
    }
}

/// `{"cuda": str, "kernel_name": str, "threads_per_group": int, "shared_bytes": int,
/// "repack": list}` for a traced kernel: the CUDA C++ the cuda backend hands
/// NVRTC for `arch` (no GPU needed), and the repack step a launch plan runs
/// before it.
#[pyfunction]
#[pyo3(name = "compile_cuda", signature = (func, num_sgs=None, arch="sm_90", **passes))]
pub fn compile_cuda_py<'py>(
    py: Python<'py>,
    func: &Bound<'_, PyTileFunction>,
    num_sgs: Option<u32>,
    arch: &str,
    passes: Option<&Bound<'_, pyo3::types::PyDict>>,
) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    let target = nvidia_target(arch)?;
    let f = func.get().func.clone();
    let (print_after, record_stages) = metile_runtime::debug::pipeline_requests();
    let options = CompileOptions {
        num_sgs,
        passes: parse_passes(passes)?,
        print_after,
        record_stages,
        ..Default::default()
    };
    let compiled = py.detach(|| compile(&f, &options, &target)).map_err(|e| {
        compilation_error(
            py,
            &format!("cannot compile `{}` for NVIDIA GPUs: {}", e.op, e.reason),
            &e.loc,
        )
    })?;
    metile_runtime::debug::report_run(&f.name, arch, &compiled.printed, &compiled.records, record_stages);
    let metile_compiler::Kernel::Cuda(k) = compiled.kernel else {
        return Err(crate::errors::CompilationError::new_err(format!(
            "internal: {arch} compiled to another language"
        )));
    };
    let d = pyo3::types::PyDict::new(py);
    d.set_item("repack", repack_step(py, &k)?)?;
    d.set_item("cuda", k.source)?;
    d.set_item("kernel_name", k.kernel_name)?;
    d.set_item("threads_per_group", k.threads_per_group)?;
    d.set_item("shared_bytes", k.shared_bytes)?;
    Ok(d)
}

/// The kernel's repack step in a launch plan (`launch_plan::plan_repack`): one
/// dict per operand a launch may copy into aligned rows (its tensor map's
/// number, buffer, dtype, extent and stride as `("arg", i)` or
/// `("const", n)`, and box); empty where the kernel has none.
fn repack_step<'py>(
    py: Python<'py>,
    kernel: &metile_compiler::CudaKernel,
) -> PyResult<Bound<'py, pyo3::types::PyList>> {
    use metile_ir::gpu_ir::LaunchValue;
    let launch_value = |v: LaunchValue| match v {
        LaunchValue::Arg(i) => ("arg", i as i64),
        LaunchValue::Const(c) => ("const", c),
    };
    let list = pyo3::types::PyList::empty(py);
    let operands = metile_compiler::launch_plan::plan_repack(kernel).map_or_else(Vec::new, |r| r.operands);
    for o in operands {
        let d = pyo3::types::PyDict::new(py);
        d.set_item("map", o.map)?;
        d.set_item("buffer", o.buffer())?;
        d.set_item("dtype", o.spec.dtype.name())?;
        d.set_item("rows", launch_value(o.spec.rows))?;
        d.set_item("cols", launch_value(o.spec.cols))?;
        d.set_item("stride", launch_value(o.spec.stride))?;
        d.set_item("box", (o.spec.box_rows, o.spec.box_cols))?;
        list.append(d)?;
    }
    Ok(list)
}

/// The pass switches (launch options, `metile.Config` keys), from the
/// compiler's policy table.
#[pyfunction]
fn pass_names() -> Vec<&'static str> {
    metile_compiler::Passes::NAMES.to_vec()
}

/// Every value `METILE_DEBUG` takes (its fixed names, then the stage names).
#[pyfunction]
fn debug_names() -> Vec<&'static str> {
    metile_runtime::debug::debug_names()
}

/// The compile pipeline's stages in order, as `(name, level, phase, switch)`
/// tuples (`switch` is None for stages that always run).
#[pyfunction]
fn pipeline_stages() -> Vec<(&'static str, &'static str, &'static str, Option<&'static str>)> {
    use metile_compiler::pipeline::{Phase, STAGES};
    STAGES
        .iter()
        .map(|s| {
            let phase = match s.phase {
                Phase::Trace => "trace",
                Phase::Target => "target",
            };
            (s.name, s.level.name(), phase, s.switch)
        })
        .collect()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyMslCompilation>()?;
    m.add_function(wrap_pyfunction!(pass_names, m)?)?;
    m.add_function(wrap_pyfunction!(debug_names, m)?)?;
    m.add_function(wrap_pyfunction!(pipeline_stages, m)?)?;
    m.add_function(wrap_pyfunction!(compile_msl_py, m)?)?;
    m.add_function(wrap_pyfunction!(compile_cuda_py, m)?)?;
    m.add_function(wrap_pyfunction!(dot_plan_py, m)?)?;
    // A mapping to Python code that checks (isinstance(x, Mapping)).
    m.py()
        .import("collections.abc")?
        .getattr("Mapping")?
        .call_method1("register", (m.getattr("MslCompilation")?,))?;
    Ok(())
}
