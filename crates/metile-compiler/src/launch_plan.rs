//! Launch plans: what one launch of a traced kernel runs, as data the runtime
//! executes. A plan lists the kernels (Tile IR, each compiled by the device
//! through the pipeline), the steps that launch them in order with the grid of
//! each, and the workspace they share. Most launches are one kernel over the
//! launch's grid; `split_k=S` is two (`crate::split_k`): the partial sums over
//! the grid with axis 2 multiplied by `S`, then the finishing kernel over the
//! launch's grid, sharing a workspace of partial tiles.
//!
//! A kernel may have a repack step (`crate::repack`), which runs before each
//! of its steps: the `dot` operands that the launch may first copy into
//! aligned rows of a workspace for the kernel's tensor maps. Which operands
//! are candidates follows from the compiled kernel, so the step is added once
//! the device has compiled it ([`LaunchPlan::add_repack_steps`]); whether a
//! launch copies each one is the runtime's to evaluate from the launch's
//! arguments and grid.

use crate::error::CompileResult;
pub use crate::repack::{plan_repack, Repack, RepackOperand};
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

/// The repack step of kernel `kernel`: it runs before each step launching
/// that kernel, over that step's grid.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RepackStep {
    /// Index into [`LaunchPlan::kernels`].
    pub kernel: usize,
    pub repack: Repack,
}

/// Scratch memory of a plan. The plan's own workspace is shared by its
/// kernels, passed to each of them as one extra f32 buffer argument after the
/// launch's own; a repack step's is the copies' and no kernel argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Workspace {
    /// Split-K's partial tiles: `splits` tiles of `tile_elems` f32 elements per
    /// program of the launch's grid.
    PartialTiles { splits: u32, tile_elems: usize },
    /// A repack step's copies: each operand copied into rows padded to a
    /// multiple of 16 bytes, each copy starting at a multiple of 256 bytes;
    /// its size follows from the operands a launch copies.
    AlignedRows,
}

impl Workspace {
    /// The f32 elements a launch over `programs` programs needs (saturating);
    /// 0 for [`Workspace::AlignedRows`], which the copies a launch makes size.
    pub fn elems(&self, programs: u64) -> u64 {
        match *self {
            Workspace::PartialTiles { splits, tile_elems } => programs
                .saturating_mul(u64::from(splits))
                .saturating_mul(tile_elems as u64),
            Workspace::AlignedRows => 0,
        }
    }
}

/// What one launch runs, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchPlan {
    pub kernels: Vec<Function>,
    pub steps: Vec<Step>,
    pub workspace: Option<Workspace>,
    /// The kernels' repack steps, at most one a kernel.
    pub repacks: Vec<RepackStep>,
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
            repacks: Vec::new(),
        }
    }

    /// Gives each kernel `k` that a step launches the repack step
    /// `repack_of(k)`, the compiled kernel's ([`plan_repack`]; `None`: it has
    /// none), replacing any it had.
    pub fn add_repack_steps(&mut self, repack_of: impl Fn(usize) -> Option<Repack>) {
        let mut launched: Vec<usize> = self.steps.iter().map(|s| s.kernel).collect();
        launched.sort_unstable();
        launched.dedup();
        self.repacks = launched
            .into_iter()
            .filter_map(|kernel| repack_of(kernel).map(|repack| RepackStep { kernel, repack }))
            .collect();
    }

    /// The repack step that runs before each step of kernel `kernel`.
    pub fn repack_of(&self, kernel: usize) -> Option<&Repack> {
        self.repacks
            .iter()
            .find(|r| r.kernel == kernel)
            .map(|r| &r.repack)
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
        repacks: Vec::new(),
    })
}
