//! The MSL emitter: a walk over GPU IR that prints one Metal Shading Language
//! 3.1 kernel, 3.2 where atomics need fences, or 4.0 where it uses Metal 4
//! tensor ops (`tensor_ops.rs`).
//!
//! Shape of the output (byte-identical for the same GPU IR in every process):
//! `#include <metal_stdlib>` (and the tensor-op headers for MSL 4.0),
//! `using namespace metal;` (and `mpp::tensor_ops`), the helper functions the
//! kernel needs (saturating float-to-int casts, exact int-to-bfloat), then one
//! `kernel void`. Its parameters, in order: every kernel argument as
//! `device [const] T* name [[buffer(i)]]` (const when never stored through) or
//! `constant T& name [[buffer(i)]]` with `i` the argument's position; threadgroup
//! memory only as `threadgroup T* tgN [[threadgroup(N)]]` parameters (the
//! emulator relies on this; Metal sizes them from the host); the builtins the body
//! uses (`uint3 tgpig`, `uint3 tgpg`, `uint tid`, `uint lane`, `uint sgid`).
//! The body declares the register arrays, then one statement per GPU IR op:
//! `T vN = expr;` for values, plain statements for stores and register writes,
//! `for`/`if` blocks for regions.
//!
//! The body is the C-family writer's (`cfamily/`) in the MSL dialect
//! (`dialect.rs`): semantics are the Tile IR's, kept as `cfamily/writer.rs`
//! lists (wrapping integer arithmetic, guarded division, saturating casts,
//! f16/bf16 math through f32, `precise::` transcendental functions).

mod atomic;
mod dialect;
pub(crate) mod tensor_ops;

use crate::cfamily::names::scalar_type;
use crate::cfamily::writer::helper_source;
use crate::cfamily::{finish_kernel, loc_of_line, name_kernel, ranges, BodyWriter, KernelNames, Name};
use crate::error::{CompileError, CompileResult};
use crate::target::Target;
pub(crate) use dialect::Msl;
use metile_ir::gpu_ir::*;
use metile_ir::Loc;
use std::collections::BTreeSet;
use std::fmt::Write;
pub use tensor_ops::MslVersion;

/// What MSL kernels that print or assert need before the kernel: Metal's
/// logging (`os_log`, Metal 3.2 and later; older Metal drops the lines), and
/// `metile_device_assert_failed`, which the msl-emu shim defines to fail the
/// launch and which on Metal logs the failure (Metal cannot abort a kernel).
pub const MSL_DEBUG_PREAMBLE: &str = "#if __METAL_VERSION__ >= 320
#include <metal_logging>
#define metile_device_print(...) metal::os_log_default.log(__VA_ARGS__)
#else
#define metile_device_print(...) ((void)0)
#endif
#ifndef metile_device_assert_failed
#if __METAL_VERSION__ >= 320
#define metile_device_assert_failed(message) metal::os_log_default.log_error(\"device_assert failed: \" message)
#else
#define metile_device_assert_failed(message) ((void)0)
#endif
#endif
";

/// A builtin kernel input the runtime must provide.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MslBuiltin {
    /// `uint3 [[threadgroup_position_in_grid]]`
    ThreadgroupPositionInGrid,
    /// `uint3 [[threadgroups_per_grid]]`
    ThreadgroupsPerGrid,
    /// `uint [[thread_index_in_threadgroup]]`
    ThreadIndexInThreadgroup,
    /// `uint [[thread_index_in_simdgroup]]`
    ThreadIndexInSimdgroup,
    /// `uint [[simdgroup_index_in_threadgroup]]`
    SimdgroupIndexInThreadgroup,
}

impl MslBuiltin {
    fn declaration(self) -> &'static str {
        match self {
            MslBuiltin::ThreadgroupPositionInGrid => "uint3 tgpig [[threadgroup_position_in_grid]]",
            MslBuiltin::ThreadgroupsPerGrid => "uint3 tgpg [[threadgroups_per_grid]]",
            MslBuiltin::ThreadIndexInThreadgroup => "uint tid [[thread_index_in_threadgroup]]",
            MslBuiltin::ThreadIndexInSimdgroup => "uint lane [[thread_index_in_simdgroup]]",
            MslBuiltin::SimdgroupIndexInThreadgroup => "uint sgid [[simdgroup_index_in_threadgroup]]",
        }
    }
}

/// One parameter of the emitted kernel, in signature order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum MslParam {
    /// `device [const] T*` at `[[buffer(tile_param_index)]]`.
    Buffer {
        msl_type: String,
        tile_param_index: usize,
    },
    /// `constant T&` at `[[buffer(tile_param_index)]]`.
    Scalar {
        msl_type: String,
        tile_param_index: usize,
    },
    /// `threadgroup T*` of `bytes` (a multiple of 16) at `[[threadgroup(k)]]`,
    /// `k` counting threadgroup parameters in order.
    Threadgroup {
        msl_type: String,
        bytes: usize,
    },
    Builtin(MslBuiltin),
}

/// An emitted kernel and what the runtime needs to launch it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MslKernel {
    pub source: String,
    pub kernel_name: String,
    pub params: Vec<MslParam>,
    pub threads_per_group: u32,
    /// The byte alignment the kernel assumes for every buffer's base address
    /// (its vector accesses rely on it).
    pub buffer_alignment: usize,
    /// `(first MSL line, kernel location)` for each run of lines emitted for
    /// ops of one kernel source line, in order: see [`MslKernel::loc_of_line`].
    pub line_locs: Vec<(u32, Loc)>,
    /// The MSL version the source is written in (what Metal compiles it as).
    pub language_version: MslVersion,
}

/// Prints `f` as MSL.
pub fn emit_msl(f: &GpuFunction) -> CompileResult<MslKernel> {
    let KernelNames {
        kernel_name,
        param_names,
        value_names,
        written,
    } = name_kernel(f, crate::reserved_by_a_dialect);
    let mut params = Vec::new();
    let mut signature = Vec::new();
    for (p, name) in f.params.iter().zip(&param_names) {
        match p.kind {
            GpuParamKind::Buffer(d) => {
                let constness = if written[p.value.index()] { "" } else { "const " };
                let msl_type = format!("device {constness}{}*", scalar_type(d));
                signature.push(format!("{msl_type} {name} [[buffer({})]]", p.tile_index));
                params.push(MslParam::Buffer {
                    msl_type,
                    tile_param_index: p.tile_index,
                });
            }
            GpuParamKind::Scalar(d) => {
                let msl_type = format!("constant {}&", scalar_type(d));
                signature.push(format!("{msl_type} {name} [[buffer({})]]", p.tile_index));
                params.push(MslParam::Scalar {
                    msl_type,
                    tile_param_index: p.tile_index,
                });
            }
            GpuParamKind::TensorMap(_) | GpuParamKind::TensorMapReady(_) | GpuParamKind::MinusOne => {
                return Err(CompileError::new(
                    "kernel",
                    "internal MSL emitter error: tensor maps are CUDA's",
                    Loc::unknown(),
                ))
            }
        }
    }
    let mut value_names = value_names;
    let mut parameter = 0;
    for (i, a) in f.threadgroup.iter().enumerate() {
        let msl_type = format!("threadgroup {}*", scalar_type(a.dtype));
        if let TgPurpose::Alias(of) = a.purpose {
            let of = value_names[of.index()].clone();
            value_names[a.value.index()] = Name::text(format!("(reinterpret_cast<{msl_type}>({of}))"));
            continue;
        }
        let name = format!("tg{i}");
        signature.push(format!("{msl_type} {name} [[threadgroup({parameter})]]"));
        parameter += 1;
        params.push(MslParam::Threadgroup {
            msl_type,
            bytes: a.bytes().div_ceil(16).max(1) * 16,
        });
        value_names[a.value.index()] = Name::text(name);
    }
    for b in used_builtins(f) {
        signature.push(b.declaration().to_string());
        params.push(MslParam::Builtin(b));
    }

    let ranges = ranges::analyze(f);
    let mut body = BodyWriter::<Msl>::new(f, &ranges, value_names, &written);
    body.registers_and_body().map_err(|e| emit_error(&e))?;
    let (text, helpers, op_starts) = body.finish();

    let language_version = MslVersion::of(f);
    let mut source = String::new();
    source.push_str("#include <metal_stdlib>\n");
    if language_version == MslVersion::V4_0 {
        source.push_str(tensor_ops::INCLUDES);
    }
    source.push_str("using namespace metal;\n");
    if language_version == MslVersion::V4_0 {
        source.push_str(tensor_ops::USING);
    }
    let _ = writeln!(
        source,
        "\n// meTile kernel `{}`: {} threads per threadgroup{}.\n",
        f.name.replace(['\n', '\r'], " "),
        f.threads_per_group,
        match language_version {
            MslVersion::V4_0 => "; MSL 4.0 (Metal 4 tensor ops)",
            MslVersion::V3_2 => "; MSL 3.2 (atomic fences)",
            MslVersion::V3_1 => "",
        }
    );
    let mut debugs = false;
    f.walk(&mut |op| debugs |= matches!(op.kind, GpuOpKind::Print { .. } | GpuOpKind::Assert { .. }));
    if debugs {
        source.push_str(MSL_DEBUG_PREAMBLE);
        source.push('\n');
    }
    for h in &helpers {
        source.push_str(&helper_source::<Msl>(*h));
        source.push('\n');
    }
    let _ = writeln!(source, "kernel void {kernel_name}(");
    let line_locs = finish_kernel(&mut source, &signature, &text, op_starts);
    Ok(MslKernel {
        source,
        kernel_name,
        params,
        threads_per_group: f.threads_per_group,
        buffer_alignment: Target::apple().buffer_base_alignment,
        line_locs,
        language_version,
    })
}

impl MslKernel {
    /// The kernel source location that MSL line `line` (1-based) was emitted for.
    pub fn loc_of_line(&self, line: u32) -> Option<&Loc> {
        loc_of_line(&self.line_locs, line)
    }
}

fn emit_error(reason: &str) -> CompileError {
    CompileError::new(
        "kernel",
        format!("internal MSL emitter error: {reason}"),
        Loc::unknown(),
    )
}

fn used_builtins(f: &GpuFunction) -> BTreeSet<MslBuiltin> {
    let mut out = BTreeSet::new();
    f.walk(&mut |op| {
        if let GpuOpKind::Builtin(b) = op.kind {
            out.insert(match b {
                Builtin::ThreadIndex => MslBuiltin::ThreadIndexInThreadgroup,
                Builtin::SimdLane => MslBuiltin::ThreadIndexInSimdgroup,
                Builtin::SimdgroupIndex => MslBuiltin::SimdgroupIndexInThreadgroup,
                Builtin::ThreadgroupPosition(_) => MslBuiltin::ThreadgroupPositionInGrid,
                Builtin::ThreadgroupsPerGrid(_) => MslBuiltin::ThreadgroupsPerGrid,
            });
        }
    });
    out
}
