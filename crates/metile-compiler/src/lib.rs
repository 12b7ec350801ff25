//! meTile's compiler: Tile IR passes, and (per target) layout assignment, lowering
//! to GPU IR, GPU IR passes and the source emitters.
//!
//! The Apple GPU path is [`compile_msl`], the NVIDIA one [`compile_cuda`] (the
//! same lowering for a different [`Target`] value, then the CUDA emitter): layout assignment
//! ([`layout_assign`], on [`dist_layout`] and [`axis_info`]), lowering to GPU IR
//! ([`lower`]), GPU IR clean-up ([`gpu_passes`]) with the GPU IR verifier after
//! each step, and the MSL emitter ([`msl`]). `docs/lowering.md` describes the
//! design: layouts, the threadgroup-size rule, conversions, reductions, `dot`,
//! and what is refused.

pub mod absent_lanes;
pub mod atoms;
pub mod axis_info;
pub mod cuda;
pub mod dist_layout;
pub mod dot_tiling;
pub mod error;
pub mod gpu_passes;
pub(crate) mod ir_emit;
pub mod l2_order;
pub mod layout_assign;
pub mod lower;
pub mod msl;
pub mod portability;
pub mod prefetch;
pub mod split_k;
pub mod target;
pub mod tile_checks;
pub mod tile_passes;
pub mod writes;

pub use cuda::{CudaKernel, CudaParam};
pub use error::{CompileError, CompileResult};
pub use msl::{MslBuiltin, MslKernel, MslParam, MslVersion};
pub use target::{AppleArch, Target, TargetKind};
pub use tile_checks::check_kernel;
pub use tile_passes::optimize_tile_ir;
pub use writes::written_params;

use metile_ir::{gpu_ir::GpuFunction, print_gpu_function, verify, verify_gpu, DType, Function};

/// The most threadgroup buffers an asynchronous `dot` operand pipeline uses
/// (tiles in flight plus the one being multiplied).
const MAX_PIPELINE_STAGES: usize = 4;

/// Per-compilation choices that are not part of the Tile IR.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct MslOptions {
    /// Simdgroups per threadgroup; `None` applies the default rule (see
    /// `layout_assign`). Kernels with thread-level ops must use the count they
    /// were traced for.
    pub num_sgs: Option<u32>,
    /// Also return the GPU IR text (for `METILE_DEBUG=gpu_ir`).
    pub keep_gpu_ir: bool,
    /// The GEMM passes a launch switched on or off (the target decides the rest).
    pub passes: Passes,
}

/// The GEMM passes a launch can switch on or off (launch options and
/// `metile.Config` keys of the same names), so their effect can be measured.
/// `None` leaves the choice to the target (`Target::default_passes`); no
/// setting changes results beyond float rounding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Passes {
    /// `dot` on the target's matrix atoms where one fits (else the generic path).
    pub matrix_atoms: Option<bool>,
    /// `dot` operands loaded one loop iteration ahead (`prefetch`).
    pub prefetch: Option<bool>,
    /// `dot` operands copied asynchronously into a ring of threadgroup
    /// buffers, several loop iterations ahead (where the target can).
    pub async_copy: Option<bool>,
    /// 16 bytes of padding per staged row of `dot` operands (no bank conflicts).
    pub pad_dot_scratch: Option<bool>,
    /// Fragments read with NVIDIA's `ldmatrix` rather than element loads.
    pub ldmatrix: Option<bool>,
    /// Each simdgroup walks its atom tiles row by row, alternating direction,
    /// so consecutive `mma`s share a fragment.
    pub serpentine: Option<bool>,
    /// f32 `dot` on tf32 tensor cores (inputs rounded to 10-bit mantissas:
    /// results then differ from the interpreter by that rounding). Off unless asked.
    pub tf32: Option<bool>,
    /// NVIDIA matrix kernels of up to 256 threads ask for two blocks per SM
    /// (`__launch_bounds__(threads, 2)`: at most 128 registers at 256 threads).
    pub occupancy: Option<bool>,
    /// 2-D GEMM grids run in groups of rows, so that concurrent programs share
    /// operand tiles in L2 (`l2_order`).
    pub l2_order: Option<bool>,
    /// f16 and bf16 `dot` on NVIDIA's warpgroup MMA (`wgmma`, sm_90a), its
    /// operands read by the tensor cores from swizzled shared memory.
    pub wgmma: Option<bool>,
    /// `wgmma` operand rings filled by the tensor memory accelerator (one
    /// thread's `cp.async.bulk.tensor` per tile, completing on a memory
    /// barrier per stage) where the runtime can describe the matrix (sm_90).
    pub tma: Option<bool>,
    /// Stores of tiles whose layout leaves each thread narrow runs of a row
    /// (matrix accumulators) go through threadgroup memory into the blocked
    /// layout's 16-byte runs (`lower/store_staging.rs`).
    pub stage_stores: Option<bool>,
    /// A tensor-copied operand whose rows the tensor memory accelerator cannot
    /// address (row pitch or base not a multiple of 16 bytes) is copied at
    /// launch into aligned rows of a workspace, which the kernel then reads
    /// with tensor copies (the cuda runtime's `repack.rs`).
    pub repack_operands: Option<bool>,
}

/// Which passes a target runs when a launch does not say.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DefaultPasses {
    pub matrix_atoms: bool,
    pub prefetch: bool,
    pub async_copy: bool,
    pub pad_dot_scratch: bool,
    pub ldmatrix: bool,
    pub serpentine: bool,
    pub tf32: bool,
    pub occupancy: bool,
    pub l2_order: bool,
    pub wgmma: bool,
    pub tma: bool,
    pub stage_stores: bool,
    pub repack_operands: bool,
}

impl Passes {
    /// The launch-option names.
    pub const NAMES: [&'static str; 13] = [
        "matrix_atoms",
        "prefetch",
        "async_copy",
        "pad_dot_scratch",
        "ldmatrix",
        "serpentine",
        "tf32",
        "occupancy",
        "l2_order",
        "wgmma",
        "tma",
        "stage_stores",
        "repack_operands",
    ];

    fn slot(&mut self, name: &str) -> Option<&mut Option<bool>> {
        match name {
            "matrix_atoms" => Some(&mut self.matrix_atoms),
            "prefetch" => Some(&mut self.prefetch),
            "async_copy" => Some(&mut self.async_copy),
            "pad_dot_scratch" => Some(&mut self.pad_dot_scratch),
            "ldmatrix" => Some(&mut self.ldmatrix),
            "serpentine" => Some(&mut self.serpentine),
            "tf32" => Some(&mut self.tf32),
            "occupancy" => Some(&mut self.occupancy),
            "l2_order" => Some(&mut self.l2_order),
            "wgmma" => Some(&mut self.wgmma),
            "tma" => Some(&mut self.tma),
            "stage_stores" => Some(&mut self.stage_stores),
            "repack_operands" => Some(&mut self.repack_operands),
            _ => None,
        }
    }

    /// Switches the pass called `name` on or off; false for an unknown name.
    pub fn set(&mut self, name: &str, on: bool) -> bool {
        self.slot(name).map(|s| *s = Some(on)).is_some()
    }

    /// The setting given for the pass called `name`, if any.
    pub fn given(&self, name: &str) -> Option<bool> {
        let mut passes = *self;
        passes.slot(name).and_then(|s| *s)
    }

    /// What runs on `target`: the settings given, the target's defaults for the rest.
    pub fn resolve(&self, target: &Target) -> DefaultPasses {
        let d = target.default_passes;
        DefaultPasses {
            matrix_atoms: self.matrix_atoms.unwrap_or(d.matrix_atoms),
            prefetch: self.prefetch.unwrap_or(d.prefetch),
            async_copy: self.async_copy.unwrap_or(d.async_copy) && target.async_copy,
            pad_dot_scratch: self.pad_dot_scratch.unwrap_or(d.pad_dot_scratch),
            ldmatrix: self.ldmatrix.unwrap_or(d.ldmatrix),
            serpentine: self.serpentine.unwrap_or(d.serpentine),
            tf32: self.tf32.unwrap_or(d.tf32),
            occupancy: self.occupancy.unwrap_or(d.occupancy),
            l2_order: self.l2_order.unwrap_or(d.l2_order),
            wgmma: self.wgmma.unwrap_or(d.wgmma) && target.wgmma,
            tma: self.tma.unwrap_or(d.tma) && target.tma,
            stage_stores: self.stage_stores.unwrap_or(d.stage_stores),
            repack_operands: self.repack_operands.unwrap_or(d.repack_operands) && target.tma,
        }
    }

    /// `target` with the passes that do not run taken away.
    pub fn restrict(&self, target: &Target) -> Target {
        let on = self.resolve(target);
        let mut t = target.clone();
        if !on.matrix_atoms {
            t.matrix_atoms.clear();
        }
        t.default_passes = on;
        t
    }
}

/// The result of [`compile_msl`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MslCompilation {
    pub kernel: MslKernel,
    /// The GPU IR, printed, when [`MslOptions::keep_gpu_ir`] was set.
    pub gpu_ir: Option<String>,
}

/// Lowers a Tile IR function to GPU IR for the threadgroup size the options and
/// the default rule choose, verified.
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

pub fn compile_gpu_ir(func: &Function, options: &MslOptions, target: &Target) -> CompileResult<GpuFunction> {
    verify(func).map_err(|e| CompileError::internal("tracing", e))?;
    refuse_missing_dtypes(func, target)?;
    let target = &options.passes.restrict(target);
    let threads = layout_assign::choose_threads(func, options.num_sgs, target)?;
    let mut prefetched = func.clone();
    let mut changed = false;
    if target.default_passes.l2_order && l2_order::order_programs(&mut prefetched) {
        let pass_err = |e| CompileError::internal("ordering programs for L2", e);
        verify(&prefetched).map_err(pass_err)?;
        tile_passes::clean_up(&mut prefetched).map_err(pass_err)?;
        changed = true;
    }
    let stage_bytes = |shape: (usize, usize, usize), dtype: DType| {
        let plan = dot_tiling::plan(target, shape, dtype, threads as usize)?;
        let bytes = dot_tiling::ring_stage(&plan, target, dtype).2 * dtype.size_bytes();
        Some((bytes, plan.c.values()))
    };
    let asynchronous = prefetch::Carry::Async {
        stage_bytes: &stage_bytes,
        budget: target.max_threadgroup_bytes,
        max_stages: MAX_PIPELINE_STAGES,
    };
    let mut carried =
        target.default_passes.async_copy && prefetch::prefetch_dot_operands(&mut prefetched, &asynchronous);
    if target.default_passes.prefetch {
        carried |= prefetch::prefetch_dot_operands(&mut prefetched, &prefetch::Carry::Registers);
    }
    if carried {
        let pass_err = |e| CompileError::internal("prefetching dot operands", e);
        verify(&prefetched).map_err(pass_err)?;
        tile_passes::clean_up(&mut prefetched).map_err(pass_err)?;
        changed = true;
    }
    let func = if changed { &prefetched } else { func };
    let mut gpu = lower::lower(func, threads, target)?;
    verify_gpu(&gpu).map_err(|e| CompileError::internal("lowering", e))?;
    // A pass that changed nothing leaves the IR the last verification accepted,
    // so only a changing pass is verified again.
    if gpu_passes::eliminate_common_subexpressions(&mut gpu) {
        verify_gpu(&gpu).map_err(|e| CompileError::internal("common-subexpression elimination", e))?;
    }
    if gpu_passes::eliminate_dead_code(&mut gpu) {
        verify_gpu(&gpu).map_err(|e| CompileError::internal("dead-code elimination", e))?;
    }
    Ok(gpu)
}

/// Compiles a Tile IR function to one MSL kernel for every Apple GPU meTile
/// supports (Apple7 and later).
pub fn compile_msl(func: &Function, options: &MslOptions) -> CompileResult<MslCompilation> {
    compile_msl_for(func, options, AppleArch::default())
}

/// Compiles a Tile IR function to one MSL kernel for Apple GPUs of family
/// `arch` (Apple10 kernels may need MSL 4.0: [`MslKernel::language_version`]).
pub fn compile_msl_for(
    func: &Function,
    options: &MslOptions,
    arch: AppleArch,
) -> CompileResult<MslCompilation> {
    let gpu = compile_gpu_ir(func, options, &arch.target())?;
    let kernel = msl::emit_msl(&gpu)?;
    let gpu_ir = options.keep_gpu_ir.then(|| print_gpu_function(&gpu));
    Ok(MslCompilation { kernel, gpu_ir })
}

/// The result of [`compile_cuda`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CudaCompilation {
    pub kernel: CudaKernel,
    /// The GPU IR, printed, when [`MslOptions::keep_gpu_ir`] was set.
    pub gpu_ir: Option<String>,
}

/// Compiles a Tile IR function to one CUDA C++ kernel for an NVIDIA `target`
/// (needs no GPU: the runtime hands the source to NVRTC).
pub fn compile_cuda(
    func: &Function,
    options: &MslOptions,
    target: &Target,
) -> CompileResult<CudaCompilation> {
    let gpu = compile_gpu_ir(func, options, target)?;
    let kernel = cuda::emit_cuda(&gpu, &options.passes.restrict(target))?;
    let gpu_ir = options.keep_gpu_ir.then(|| print_gpu_function(&gpu));
    Ok(CudaCompilation { kernel, gpu_ir })
}

#[cfg(test)]
mod tests {
    use super::Passes;

    #[test]
    fn every_pass_name_has_a_switch() {
        for name in Passes::NAMES {
            let mut p = Passes::default();
            assert!(p.set(name, false), "{name}");
            assert_eq!(p.given(name), Some(false), "{name}");
        }
        assert!(!Passes::default().set("fast", true));
    }
}
