//! What `kernel.warmup(...)` returns: the compiled specialisation's resources,
//! spelled as Triton's compiled kernels spell them (`n_regs`, `n_spills`,
//! `metadata.shared`, `metadata.num_warps`), so code that sizes a persistent
//! grid from them ports as it is.

use metile_runtime::KernelResources;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

/// `compiled.metadata`: the launch configuration of a compiled kernel.
#[pyclass(module = "metile._metile", name = "KernelMetadata", frozen, get_all)]
pub struct KernelMetadata {
    /// Threadgroup (shared) memory per threadgroup in bytes; 0 where the
    /// backend has none (cpu).
    shared: usize,
    /// Simdgroups (warps) per threadgroup; `None` on cpu.
    num_warps: Option<u32>,
    /// Threads per threadgroup; `None` on cpu.
    threads_per_group: Option<u32>,
    /// The device it was compiled for.
    device: String,
}

#[pymethods]
impl KernelMetadata {
    fn __repr__(&self) -> String {
        let show = |n: Option<u32>| n.map_or_else(|| "None".to_string(), |n| n.to_string());
        format!(
            "KernelMetadata(shared={}, num_warps={}, threads_per_group={}, device={:?})",
            self.shared,
            show(self.num_warps),
            show(self.threads_per_group),
            self.device
        )
    }
}

/// A compiled kernel specialisation, as `kernel.warmup(...)` returns it.
///
/// Iterating it (or comparing it with a list) gives `written`, the names of
/// the pointer parameters the kernel may store to: what `warmup` returned
/// before it returned this object.
#[pyclass(module = "metile._metile", name = "CompiledKernel", frozen)]
pub struct CompiledKernelInfo {
    name: String,
    written: Vec<String>,
    resources: KernelResources,
    metadata: Py<KernelMetadata>,
}

impl CompiledKernelInfo {
    pub fn new(
        py: Python<'_>,
        name: &str,
        device: &str,
        written: Vec<String>,
        resources: KernelResources,
    ) -> PyResult<CompiledKernelInfo> {
        let metadata = KernelMetadata {
            shared: resources.shared_bytes.unwrap_or(0),
            num_warps: resources.threads_per_group.map(|t| t.div_ceil(32)),
            threads_per_group: resources.threads_per_group,
            device: device.to_string(),
        };
        Ok(CompiledKernelInfo {
            name: name.to_string(),
            written,
            resources,
            metadata: Py::new(py, metadata)?,
        })
    }
}

#[pymethods]
impl CompiledKernelInfo {
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// Registers per thread: the driver's count on cuda, `None` elsewhere (the
    /// msl-emu backend compiles for the CPU, and Metal does not report it).
    #[getter]
    fn n_regs(&self) -> Option<u32> {
        self.resources.registers
    }

    /// Spilled registers per thread on cuda, counted as the thread's local
    /// memory in 4-byte words (spills and local arrays, an upper bound);
    /// `None` elsewhere.
    #[getter]
    fn n_spills(&self) -> Option<u32> {
        self.resources.local_bytes.map(|b| b / 4)
    }

    #[getter]
    fn metadata(&self, py: Python<'_>) -> Py<KernelMetadata> {
        self.metadata.clone_ref(py)
    }

    /// Triton's compiled kernels load their module here; a meTile kernel is
    /// loaded when it is compiled, so this does nothing (Triton code calls it
    /// before reading `n_regs`).
    fn _init_handles(&self) {}

    /// The pointer parameters the kernel may store to.
    #[getter]
    fn written(&self) -> Vec<String> {
        self.written.clone()
    }

    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        PyList::new(py, &self.written)?.try_iter().map(Bound::into_any)
    }

    fn __len__(&self) -> usize {
        self.written.len()
    }

    fn __getitem__<'py>(&self, py: Python<'py>, index: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        PyList::new(py, &self.written)?.as_any().get_item(index)
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        if let Ok(other) = other.cast::<CompiledKernelInfo>() {
            let other = other.get();
            return self.name == other.name && self.written == other.written;
        }
        let items: Option<Vec<String>> = other
            .cast::<PyList>()
            .ok()
            .and_then(|l| l.extract().ok())
            .or_else(|| other.cast::<PyTuple>().ok().and_then(|t| t.extract().ok()));
        items.is_some_and(|items| items == self.written)
    }

    fn __repr__(&self) -> String {
        let show = |n: Option<u32>| n.map_or_else(|| "None".to_string(), |n| n.to_string());
        format!(
            "<metile compiled kernel {}: n_regs={}, n_spills={}, {}>",
            self.name,
            show(self.n_regs()),
            show(self.n_spills()),
            self.metadata.get().__repr__()
        )
    }
}
