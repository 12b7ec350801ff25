//! The Metal Shading Language dialect of the C-family writer: address-space
//! qualified pointers, `simd_*` shuffles, `threadgroup_barrier`,
//! `metal::precise::` math, Metal's atomics (`atomic.rs`), `simdgroup_matrix`
//! and Metal 4 `matmul2d` atoms, and the copies standing in for
//! asynchronous ones. Metal has no `double`, no `erf`, `log1p` or `expm1`
//! (helpers stand in: `erf` is the interpreter's polynomial, `metile-interp`'s
//! `erf_f32` with the same coefficients; `log1p(x) = log(u) * x / (u - 1)` with
//! `u = 1 + x` and `expm1(x) = (u - 1) * (x / log(u))` with `u = exp(x)`,
//! Kahan's forms, whose rounding errors cancel), and none of NVIDIA's ops.

use crate::cfamily::names::scalar_type;
use crate::cfamily::text::push_u32;
use crate::cfamily::writer::c_string;
use crate::cfamily::{BodyWriter, Dialect, EmitResult, Helper, Name, Rmw};
use metile_ir::gpu_ir::*;
use metile_ir::{DType, MemScope, MemSem, UnaryOp};
use std::fmt::Write;

/// Metal Shading Language.
pub(crate) struct Msl;

const WORDS: &[&str] = &[
    // Qualifiers, types and namespaces.
    "kernel",
    "vertex",
    "fragment",
    "device",
    "constant",
    "threadgroup",
    "threadgroup_imageblock",
    "thread",
    "ray_data",
    "object_data",
    "size_t",
    "ptrdiff_t",
    "metal",
    "precise",
    "fast",
    "vec",
    "packed_vec",
    "simdgroup_matrix",
    // Metal 4 tensor ops (`using namespace mpp::tensor_ops`).
    "mpp",
    "tensor_ops",
    "matmul2d",
    "matmul2d_descriptor",
    "execution_simdgroup",
    "remove_addrspace_t",
    "texture",
    "sampler",
    "array",
    "atomic",
    "mem_flags",
    "select",
    "simd_shuffle_xor",
    "simd_broadcast",
    "threadgroup_barrier",
];

/// True for vector type names such as `float4` or `half2`.
fn is_vector_type(name: &str) -> bool {
    let base = name.trim_end_matches(|c: char| c.is_ascii_digit());
    base.len() < name.len()
        && [
            "bool", "char", "uchar", "short", "ushort", "int", "uint", "long", "ulong", "half", "bfloat",
            "float",
        ]
        .contains(&base.trim_start_matches("packed_"))
}

/// The MSL name of a vector type.
pub(crate) fn vector_type(d: DType, lanes: u8) -> String {
    format!("{}{lanes}", scalar_type(d))
}

impl Dialect for Msl {
    const NAME: &'static str = "MSL";
    const HAS_F64: bool = false;
    // Metal vectors have at most 4 lanes.
    const VECTOR_FIELDS: &'static [&'static str] = &["x", "y", "z", "w"];
    const BARRIER: &'static str = "threadgroup_barrier(mem_flags::mem_threadgroup);";
    const DEVICE_BARRIER: &'static str =
        "threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);";

    type State = ();
    fn state(_: &GpuFunction) {}

    fn reserves(name: &str) -> bool {
        WORDS.contains(&name) || is_vector_type(name)
    }

    fn scalar(d: DType) -> &'static str {
        scalar_type(d)
    }

    fn vector(d: DType, lanes: u8) -> String {
        vector_type(d, lanes)
    }

    fn push_type(out: &mut String, t: GpuType) {
        match t {
            GpuType::Scalar(d) => out.push_str(scalar_type(d)),
            GpuType::Vector(d, n) => {
                out.push_str(scalar_type(d));
                push_u32(out, u32::from(n));
            }
            GpuType::Ptr(d, s) => {
                let _ = write!(out, "{} {}*", s.name(), scalar_type(d));
            }
        }
    }

    fn vector_pointer(space: MemSpace, constness: &str, d: DType, width: u8) -> String {
        format!("{} {constness}{}*", space.name(), vector_type(d, width))
    }

    // MSL overloads the C math functions for float.
    fn float_fn(name: &str) -> String {
        name.to_string()
    }

    fn transcendental(name: &str) -> String {
        format!("precise::{name}")
    }

    fn float_function_helper(u: UnaryOp) -> Option<(Helper, &'static str)> {
        match u {
            UnaryOp::Erf => Some((Helper::Erf, "metile_erf")),
            UnaryOp::Log1p => Some((Helper::Log1p, "metile_log1p")),
            UnaryOp::Expm1 => Some((Helper::Expm1, "metile_expm1")),
            _ => None,
        }
    }

    fn helper_source(h: Helper) -> Option<&'static str> {
        math_helper_source(h)
    }

    fn mul_hi(ua: &str, ub: &str, _wide: bool) -> String {
        format!("mulhi({ua}, {ub})")
    }

    fn shuffle(xor: bool, x: &Name, lane: &Name, d: DType) -> EmitResult<String> {
        let f = if xor { "simd_shuffle_xor" } else { "simd_broadcast" };
        let lane = format!("ushort({lane})");
        Ok(match d {
            DType::Bool => format!("{f}(uint({x}), {lane}) != 0u"),
            DType::I64 | DType::U64 => {
                format!("as_type<{}>({f}(as_type<uint2>({x}), {lane}))", scalar_type(d))
            }
            DType::F64 => return Err(crate::cfamily::writer::no_f64::<Msl>()),
            DType::BF16 => format!("as_type<bfloat>({f}(as_type<ushort>({x}), {lane}))"),
            _ => format!("{f}({x}, {lane})"),
        })
    }

    /// The `metile_device_print` macro (Metal's `os_log` from Metal 3.2 on,
    /// see `MSL_DEBUG_PREAMBLE`), which ends the line itself.
    fn print_statement(format: &str, args: &str) -> String {
        format!("metile_device_print({}{args});", c_string(format))
    }

    /// `metile_device_assert_failed` (see `MSL_DEBUG_PREAMBLE`).
    fn assert_statement(_: &GpuFunction, op: &GpuOp, cond: &Name, message: &str) -> String {
        // The message is part of a format on Metal: `%` is doubled.
        let text = c_string(&format!("{}: {message}", op.loc).replace('%', "%%"));
        format!("if (!({cond})) metile_device_assert_failed({text});")
    }

    fn atomic(
        w: &mut BodyWriter<'_, Self>,
        rmw: &Rmw,
        sem: MemSem,
        scope: MemScope,
        depth: usize,
    ) -> EmitResult<()> {
        w.msl_atomic(rmw, sem, scope, depth)
    }

    /// `simdgroup_matrix` values filled through `thread_elements()` (the lane
    /// layout the atom describes), or Metal 4's `matmul2d` (`tensor_ops.rs`).
    fn mma(
        w: &mut BodyWriter<'_, Self>,
        op: &GpuOp,
        kind: AtomKind,
        [a, b, c]: [&[String]; 3],
        depth: usize,
    ) -> EmitResult<()> {
        let operand = scalar_type(w.dtype(*op.operands.first().ok_or("an mma without operands")?));
        let first = op.results[0].0;
        match kind {
            AtomKind::AppleSimdgroup8x8 => {
                let m = format!("m{first}");
                w.line_fmt(
                    depth,
                    format_args!("simdgroup_matrix<{operand}, 8, 8> {m}a, {m}b;"),
                );
                w.line_fmt(depth, format_args!("simdgroup_float8x8 {m}c;"));
                for (suffix, values) in [("a", a), ("b", b), ("c", c)] {
                    for (i, x) in values.iter().enumerate() {
                        w.line_fmt(depth, format_args!("{m}{suffix}.thread_elements()[{i}] = {x};"));
                    }
                }
                w.line_fmt(
                    depth,
                    format_args!("simdgroup_multiply_accumulate({m}c, {m}a, {m}b, {m}c);"),
                );
                for (i, &d) in op.results.iter().enumerate() {
                    w.define(depth, d, &format!("{m}c.thread_elements()[{i}]"));
                }
            }
            AtomKind::AppleMatmul2d16x32x16 => {
                let (lines, result) = super::tensor_ops::matmul2d(first, operand, a, b, c);
                for l in &lines {
                    w.line(depth, l);
                }
                for (i, &d) in op.results.iter().enumerate() {
                    w.define(depth, d, &format!("{result}[{i}]"));
                }
            }
            _ => return Err(format!("no MSL spelling of the matrix atom {}", kind.name())),
        }
        Ok(())
    }

    /// Metal has no asynchronous copy into threadgroup memory in compute
    /// kernels: the copy is done at once, so groups and waits are no-ops.
    /// NVIDIA's ops have no spelling.
    fn own_op(w: &mut BodyWriter<'_, Self>, op: &GpuOp, depth: usize) -> EmitResult<()> {
        match op.kind {
            GpuOpKind::AsyncCopy {
                bytes,
                has_mask,
                zero_fill,
            } => w.synchronous_copy(op, (bytes, has_mask, zero_fill), depth),
            GpuOpKind::AsyncCommit | GpuOpKind::AsyncWait { .. } => Ok(()),
            GpuOpKind::SimdgroupLoad { transpose } => w.simdgroup_load(op, transpose, depth),
            _ => Err(format!("{} has no MSL spelling", op.kind.name())),
        }
    }
}

impl BodyWriter<'_, Msl> {
    /// `simdgroup_load` into a matrix of its own, whose `thread_elements()`
    /// are the results. The pointer carries the offset and the origin stays
    /// 0, whose meaning under `transpose` Apple leaves open.
    fn simdgroup_load(&mut self, op: &GpuOp, transpose: bool, depth: usize) -> EmitResult<()> {
        let arg = |i: usize| -> EmitResult<Name> {
            op.operands
                .get(i)
                .ok_or_else(|| format!("simdgroup_load lacks operand {i}"))
                .and_then(|&v| self.name(v))
        };
        let (ptr, index, ld) = (arg(0)?, arg(1)?, arg(2)?);
        let first = op.results.first().ok_or("simdgroup_load without results")?;
        let element = scalar_type(self.dtype(*first));
        let m = format!("m{}", first.0);
        self.line_fmt(depth, format_args!("simdgroup_matrix<{element}, 8, 8> {m};"));
        self.line_fmt(
            depth,
            format_args!("simdgroup_load({m}, {ptr} + {index}, {ld}, ulong2(0), {transpose});"),
        );
        for (i, &d) in op.results.iter().enumerate() {
            self.define(depth, d, &format!("{m}.thread_elements()[{i}]"));
        }
        Ok(())
    }

    /// An asynchronous copy done at once: `[if (mask)] dst = [inside ? src : 0]`.
    fn synchronous_copy(
        &mut self,
        op: &GpuOp,
        (bytes, has_mask, zero_fill): (u8, bool, bool),
        depth: usize,
    ) -> EmitResult<()> {
        let arg = |i: usize| -> EmitResult<Name> {
            op.operands
                .get(i)
                .ok_or_else(|| format!("{} lacks operand {i}", op.kind.name()))
                .and_then(|&v| self.name(v))
        };
        let d = self.dtype(op.operands[2]);
        let width = (usize::from(bytes) / d.size_bytes()) as u8;
        let mask = if has_mask { Some(arg(4)?) } else { None };
        let inside = if zero_fill {
            Some(arg(4 + usize::from(has_mask))?)
        } else {
            None
        };
        // Both arms in the value type: a device reference and a
        // temporary do not meet in a conditional.
        let ty = if width == 1 {
            scalar_type(d).to_string()
        } else {
            vector_type(d, width)
        };
        let (src, src_index) = (op.operands[2], op.operands[3]);
        let access = (op.operands[0], op.operands[1], width);
        self.assign_access(depth, mask, access, |this, out| {
            if let Some(inside) = &inside {
                let _ = write!(out, "{inside} ? {ty}(");
                this.push_access(out, src, src_index, width)?;
                let _ = write!(out, ") : {ty}(0)");
                return Ok(());
            }
            this.push_access(out, src, src_index, width)
        })
    }
}

fn math_helper_source(h: Helper) -> Option<&'static str> {
    Some(match h {
        Helper::Erf => {
            "// erf: x + x * P(x^2) below 0.875, 1 - exp(-x^2) * R(1 / |x|) up to 4, then +-1.\n\
             static inline float metile_erf(float x) {\n  \
             float a = fabs(x);\n  \
             if (isnan(x)) return x;\n  \
             if (a >= 4.0f) return copysign(1.0f, x);\n  \
             if (a < 0.875f) {\n    \
             float t = x * x;\n    \
             float p = -1.0694233e-05f;\n    \
             p = p * t + 0.0001156039f;\n    \
             p = p * t + -0.0008517245f;\n    \
             p = p * t + 0.0052228826f;\n    \
             p = p * t + -0.02686596f;\n    \
             p = p * t + 0.112837896f;\n    \
             p = p * t + -0.37612638f;\n    \
             p = p * t + 0.12837917f;\n    \
             return x + x * p;\n  \
             }\n  \
             float u = 1.0f / a;\n  \
             float r = 0.015747964f;\n  \
             r = r * u + -0.09702005f;\n  \
             r = r * u + 0.2403014f;\n  \
             r = r * u + -0.2679921f;\n  \
             r = r * u + 0.010065993f;\n  \
             r = r * u + 0.3557146f;\n  \
             r = r * u + -0.42031905f;\n  \
             r = r * u + 0.030355053f;\n  \
             r = r * u + 0.56054294f;\n  \
             r = r * u + 0.00018686573f;\n  \
             return copysign(1.0f - precise::exp(-(a * a)) * r, x);\n}\n"
        }
        Helper::Log1p => {
            "static inline float metile_log1p(float x) {\n  \
             float u = 1.0f + x;\n  \
             if (u == 1.0f || u == INFINITY) return u == 1.0f ? x : u;\n  \
             return precise::log(u) * (x / (u - 1.0f));\n}\n"
        }
        Helper::Expm1 => {
            "static inline float metile_expm1(float x) {\n  \
             float u = precise::exp(x);\n  \
             if (u == 1.0f) return x;\n  \
             float um1 = u - 1.0f;\n  \
             if (um1 == -1.0f) return -1.0f;\n  \
             if (isinf(u)) return u;\n  \
             return um1 * (x / precise::log(u));\n}\n"
        }
        _ => return None,
    })
}
