//! GPU IR ops as MSL or CUDA C++ statements, keeping the Tile IR's element
//! semantics. Both languages are C++ dialects: the walk, the names and the
//! semantic guards are shared, and [`Lang`] decides the few spellings that
//! differ (vector types, address spaces, shuffles, barriers, float math
//! functions, int-to-half casts). The CUDA prelude (`cuda/prelude.cuh`) defines
//! MSL's scalar type names, `as_type` and `simd_sum`/`simd_max`/`simd_min` so
//! the rest reads the same. The rules:
//!
//! * integer `+ - * neg <<` wrap: printed through unsigned `as_type` unless the
//!   range analysis proves no overflow (signed overflow is undefined in MSL);
//! * integer `// %` by zero give 0 and `MIN // -1` wraps (guarded, never trapping);
//!   shift counts are taken modulo the bit width;
//! * float `//` is `trunc(a / b)`, `%` is `fmod`, max/min are `fmax`/`fmin`;
//! * f16 `+ - * /` are native (rounding a binary16 op through binary32 is exact),
//!   every other f16 op and every bf16 op computes in float and rounds once;
//! * transcendental functions use `precise::` (fast `tanh` overflows to NaN);
//! * float-to-int casts saturate and map NaN to 0 (helpers), int-to-bfloat
//!   rounds once (a helper rounding to odd through float first);
//! * float literals are printed with the shortest decimal that round-trips, with
//!   the `f` suffix; f16/bf16 literals as an exactly representable float
//!   converted explicitly; non-finite values through `as_type` of their bits;
//! * `simd_*` on bool, i64 and bf16 go through integer types of the same size.

use super::names::{scalar_type, vector_type};
use super::ranges::Ranges;
use super::text::{literal, push_infix, push_type, push_u32, type_text, zero_text, Lang, Name, RegText};
use metile_ir::gpu_ir::*;
use metile_ir::{BinaryOp, CmpOp, DType, Loc, ReduceOp, UnaryOp};
use std::collections::{BTreeSet, HashMap};
use std::fmt::{self, Write};

mod atomic;
mod convert;
mod ints;
mod math;
mod tma;
mod wgmma;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Helper {
    FloatToInt,
    FloatToUint,
    FloatToLong,
    /// Float (or, when `true`, double) to an integer type the three above do not cover.
    FloatToInteger(DType, bool),
    BfloatFromLong,
    BfloatFromUlong,
    /// An fp8 type's decoder to float.
    Fp8ToFloat(DType),
    /// An fp8 type's encoder from float (or, when `true`, from double).
    Fp8FromFloat(DType, bool),
    Erf,
    Log1p,
    Expm1,
    /// CUDA's approximate `exp`, `exp2` and division (PTX `ex2.approx`, `div.full`).
    FastMath,
}

/// `text` as a C string literal (the text is printable ASCII, see
/// `print_format::is_printable`, except kernel file names: anything else is escaped).
pub fn c_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for b in text.bytes() {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            0x20..=0x7e => out.push(char::from(b)),
            _ => out.push_str(&format!("\\{b:03o}")),
        }
    }
    out.push('"');
    out
}

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

pub fn helper_source(h: Helper, lang: Lang) -> String {
    match h {
        Helper::Erf | Helper::Log1p | Helper::Expm1 | Helper::FastMath => math::helper_source(h).to_string(),
        Helper::FloatToInteger(to, double) => convert::float_to_integer_source(lang, double, to),
        Helper::BfloatFromUlong => convert::BFLOAT_FROM_ULONG.to_string(),
        Helper::Fp8ToFloat(d) => convert::decoder_source(d),
        Helper::Fp8FromFloat(d, double) => convert::encoder_source(d, double),
        _ => fixed_helper_source(h).to_string(),
    }
}

fn fixed_helper_source(h: Helper) -> &'static str {
    match h {
        Helper::FloatToInt => {
            "static inline int metile_float_to_int(float x) {\n  \
             return isnan(x) ? 0 : x >= 2147483648.0f ? 2147483647 : x <= -2147483648.0f ? (-2147483647 - 1) : int(x);\n}\n"
        }
        Helper::FloatToUint => {
            "static inline uint metile_float_to_uint(float x) {\n  \
             return isnan(x) ? 0u : x >= 4294967296.0f ? 4294967295u : x <= 0.0f ? 0u : uint(x);\n}\n"
        }
        Helper::FloatToLong => {
            "static inline long metile_float_to_long(float x) {\n  \
             return isnan(x) ? 0L : x >= 9223372036854775808.0f ? 9223372036854775807L\n    \
             : x <= -9223372036854775808.0f ? (-9223372036854775807L - 1L) : long(x);\n}\n"
        }
        Helper::BfloatFromLong => {
            "// Rounds once: to float with round-to-odd (exact for the later rounding), then to bfloat.\n\
             static inline bfloat metile_bfloat_from_long(long v) {\n  \
             ulong m = v < 0 ? 0UL - ulong(v) : ulong(v);\n  \
             float f = float(m);\n  \
             uint bits = as_type<uint>(f);\n  \
             ulong g = ulong(f);\n  \
             if (g != m && (bits & 1u) == 0u) {\n    \
             bits = g > m ? bits - 1u : bits + 1u;\n  \
             }\n  \
             float r = as_type<float>(bits);\n  \
             return bfloat(v < 0 ? -r : r);\n}\n"
        }
        _ => "",
    }
}

/// The unsigned type of the same width, for wrapping arithmetic (narrow
/// integers compute in 32 bits, as C promotes them).
fn unsigned_of(d: DType) -> &'static str {
    match d {
        DType::I64 | DType::U64 => "ulong",
        _ => "uint",
    }
}

pub struct BodyWriter<'a> {
    lang: Lang,
    f: &'a GpuFunction,
    ranges: &'a Ranges,
    /// The spelling of each value, indexed by value.
    names: Vec<Name>,
    /// Pointer roots some store writes through, indexed by value.
    written: &'a [bool],
    out: String,
    helpers: BTreeSet<Helper>,
    /// Where in `out` each op's text starts, with the op's kernel source line
    /// (recorded when the line changes), so faults in the MSL map back to it.
    op_starts: Vec<(usize, Loc)>,
    /// Register arrays that hold `wgmma` accumulators (`wgmma.rs`).
    wgmma_accumulators: Vec<RegId>,
    /// f16 and bf16 values cast from an f32 value, with that value (CUDA).
    narrowed: HashMap<GpuValue, GpuValue>,
}

type EmitResult<T> = Result<T, String>;

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

impl<'a> BodyWriter<'a> {
    pub fn new(
        lang: Lang,
        f: &'a GpuFunction,
        ranges: &'a Ranges,
        names: Vec<Name>,
        written: &'a [bool],
    ) -> BodyWriter<'a> {
        BodyWriter {
            lang,
            f,
            ranges,
            names,
            wgmma_accumulators: wgmma::accumulators(f),
            narrowed: if lang == Lang::Cuda {
                narrowed_values(f)
            } else {
                HashMap::new()
            },
            written,
            out: String::new(),
            helpers: BTreeSet::new(),
            op_starts: Vec::new(),
        }
    }

    /// The f32 sources of a two-lane f16 or bf16 vector built from two casts.
    fn narrowed_pair(&self, op: &GpuOp) -> Option<(GpuValue, GpuValue, DType)> {
        let [a, b] = op.operands[..] else {
            return None;
        };
        let d = self.dtype(a);
        let pair = (*self.narrowed.get(&a)?, *self.narrowed.get(&b)?, d);
        matches!(d, DType::F16 | DType::BF16).then_some(pair)
    }

    pub fn finish(self) -> (String, BTreeSet<Helper>, Vec<(usize, Loc)>) {
        (self.out, self.helpers, self.op_starts)
    }

    pub fn line(&mut self, depth: usize, text: &str) {
        self.line_fmt(depth, format_args!("{text}"));
    }

    /// A line formatted straight into the output (no temporary string).
    fn line_fmt(&mut self, depth: usize, args: fmt::Arguments<'_>) {
        for _ in 0..depth {
            self.out.push_str("  ");
        }
        // Writing to a String cannot fail.
        let _ = self.out.write_fmt(args);
        self.out.push('\n');
    }

    fn name(&self, v: GpuValue) -> EmitResult<Name> {
        match self.names.get(v.index()) {
            Some(Name::Unset) | None => Err(format!("{v} has no name")),
            Some(n) => Ok(n.clone()),
        }
    }

    /// Names a value defined outside the body (threadgroup memory in CUDA).
    pub fn set_value_name(&mut self, v: GpuValue, name: Name) {
        self.set_name(v, name);
    }

    fn set_name(&mut self, v: GpuValue, name: Name) {
        if self.names.len() <= v.index() {
            self.names.resize(v.index() + 1, Name::Unset);
        }
        self.names[v.index()] = name;
    }

    fn dtype(&self, v: GpuValue) -> DType {
        self.f.ty(v).dtype()
    }

    /// The spelling of a GPU IR type in the output language.
    fn type_of(&self, t: GpuType) -> String {
        match (self.lang, t) {
            (Lang::Cuda, GpuType::Vector(d, n)) => self.vector_of(d, n),
            (Lang::Cuda, GpuType::Scalar(d)) => self.lang.scalar(d).to_string(),
            (Lang::Cuda, GpuType::Ptr(d, _)) => format!("{}*", self.lang.scalar(d)),
            _ => type_text(t).to_string(),
        }
    }

    fn vector_of(&self, d: DType, lanes: u8) -> String {
        match self.lang {
            Lang::Msl => vector_type(d, lanes),
            Lang::Cuda => format!("metile_vec<{}, {lanes}>", self.lang.scalar(d)),
        }
    }

    /// Declares the register arrays, then writes the function's body.
    pub fn registers_and_body(&mut self) -> EmitResult<()> {
        let f = self.f;
        for (i, r) in f.regs.iter().enumerate() {
            let ty = self.lang.scalar(r.dtype);
            if r.len == 1 {
                self.line_fmt(1, format_args!("{ty} r{i};"));
            } else {
                self.line_fmt(1, format_args!("{ty} r{i}[{}];", r.len));
            }
        }
        self.block(&f.body, 1)
    }

    pub fn block(&mut self, b: &GpuBlock, depth: usize) -> EmitResult<()> {
        for op in &b.ops {
            if self.op_starts.last().is_none_or(|(_, loc)| *loc != op.loc) {
                self.op_starts.push((self.out.len(), op.loc.clone()));
            }
            self.op(op, depth)?;
        }
        Ok(())
    }

    fn define(&mut self, depth: usize, result: GpuValue, rhs: &str) {
        let ty = self.type_of(self.f.ty(result));
        self.line_fmt(depth, format_args!("{ty} v{} = {rhs};", result.0));
        self.set_name(result, Name::Local(result.0));
    }

    /// [`BodyWriter::define`] with the right-hand side written by `rhs` straight
    /// into the output.
    fn define_with(
        &mut self,
        depth: usize,
        result: GpuValue,
        rhs: impl FnOnce(&Self, &mut String) -> EmitResult<()>,
    ) -> EmitResult<()> {
        let mut out = std::mem::take(&mut self.out);
        for _ in 0..depth {
            out.push_str("  ");
        }
        match self.lang {
            Lang::Msl => push_type(&mut out, self.f.ty(result)),
            Lang::Cuda => out.push_str(&self.type_of(self.f.ty(result))),
        }
        out.push_str(" v");
        push_u32(&mut out, result.0);
        out.push_str(" = ");
        let written = rhs(self, &mut out);
        out.push_str(";\n");
        self.out = out;
        written?;
        self.set_name(result, Name::Local(result.0));
        Ok(())
    }

    fn op(&mut self, op: &GpuOp, depth: usize) -> EmitResult<()> {
        let arg = |i: usize| -> EmitResult<Name> {
            op.operands
                .get(i)
                .ok_or_else(|| format!("{} lacks operand {i}", op.kind.name()))
                .and_then(|&v| self.name(v))
        };
        match &op.kind {
            GpuOpKind::Const(lit) => {
                let d = self.f.ty(op.results[0]).dtype();
                self.set_name(op.results[0], Name::text(literal(lit, d, self.lang)));
            }
            GpuOpKind::Builtin(b) => {
                let axis = |a: u8| ["x", "y", "z"].get(usize::from(a)).copied().unwrap_or("x");
                let rhs = match b {
                    Builtin::ThreadIndex => "int(tid)".to_string(),
                    Builtin::SimdLane => "int(lane)".to_string(),
                    Builtin::SimdgroupIndex => "int(sgid)".to_string(),
                    Builtin::ThreadgroupPosition(a) => format!("int(tgpig.{})", axis(*a)),
                    Builtin::ThreadgroupsPerGrid(a) => format!("int(tgpg.{})", axis(*a)),
                };
                self.define(depth, op.results[0], &rhs);
            }
            GpuOpKind::Unary(u) => {
                let rhs = self.unary(*u, op.operands[0])?;
                self.define(depth, op.results[0], &rhs);
            }
            GpuOpKind::Binary(b) => {
                let (x, y) = (op.operands[0], op.operands[1]);
                if *b == BinaryOp::FastDiv && self.lang == Lang::Cuda && self.dtype(x) == DType::F32 {
                    self.helpers.insert(Helper::FastMath);
                }
                self.define_with(depth, op.results[0], |w, out| w.binary(out, *b, x, y))?;
            }
            GpuOpKind::Compare(c) => {
                let rhs = self.compare(*c, op.operands[0], op.operands[1])?;
                self.define(depth, op.results[0], &rhs);
            }
            GpuOpKind::Fma => {
                let rhs = self.fma(op)?;
                self.define(depth, op.results[0], &rhs);
            }
            GpuOpKind::Select => {
                let (c, x, y) = (arg(0)?, arg(1)?, arg(2)?);
                self.define_with(depth, op.results[0], |_, out| {
                    let _ = write!(out, "{c} ? {x} : {y}");
                    Ok(())
                })?;
            }
            GpuOpKind::Cast => {
                let to = self.f.ty(op.results[0]).dtype();
                let rhs = self.cast(op.operands[0], to)?;
                self.define(depth, op.results[0], &rhs);
            }
            GpuOpKind::IntToPtr => {
                let ty = self.type_of(self.f.ty(op.results[0]));
                let address = arg(0)?;
                self.define(
                    depth,
                    op.results[0],
                    &format!("reinterpret_cast<{ty}>({address})"),
                );
            }
            GpuOpKind::MakeVector if self.narrowed_pair(op).is_some() => {
                let (a, b, d) = self.narrowed_pair(op).ok_or("no pair")?;
                // One conversion of the pair (`cvt.rn.f16x2.f32`): ptxas
                // serializes `wgmma`s whose accumulators are later converted
                // one at a time, though only after the last wait.
                let (a, b) = (self.name(a)?, self.name(b)?);
                let ty = self.lang.scalar(d);
                self.define_with(depth, op.results[0], |_, out| {
                    let _ = write!(out, "metile_narrow2<{ty}>({a}, {b})");
                    Ok(())
                })?;
            }
            GpuOpKind::MakeVector => {
                let ty = self.type_of(self.f.ty(op.results[0]));
                let mut rhs = format!("{ty}(");
                for i in 0..op.operands.len() {
                    let sep = if i == 0 { "" } else { ", " };
                    let _ = write!(rhs, "{sep}{}", arg(i)?);
                }
                rhs.push(')');
                self.define(depth, op.results[0], &rhs);
            }
            GpuOpKind::Extract { lane } => {
                // MSL vectors have at most 4 lanes; CUDA's metile_vec has 8.
                let fields: &[&str] = match self.lang {
                    Lang::Msl => &["x", "y", "z", "w"],
                    Lang::Cuda => &["x", "y", "z", "w", "e4", "e5", "e6", "e7"],
                };
                let field = *fields
                    .get(usize::from(*lane))
                    .ok_or_else(|| format!("vector lane {lane} out of range"))?;
                let v = arg(0)?;
                self.define_with(depth, op.results[0], |_, out| {
                    let _ = write!(out, "{v}.{field}");
                    Ok(())
                })?;
            }
            GpuOpKind::Load {
                width,
                has_mask,
                has_other,
            } => {
                if !*has_mask {
                    let (root, index) = (op.operands[0], op.operands[1]);
                    return self.define_with(depth, op.results[0], |w, out| {
                        w.push_access(out, root, index, *width)
                    });
                }
                let access = self.access(op.operands[0], op.operands[1], *width)?;
                let rhs = {
                    let other = if *has_other {
                        arg(op.operands.len() - 1)?.to_string()
                    } else {
                        let d = self.dtype(op.operands[0]);
                        let z = zero_text(d);
                        if *width > 1 {
                            format!("{}({z})", self.vector_of(d, *width))
                        } else {
                            z.to_string()
                        }
                    };
                    // The access is made an rvalue of the result type: a ternary
                    // cannot mix an address-space-qualified lvalue with a temporary.
                    let ty = self.type_of(self.f.ty(op.results[0]));
                    format!("{} ? {ty}({access}) : {other}", arg(2)?)
                };
                self.define(depth, op.results[0], &rhs);
            }
            GpuOpKind::Store { width, has_mask } => {
                let value = arg(2)?;
                let mask = if *has_mask { Some(arg(3)?) } else { None };
                let access = (op.operands[0], op.operands[1], *width);
                self.assign_access(depth, mask, access, |_, out| {
                    value.push_to(out);
                    Ok(())
                })?;
            }
            GpuOpKind::RegRead { reg, index } => {
                let r = self.reg(*reg, *index);
                self.define_with(depth, op.results[0], |_, out| {
                    r.push_to(out);
                    Ok(())
                })?;
            }
            GpuOpKind::RegWrite { reg, index } if self.wgmma_accumulators.contains(reg) => {
                self.opaque_write(*reg, *index, &arg(0)?, depth);
            }
            GpuOpKind::RegWrite { reg, index } => {
                let lhs = self.reg(*reg, *index);
                let value = arg(0)?;
                self.indent(depth);
                lhs.push_to(&mut self.out);
                self.out.push_str(" = ");
                value.push_to(&mut self.out);
                self.out.push_str(";\n");
            }
            GpuOpKind::AssumeUniform => {
                let same = self.name(op.operands[0])?;
                self.set_name(op.results[0], same);
            }
            GpuOpKind::SimdShuffleXor | GpuOpKind::SimdBroadcast if self.lang == Lang::Cuda => {
                let f = if matches!(op.kind, GpuOpKind::SimdShuffleXor) {
                    "__shfl_xor_sync"
                } else {
                    "__shfl_sync"
                };
                let (x, lane) = (arg(0)?, arg(1)?);
                let d = self.dtype(op.operands[0]);
                let rhs = match d {
                    DType::Bool => format!("{f}(0xffffffffu, int({x}), {lane}) != 0"),
                    // CUDA shuffles 32- and 64-bit values: narrow ones (and fp8 bits) travel as int.
                    d if d.size_bytes() < 4 && !matches!(d, DType::F16 | DType::BF16) => {
                        format!("{}({f}(0xffffffffu, int({x}), {lane}))", self.lang.scalar(d))
                    }
                    _ => format!("{f}(0xffffffffu, {x}, {lane})"),
                };
                self.define(depth, op.results[0], &rhs);
            }
            GpuOpKind::SimdShuffleXor | GpuOpKind::SimdBroadcast => {
                let f = if matches!(op.kind, GpuOpKind::SimdShuffleXor) {
                    "simd_shuffle_xor"
                } else {
                    "simd_broadcast"
                };
                let x = arg(0)?;
                let lane = format!("ushort({})", arg(1)?);
                let d = self.dtype(op.operands[0]);
                let rhs = match d {
                    DType::Bool => format!("{f}(uint({x}), {lane}) != 0u"),
                    DType::I64 | DType::U64 => {
                        format!("as_type<{}>({f}(as_type<uint2>({x}), {lane}))", scalar_type(d))
                    }
                    DType::F64 => return Err("Metal has no f64".into()),
                    DType::BF16 => format!("as_type<bfloat>({f}(as_type<ushort>({x}), {lane}))"),
                    _ => format!("{f}({x}, {lane})"),
                };
                self.define(depth, op.results[0], &rhs);
            }
            GpuOpKind::SimdReduce(r) => {
                let f = match r {
                    ReduceOp::Sum => "simd_sum",
                    ReduceOp::Max => "simd_max",
                    ReduceOp::Min => "simd_min",
                    ReduceOp::Xor => return Err("xor reductions use shuffles, never simd_xor".into()),
                };
                self.define(depth, op.results[0], &format!("{f}({})", arg(0)?));
            }
            GpuOpKind::Mma(kind) => self.mma(op, *kind, depth)?,
            GpuOpKind::LdMatrix { count, trans } if self.lang == Lang::Cuda => {
                let (root, index) = (arg(0)?, arg(1)?);
                let regs: Vec<String> = op.results.iter().map(|d| format!("m{}", d.0)).collect();
                let list = (0..regs.len())
                    .map(|i| format!("%{i}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                let outs = regs
                    .iter()
                    .map(|r| format!("\"=r\"({r})"))
                    .collect::<Vec<_>>()
                    .join(", ");
                self.line_fmt(depth, format_args!("uint {};", regs.join(", ")));
                self.line_fmt(
                    depth,
                    format_args!(
                        "asm volatile(\"ldmatrix.sync.aligned.m8n8.x{count}{}.shared.b16 {{{list}}}, [%{}];\" : {outs} : \
                         \"r\"(uint(__cvta_generic_to_shared({root} + {index}))));",
                        if *trans { ".trans" } else { "" },
                        regs.len()
                    ),
                );
                for (d, r) in op.results.iter().zip(&regs) {
                    let ty = self.type_of(self.f.ty(*d));
                    self.define(depth, *d, &format!("as_type<{ty}>({r})"));
                }
            }
            GpuOpKind::LdMatrix { .. } => return Err("ldmatrix has no MSL spelling".into()),
            GpuOpKind::AsyncCopy {
                bytes,
                has_mask,
                zero_fill,
            } if self.lang == Lang::Cuda => {
                let (dst, di, src, si) = (arg(0)?, arg(1)?, arg(2)?, arg(3)?);
                // .cg (L2 only) takes 16-byte copies; smaller ones go through .ca.
                let cache = if *bytes == 16 { "cg" } else { "ca" };
                let dst_addr = format!("\"r\"(uint(__cvta_generic_to_shared({dst} + {di})))");
                let copy = if *zero_fill {
                    // Outside, zero source bytes are read (from the buffer's start)
                    // and the rest of the destination is zero-filled.
                    let inside = arg(4 + usize::from(*has_mask))?;
                    format!(
                        "asm volatile(\"cp.async.{cache}.shared.global [%0], [%1], {bytes}, %2;\" :: {dst_addr}, \
                         \"l\"({src} + ({inside} ? {si} : 0)), \"r\"({inside} ? {bytes} : 0) : \"memory\");"
                    )
                } else {
                    format!(
                        "asm volatile(\"cp.async.{cache}.shared.global [%0], [%1], {bytes};\" :: {dst_addr}, \
                         \"l\"({src} + {si}) : \"memory\");"
                    )
                };
                if *has_mask {
                    let m = arg(4)?;
                    self.line_fmt(depth, format_args!("if ({m}) {copy}"));
                } else {
                    self.line(depth, &copy);
                }
            }
            GpuOpKind::AsyncCommit if self.lang == Lang::Cuda => {
                self.line(depth, "asm volatile(\"cp.async.commit_group;\" ::: \"memory\");");
            }
            GpuOpKind::AsyncWait { pending } if self.lang == Lang::Cuda => {
                self.line_fmt(
                    depth,
                    format_args!("asm volatile(\"cp.async.wait_group {pending};\" ::: \"memory\");"),
                );
            }
            // Metal has no asynchronous copy into threadgroup memory in compute
            // kernels: the copy is done at once, so groups and waits are no-ops.
            GpuOpKind::AsyncCopy {
                bytes,
                has_mask,
                zero_fill,
            } => {
                let d = self.dtype(op.operands[2]);
                let width = (usize::from(*bytes) / d.size_bytes()) as u8;
                let mask = if *has_mask { Some(arg(4)?) } else { None };
                let inside = if *zero_fill {
                    Some(arg(4 + usize::from(*has_mask))?)
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
                })?;
            }
            GpuOpKind::AsyncCommit | GpuOpKind::AsyncWait { .. } => {}
            GpuOpKind::Wgmma { n, a, b, acc, first } if self.lang == Lang::Cuda => {
                self.wgmma(op, *n, (*a, *b), *acc, *first, depth)?
            }
            GpuOpKind::WgmmaRegA {
                n,
                b,
                acc,
                first,
                a,
                a_first,
            } if self.lang == Lang::Cuda => {
                self.wgmma_reg_a(op, (*n, *b), (*acc, *first), (*a, *a_first), depth)?
            }
            GpuOpKind::WgmmaWait {
                pending,
                acc,
                count,
                held,
            } if self.lang == Lang::Cuda => self.wgmma_wait(*pending, (*acc, *count), *held, depth),
            GpuOpKind::WgmmaFence | GpuOpKind::ProxyFence | GpuOpKind::WgmmaCommit
                if self.lang == Lang::Cuda =>
            {
                let text = match op.kind {
                    GpuOpKind::WgmmaFence => "wgmma.fence.sync.aligned;",
                    GpuOpKind::ProxyFence => "fence.proxy.async.shared::cta;",
                    _ => "wgmma.commit_group.sync.aligned;",
                };
                self.line_fmt(depth, format_args!("asm volatile(\"{text}\" ::: \"memory\");"));
            }
            GpuOpKind::Wgmma { .. }
            | GpuOpKind::WgmmaRegA { .. }
            | GpuOpKind::WgmmaWait { .. }
            | GpuOpKind::WgmmaFence
            | GpuOpKind::ProxyFence
            | GpuOpKind::WgmmaCommit => return Err("wgmma has no MSL spelling".into()),
            GpuOpKind::AtomicAdd if self.lang == Lang::Cuda => {
                let rhs = format!("metile_atomic_add({} + {}, {})", arg(0)?, arg(1)?, arg(2)?);
                self.define(depth, op.results[0], &rhs);
            }
            GpuOpKind::MbarrierInit { .. }
            | GpuOpKind::MbarrierArrive { .. }
            | GpuOpKind::MbarrierWait
            | GpuOpKind::TmaLoad
                if self.lang == Lang::Cuda =>
            {
                self.tma_op(op, depth)?
            }
            GpuOpKind::MbarrierInit { .. }
            | GpuOpKind::MbarrierArrive { .. }
            | GpuOpKind::MbarrierWait
            | GpuOpKind::AtomicAdd
            | GpuOpKind::TmaLoad => {
                return Err("tensor copies and memory barriers have no MSL spelling".into())
            }
            GpuOpKind::Barrier => match self.lang {
                Lang::Msl => self.line(depth, "threadgroup_barrier(mem_flags::mem_threadgroup);"),
                Lang::Cuda => self.line(depth, "__syncthreads();"),
            },
            // `__syncthreads` orders global memory too.
            GpuOpKind::DeviceBarrier => match self.lang {
                Lang::Msl => self.line(
                    depth,
                    "threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);",
                ),
                Lang::Cuda => self.line(depth, "__syncthreads();"),
            },
            GpuOpKind::Atomic { .. } => self.atomic(op, depth)?,
            GpuOpKind::For => self.for_loop(op, depth)?,
            GpuOpKind::While => {
                self.line(depth, "while (true) {");
                for region in &op.regions {
                    self.block(region, depth + 1)?;
                }
                self.line(depth, "}");
            }
            GpuOpKind::Condition => {
                let cond = arg(0)?;
                self.line_fmt(depth, format_args!("if (!({cond})) break;"));
            }
            GpuOpKind::Print { pieces, hex_from } => self.device_print(op, pieces, *hex_from, depth)?,
            GpuOpKind::Assert { message } => {
                let cond = arg(0)?;
                self.device_assert(op, &cond, message, depth);
            }
            GpuOpKind::If => {
                let cond = arg(0)?;
                self.line_fmt(depth, format_args!("if ({cond}) {{"));
                if let Some(then_b) = op.regions.first() {
                    self.block(then_b, depth + 1)?;
                }
                match op.regions.get(1) {
                    Some(else_b) if !else_b.ops.is_empty() => {
                        self.line(depth, "} else {");
                        self.block(else_b, depth + 1)?;
                        self.line(depth, "}");
                    }
                    _ => self.line(depth, "}"),
                }
            }
        }
        Ok(())
    }

    /// One matrix instruction. MSL fills `simdgroup_matrix` values through
    /// `thread_elements()` (the lane layout the atom describes); CUDA packs
    /// the fragments into the registers `mma.sync` takes (two 16-bit values
    /// per 32-bit register, the lower half first; tf32 as rounded f32 bits).
    fn mma(&mut self, op: &GpuOp, kind: AtomKind, depth: usize) -> EmitResult<()> {
        let (na, nb, nc) = kind.fragment_sizes();
        let names = op
            .operands
            .iter()
            .map(|&v| self.name(v).map(|n| n.to_string()))
            .collect::<EmitResult<Vec<String>>>()?;
        let (a, rest) = names.split_at(na);
        let (b, c) = rest.split_at(nb);
        let operand = scalar_type(self.dtype(op.operands[0]));
        let first = op.results[0].0;
        match (self.lang, kind) {
            (Lang::Msl, AtomKind::AppleSimdgroup8x8) => {
                let m = format!("m{first}");
                self.line_fmt(
                    depth,
                    format_args!("simdgroup_matrix<{operand}, 8, 8> {m}a, {m}b;"),
                );
                self.line_fmt(depth, format_args!("simdgroup_float8x8 {m}c;"));
                for (suffix, values) in [("a", a), ("b", b), ("c", c)] {
                    for (i, x) in values.iter().enumerate() {
                        self.line_fmt(depth, format_args!("{m}{suffix}.thread_elements()[{i}] = {x};"));
                    }
                }
                self.line_fmt(
                    depth,
                    format_args!("simdgroup_multiply_accumulate({m}c, {m}a, {m}b, {m}c);"),
                );
                for (i, &d) in op.results.iter().enumerate() {
                    self.define(depth, d, &format!("{m}c.thread_elements()[{i}]"));
                }
            }
            (Lang::Msl, AtomKind::AppleMatmul2d16x32x16) => {
                let (lines, result) = super::tensor_ops::matmul2d(first, operand, a, b, c);
                for l in &lines {
                    self.line(depth, l);
                }
                for (i, &d) in op.results.iter().enumerate() {
                    self.define(depth, d, &format!("{result}[{i}]"));
                }
            }
            (Lang::Cuda, AtomKind::NvidiaMmaM16N8K16 | AtomKind::NvidiaMmaM16N8K8Tf32) => {
                let (ptx, a_regs, b_regs): (String, Vec<String>, Vec<String>) = match kind {
                    AtomKind::NvidiaMmaM16N8K8Tf32 => (
                        "m16n8k8.row.col.f32.tf32.tf32.f32".into(),
                        a.iter().map(|x| format!("metile_tf32({x})")).collect(),
                        b.iter().map(|x| format!("metile_tf32({x})")).collect(),
                    ),
                    _ => {
                        let ty = if operand == "half" { "f16" } else { "bf16" };
                        let pairs = |v: &[String]| {
                            v.chunks(2)
                                .map(|p| format!("metile_pack2({}, {})", p[0], p[1]))
                                .collect()
                        };
                        (format!("m16n8k16.row.col.f32.{ty}.{ty}.f32"), pairs(a), pairs(b))
                    }
                };
                let list = |from: usize, count: usize| {
                    (from..from + count)
                        .map(|i| format!("%{i}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let (nar, nbr) = (a_regs.len(), b_regs.len());
                let text = format!(
                    "mma.sync.aligned.{ptx} {{{}}}, {{{}}}, {{{}}}, {{{}}};",
                    list(0, nc),
                    list(nc, nar),
                    list(nc + nar, nbr),
                    list(nc + nar + nbr, nc)
                );
                let results: Vec<String> = op.results.iter().map(|d| format!("v{}", d.0)).collect();
                self.line_fmt(depth, format_args!("float {};", results.join(", ")));
                let outs: Vec<String> = results.iter().map(|r| format!("\"=f\"({r})")).collect();
                let ins: Vec<String> = a_regs
                    .iter()
                    .chain(&b_regs)
                    .map(|r| format!("\"r\"({r})"))
                    .chain(c.iter().map(|x| format!("\"f\"({x})")))
                    .collect();
                self.line_fmt(
                    depth,
                    format_args!("asm(\"{text}\" : {} : {});", outs.join(", "), ins.join(", ")),
                );
                for &d in op.results.iter() {
                    self.set_name(d, Name::Local(d.0));
                }
            }
            (lang, kind) => return Err(format!("no {lang:?} spelling of the matrix atom {}", kind.name())),
        }
        Ok(())
    }

    fn reg(&self, reg: RegId, index: u32) -> RegText {
        let single = self.f.regs.get(reg.0 as usize).is_some_and(|r| r.len == 1);
        RegText { reg, index, single }
    }

    /// `X[i]`, or `*(device const float4*)(X + i)` for a vector access.
    fn access(&self, root: GpuValue, index: GpuValue, width: u8) -> EmitResult<String> {
        let mut out = String::new();
        self.push_access(&mut out, root, index, width)?;
        Ok(out)
    }

    /// [`BodyWriter::access`] appended to `out` (no temporary string: loads
    /// and stores are most of a kernel's statements).
    /// `[if (mask) {] *access = rhs; [}]`, the statement of stores and copies.
    fn assign_access(
        &mut self,
        depth: usize,
        mask: Option<Name>,
        (root, index, width): (GpuValue, GpuValue, u8),
        rhs: impl FnOnce(&Self, &mut String) -> EmitResult<()>,
    ) -> EmitResult<()> {
        let inner = match &mask {
            Some(m) => {
                self.line_fmt(depth, format_args!("if ({m}) {{"));
                depth + 1
            }
            None => depth,
        };
        let mut out = std::mem::take(&mut self.out);
        for _ in 0..inner {
            out.push_str("  ");
        }
        let written = self.push_access(&mut out, root, index, width);
        out.push_str(" = ");
        let read = rhs(self, &mut out);
        out.push_str(";\n");
        self.out = out;
        written?;
        read?;
        if mask.is_some() {
            self.line(depth, "}");
        }
        Ok(())
    }

    fn push_access(&self, out: &mut String, root: GpuValue, index: GpuValue, width: u8) -> EmitResult<()> {
        let (r, i) = (self.name(root)?, self.name(index)?);
        if width <= 1 {
            r.push_to(out);
            out.push('[');
            i.push_to(out);
            out.push(']');
            return Ok(());
        }
        let GpuType::Ptr(d, space) = self.f.ty(root) else {
            return Err(format!("{root} is not a pointer"));
        };
        let written = self.written.get(root.index()).copied().unwrap_or(false);
        let constness = if space == MemSpace::Device && !written {
            "const "
        } else {
            ""
        };
        let _ = match self.lang {
            Lang::Msl => write!(
                out,
                "*(({} {constness}{}*)({r} + {i}))",
                space.name(),
                vector_type(d, width)
            ),
            Lang::Cuda => write!(out, "*(({constness}{}*)({r} + {i}))", self.vector_of(d, width)),
        };
        Ok(())
    }

    /// Starts a statement line: the indentation for `depth`.
    fn indent(&mut self, depth: usize) {
        for _ in 0..depth {
            self.out.push_str("  ");
        }
    }

    /// One `device_print` line: `printf` in CUDA, the `metile_device_print`
    /// macro in MSL (Metal's `os_log` from Metal 3.2 on, see `debug_preamble`).
    fn device_print(
        &mut self,
        op: &GpuOp,
        pieces: &[String],
        hex_from: Option<usize>,
        depth: usize,
    ) -> EmitResult<()> {
        let mut format = String::new();
        let mut args = String::new();
        for (i, piece) in pieces.iter().enumerate() {
            format.push_str(&piece.replace('%', "%%"));
            let Some(&v) = op.operands.get(i) else { continue };
            let hex = hex_from.is_some_and(|h| i >= h);
            let x = self.name(v)?;
            let (spec, arg) = match (self.dtype(v), hex) {
                (DType::I64 | DType::U64, true) => ("0x%lx", format!("ulong({x})")),
                (_, true) => ("0x%x", format!("uint({x})")),
                (DType::Bool | DType::I8 | DType::I16 | DType::I32, false) => ("%d", format!("int({x})")),
                (DType::U8 | DType::U16 | DType::U32, false) => ("%u", format!("uint({x})")),
                (DType::I64, false) => ("%ld", format!("long({x})")),
                (DType::U64, false) => ("%lu", format!("ulong({x})")),
                (DType::F64, false) => ("%g", x.to_string()),
                (DType::F16 | DType::BF16 | DType::F32, false) => ("%g", format!("float({x})")),
                (d, false) => return Err(format!("printing a {d} value (the builder prints fp8 as f32)")),
            };
            format.push_str(spec);
            args.push_str(", ");
            args.push_str(&arg);
        }
        match self.lang {
            Lang::Cuda => {
                let format = c_string(&format!("{format}\n"));
                self.line_fmt(depth, format_args!("printf({format}{args});"));
            }
            Lang::Msl => {
                let format = c_string(&format);
                self.line_fmt(depth, format_args!("metile_device_print({format}{args});"));
            }
        }
        Ok(())
    }

    /// A failing `device_assert`: in CUDA, the device-side assert that `assert`
    /// calls (`__assertfail`, which NVRTC declares, as it does `printf`): the
    /// GPU prints the message, file, line and thread, and the launch fails with
    /// CUDA_ERROR_ASSERT, which poisons the CUDA context; in MSL,
    /// `metile_device_assert_failed` (see `MSL_DEBUG_PREAMBLE`).
    fn device_assert(&mut self, op: &GpuOp, cond: &Name, message: &str, depth: usize) {
        match self.lang {
            Lang::Msl => {
                // The message is part of a format on Metal: `%` is doubled.
                let text = c_string(&format!("{}: {message}", op.loc).replace('%', "%%"));
                self.line_fmt(
                    depth,
                    format_args!("if (!({cond})) metile_device_assert_failed({text});"),
                );
            }
            Lang::Cuda => {
                let text = c_string(if message.is_empty() {
                    "device_assert"
                } else {
                    message
                });
                let file = c_string(&op.loc.file);
                let function = c_string(&self.f.name);
                let line = op.loc.line;
                self.line_fmt(
                    depth,
                    format_args!("if (!({cond})) __assertfail({text}, {file}, {line}u, {function}, 1);"),
                );
            }
        }
    }

    fn for_loop(&mut self, op: &GpuOp, depth: usize) -> EmitResult<()> {
        let body = op.regions.first().ok_or("a for without a body")?;
        let iv = *body.args.first().ok_or("a for without an induction variable")?;
        let (start, end, step) = (
            self.name(op.operands[0])?,
            self.name(op.operands[1])?,
            self.name(op.operands[2])?,
        );
        let iv_name = Name::Local(iv.0);
        self.set_name(iv, iv_name.clone());
        let step_const = self.ranges.constant(op.operands[2]);
        // A 32-bit counter is used when `iv + step` provably cannot overflow;
        // otherwise a 64-bit one, so the loop stops exactly like Python's range.
        let fits32 = match (self.ranges.get(op.operands[1]), self.ranges.get(op.operands[2])) {
            (Some(e), Some(s)) if s.lo > 0 => e.hi + s.hi <= i128::from(i32::MAX),
            _ => false,
        };
        let counter = if fits32 {
            iv_name.clone()
        } else {
            Name::text(format!("c{}", iv.0))
        };
        let ty = if fits32 { "int" } else { "long" };
        let cond = match step_const {
            Some(s) if s > 0 => format!("{counter} < {end}"),
            Some(s) if s < 0 => format!("{counter} > {end}"),
            Some(_) => "false".into(),
            None => format!("({step} > 0 ? {counter} < {end} : ({step} < 0 && {counter} > {end}))"),
        };
        self.line_fmt(
            depth,
            format_args!("for ({ty} {counter} = {start}; {cond}; {counter} += {step}) {{"),
        );
        if !fits32 {
            self.line_fmt(depth + 1, format_args!("int {iv_name} = int({counter});"));
        }
        self.block(body, depth + 1)?;
        self.line(depth, "}");
        Ok(())
    }

    // ------------------------------------------------------------ arithmetic

    fn unary(&mut self, u: UnaryOp, v: GpuValue) -> EmitResult<String> {
        let d = self.dtype(v);
        let a = self.name(v)?;
        let lang = self.lang;
        if d.is_fp8() {
            return Err(format!("{u:?} on {d} (the builder computes fp8 in f32)"));
        }
        if d == DType::F64 && lang == Lang::Msl {
            return Err("Metal has no f64".into());
        }
        let math = |name: &str| -> String {
            let f = lang.transcendental(name);
            match d {
                DType::F32 => format!("{f}({a})"),
                // CUDA's double functions carry no suffix.
                DType::F64 => format!("{name}({a})"),
                DType::F16 | DType::BF16 => format!("{}({f}(float({a})))", scalar_type(d)),
                _ => a.to_string(),
            }
        };
        Ok(match u {
            UnaryOp::Neg => match d {
                DType::F32 | DType::F16 | DType::F64 => format!("-{a}"),
                DType::BF16 => format!("bfloat(-float({a}))"),
                d if d.is_signed_int() => self.negate_int(d, &a, v),
                DType::U64 => format!("0UL - {a}"),
                DType::U32 => format!("0u - {a}"),
                // Narrow unsigned: negated in int, truncated where stored.
                d if d.is_int() => format!("-{a}"),
                _ => a.to_string(),
            },
            UnaryOp::Not => match d {
                DType::Bool => format!("!{a}"),
                d if d.is_int() => format!("~{a}"),
                _ => return Err(format!("bitwise not on {d}")),
            },
            UnaryOp::Exp => math("exp"),
            UnaryOp::FastExp | UnaryOp::FastExp2 if self.lang == Lang::Cuda && d == DType::F32 => {
                self.helpers.insert(Helper::FastMath);
                let f = if u == UnaryOp::FastExp {
                    "metile_fast_exp"
                } else {
                    "metile_fast_exp2"
                };
                format!("{f}({a})")
            }
            // Elsewhere the approximations are the exact functions.
            UnaryOp::FastExp => math("exp"),
            UnaryOp::FastExp2 => return self.float_function(UnaryOp::Exp2, v),
            UnaryOp::Log => math("log"),
            UnaryOp::Sqrt => math("sqrt"),
            UnaryOp::Tanh => math("tanh"),
            UnaryOp::Abs => match d {
                DType::F32 => format!("{}({a})", lang.float_fn("fabs")),
                DType::F64 => format!("fabs({a})"),
                DType::F16 | DType::BF16 => {
                    format!("{}({}(float({a})))", scalar_type(d), lang.float_fn("fabs"))
                }
                d if d.is_signed_int() => format!("{a} < 0 ? {} : {a}", self.negate_int(d, &a, v)),
                _ => a.to_string(),
            },
            u => return self.float_function(u, v),
        })
    }

    /// Writes the right-hand side of `op(x, y)` to `out`.
    fn binary(&self, out: &mut String, op: BinaryOp, x: GpuValue, y: GpuValue) -> EmitResult<()> {
        let d = self.dtype(x);
        let (a, b) = (self.name(x)?, self.name(y)?);
        let sym = match op {
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div | BinaryOp::FastDiv => "/",
            BinaryOp::And => "&",
            BinaryOp::Or => "|",
            BinaryOp::Xor => "^",
            _ => "",
        };
        // Writing to a String cannot fail.
        macro_rules! w {
            ($($t:tt)*) => {{
                let _ = write!(out, $($t)*);
            }};
        }
        if d.is_fp8() {
            return Err(format!("{op:?} on {d} (the builder computes fp8 in f32)"));
        }
        if d == DType::F64 {
            if self.lang == Lang::Msl {
                return Err("Metal has no f64".into());
            }
            match op {
                BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::FastDiv => {
                    push_infix(out, &a, sym, &b)
                }
                BinaryOp::FloorDiv => w!("trunc({a} / {b})"),
                BinaryOp::Rem => w!("fmod({a}, {b})"),
                BinaryOp::Max => w!("fmax({a}, {b})"),
                BinaryOp::Min => w!("fmin({a}, {b})"),
                BinaryOp::Pow => w!("pow({a}, {b})"),
                BinaryOp::Atan2 => w!("atan2({a}, {b})"),
                _ => return Err(format!("{op:?} on {d}")),
            }
            return Ok(());
        }
        if d.is_float() {
            let native = d != DType::BF16;
            // f16/bf16 ops other than native + - * / compute in float and round once.
            let narrow = scalar_type(d);
            let [trunc, fmod, fmax, fmin] = ["trunc", "fmod", "fmax", "fmin"].map(|n| self.lang.float_fn(n));
            match op {
                // The caller asked for the helper.
                BinaryOp::FastDiv if self.lang == Lang::Cuda && d == DType::F32 => {
                    w!("metile_fast_div({a}, {b})")
                }
                // Elsewhere the approximate division is the exact one.
                BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::FastDiv
                    if native =>
                {
                    push_infix(out, &a, sym, &b)
                }
                BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::FastDiv => {
                    w!("{narrow}(float({a}) {sym} float({b}))")
                }
                BinaryOp::FloorDiv if d == DType::F32 => w!("{trunc}({a} / {b})"),
                BinaryOp::FloorDiv => w!("{narrow}({trunc}(float({a}) / float({b})))"),
                BinaryOp::Rem if d == DType::F32 => w!("{fmod}({a}, {b})"),
                BinaryOp::Rem => w!("{narrow}({fmod}(float({a}), float({b})))"),
                BinaryOp::Max if d == DType::F32 => w!("{fmax}({a}, {b})"),
                BinaryOp::Max => w!("{narrow}({fmax}(float({a}), float({b})))"),
                BinaryOp::Min if d == DType::F32 => w!("{fmin}({a}, {b})"),
                BinaryOp::Min => w!("{narrow}({fmin}(float({a}), float({b})))"),
                BinaryOp::Pow | BinaryOp::Atan2 => {
                    out.push_str(&self.float_binary_function(op, d, &a.to_string(), &b.to_string()))
                }
                _ => return Err(format!("{op:?} on {d}")),
            }
            return Ok(());
        }
        if d == DType::Bool {
            match op {
                BinaryOp::And | BinaryOp::Min | BinaryOp::Mul => w!("{a} && {b}"),
                BinaryOp::Or | BinaryOp::Max => w!("{a} || {b}"),
                BinaryOp::Xor | BinaryOp::Sub | BinaryOp::Add => w!("{a} != {b}"),
                _ => return Err(format!("{op:?} on bool")),
            }
            return Ok(());
        }
        if d.is_narrow_int() {
            return self.narrow_binary(out, op, d, (x, &a), (y, &b));
        }
        let bits = if d.size_bytes() == 8 { 63 } else { 31 };
        let signed = d.is_signed_int();
        match op {
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul => {
                if !signed || self.ranges.no_overflow(op, x, y, d) {
                    push_infix(out, &a, sym, &b)
                } else {
                    self.wrapping(out, d, (x, &a), sym, (y, &b))
                }
            }
            BinaryOp::Div | BinaryOp::FloorDiv | BinaryOp::Rem => {
                out.push_str(&self.int_division(op, d, x, y)?)
            }
            BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => push_infix(out, &a, sym, &b),
            BinaryOp::Max => w!("{a} > {b} ? {a} : {b}"),
            BinaryOp::Min => w!("{a} < {b} ? {a} : {b}"),
            BinaryOp::Shl => {
                let u = unsigned_of(d);
                if signed {
                    w!(
                        "as_type<{}>(as_type<{u}>({a}) << (as_type<{u}>({b}) & {u}({bits})))",
                        scalar_type(d)
                    )
                } else {
                    w!("{a} << ({b} & {bits}u)")
                }
            }
            BinaryOp::MulHi => out.push_str(&self.mul_hi(d, &a.to_string(), &b.to_string())?),
            BinaryOp::Pow | BinaryOp::Atan2 | BinaryOp::FastDiv => return Err(format!("{op:?} on {d}")),
            BinaryOp::Shr => match d {
                DType::U32 => w!("{a} >> ({b} & {bits}u)"),
                DType::I64 => w!("{a} >> ({b} & {bits}L)"),
                DType::U64 => w!("{a} >> ({b} & {bits}UL)"),
                _ => w!("{a} >> ({b} & {bits})"),
            },
        }
        Ok(())
    }

    fn compare(&mut self, c: CmpOp, x: GpuValue, y: GpuValue) -> EmitResult<String> {
        let d = self.dtype(x);
        let (mut a, mut b) = (self.name(x)?, self.name(y)?);
        match d {
            d if d.is_fp8() => return Err(format!("comparison of {d} (the builder computes fp8 in f32)")),
            DType::BF16 => {
                a = Name::text(format!("float({a})"));
                b = Name::text(format!("float({b})"));
            }
            DType::Bool if !matches!(c, CmpOp::Eq | CmpOp::Ne) => {
                a = Name::text(format!("int({a})"));
                b = Name::text(format!("int({b})"));
            }
            _ => {}
        }
        let sym = match c {
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
        };
        Ok(format!("{a} {sym} {b}"))
    }
}
