//! meTile's compiler: Tile IR passes, and (per target) layout assignment, lowering
//! to GPU IR, GPU IR passes and the source emitters, run in order by one
//! [`pipeline::Pipeline`] from its stage table; which optional passes run on
//! which target is [`policy`]'s table.
//!
//! [`compile`] is the entry point: the Apple GPU path ends in the MSL emitter
//! ([`msl`]), the NVIDIA one in the CUDA emitter ([`cuda`]), both the
//! C-family writer (`cfamily`) in their language's dialect; they share layout
//! assignment ([`layout_assign`], on [`dist_layout`] and [`axis_info`]),
//! lowering to GPU IR ([`lower`]) and the GPU IR clean-ups ([`gpu_passes`]),
//! with the verifier after each stage that changed something.
//! `docs/pipeline.md` lists the stages; `docs/lowering.md` describes the
//! lowering: layouts, the threadgroup-size rule, conversions, reductions,
//! `dot`, and what is refused.

pub mod absent_lanes;
pub mod atoms;
pub mod axis_info;
pub(crate) mod cfamily;
pub mod cuda;
pub mod dist_layout;
pub mod dot_tiling;
pub mod error;
pub mod fp8_dot;
pub mod gpu_passes;
pub(crate) mod ir_emit;
pub mod l2_order;
pub mod launch_plan;
pub mod layout_assign;
pub mod lockstep;
pub mod lower;
pub mod msl;
pub mod pipeline;
pub mod policy;
pub mod portability;
pub mod prefetch;
pub mod relax_precision;
pub mod repack;
pub mod sink;
pub mod split_k;
pub mod target;
pub mod tile_checks;
pub mod tile_passes;
pub mod writes;

pub use cuda::{CudaKernel, CudaParam};
pub use error::{CompileError, CompileResult};
pub use msl::{MslBuiltin, MslKernel, MslParam, MslVersion};
pub use pipeline::{compile, Compilation, CompileOptions, Kernel, Pipeline};
pub use policy::{Passes, Switches};
pub use target::{AppleArch, Target, TargetKind};
pub use tile_checks::check_kernel;
pub use tile_passes::optimize_tile_ir;
pub use writes::written_params;

use cfamily::Dialect;
use metile_ir::{gpu_ir::GpuFunction, DType, Function};

/// Whether some target language reserves `name` (a kernel's identifiers
/// avoid the words of every dialect, so they are the same on every target).
pub(crate) fn reserved_by_a_dialect(name: &str) -> bool {
    msl::Msl::reserves(name) || cuda::Cuda::reserves(name)
}

/// Refuses a kernel that uses a dtype `target` cannot compute in: f64 on
/// Apple GPUs, whose Metal has no double. The error names the first op (or
/// parameter) that has an f64 value.
fn refuse_missing_dtypes(func: &Function, target: &Target) -> CompileResult<()> {
    if target.has_f64 {
        return Ok(());
    }
    let f64_in = |t: &metile_ir::Type| t.dtype() == Some(DType::F64) || t.elem.pointee() == Some(DType::F64);
    let reason = "float64 is not supported on Apple GPUs (Metal has no double); compute in float32 \
                  (x.to(metile.float32)), or run on the cpu or cuda device";
    if let Some(p) = func.params.iter().find(|p| f64_in(&func.values[p.value.index()])) {
        return Err(CompileError::new(
            "kernel",
            format!("parameter '{}' is float64: {reason}", p.name),
            metile_ir::Loc::unknown(),
        ));
    }
    let mut found: Option<(String, metile_ir::Loc)> = None;
    func.walk(&mut |op: &metile_ir::Op| {
        if found.is_none()
            && op
                .results
                .iter()
                .chain(&op.operands)
                .any(|v| f64_in(&func.values[v.index()]))
        {
            found = Some((op.kind.name().to_string(), op.loc.clone()));
        }
    });
    match found {
        Some((op, loc)) => Err(CompileError::new(op, reason, loc)),
        None => Ok(()),
    }
}

/// Compiles a Tile IR function to verified GPU IR for `target` (the
/// pipeline's stages up to the GPU IR passes; emission runs too, so a kernel
/// the emitter refuses is refused here as well).
pub fn compile_gpu_ir(
    func: &Function,
    options: &CompileOptions,
    target: &Target,
) -> CompileResult<GpuFunction> {
    compile(func, options, target).map(|c| c.gpu)
}

/// The result of [`compile_msl`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MslCompilation {
    pub kernel: MslKernel,
    /// The GPU IR, printed, when [`CompileOptions::keep_gpu_ir`] was set.
    pub gpu_ir: Option<String>,
}

/// Compiles a Tile IR function to one MSL kernel for every Apple GPU meTile
/// supports (Apple7 and later).
pub fn compile_msl(func: &Function, options: &CompileOptions) -> CompileResult<MslCompilation> {
    compile_msl_for(func, options, AppleArch::default())
}

/// Compiles a Tile IR function to one MSL kernel for Apple GPUs of family
/// `arch` (Apple10 kernels may need MSL 4.0: [`MslKernel::language_version`]).
pub fn compile_msl_for(
    func: &Function,
    options: &CompileOptions,
    arch: AppleArch,
) -> CompileResult<MslCompilation> {
    let compiled = compile(func, options, &arch.target())?;
    match compiled.kernel {
        Kernel::Msl(kernel) => Ok(MslCompilation {
            kernel,
            gpu_ir: compiled.gpu_ir,
        }),
        Kernel::Cuda(_) => Err(wrong_kernel("an Apple")),
    }
}

/// The result of [`compile_cuda`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CudaCompilation {
    pub kernel: CudaKernel,
    /// The GPU IR, printed, when [`CompileOptions::keep_gpu_ir`] was set.
    pub gpu_ir: Option<String>,
}

/// Compiles a Tile IR function to one CUDA C++ kernel for an NVIDIA `target`
/// (needs no GPU: the runtime hands the source to NVRTC).
pub fn compile_cuda(
    func: &Function,
    options: &CompileOptions,
    target: &Target,
) -> CompileResult<CudaCompilation> {
    let compiled = compile(func, options, target)?;
    match compiled.kernel {
        Kernel::Cuda(kernel) => Ok(CudaCompilation {
            kernel,
            gpu_ir: compiled.gpu_ir,
        }),
        Kernel::Msl(_) => Err(wrong_kernel("an NVIDIA")),
    }
}

fn wrong_kernel(family: &str) -> CompileError {
    CompileError::new(
        "kernel",
        format!("the target is not {family} GPU"),
        metile_ir::Loc::unknown(),
    )
}
