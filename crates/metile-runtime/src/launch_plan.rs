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

#[cfg(test)]
mod tests {
    use super::*;
    use metile_compiler::launch_plan::{RepackOperand, Workspace};
    use metile_ir::gpu_ir::{LaunchValue, TensorMapSpec};
    use metile_ir::{Builder, DType, Function};
    use std::sync::Mutex;

    type Log = Arc<Mutex<Vec<String>>>;

    fn repack() -> Repack {
        let spec = TensorMapSpec {
            buffer: 0,
            dtype: DType::F16,
            rows: LaunchValue::Arg(1),
            cols: LaunchValue::Arg(2),
            stride: LaunchValue::Arg(2),
            box_rows: 128,
            box_cols: 64,
            swizzle_bytes: 128,
            stacked: false,
        };
        Repack {
            operands: vec![RepackOperand { map: 0, spec }],
            workspace: Workspace::AlignedRows,
        }
    }

    /// Records how each launch ran: a kernel with tensor maps (named
    /// `mapped*`) has the repack step `repack()`.
    struct Recording {
        name: String,
        repack: Option<Repack>,
        log: Log,
    }

    impl CompiledKernel for Recording {
        unsafe fn launch(&self, _args: &[KernelArg], grid: [u32; 3]) -> Result<(), RuntimeError> {
            self.log.lock().unwrap().push(format!("{} {grid:?}", self.name));
            Ok(())
        }

        fn repack(&self) -> Option<&Repack> {
            self.repack.as_ref()
        }

        unsafe fn launch_repacking(
            &self,
            repack: &Repack,
            _args: &[KernelArg],
            grid: [u32; 3],
        ) -> Result<(), RuntimeError> {
            let operands = repack.operands.len();
            let line = format!("{} {grid:?} after repacking {operands}", self.name);
            self.log.lock().unwrap().push(line);
            Ok(())
        }
    }

    struct Fake {
        log: Log,
    }

    impl Device for Fake {
        fn name(&self) -> &'static str {
            "fake"
        }

        fn compile(
            &self,
            func: Arc<Function>,
            _options: &CompileOptions,
        ) -> Result<Arc<dyn CompiledKernel>, RuntimeError> {
            Ok(Arc::new(Recording {
                name: func.name.clone(),
                repack: func.name.starts_with("mapped").then(repack),
                log: self.log.clone(),
            }))
        }

        fn synchronize(&self) -> Result<(), RuntimeError> {
            Ok(())
        }
    }

    fn function(name: &str) -> Function {
        Builder::new(name).finish().unwrap()
    }

    fn run(plan: LaunchPlan, grid: [u32; 3]) -> (CompiledPlan, Vec<String>) {
        let log = Log::default();
        let device: Arc<dyn Device> = Arc::new(Fake { log: log.clone() });
        let compiled = CompiledPlan::compile(plan, &device, &CompileOptions::default()).unwrap();
        // SAFETY: no argument; the fake kernels read nothing.
        unsafe { compiled.launch(&[], grid, &device) }.unwrap();
        let lines = log.lock().unwrap().clone();
        (compiled, lines)
    }

    #[test]
    fn a_compiled_kernel_with_a_repack_step_runs_it_before_each_launch() {
        let (compiled, log) = run(LaunchPlan::single(function("mapped")), [3, 2, 1]);
        let steps: Vec<_> = compiled.steps().map(|(s, r)| (s.kernel, r.cloned())).collect();
        assert_eq!(steps, [(0, Some(repack()))]);
        assert_eq!(log, ["mapped [3, 2, 1] after repacking 1"]);
        let (_, log) = run(LaunchPlan::single(function("plain")), [3, 2, 1]);
        assert_eq!(log, ["plain [3, 2, 1]"]);
    }

    #[test]
    fn each_step_of_a_plan_gets_its_own_kernels_repack_step() {
        // As split-K's: the partial kernel (tensor maps) over axis 2 times the
        // splits, then the finishing one (none) over the launch's grid.
        let plan = LaunchPlan {
            kernels: vec![function("mapped_partial"), function("finish")],
            steps: vec![
                Step {
                    kernel: 0,
                    grid: StepGrid::SplitAxis2 { splits: 4 },
                },
                Step {
                    kernel: 1,
                    grid: StepGrid::Launch,
                },
            ],
            workspace: Some(Workspace::PartialTiles {
                splits: 4,
                tile_elems: 16,
            }),
            repacks: Vec::new(),
        };
        let (_, log) = run(plan, [2, 2, 1]);
        assert_eq!(
            log,
            ["mapped_partial [2, 2, 4] after repacking 1", "finish [2, 2, 1]"]
        );
    }

    #[test]
    fn an_artifact_launch_runs_its_kernels_repack_step() {
        let log = Log::default();
        let kernel = Recording {
            name: "mapped".into(),
            repack: Some(repack()),
            log: log.clone(),
        };
        // SAFETY: no argument; the fake kernel reads nothing.
        unsafe { launch_alone(&kernel, &[], [5, 1, 1]) }.unwrap();
        assert_eq!(*log.lock().unwrap(), ["mapped [5, 1, 1] after repacking 1"]);
    }

    #[test]
    fn a_shared_workspace_sized_by_copies_is_an_internal_error() {
        let log = Log::default();
        let device: Arc<dyn Device> = Arc::new(Fake { log });
        let mut plan = LaunchPlan::single(function("plain"));
        plan.workspace = Some(Workspace::AlignedRows);
        let compiled = CompiledPlan::compile(plan, &device, &CompileOptions::default()).unwrap();
        // SAFETY: no argument; the fake kernel reads nothing.
        let e = unsafe { compiled.launch(&[], [1, 1, 1], &device) }.unwrap_err();
        assert!(e.to_string().contains("sized only by its copies"), "{e}");
    }
}
