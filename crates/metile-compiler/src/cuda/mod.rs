//! The CUDA C++ emitter: the C-family writer's walk over GPU IR (`cfamily/`)
//! in the CUDA dialect (`dialect.rs`), wrapped in a CUDA kernel that NVRTC
//! compiles.
//!
//! Shape of the output (byte-identical for the same GPU IR in every process):
//! the parts of `prelude.cuh` the kernel needs (MSL's type names and `as_type`,
//! `cuda_fp16.h`/`cuda_bf16.h` only for kernels that use f16/bf16, the aligned
//! vector type, warp reductions), the helper functions, then one
//! `extern "C" __global__` kernel with `__launch_bounds__(threads)` (two blocks per SM
//! asked for matrix kernels of up to 256 threads). Its
//! parameters are the kernel's arguments in order: `[const] T*` for buffers
//! (const when never stored through) and `T` by value for scalars. The body
//! starts with the builtins it uses (`tid`, `lane`, `sgid`, `tgpig`, `tgpg`,
//! with simdgroups = warps: `lane = tid % 32`, `sgid = tid / 32`) and one
//! pointer into the dynamic shared memory per threadgroup allocation (each
//! 16-byte aligned), then the body's statements.

mod atomic;
mod dialect;
mod mma;
mod tma;
mod wgmma;

use crate::cfamily::writer::helper_source;
use crate::cfamily::{
    finish_kernel, loc_of_line, name_kernel, ranges, BodyWriter, Dialect, KernelNames, Name,
};
use crate::error::{CompileError, CompileResult};
use crate::policy::Switches;
use crate::target::Target;
pub(crate) use dialect::Cuda;
use metile_ir::gpu_ir::*;
use metile_ir::{DType, Loc};
use std::fmt::Write;

const PRELUDE: &str = include_str!("prelude.cuh");

/// One parameter of the emitted kernel, in signature order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CudaParam {
    /// A device pointer to elements of `dtype`; `written` when the kernel
    /// stores through it.
    Buffer {
        dtype: DType,
        tile_param_index: usize,
        written: bool,
    },
    /// A scalar passed by value.
    Scalar { dtype: DType, tile_param_index: usize },
    /// A tensor map the runtime builds from the launch's arguments
    /// (`cuTensorMapEncodeTiled`), passed by value (128 bytes).
    TensorMap(TensorMapSpec),
    /// An `int`: 1 when the runtime built the tensor map of this spec, 0 when
    /// the arguments do not allow one (the kernel then copies another way).
    TensorMapReady(TensorMapSpec),
    /// An `int` the runtime passes as -1 (`GpuParamKind::MinusOne`).
    MinusOne,
}

/// An emitted kernel and what the runtime needs to launch it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CudaKernel {
    /// The architecture NVRTC compiles for (`sm_90`, or `sm_90a` for `wgmma`).
    pub arch: String,
    pub source: String,
    pub kernel_name: String,
    pub params: Vec<CudaParam>,
    pub threads_per_group: u32,
    /// Dynamic shared memory per block, in bytes.
    pub shared_bytes: usize,
    /// Above this many bytes of shared memory the runtime must raise the
    /// kernel's limit before launching it.
    pub default_shared_bytes: usize,
    /// The byte alignment the kernel assumes for every buffer's base address.
    pub buffer_alignment: usize,
    /// Whether the runtime may copy a tensor-map operand it cannot describe
    /// into aligned rows of a workspace (the `repack_operands` pass).
    pub repack_operands: bool,
    /// `(first CUDA line, kernel location)` for each run of lines emitted for
    /// ops of one kernel source line, in order: see [`CudaKernel::loc_of_line`].
    pub line_locs: Vec<(u32, Loc)>,
    /// The kernel prints (`device_print`): the runtime waits for each launch
    /// and flushes stdout, so its lines come out before the host's next ones.
    pub prints: bool,
}

impl CudaKernel {
    /// The kernel source location that CUDA line `line` (1-based) was emitted for.
    pub fn loc_of_line(&self, line: u32) -> Option<&Loc> {
        loc_of_line(&self.line_locs, line)
    }
}

/// The prelude's `// @section name` parts, in order.
fn prelude_section(name: &str) -> &'static str {
    let marker = format!("// @section {name}\n");
    let Some(start) = PRELUDE.find(&marker).map(|i| i + marker.len()) else {
        return "";
    };
    let end = PRELUDE[start..]
        .find("// @section ")
        .map_or(PRELUDE.len(), |i| start + i);
    &PRELUDE[start..end]
}

/// What the body uses that decides the prelude: dtypes, vectors, reductions.
#[derive(Default)]
struct Uses {
    f16: bool,
    bf16: bool,
    vectors: bool,
    reductions: bool,
    mma: bool,
    tf32: bool,
    wgmma: bool,
    tma: bool,
    /// Tensor copies through stacked maps (a third dimension).
    tma_stacked: bool,
    /// Atomic counts of the warps' releases of ring stages.
    release_counts: bool,
    /// Pairs of f32 values narrowed into one vector (`metile_narrow2`).
    narrow: bool,
    /// `device_print`s (`printf`).
    prints: bool,
    builtins: [bool; 5],
}

fn uses(f: &GpuFunction) -> Uses {
    let mut u = Uses {
        tma: f
            .params
            .iter()
            .any(|p| matches!(p.kind, GpuParamKind::TensorMap(_))),
        ..Uses::default()
    };
    let narrowed = dialect::narrowed_values(f);
    for t in &f.values {
        let d = t.dtype();
        u.f16 |= d == DType::F16;
        u.bf16 |= d == DType::BF16;
        u.vectors |= matches!(t, GpuType::Vector(..));
    }
    for r in &f.regs {
        u.f16 |= r.dtype == DType::F16;
        u.bf16 |= r.dtype == DType::BF16;
    }
    f.walk(&mut |op| match op.kind {
        GpuOpKind::SimdReduce(_) => u.reductions = true,
        GpuOpKind::Print { .. } => u.prints = true,
        GpuOpKind::MbarrierInit { .. } => u.tma = true,
        GpuOpKind::TmaLoad => {
            u.tma = true;
            u.tma_stacked |= op.operands.len() == 8;
        }
        GpuOpKind::AtomicAdd => {
            u.tma = true;
            u.release_counts = true;
        }
        GpuOpKind::MakeVector if op.operands.len() == 2 => {
            u.narrow |= op.operands.iter().all(|x| narrowed.contains_key(x))
        }
        GpuOpKind::Wgmma { .. } | GpuOpKind::WgmmaRegA { .. } => {
            u.mma = true;
            u.wgmma = true;
        }
        GpuOpKind::Mma(kind) => {
            u.mma = true;
            u.tf32 |= kind == AtomKind::NvidiaMmaM16N8K8Tf32;
        }
        GpuOpKind::Builtin(b) => {
            let i = match b {
                Builtin::ThreadIndex => 0,
                Builtin::SimdLane => 1,
                Builtin::SimdgroupIndex => 2,
                Builtin::ThreadgroupPosition(_) => 3,
                Builtin::ThreadgroupsPerGrid(_) => 4,
            };
            u.builtins[i] = true;
        }
        _ => {}
    });
    u
}

/// Prints `f` as one CUDA C++ kernel for `target`.
/// `switches` are the pass switches in force (`occupancy`, `repack_operands`).
pub fn emit_cuda(f: &GpuFunction, target: &Target, switches: &Switches) -> CompileResult<CudaKernel> {
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
                let is_written = written[p.value.index()];
                let constness = if is_written { "" } else { "const " };
                signature.push(format!("{constness}{}* {name}", Cuda::scalar(d)));
                params.push(CudaParam::Buffer {
                    dtype: d,
                    tile_param_index: p.tile_index,
                    written: is_written,
                });
            }
            GpuParamKind::Scalar(d) => {
                signature.push(format!("{} {name}", Cuda::scalar(d)));
                params.push(CudaParam::Scalar {
                    dtype: d,
                    tile_param_index: p.tile_index,
                });
            }
            GpuParamKind::TensorMap(spec) => {
                signature.push(format!("const __grid_constant__ metile_tensor_map {name}"));
                params.push(CudaParam::TensorMap(spec));
            }
            GpuParamKind::TensorMapReady(spec) => {
                signature.push(format!("int {name}"));
                params.push(CudaParam::TensorMapReady(spec));
            }
            GpuParamKind::MinusOne => {
                signature.push(format!("int {name}"));
                params.push(CudaParam::MinusOne);
            }
        }
    }

    let used = uses(f);
    let ranges = ranges::analyze(f);
    let mut body = BodyWriter::<Cuda>::new(f, &ranges, value_names, &written);
    let simd = target.simd_width;
    let builtin_lines = [
        "const uint tid = threadIdx.x;".to_string(),
        format!("const uint lane = threadIdx.x % {simd}u;"),
        format!("const uint sgid = threadIdx.x / {simd}u;"),
        "const uint3 tgpig = blockIdx;".to_string(),
        "const uint3 tgpg = gridDim;".to_string(),
    ];
    for (line, used) in builtin_lines.iter().zip(used.builtins) {
        if used {
            body.line(1, line);
        }
    }
    // wgmma reads swizzled tiles, and the hardware swizzles addresses: every
    // array then starts 1024-byte aligned, as the tiles within them do; but
    // memory barriers (i64) and the warps' release counts (i32) need 8 bytes.
    let align_of = |a: &TgAlloc| {
        if used.wgmma && !matches!(a.dtype, DType::I64 | DType::I32) {
            1024
        } else {
            16
        }
    };
    let align = f.threadgroup.iter().map(align_of).max().unwrap_or(16);
    let mut shared_bytes = 0usize;
    if !f.threadgroup.is_empty() {
        body.line(
            1,
            &format!("extern __shared__ __align__({align}) unsigned char metile_smem[];"),
        );
    }
    let mut offsets: Vec<(GpuValue, usize)> = Vec::with_capacity(f.threadgroup.len());
    for (i, a) in f.threadgroup.iter().enumerate() {
        let offset = match a.purpose {
            TgPurpose::Alias(of) => offsets
                .iter()
                .find(|(v, _)| *v == of)
                .map(|&(_, o)| o)
                .ok_or_else(|| {
                    CompileError::new(
                        "kernel",
                        "internal CUDA emitter error: a threadgroup alias of no earlier allocation",
                        Loc::unknown(),
                    )
                })?,
            _ => {
                shared_bytes = shared_bytes.div_ceil(align_of(a)) * align_of(a);
                let o = shared_bytes;
                shared_bytes += a.bytes().div_ceil(16).max(1) * 16;
                o
            }
        };
        offsets.push((a.value, offset));
        let ty = Cuda::scalar(a.dtype);
        body.line(
            1,
            &format!("{ty}* tg{i} = reinterpret_cast<{ty}*>(metile_smem + {offset});"),
        );
        body.set_value_name(a.value, Name::text(format!("tg{i}")));
    }
    if shared_bytes > target.max_threadgroup_bytes {
        // Only the 1024-byte alignment of wgmma tiles can push past what lowering counted.
        return Err(CompileError::new(
            "kernel",
            format!(
                "needs {shared_bytes} bytes of shared memory once its wgmma tiles are 1024-byte aligned; at most {} \
                 are allowed: use smaller tiles or wgmma=False",
                target.max_threadgroup_bytes
            ),
            Loc::unknown(),
        ));
    }
    body.registers_and_body().map_err(|e| emit_error(&e))?;
    let (text, helpers, op_starts) = body.finish();

    let mut source = String::new();
    let _ = writeln!(
        source,
        "// meTile kernel `{}`: {} threads per block, {shared_bytes} bytes of shared memory, for {}.\n",
        f.name.replace(['\n', '\r'], " "),
        f.threads_per_group,
        target.arch_name()
    );
    source.push_str(prelude_section("base"));
    let sections = [
        (used.f16, "f16"),
        (used.bf16, "bf16"),
        (used.vectors, "vec"),
        (used.narrow, "narrow"),
        (used.narrow && used.f16, "narrow_f16"),
        (used.narrow && used.bf16, "narrow_bf16"),
        (used.reductions, "reduce"),
        (used.mma && used.f16, "mma_f16"),
        (used.mma && used.bf16, "mma_bf16"),
        (used.tf32, "mma_tf32"),
        (used.wgmma, "wgmma"),
        (used.tma, "tma"),
        (used.tma_stacked, "tma_stacked"),
        (used.release_counts, "release_counts"),
    ];
    for (wanted, name) in sections {
        if wanted {
            source.push_str(prelude_section(name));
        }
    }
    source.push('\n');
    for h in &helpers {
        source.push_str(&helper_source::<Cuda>(*h).replace("static inline ", "static __device__ inline "));
        source.push('\n');
    }
    // Matrix kernels of up to 256 threads ask for two blocks per SM (at most
    // 128 registers a thread at 256): latency hiding comes from the second
    // block, and the prefetched tiles then fit without spilling (benchmarks/gemm.py).
    // Not when a register array, in a GEMM its accumulators, holds more than
    // 64 values a thread (a 128 x 256 tile on 256 threads): those alone would
    // take the 128 registers. Chained products (attention's `q k^T` and then
    // `p v`) keep two `wgmma` accumulators live at once, so their two largest
    // count together: an attention step of 128 x 128 with head dim 128 on 256
    // threads spilled a kilobyte a thread under the cap and ran at 61 TFLOP/s
    // on an H100, 108 without it.
    let accumulators = wgmma_accumulators(f).max(f.regs.iter().map(|r| r.len as usize).max().unwrap_or(0));
    let min_blocks = if used.mma && f.threads_per_group <= 256 && accumulators <= 64 && switches.occupancy {
        ", 2"
    } else {
        ""
    };
    let _ = writeln!(
        source,
        "extern \"C\" __global__ void __launch_bounds__({}{min_blocks}) {kernel_name}(",
        f.threads_per_group
    );
    let line_locs = finish_kernel(&mut source, &signature, &text, op_starts);
    // Architecture-specific features (wgmma) need the `a` target (sm_90a).
    let arch = if used.wgmma {
        format!("{}a", target.arch_name())
    } else {
        target.arch_name()
    };
    Ok(CudaKernel {
        arch,
        source,
        kernel_name,
        params,
        threads_per_group: f.threads_per_group,
        shared_bytes,
        default_shared_bytes: target.default_threadgroup_bytes,
        buffer_alignment: target.buffer_base_alignment,
        repack_operands: switches.repack_operands,
        line_locs,
        prints: used.prints,
    })
}

fn emit_error(reason: &str) -> CompileError {
    CompileError::new(
        "kernel",
        format!("internal CUDA emitter error: {reason}"),
        Loc::unknown(),
    )
}

/// The values a thread holds in the two largest `wgmma` accumulator arrays
/// together (0 without `wgmma`).
fn wgmma_accumulators(f: &GpuFunction) -> usize {
    let mut accs: Vec<RegId> = vec![];
    f.walk(&mut |op| {
        if let GpuOpKind::Wgmma { acc, .. } | GpuOpKind::WgmmaRegA { acc, .. } = op.kind {
            if !accs.contains(&acc) {
                accs.push(acc);
            }
        }
    });
    let mut lens: Vec<usize> = accs.iter().map(|r| f.regs[r.0 as usize].len as usize).collect();
    lens.sort_unstable_by(|a, b| b.cmp(a));
    lens.iter().take(2).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two arrays that fit with 16-byte alignment but not once the second
    /// starts on 1024 bytes, as a kernel with `wgmma` places them.
    #[test]
    fn wgmma_alignment_past_the_shared_memory_is_refused() {
        let target = Target::nvidia(9, 0);
        let mut b = GpuBuilder::new("k", 128);
        let small = b.add_threadgroup(DType::F16, 8, TgPurpose::Scratch);
        let rest = (target.max_threadgroup_bytes - 16) / 2;
        let big = b.add_threadgroup(DType::F16, rest, TgPurpose::Scratch);
        let acc = b.add_reg(DType::F32, 32);
        let zero = b.emit(
            GpuOpKind::Const(metile_ir::Literal::Int(0)),
            ValueList::new(),
            vec![GpuType::Scalar(DType::I32)],
        )[0];
        let operand = WgmmaOperand {
            swizzle_bytes: 128,
            lbo: 16,
            sbo: 1024,
            mn_major: false,
        };
        let wgmma = GpuOpKind::Wgmma {
            n: 64,
            a: operand,
            b: operand,
            acc,
            first: 0,
            accumulate: true,
        };
        b.emit(wgmma, [small, zero, big, zero], vec![]);
        let err = emit_cuda(&b.finish(), &target, &Switches::defaults(&target))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("1024-byte aligned") && err.contains("wgmma=False"),
            "{err}"
        );
    }
}
