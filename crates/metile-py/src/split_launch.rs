//! `split_k=S` launches: the option's parsing, the compilation of the two
//! kernels `metile_compiler::split_k` derives from the traced one, and their
//! launch, in order, with a pooled workspace of partial tiles (docs/gemm.md).

use crate::errors::compilation_error;
use crate::tracing::PyTileFunction;
use metile_compiler::split_k::{split_k, SplitK};
use metile_interp::KernelArg;
use metile_ir::Function;
use metile_runtime::{check_grid, CompileOptions, CompiledKernel, Device, RuntimeError, WorkspacePool};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBool;
use std::sync::Arc;

pub const OPTION_SPLIT_K: &str = "split_k";

/// The most splits: the partial kernel's grid multiplies axis 2 by the count,
/// and CUDA allows 65535 blocks along it.
pub const MAX_SPLIT_K: u32 = 65535;

/// Program ids and workspace offsets are i32.
const MAX_WORKSPACE_ELEMS: u64 = i32::MAX as u64;

static WORKSPACES: WorkspacePool = WorkspacePool::new();

/// `split_k=value`: an int from 1 (no split) to [`MAX_SPLIT_K`].
pub fn parse_split_k(value: &Bound<'_, PyAny>) -> PyResult<u32> {
    let repr = || value.repr().map(|r| r.to_string()).unwrap_or_default();
    if value.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "split_k is the number of programs that share each output tile's K loop and must be an int, got {}",
            repr()
        )));
    }
    let n: i64 = value.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "split_k is the number of programs that share each output tile's K loop and must be an int, got {}",
            repr()
        ))
    })?;
    u32::try_from(n)
        .ok()
        .filter(|n| (1..=MAX_SPLIT_K).contains(n))
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "split_k must be from 1 (no split) to {MAX_SPLIT_K}, got {}",
                repr()
            ))
        })
}

/// The kernel a split launch runs first, and the workspace it needs.
pub struct SplitKernels {
    partial: Arc<dyn CompiledKernel>,
    splits: u32,
    tile_elems: usize,
}

/// Derives the two kernels of `split_k=splits` from `func` and compiles them:
/// the partial one, and the finishing one (returned second), which takes the
/// place of the kernel in the specialisation.
pub fn compile_split(
    py: Python<'_>,
    func: &Function,
    splits: u32,
    device: &Arc<dyn Device>,
    options: &CompileOptions,
    compile_error: impl Fn(RuntimeError) -> PyErr,
) -> PyResult<(SplitKernels, Arc<dyn CompiledKernel>)> {
    let split = split(py, func, splits)?;
    let partial = device
        .compile(Arc::new(split.partial), options)
        .map_err(&compile_error)?;
    let finish = device
        .compile(Arc::new(split.finish), options)
        .map_err(&compile_error)?;
    let kernels = SplitKernels {
        partial,
        splits,
        tile_elems: split.tile_elems,
    };
    Ok((kernels, finish))
}

fn split(py: Python<'_>, func: &Function, splits: u32) -> PyResult<SplitK> {
    split_k(func, splits).map_err(|e| {
        compilation_error(
            py,
            &format!("split_k={splits} cannot split kernel {}: {}", func.name, e.reason),
            &e.loc,
        )
    })
}

impl SplitKernels {
    /// The partial kernel's grid and the workspace's f32 elements for a launch
    /// over `grid`, checked.
    fn plan(&self, grid: [u32; 3], device: &str) -> Result<([u32; 3], usize), RuntimeError> {
        let s = self.splits;
        let z = grid[2].saturating_mul(s);
        let partial_grid = [grid[0], grid[1], z];
        let limit = self.partial.max_grid()[2];
        if z > limit {
            return Err(RuntimeError::InvalidLaunch(format!(
                "split_k={s} runs {s} programs per output tile along grid axis 2: {} x {s} = {} exceeds the \
                 {limit} the {device} device allows there; use a smaller split_k",
                grid[2],
                u64::from(grid[2]) * u64::from(s)
            )));
        }
        check_grid(partial_grid, self.partial.as_ref(), device)?;
        let programs = grid.iter().map(|&g| u64::from(g)).product::<u64>();
        let elems = programs
            .saturating_mul(u64::from(s))
            .saturating_mul(self.tile_elems as u64);
        if elems > MAX_WORKSPACE_ELEMS {
            return Err(RuntimeError::InvalidLaunch(format!(
                "split_k={s} over {programs} programs of {} accumulator elements needs {elems} f32 partial \
                 sums; at most {MAX_WORKSPACE_ELEMS} are addressable, so use a smaller split_k or grid",
                self.tile_elems
            )));
        }
        Ok((partial_grid, elems as usize))
    }

    /// Launches the partial kernel, then `finish`, sharing a workspace.
    ///
    /// # Safety
    /// As [`CompiledKernel::launch`] for `args`.
    pub unsafe fn launch(
        &self,
        finish: &dyn CompiledKernel,
        args: &[KernelArg],
        grid: [u32; 3],
        device: &Arc<dyn Device>,
    ) -> Result<(), RuntimeError> {
        let (partial_grid, elems) = self.plan(grid, device.name())?;
        let workspace = WORKSPACES.take(device, elems * std::mem::size_of::<f32>())?;
        let mut all = Vec::with_capacity(args.len() + 1);
        all.extend_from_slice(args);
        all.push(workspace.f32_arg(elems));
        // SAFETY: the caller's arguments, and the workspace, which lives until
        // it goes back to the pool (later launches reuse it only after these).
        let launched = unsafe { self.partial.launch(&all, partial_grid) }
            .and_then(|()| unsafe { finish.launch(&all, grid) });
        WORKSPACES.give_back(device, workspace);
        launched
    }
}

/// `split_k(func, splits)`: the partial and finishing kernels (traced
/// functions, for `compile_msl` / `compile_cuda`) that `split_k=splits`
/// launches in place of `func`.
#[pyfunction]
#[pyo3(name = "split_k")]
pub fn split_k_py(
    py: Python<'_>,
    func: &Bound<'_, PyTileFunction>,
    splits: &Bound<'_, PyAny>,
) -> PyResult<(PyTileFunction, PyTileFunction)> {
    let splits = parse_split_k(splits)?;
    if splits < 2 {
        return Err(PyValueError::new_err(
            "split_k=1 runs the kernel unchanged; there is nothing to split",
        ));
    }
    let s = split(py, &func.get().func, splits)?;
    Ok((PyTileFunction::new(s.partial), PyTileFunction::new(s.finish)))
}
