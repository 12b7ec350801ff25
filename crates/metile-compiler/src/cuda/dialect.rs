//! The CUDA C++ dialect of the C-family writer: no address spaces, the
//! prelude's aligned `metile_vec<T, N>` vectors, warp shuffles
//! (`__shfl_xor_sync`/`__shfl_sync` with a full mask), `__syncthreads()`,
//! libdevice's single-precision math (`expf`, `fmaxf`, ...), `__int2half_rn`
//! and friends for int-to-half, `printf` and `__assertfail`, PTX atomics
//! (`atomic.rs`), and NVIDIA's own ops: `mma.sync`, `ldmatrix` and `cp.async`
//! (`mma.rs`), `wgmma` (`wgmma.rs`), `mbarrier` and TMA (`tma.rs`). Apple's
//! matrix atoms have no spelling.

use crate::cfamily::names::scalar_type;
use crate::cfamily::writer::c_string;
use crate::cfamily::{BodyWriter, Dialect, EmitResult, Helper, Name, Rmw};
use metile_ir::gpu_ir::*;
use metile_ir::{DType, MemScope, MemSem};
use std::collections::HashMap;

/// CUDA C++, as NVRTC compiles it with the emitter's prelude (`prelude.cuh`).
pub(crate) struct Cuda;

const WORDS: &[&str] = &[
    // Builtins and the float math functions the emitter calls.
    "threadIdx",
    "blockIdx",
    "blockDim",
    "gridDim",
    "warpSize",
    "uint3",
    "dim3",
    "memcpy",
    "expf",
    "logf",
    "sqrtf",
    "tanhf",
    "fabsf",
    "fmaxf",
    "fminf",
    "fmodf",
    "truncf",
];

/// What the CUDA spellings need to know of the whole function.
pub(crate) struct CudaState {
    /// Register arrays that hold `wgmma` accumulators (`wgmma.rs`).
    wgmma_accumulators: Vec<RegId>,
    /// f16 and bf16 values cast from an f32 value, with that value.
    narrowed: HashMap<GpuValue, GpuValue>,
}

/// Every f16 or bf16 scalar cast from an f32 scalar, with its source.
pub(crate) fn narrowed_values(f: &GpuFunction) -> HashMap<GpuValue, GpuValue> {
    let mut narrowed = HashMap::new();
    f.walk(&mut |op| {
        if matches!(op.kind, GpuOpKind::Cast)
            && f.ty(op.operands[0]) == GpuType::Scalar(DType::F32)
            && matches!(f.ty(op.results[0]), GpuType::Scalar(DType::F16 | DType::BF16))
        {
            narrowed.insert(op.results[0], op.operands[0]);
        }
    });
    narrowed
}

/// The f32 sources of a two-lane f16 or bf16 vector built from two casts.
fn narrowed_pair(state: &CudaState, f: &GpuFunction, op: &GpuOp) -> Option<(GpuValue, GpuValue, DType)> {
    let [a, b] = op.operands[..] else {
        return None;
    };
    let d = f.ty(a).dtype();
    let pair = (*state.narrowed.get(&a)?, *state.narrowed.get(&b)?, d);
    matches!(d, DType::F16 | DType::BF16).then_some(pair)
}

impl Dialect for Cuda {
    const NAME: &'static str = "CUDA";
    const HAS_F64: bool = true;
    // The prelude's metile_vec has up to 8 lanes.
    const VECTOR_FIELDS: &'static [&'static str] = &["x", "y", "z", "w", "e4", "e5", "e6", "e7"];
    const BARRIER: &'static str = "__syncthreads();";
    // `__syncthreads` orders global memory too.
    const DEVICE_BARRIER: &'static str = "__syncthreads();";

    type State = CudaState;
    fn state(f: &GpuFunction) -> CudaState {
        CudaState {
            wgmma_accumulators: super::wgmma::accumulators(f),
            narrowed: narrowed_values(f),
        }
    }

    fn reserves(name: &str) -> bool {
        WORDS.contains(&name)
    }

    /// C++'s `char` may be unsigned: i8 is `schar` (`signed char`, in the prelude).
    fn scalar(d: DType) -> &'static str {
        match d {
            DType::I8 => "schar",
            _ => scalar_type(d),
        }
    }

    fn vector(d: DType, lanes: u8) -> String {
        format!("metile_vec<{}, {lanes}>", Self::scalar(d))
    }

    fn push_type(out: &mut String, t: GpuType) {
        match t {
            GpuType::Vector(d, n) => out.push_str(&Self::vector(d, n)),
            GpuType::Scalar(d) => out.push_str(Self::scalar(d)),
            GpuType::Ptr(d, _) => {
                out.push_str(Self::scalar(d));
                out.push('*');
            }
        }
    }

    fn vector_pointer(_: MemSpace, constness: &str, d: DType, width: u8) -> String {
        format!("{constness}{}*", Self::vector(d, width))
    }

    fn float_fn(name: &str) -> String {
        format!("{name}f")
    }

    // libdevice's single-precision functions, never the fast intrinsics (`__expf`).
    fn transcendental(name: &str) -> String {
        format!("{name}f")
    }

    fn helper_source(h: Helper) -> Option<&'static str> {
        match h {
            Helper::FastMath => Some(FAST_MATH),
            _ => None,
        }
    }

    fn approximation(name: &str) -> Option<&'static str> {
        match name {
            "fast_exp" => Some("metile_fast_exp"),
            "fast_exp2" => Some("metile_fast_exp2"),
            "fast_div" => Some("metile_fast_div"),
            _ => None,
        }
    }

    fn mul_hi(ua: &str, ub: &str, wide: bool) -> String {
        if wide {
            format!("ulong(__umul64hi({ua}, {ub}))")
        } else {
            format!("__umulhi({ua}, {ub})")
        }
    }

    /// CUDA's `__half` has several integer constructors, so `half(long)`
    /// would be ambiguous: its round-to-nearest intrinsics say which.
    fn int_to_half(from: DType, a: &str) -> Option<String> {
        Some(match from {
            DType::I32 | DType::I8 | DType::I16 => format!("__int2half_rn({a})"),
            DType::U32 | DType::U8 | DType::U16 => format!("__uint2half_rn({a})"),
            DType::I64 => format!("__ll2half_rn({a})"),
            DType::U64 => format!("__ull2half_rn({a})"),
            _ => return None,
        })
    }

    fn shuffle(xor: bool, x: &Name, lane: &Name, d: DType) -> EmitResult<String> {
        let f = if xor { "__shfl_xor_sync" } else { "__shfl_sync" };
        Ok(match d {
            DType::Bool => format!("{f}(0xffffffffu, int({x}), {lane}) != 0"),
            // CUDA shuffles 32- and 64-bit values: narrow ones (and fp8 bits) travel as int.
            d if d.size_bytes() < 4 && !matches!(d, DType::F16 | DType::BF16) => {
                format!("{}({f}(0xffffffffu, int({x}), {lane}))", Self::scalar(d))
            }
            _ => format!("{f}(0xffffffffu, {x}, {lane})"),
        })
    }

    fn print_statement(format: &str, args: &str) -> String {
        format!("printf({}{args});", c_string(&format!("{format}\n")))
    }

    /// The device-side assert that `assert` calls (`__assertfail`, which
    /// NVRTC declares, as it does `printf`): the GPU prints the message, file,
    /// line and thread, and the launch fails with CUDA_ERROR_ASSERT, which
    /// poisons the CUDA context.
    fn assert_statement(f: &GpuFunction, op: &GpuOp, cond: &Name, message: &str) -> String {
        let text = c_string(if message.is_empty() {
            "device_assert"
        } else {
            message
        });
        let file = c_string(&op.loc.file);
        let function = c_string(&f.name);
        let line = op.loc.line;
        format!("if (!({cond})) __assertfail({text}, {file}, {line}u, {function}, 1);")
    }

    fn atomic(
        w: &mut BodyWriter<'_, Self>,
        rmw: &Rmw,
        sem: MemSem,
        scope: MemScope,
        depth: usize,
    ) -> EmitResult<()> {
        w.cuda_atomic(rmw, sem, scope, depth)
    }

    fn mma(
        w: &mut BodyWriter<'_, Self>,
        op: &GpuOp,
        kind: AtomKind,
        fragments: [&[String]; 3],
        depth: usize,
    ) -> EmitResult<()> {
        w.mma_sync(op, kind, fragments, depth)
    }

    fn own_op(w: &mut BodyWriter<'_, Self>, op: &GpuOp, depth: usize) -> EmitResult<()> {
        match op.kind {
            GpuOpKind::LdMatrix { count, trans } => w.ldmatrix(op, count, trans, depth)?,
            GpuOpKind::AsyncCopy { .. } | GpuOpKind::AsyncCommit | GpuOpKind::AsyncWait { .. } => {
                w.async_copy_op(op, depth)?
            }
            GpuOpKind::Wgmma {
                n,
                a,
                b,
                acc,
                first,
                accumulate,
            } => w.wgmma(op, n, (a, b), (acc, first, accumulate), depth)?,
            GpuOpKind::WgmmaRegA {
                n,
                b,
                acc,
                first,
                a,
                a_first,
            } => w.wgmma_reg_a(op, (n, b), (acc, first), (a, a_first), depth)?,
            GpuOpKind::WgmmaWait {
                pending,
                acc,
                count,
                held,
            } => w.wgmma_wait(pending, (acc, count), held, depth),
            GpuOpKind::WgmmaFence | GpuOpKind::ProxyFence | GpuOpKind::WgmmaCommit => {
                let text = match op.kind {
                    GpuOpKind::WgmmaFence => "wgmma.fence.sync.aligned;",
                    GpuOpKind::ProxyFence => "fence.proxy.async.shared::cta;",
                    _ => "wgmma.commit_group.sync.aligned;",
                };
                w.line_fmt(depth, format_args!("asm volatile(\"{text}\" ::: \"memory\");"));
            }
            GpuOpKind::AtomicAdd => {
                let name = |i: usize| -> EmitResult<Name> {
                    op.operands
                        .get(i)
                        .ok_or_else(|| format!("atomic_add lacks operand {i}"))
                        .and_then(|&v| w.name(v))
                };
                let rhs = format!("metile_atomic_add({} + {}, {})", name(0)?, name(1)?, name(2)?);
                w.define(depth, op.results[0], &rhs);
            }
            GpuOpKind::MbarrierInit { .. }
            | GpuOpKind::MbarrierArrive { .. }
            | GpuOpKind::MbarrierWait
            | GpuOpKind::TmaLoad => w.tma_op(op, depth)?,
            _ => return Err(format!("{} has no CUDA spelling", op.kind.name())),
        }
        Ok(())
    }

    /// `wgmma` accumulators are written through an `asm` move (`wgmma.rs`).
    fn register_write(
        w: &mut BodyWriter<'_, Self>,
        reg: RegId,
        index: u32,
        value: &Name,
        depth: usize,
    ) -> bool {
        if !w.state.wgmma_accumulators.contains(&reg) {
            return false;
        }
        w.opaque_write(reg, index, value, depth);
        true
    }

    /// Two f32 values narrowed into one f16/bf16 pair with one conversion
    /// (`cvt.rn.f16x2.f32`): ptxas serializes `wgmma`s whose accumulators
    /// are later converted one at a time, though only after the last wait.
    fn make_vector(w: &mut BodyWriter<'_, Self>, op: &GpuOp, depth: usize) -> EmitResult<bool> {
        let Some((a, b, d)) = narrowed_pair(&w.state, w.f, op) else {
            return Ok(false);
        };
        let (a, b) = (w.name(a)?, w.name(b)?);
        let ty = Self::scalar(d);
        w.define_with(depth, op.results[0], |_, out| {
            use std::fmt::Write;
            let _ = write!(out, "metile_narrow2<{ty}>({a}, {b})");
            Ok(())
        })?;
        Ok(true)
    }
}

/// PTX's approximations, as Triton compiles `exp` and `/`: `ex2.approx` is
/// within 2 ulp of 2^x (subnormal results kept), `div.full` within 2 ulp of
/// a / b for every divisor. `exp` multiplies by log2(e) first, whose rounding
/// adds a relative error of |x| * 2^-24 (2^-17 at the largest |x| with a
/// finite, normal result).
const FAST_MATH: &str = "static inline float metile_fast_exp2(float x) {
  float y;
  asm(\"ex2.approx.f32 %0, %1;\" : \"=f\"(y) : \"f\"(x));
  return y;
}
static inline float metile_fast_exp(float x) { return metile_fast_exp2(x * 1.44269504088896341f); }
static inline float metile_fast_div(float a, float b) {
  float q;
  asm(\"div.full.f32 %0, %1, %2;\" : \"=f\"(q) : \"f\"(a), \"f\"(b));
  return q;
}
";
