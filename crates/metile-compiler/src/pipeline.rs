//! The compile pipeline: one ordered table of named stages ([`STAGES`]), each
//! with its level, the pass switch that turns it on or off (defaults per
//! target in [`crate::policy`]) and the phase it runs in. Everything that turns
//! traced Tile IR into a kernel's source runs here, in this order:
//!
//! - the **trace** phase ([`prepare`]), once per traced specialisation and for
//!   every backend (the cpu interpreter runs its result): kernel checks and the
//!   target-independent Tile IR clean-ups;
//! - the **target** phase ([`compile`]), per GPU target: target refusals,
//!   the threadgroup size, the Tile IR passes that serve the GPU (L2 ordering,
//!   `dot` operand carries), layout assignment, lowering, the GPU IR passes
//!   and emission.
//!
//! The verifier runs after every stage that changed its IR (an unchanged IR is
//! the one already verified). Each run records what every stage did ([`StageRecord`]:
//! ran, skipped, changed, time), which `METILE_DEBUG=pipeline` prints, and the
//! IR after the stages [`CompileOptions::print_after`] names (`METILE_DEBUG=<stage>`).
//! `docs/pipeline.md` describes the stages.

use std::fmt::Write as _;
use std::time::Instant;

use metile_ir::gpu_ir::GpuFunction;
use metile_ir::{print_function, print_gpu_function, verify, verify_gpu, Function, IrError};

use crate::cuda::{self, CudaKernel};
use crate::error::{CompileError, CompileResult};
use crate::layout_assign::{self, Assignment};
use crate::msl::{self, MslKernel};
use crate::policy::{Passes, Switches};
use crate::target::{Target, TargetKind};
use crate::{dot_tiling, gpu_passes, l2_order, lower, prefetch, sink, tile_passes};

/// The most threadgroup buffers an asynchronous `dot` operand pipeline uses
/// (tiles in flight plus the one being multiplied).
const MAX_PIPELINE_STAGES: usize = 4;

/// Per-compilation choices that are not part of the Tile IR.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CompileOptions {
    /// Simdgroups per threadgroup; `None` applies the default rule (see
    /// `layout_assign`). Kernels with thread-level ops must use the count they
    /// were traced for.
    pub num_sgs: Option<u32>,
    /// Also return the GPU IR text (for `METILE_DEBUG=gpu_ir`).
    pub keep_gpu_ir: bool,
    /// The pass switches a launch gave (the policy table decides the rest).
    pub passes: Passes,
    /// Stages after which the IR is printed into [`Compilation::printed`]
    /// (`METILE_DEBUG=<stage>`); a name that is no stage prints nothing.
    pub print_after: Vec<String>,
    /// Record what each stage did and its time into [`Compilation::records`]
    /// (`METILE_DEBUG=pipeline`); ordinary compiles record nothing.
    pub record_stages: bool,
    /// Keep the register layout of every tile value into
    /// [`Compilation::layouts`] (`METILE_DEBUG=layouts`).
    pub keep_layouts: bool,
}

/// What a stage works on: the level of the IR it reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Level {
    /// Tile IR (tile-granular SSA).
    Tile,
    /// Layout assignment over the Tile IR.
    Layout,
    /// GPU IR (per-thread SSA).
    Gpu,
    /// The kernel's source (MSL or CUDA C++).
    Emit,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::Tile => "tile",
            Level::Layout => "layout",
            Level::Gpu => "gpu",
            Level::Emit => "emit",
        }
    }
}

/// When a stage runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Once per traced specialisation ([`prepare`]), for every backend.
    Trace,
    /// Per GPU target ([`compile`]).
    Target,
}

/// One row of the stage table.
#[derive(Clone, Copy, Debug)]
pub struct StageSpec {
    /// The stage's name, after the function it runs (`METILE_DEBUG=<name>`).
    pub name: &'static str,
    pub level: Level,
    pub phase: Phase,
    /// The pass switch (`crate::policy::SWITCHES`) that turns the stage on
    /// or off; `None` for stages that always run.
    pub switch: Option<&'static str>,
    pub doc: &'static str,
    run: StageFn,
}

/// A stage's work: `Ok(None)` when it did not apply, else whether it changed the IR.
type StageFn = fn(&mut Work<'_>) -> CompileResult<Option<bool>>;

/// Every stage, in the order it runs. A name may repeat (`clean_up` runs
/// after each group of Tile IR passes that changed something).
pub const STAGES: &[StageSpec] = &[
    StageSpec {
        name: "check_kernel",
        level: Level::Tile,
        phase: Phase::Trace,
        switch: None,
        doc: "refuses traced kernels no backend runs (thread-level ops misused, ...)",
        run: run_check_kernel,
    },
    StageSpec {
        name: "clean_up",
        level: Level::Tile,
        phase: Phase::Trace,
        switch: None,
        doc: "constant folding, lockstep counters, common-subexpression and dead-code elimination to a fixed point",
        run: run_clean_up,
    },
    StageSpec {
        name: "resolve_absent_lanes",
        level: Level::Tile,
        phase: Phase::Trace,
        switch: None,
        doc: "makes absent lanes explicit (docs/language.md)",
        run: run_resolve_absent_lanes,
    },
    StageSpec {
        name: "clean_up",
        level: Level::Tile,
        phase: Phase::Trace,
        switch: None,
        doc: "clean-ups of what the passes before added",
        run: run_clean_up,
    },
    StageSpec {
        name: "refuse_missing_dtypes",
        level: Level::Tile,
        phase: Phase::Target,
        switch: None,
        doc: "refuses dtypes the target cannot compute in (f64 on Apple GPUs)",
        run: run_refuse_missing_dtypes,
    },
    StageSpec {
        name: "choose_threads",
        level: Level::Layout,
        phase: Phase::Target,
        switch: None,
        doc: "the threadgroup size (docs/lowering.md)",
        run: run_choose_threads,
    },
    StageSpec {
        name: "l2_order",
        level: Level::Tile,
        phase: Phase::Target,
        switch: Some("l2_order"),
        doc: "2-D GEMM grids run in groups of rows that share operand tiles in L2",
        run: run_l2_order,
    },
    StageSpec {
        name: "clean_up",
        level: Level::Tile,
        phase: Phase::Target,
        switch: None,
        doc: "clean-ups of what the passes before added",
        run: run_clean_up,
    },
    StageSpec {
        name: "prefetch_dot_operands_async",
        level: Level::Tile,
        phase: Phase::Target,
        switch: Some("async_copy"),
        doc: "dot operands carried several iterations ahead, for the asynchronous ring",
        run: run_prefetch_async,
    },
    StageSpec {
        name: "prefetch_dot_operands",
        level: Level::Tile,
        phase: Phase::Target,
        switch: Some("prefetch"),
        doc: "dot operands loaded one iteration ahead, in registers",
        run: run_prefetch_registers,
    },
    StageSpec {
        name: "relax_precision",
        level: Level::Tile,
        phase: Phase::Target,
        switch: Some("relaxed_math"),
        doc: "approximate exp and division where only 16-bit results depend on them",
        run: run_relax_precision,
    },
    StageSpec {
        name: "clean_up",
        level: Level::Tile,
        phase: Phase::Target,
        switch: None,
        doc: "clean-ups of what the passes before added",
        run: run_clean_up,
    },
    StageSpec {
        name: "layout_assign",
        level: Level::Layout,
        phase: Phase::Target,
        switch: None,
        doc: "which thread holds which element of every tile; matrix-atom plans of dots",
        run: run_layout_assign,
    },
    StageSpec {
        name: "lower",
        level: Level::Gpu,
        phase: Phase::Target,
        switch: None,
        doc: "Tile IR to GPU IR",
        run: run_lower,
    },
    StageSpec {
        name: "eliminate_common_subexpressions",
        level: Level::Gpu,
        phase: Phase::Target,
        switch: None,
        doc: "GPU IR common-subexpression elimination",
        run: run_gpu_cse,
    },
    StageSpec {
        name: "eliminate_dead_code",
        level: Level::Gpu,
        phase: Phase::Target,
        switch: None,
        doc: "GPU IR dead-code elimination",
        run: run_gpu_dce,
    },
    StageSpec {
        name: "sink_to_first_use",
        level: Level::Gpu,
        phase: Phase::Target,
        switch: Some("sink"),
        doc: "pure ops, loads and register reads moved down to just before their first reader",
        run: run_sink,
    },
    StageSpec {
        name: "emit",
        level: Level::Emit,
        phase: Phase::Target,
        switch: None,
        doc: "MSL (Apple GPUs) or CUDA C++ (NVIDIA GPUs)",
        run: run_emit,
    },
];

/// The distinct stage names, in the order they first run.
pub fn stage_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = Vec::new();
    for stage in STAGES {
        if !names.contains(&stage.name) {
            names.push(stage.name);
        }
    }
    names
}

/// The stage called `name`, if any (its first occurrence).
pub fn stage(name: &str) -> Option<&'static StageSpec> {
    STAGES.iter().find(|s| s.name == name)
}

/// What a stage did in one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Its switch is off on this target.
    SwitchedOff,
    /// It had nothing to do (no change since the last clean-up, ...).
    Skipped,
    Unchanged,
    Changed,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::SwitchedOff => "off",
            Outcome::Skipped => "skipped",
            Outcome::Unchanged => "ran",
            Outcome::Changed => "changed",
        }
    }
}

/// One stage's entry in a run's record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageRecord {
    pub name: &'static str,
    pub level: Level,
    pub switch: Option<&'static str>,
    pub outcome: Outcome,
    pub nanos: u128,
}

/// The stage list of a run with what each stage did, one line each
/// (`METILE_DEBUG=pipeline`).
pub fn describe_run(title: &str, records: &[StageRecord]) -> String {
    let mut out = format!("// pipeline of {title}\n");
    for r in records {
        let switch = r.switch.map(|s| format!(" [{s}]")).unwrap_or_default();
        let _ = writeln!(
            out,
            "//   {:<32} {:<6} {:<8} {:>9.3} ms{switch}",
            r.name,
            r.level.name(),
            r.outcome.name(),
            r.nanos as f64 / 1e6
        );
    }
    out
}

/// `(stage, IR text)` after each stage a run was asked to print.
pub type Printed = Vec<(&'static str, String)>;

/// The kernel a target compiles to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    Msl(MslKernel),
    Cuda(CudaKernel),
}

/// The result of [`compile`].
#[derive(Clone, Debug)]
pub struct Compilation {
    pub kernel: Kernel,
    /// The final GPU IR.
    pub gpu: GpuFunction,
    /// The GPU IR, printed, when [`CompileOptions::keep_gpu_ir`] was set.
    pub gpu_ir: Option<String>,
    /// What every stage did, when [`CompileOptions::record_stages`] asked.
    pub records: Vec<StageRecord>,
    /// `(stage, IR text)` after each stage [`CompileOptions::print_after`] names.
    pub printed: Printed,
    /// The register layouts of the Tile IR values the lowering put in
    /// registers, when [`CompileOptions::keep_layouts`] asked.
    pub layouts: Vec<lower::TileLayout>,
}

/// The result of [`prepare`].
#[derive(Clone, Debug)]
pub struct Prepared {
    pub func: Function,
    pub records: Vec<StageRecord>,
    pub printed: Printed,
}

/// A compilation in progress: the IR of every level reached so far.
struct Work<'a> {
    /// The target and the switches in force (none in the trace phase).
    machine: Option<(&'a Target, Switches)>,
    num_sgs: Option<u32>,
    threads: u32,
    tile: Function,
    /// The Tile IR changed since the last clean-up.
    dirty: bool,
    assignment: Option<Assignment>,
    gpu: Option<GpuFunction>,
    kernel: Option<Kernel>,
    keep_layouts: bool,
    layouts: Vec<lower::TileLayout>,
}

/// The compile pipeline for one target and one launch's pass switches.
pub struct Pipeline<'t> {
    target: &'t Target,
    switches: Switches,
}

impl<'t> Pipeline<'t> {
    /// The pipeline on `target` with the switches `passes` gives (the policy
    /// table's defaults for the rest).
    pub fn new(target: &'t Target, passes: &Passes) -> Pipeline<'t> {
        Pipeline {
            target,
            switches: passes.resolve(target),
        }
    }

    /// The switches in force.
    pub fn switches(&self) -> &Switches {
        &self.switches
    }

    /// Whether the stage runs on this target (its switch, if any, is on).
    pub fn enabled(&self, stage: &StageSpec) -> bool {
        stage
            .switch
            .is_none_or(|s| self.switches.is_on(s).unwrap_or(false))
    }

    /// Compiles verified, prepared Tile IR to the target's kernel source.
    pub fn run(&self, func: &Function, options: &CompileOptions) -> CompileResult<Compilation> {
        verify(func).map_err(|e| CompileError::internal("tracing", e))?;
        let mut work = Work {
            machine: Some((self.target, self.switches)),
            num_sgs: options.num_sgs,
            threads: 0,
            tile: func.clone(),
            dirty: false,
            assignment: None,
            gpu: None,
            kernel: None,
            keep_layouts: options.keep_layouts,
            layouts: vec![],
        };
        let (records, printed) = run_phase(&mut work, Phase::Target, |s| self.enabled(s), options)?;
        let (Some(gpu), Some(kernel)) = (work.gpu, work.kernel) else {
            return Err(CompileError::new(
                "kernel",
                "internal compiler error: the pipeline ended without a kernel",
                metile_ir::Loc::unknown(),
            ));
        };
        let gpu_ir = options.keep_gpu_ir.then(|| print_gpu_function(&gpu));
        Ok(Compilation {
            kernel,
            gpu,
            gpu_ir,
            records,
            printed,
            layouts: work.layouts,
        })
    }
}

/// Compiles prepared Tile IR for `target`: the one entry point of every GPU
/// backend and of the Python stage inspectors.
pub fn compile(func: &Function, options: &CompileOptions, target: &Target) -> CompileResult<Compilation> {
    Pipeline::new(target, &options.passes).run(func, options)
}

/// The trace phase: checks a freshly traced function and (with `optimize`)
/// runs the target-independent Tile IR passes; of `options`, only what to
/// print and whether to time the stages matter here. Refusals name the op and
/// line; compiler bugs are [`CompileError::is_internal`].
pub fn prepare(func: Function, optimize: bool, options: &CompileOptions) -> CompileResult<Prepared> {
    let mut work = Work {
        machine: None,
        num_sgs: None,
        threads: 0,
        tile: func,
        dirty: true,
        assignment: None,
        gpu: None,
        kernel: None,
        keep_layouts: false,
        layouts: vec![],
    };
    let enabled = |s: &StageSpec| optimize || s.name == "check_kernel";
    let (records, printed) = run_phase(&mut work, Phase::Trace, enabled, options)?;
    Ok(Prepared {
        func: work.tile,
        records,
        printed,
    })
}

/// The Tile IR the cpu backend interprets: the traced function, with programs
/// renumbered by the `l2_order` stage only when the launch switched it on (the
/// CPU has no L2 to share; asked for, the interpreter checks the GPU targets'
/// numbering). `None` when that changes nothing.
pub fn prepare_for_interpreter(func: &Function, passes: &Passes) -> CompileResult<Option<Function>> {
    if passes.l2_order != Some(true) {
        return Ok(None);
    }
    let mut work = Work {
        machine: None,
        num_sgs: None,
        threads: 0,
        tile: func.clone(),
        dirty: false,
        assignment: None,
        gpu: None,
        kernel: None,
        keep_layouts: false,
        layouts: vec![],
    };
    let l2_order = STAGES.iter().filter(|s| s.name == "l2_order");
    run_stages(&mut work, l2_order, |_| true, &CompileOptions::default())?;
    Ok(work.dirty.then_some(work.tile))
}

/// Runs the one stage called `name` on Tile IR `func` for `target` (with the
/// policy's default switches, the stage's own switch aside, and the threadgroup
/// size the default rule gives), verifying after a change: a pass tested by
/// itself, as golden tests of single passes do. True if it changed `func`;
/// an error for a name that is no Tile IR stage.
pub fn run_tile_stage(name: &str, func: &mut Function, target: &Target) -> CompileResult<bool> {
    let stage = STAGES
        .iter()
        .find(|s| s.name == name && s.level == Level::Tile)
        .ok_or_else(|| unknown_stage(name, Level::Tile))?;
    let threads = layout_assign::choose_threads(func, None, target)?;
    let mut work = Work {
        machine: Some((target, Switches::defaults(target))),
        num_sgs: None,
        threads,
        tile: func.clone(),
        dirty: true,
        assignment: None,
        gpu: None,
        kernel: None,
        keep_layouts: false,
        layouts: vec![],
    };
    let changed = run_one(&mut work, stage)?;
    *func = work.tile;
    Ok(changed)
}

/// Runs the one GPU IR stage called `name` on `gpu` for `target`, verifying
/// after a change (for the target's vendor); true if it changed `gpu`.
pub fn run_gpu_stage(name: &str, gpu: &mut GpuFunction, target: &Target) -> CompileResult<bool> {
    let stage = STAGES
        .iter()
        .find(|s| s.name == name && s.level == Level::Gpu && s.name != "lower")
        .ok_or_else(|| unknown_stage(name, Level::Gpu))?;
    // GPU IR stages read no Tile IR: an empty function stands in for it.
    let tile = metile_ir::Builder::new(&gpu.name)
        .finish()
        .map_err(|e| CompileError::internal(stage.name, e))?;
    let mut work = Work {
        machine: Some((target, Switches::defaults(target))),
        num_sgs: None,
        threads: gpu.threads_per_group,
        tile,
        dirty: false,
        assignment: None,
        gpu: Some(gpu.clone()),
        kernel: None,
        keep_layouts: false,
        layouts: vec![],
    };
    let changed = run_one(&mut work, stage)?;
    if let Some(done) = work.gpu {
        *gpu = done;
    }
    Ok(changed)
}

fn run_one(work: &mut Work<'_>, stage: &StageSpec) -> CompileResult<bool> {
    let changed = (stage.run)(work)? == Some(true);
    if changed {
        work.verify_after(stage)?;
    }
    Ok(changed)
}

fn unknown_stage(name: &str, level: Level) -> CompileError {
    let names: Vec<&str> = STAGES
        .iter()
        .filter(|s| s.level == level && s.name != "lower")
        .map(|s| s.name)
        .collect();
    CompileError::new(
        "kernel",
        format!(
            "no {} stage is called '{name}'; they are {}",
            level.name(),
            names.join(", ")
        ),
        metile_ir::Loc::unknown(),
    )
}

fn run_phase(
    work: &mut Work<'_>,
    phase: Phase,
    enabled: impl Fn(&StageSpec) -> bool,
    options: &CompileOptions,
) -> CompileResult<(Vec<StageRecord>, Printed)> {
    run_stages(work, STAGES.iter().filter(|s| s.phase == phase), enabled, options)
}

fn run_stages<'s>(
    work: &mut Work<'_>,
    stages: impl Iterator<Item = &'s StageSpec>,
    enabled: impl Fn(&StageSpec) -> bool,
    options: &CompileOptions,
) -> CompileResult<(Vec<StageRecord>, Printed)> {
    let mut records = Vec::new();
    let mut printed = Vec::new();
    for stage in stages {
        let start = options.record_stages.then(Instant::now);
        let outcome = if !enabled(stage) {
            Outcome::SwitchedOff
        } else {
            match (stage.run)(work)? {
                None => Outcome::Skipped,
                Some(false) => Outcome::Unchanged,
                Some(true) => {
                    work.verify_after(stage)?;
                    Outcome::Changed
                }
            }
        };
        if let Some(start) = start {
            records.push(StageRecord {
                name: stage.name,
                level: stage.level,
                switch: stage.switch,
                outcome,
                nanos: start.elapsed().as_nanos(),
            });
        }
        if options.print_after.iter().any(|p| p == stage.name) {
            printed.push((stage.name, work.print(stage.level)));
        }
    }
    Ok((records, printed))
}

impl<'a> Work<'a> {
    fn machine(&self) -> CompileResult<(&'a Target, Switches)> {
        self.machine.ok_or_else(|| missing("a target"))
    }

    fn target(&self) -> CompileResult<&'a Target> {
        self.machine().map(|(t, _)| t)
    }

    /// The verifier of the stage's level; a stage that changed the Tile IR
    /// also leaves it to be cleaned up.
    fn verify_after(&mut self, stage: &StageSpec) -> CompileResult<()> {
        let internal = |e: IrError| CompileError::internal(stage.name, e);
        match stage.level {
            // The clean-ups verify after each of their passes that changed something.
            Level::Tile if stage.name == "clean_up" => {}
            Level::Tile => {
                verify(&self.tile).map_err(internal)?;
                self.dirty = true;
            }
            // GPU IR is verified for the target's vendor: an op only another
            // vendor's GPUs have is a compiler bug, named with the target.
            Level::Gpu => {
                if let Some(gpu) = &self.gpu {
                    let target = self.target()?;
                    verify_gpu(gpu, target.vendor()).map_err(|e| {
                        CompileError::internal(&format!("{} for {}", stage.name, target.arch_name()), e)
                    })?;
                }
            }
            Level::Layout | Level::Emit => {}
        }
        Ok(())
    }

    /// The IR of `level` as it stands, printed.
    fn print(&self, level: Level) -> String {
        match level {
            Level::Tile => print_function(&self.tile),
            Level::Layout => match &self.assignment {
                Some(a) => a.describe(),
                None => format!("// threads per group: {}\n", self.threads),
            },
            Level::Gpu => self.gpu.as_ref().map(print_gpu_function).unwrap_or_default(),
            Level::Emit => match &self.kernel {
                Some(Kernel::Msl(k)) => k.source.clone(),
                Some(Kernel::Cuda(k)) => k.source.clone(),
                None => String::new(),
            },
        }
    }
}

fn missing(what: &str) -> CompileError {
    CompileError::new(
        "kernel",
        format!("internal compiler error: a stage ran without {what}"),
        metile_ir::Loc::unknown(),
    )
}

/// The kernel checks, then the verifier on the traced function.
fn run_check_kernel(w: &mut Work<'_>) -> CompileResult<Option<bool>> {
    crate::tile_checks::check_kernel(&w.tile)?;
    verify(&w.tile).map_err(|e| CompileError::internal("tracing", e))?;
    Ok(Some(false))
}

fn run_clean_up(w: &mut Work<'_>) -> CompileResult<Option<bool>> {
    if !w.dirty {
        return Ok(None);
    }
    w.dirty = false;
    let changed = tile_passes::clean_up(&mut w.tile).map_err(|e| CompileError::internal("clean_up", e))?;
    Ok(Some(changed))
}

fn run_resolve_absent_lanes(w: &mut Work<'_>) -> CompileResult<Option<bool>> {
    Ok(Some(crate::absent_lanes::resolve_absent_lanes(&mut w.tile)))
}

fn run_refuse_missing_dtypes(w: &mut Work<'_>) -> CompileResult<Option<bool>> {
    crate::refuse_missing_dtypes(&w.tile, w.target()?)?;
    Ok(Some(false))
}

fn run_choose_threads(w: &mut Work<'_>) -> CompileResult<Option<bool>> {
    w.threads = layout_assign::choose_threads(&w.tile, w.num_sgs, w.target()?)?;
    Ok(Some(false))
}

fn run_l2_order(w: &mut Work<'_>) -> CompileResult<Option<bool>> {
    Ok(Some(l2_order::order_programs(&mut w.tile)))
}

fn run_prefetch_async(w: &mut Work<'_>) -> CompileResult<Option<bool>> {
    let ((target, switches), threads) = (w.machine()?, w.threads as usize);
    let stage_bytes =
        |shape, dtype, held| dot_tiling::ring_stage_bytes((target, &switches, threads), shape, dtype, held);
    let asynchronous = prefetch::Carry::Async {
        stage_bytes: &stage_bytes,
        budget: target.max_threadgroup_bytes,
        max_stages: MAX_PIPELINE_STAGES,
    };
    Ok(Some(prefetch::prefetch_dot_operands(&mut w.tile, &asynchronous)))
}

fn run_relax_precision(w: &mut Work<'_>) -> CompileResult<Option<bool>> {
    Ok(Some(crate::relax_precision::relax_precision(&mut w.tile)))
}

fn run_prefetch_registers(w: &mut Work<'_>) -> CompileResult<Option<bool>> {
    let keep_transposes = w.machine()?.1.k_major_b;
    Ok(Some(prefetch::prefetch_dot_operands(
        &mut w.tile,
        &prefetch::Carry::Registers { keep_transposes },
    )))
}

fn run_layout_assign(w: &mut Work<'_>) -> CompileResult<Option<bool>> {
    let (target, switches) = w.machine()?;
    w.assignment = Some(layout_assign::assign(&w.tile, w.threads, target, &switches)?);
    Ok(Some(true))
}

fn run_lower(w: &mut Work<'_>) -> CompileResult<Option<bool>> {
    let a = w
        .assignment
        .take()
        .ok_or_else(|| missing("a layout assignment"))?;
    let (gpu, layouts) = lower::lower_keeping(&w.tile, a, w.keep_layouts)?;
    w.gpu = Some(gpu);
    w.layouts = layouts;
    Ok(Some(true))
}

fn run_gpu_cse(w: &mut Work<'_>) -> CompileResult<Option<bool>> {
    let gpu = w.gpu.as_mut().ok_or_else(|| missing("GPU IR"))?;
    Ok(Some(gpu_passes::eliminate_common_subexpressions(gpu)))
}

fn run_gpu_dce(w: &mut Work<'_>) -> CompileResult<Option<bool>> {
    let gpu = w.gpu.as_mut().ok_or_else(|| missing("GPU IR"))?;
    Ok(Some(gpu_passes::eliminate_dead_code(gpu)))
}

fn run_sink(w: &mut Work<'_>) -> CompileResult<Option<bool>> {
    let gpu = w.gpu.as_mut().ok_or_else(|| missing("GPU IR"))?;
    Ok(Some(sink::sink_to_first_use(gpu)))
}

fn run_emit(w: &mut Work<'_>) -> CompileResult<Option<bool>> {
    let gpu = w.gpu.as_ref().ok_or_else(|| missing("GPU IR"))?;
    let (target, switches) = w.machine()?;
    w.kernel = Some(match target.kind {
        TargetKind::Apple(_) => Kernel::Msl(msl::emit_msl(gpu)?),
        TargetKind::Nvidia { .. } => Kernel::Cuda(cuda::emit_cuda(gpu, target, &switches)?),
    });
    Ok(Some(true))
}

#[cfg(test)]
mod tests;
