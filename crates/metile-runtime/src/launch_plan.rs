//! Executing a compiler's launch plan (`metile_compiler::launch_plan`): each
//! kernel compiled by the device, then per launch the steps in order, each
//! over its grid, with the plan's workspace (from a pool, one per device)
//! passed as the last argument of every kernel. A step with a repack step is
//! run by its kernel's backend, which evaluates the launch's conditions for
//! each operand and copies or skips it before launching the kernel.

use crate::device::{check_grid, CompileOptions, CompiledKernel, Device};
use crate::error::RuntimeError;
use crate::workspace::WorkspacePool;
use metile_compiler::launch_plan::{LaunchPlan, Repack, Step, StepGrid, Workspace};
use metile_interp::KernelArg;
use std::sync::Arc;

/// Program ids and workspace offsets are i32.
const MAX_WORKSPACE_ELEMS: u64 = i32::MAX as u64;

static WORKSPACES: WorkspacePool = WorkspacePool::new();

/// A plan whose kernels the device has compiled.
pub struct CompiledPlan {
    kernels: Vec<Arc<dyn CompiledKernel>>,
    steps: Vec<Step>,
    /// Each step's repack step (its kernel's), if it has one.
    repacks: Vec<Option<Repack>>,
    workspace: Option<Workspace>,
    main: usize,
}

impl CompiledPlan {
    /// Compiles every kernel of `plan` on `device`, and gives each kernel's
    /// steps the repack step the compiler planned for the compiled kernel.
    pub fn compile(
        mut plan: LaunchPlan,
        device: &Arc<dyn Device>,
        options: &CompileOptions,
    ) -> Result<CompiledPlan, RuntimeError> {
        let main = plan.main_kernel();
        let kernels = std::mem::take(&mut plan.kernels)
            .into_iter()
            .map(|k| device.compile(Arc::new(k), options))
            .collect::<Result<Vec<_>, _>>()?;
        if main >= kernels.len() || plan.steps.iter().any(|s| s.kernel >= kernels.len()) {
            return Err(RuntimeError::InvalidLaunch(
                "internal error: a launch plan names a kernel it does not have".into(),
            ));
        }
        plan.add_repack_steps(|k| kernels[k].repack().cloned());
        let repacks = plan
            .steps
            .iter()
            .map(|s| plan.repack_of(s.kernel).cloned())
            .collect();
        Ok(CompiledPlan {
            kernels,
            steps: plan.steps,
            repacks,
            workspace: plan.workspace,
            main,
        })
    }

    /// The steps, in the order they run, each with its repack step.
    pub fn steps(&self) -> impl Iterator<Item = (&Step, Option<&Repack>)> {
        self.steps.iter().zip(self.repacks.iter().map(Option::as_ref))
    }

    /// The kernel launched over the launch's own grid: its limits and
    /// resources are the launch's.
    pub fn main(&self) -> &Arc<dyn CompiledKernel> {
        &self.kernels[self.main]
    }

    /// The grid of each step and the workspace's f32 elements for a launch
    /// over `grid`, checked against the kernels' limits.
    fn grids(&self, grid: [u32; 3], device: &str) -> Result<(Vec<[u32; 3]>, usize), RuntimeError> {
        let mut grids = Vec::with_capacity(self.steps.len());
        for step in &self.steps {
            let kernel = self.kernels[step.kernel].as_ref();
            let g = match step.grid {
                StepGrid::Launch => grid,
                StepGrid::SplitAxis2 { splits: s } => {
                    let z = grid[2].saturating_mul(s);
                    let limit = kernel.max_grid()[2];
                    if z > limit {
                        return Err(RuntimeError::InvalidLaunch(format!(
                            "split_k={s} runs {s} programs per output tile along grid axis 2: {} x {s} = {} \
                             exceeds the {limit} the {device} device allows there; use a smaller split_k",
                            grid[2],
                            u64::from(grid[2]) * u64::from(s)
                        )));
                    }
                    [grid[0], grid[1], z]
                }
            };
            check_grid(g, kernel, device)?;
            grids.push(g);
        }
        let elems = match self.workspace {
            None => 0,
            Some(w) => {
                let programs = grid.iter().map(|&g| u64::from(g)).product::<u64>();
                let Workspace::PartialTiles { splits, tile_elems } = w else {
                    return Err(RuntimeError::InvalidLaunch(
                        "internal error: a launch plan shares a workspace that is sized only by its copies"
                            .into(),
                    ));
                };
                let elems = w.elems(programs);
                if elems > MAX_WORKSPACE_ELEMS {
                    return Err(RuntimeError::InvalidLaunch(format!(
                        "split_k={splits} over {programs} programs of {tile_elems} accumulator elements needs \
                         {elems} f32 partial sums; at most {MAX_WORKSPACE_ELEMS} are addressable, so use a \
                         smaller split_k or grid"
                    )));
                }
                elems as usize
            }
        };
        Ok((grids, elems))
    }

    /// Runs the plan's steps in order over `grid`.
    ///
    /// # Safety
    /// As [`CompiledKernel::launch`] for `args`.
    pub unsafe fn launch(
        &self,
        args: &[KernelArg],
        grid: [u32; 3],
        device: &Arc<dyn Device>,
    ) -> Result<(), RuntimeError> {
        if self.workspace.is_none() && self.steps.len() == 1 {
            let kernel = self.kernels[self.steps[0].kernel].as_ref();
            // SAFETY: forwarded from the caller's contract.
            return unsafe { run_step(kernel, self.repacks[0].as_ref(), args, grid) };
        }
        let (grids, elems) = self.grids(grid, device.name())?;
        let workspace = match self.workspace {
            Some(_) => Some(WORKSPACES.take(device, elems * std::mem::size_of::<f32>())?),
            None => None,
        };
        let mut all = Vec::with_capacity(args.len() + 1);
        all.extend_from_slice(args);
        if let Some(w) = &workspace {
            all.push(w.f32_arg(elems));
        }
        let mut launched = Ok(());
        for ((step, repack), g) in self.steps().zip(grids) {
            // SAFETY: the caller's arguments, and the workspace, which lives
            // until it goes back to the pool (later launches reuse it only
            // after these).
            launched = unsafe { run_step(self.kernels[step.kernel].as_ref(), repack, &all, g) };
            if launched.is_err() {
                break;
            }
        }
        if let Some(w) = workspace {
            WORKSPACES.give_back(device, w);
        }
        launched
    }
}

/// One kernel step: the kernel over `grid`, after its repack step if it has one.
///
/// # Safety
/// As [`CompiledKernel::launch`] for `args`.
unsafe fn run_step(
    kernel: &dyn CompiledKernel,
    repack: Option<&Repack>,
    args: &[KernelArg],
    grid: [u32; 3],
) -> Result<(), RuntimeError> {
    // SAFETY: forwarded from the caller's contract.
    unsafe {
        match repack {
            Some(repack) => kernel.launch_repacking(repack, args, grid),
            None => kernel.launch(args, grid),
        }
    }
}

/// A one-kernel plan over the launch's grid, with the repack step the
/// compiler planned for the kernel: what an ahead-of-time artifact's launch runs.
///
/// # Safety
/// As [`CompiledKernel::launch`] for `args`.
pub unsafe fn launch_alone(
    kernel: &dyn CompiledKernel,
    args: &[KernelArg],
    grid: [u32; 3],
) -> Result<(), RuntimeError> {
    // SAFETY: forwarded from the caller's contract.
    unsafe { run_step(kernel, kernel.repack(), args, grid) }
}
