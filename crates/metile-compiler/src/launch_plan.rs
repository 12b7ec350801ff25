//! Launch plans: what one launch of a traced kernel runs, as data the runtime
//! executes. A plan lists the kernels (Tile IR, each compiled by the device
//! through the pipeline), the steps that launch them in order with the grid of
//! each, and the workspace they share. Most launches are one kernel over the
//! launch's grid; `split_k=S` is two (`crate::split_k`): the partial sums over
//! the grid with axis 2 multiplied by `S`, then the finishing kernel over the
//! launch's grid, sharing a workspace of partial tiles.

use crate::error::CompileResult;
use crate::split_k::split_k;
use metile_ir::Function;

/// How a step's grid follows from the launch's grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StepGrid {
    /// The launch's grid.
    Launch,
    /// The launch's grid with axis 2 multiplied by `splits` (split-K's partial sums).
    SplitAxis2 { splits: u32 },
}

/// One kernel launch of a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Step {
    /// Index into [`LaunchPlan::kernels`].
    pub kernel: usize,
    pub grid: StepGrid,
}

/// Scratch memory the kernels of a plan share, passed to each of them as one
/// extra f32 buffer argument after the launch's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Workspace {
    /// Split-K's partial tiles: `splits` tiles of `tile_elems` f32 elements per
    /// program of the launch's grid.
    PartialTiles { splits: u32, tile_elems: usize },
}

impl Workspace {
    /// The f32 elements a launch over `programs` programs needs (saturating).
    pub fn elems(&self, programs: u64) -> u64 {
        match *self {
            Workspace::PartialTiles { splits, tile_elems } => programs
                .saturating_mul(u64::from(splits))
                .saturating_mul(tile_elems as u64),
        }
    }
}

/// What one launch runs, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchPlan {
    pub kernels: Vec<Function>,
    pub steps: Vec<Step>,
    pub workspace: Option<Workspace>,
}

impl LaunchPlan {
    /// One kernel over the launch's grid.
    pub fn single(func: Function) -> LaunchPlan {
        LaunchPlan {
            kernels: vec![func],
            steps: vec![Step {
                kernel: 0,
                grid: StepGrid::Launch,
            }],
            workspace: None,
        }
    }

    /// The kernel launched over the launch's own grid (the last such step's):
    /// the one whose limits the grid must meet and whose resources a launch reports.
    pub fn main_kernel(&self) -> usize {
        self.steps
            .iter()
            .rev()
            .find(|s| s.grid == StepGrid::Launch)
            .map_or(0, |s| s.kernel)
    }
}

/// The plan of a launch of `func` with `split_k` programs per output tile
/// (1: no split). A kernel split-K cannot split is refused with the reason.
pub fn plan_launch(func: &Function, split_k_count: u32) -> CompileResult<LaunchPlan> {
    if split_k_count <= 1 {
        return Ok(LaunchPlan::single(func.clone()));
    }
    let split = split_k(func, split_k_count)?;
    Ok(LaunchPlan {
        kernels: vec![split.partial, split.finish],
        steps: vec![
            Step {
                kernel: 0,
                grid: StepGrid::SplitAxis2 { splits: split.splits },
            },
            Step {
                kernel: 1,
                grid: StepGrid::Launch,
            },
        ],
        workspace: Some(Workspace::PartialTiles {
            splits: split.splits,
            tile_elems: split.tile_elems,
        }),
    })
}
