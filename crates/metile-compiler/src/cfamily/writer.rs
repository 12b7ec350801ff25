//! GPU IR ops as C-family statements, keeping the Tile IR's element
//! semantics. The walk, the names and the semantic guards are here; the
//! [`Dialect`] decides the spellings that differ (see `mod.rs`). The rules:
//!
//! * integer `+ - * neg <<` wrap: printed through unsigned `as_type` unless the
//!   range analysis proves no overflow (signed overflow is undefined in C++);
//! * integer `// %` by zero give 0 and `MIN // -1` wraps (guarded, never trapping);
//!   shift counts are taken modulo the bit width;
//! * float `//` is `trunc(a / b)`, `%` is `fmod`, max/min are `fmax`/`fmin`;
//! * f16 `+ - * /` are native (rounding a binary16 op through binary32 is exact),
//!   every other f16 op and every bf16 op computes in float and rounds once;
//! * transcendental functions are the correctly rounded ones (fast `tanh`
//!   overflows to NaN);
//! * float-to-int casts saturate and map NaN to 0 (helpers), int-to-bfloat
//!   rounds once (a helper rounding to odd through float first);
//! * float literals are printed with the shortest decimal that round-trips, with
//!   the `f` suffix; f16/bf16 literals as an exactly representable float
//!   converted explicitly; non-finite values through `as_type` of their bits;
//! * `simd_*` on bool, i64 and bf16 go through integer types of the same size.

use super::ranges::Ranges;
use super::text::{literal, push_u32, zero_text, Name, RegText};
use super::Dialect;
use metile_ir::gpu_ir::*;
use metile_ir::{BinaryOp, DType, Loc, ReduceOp};
use std::collections::BTreeSet;
use std::fmt::{self, Write};

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
    /// Float functions a dialect lacks ([`Dialect::float_function_helper`]).
    Erf,
    Log1p,
    Expm1,
    /// The approximate f32 functions of a dialect that has them ([`Dialect::approximation`]).
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

/// The source of helper `h`, as `static inline` C.
pub fn helper_source<D: Dialect>(h: Helper) -> String {
    if let Some(own) = D::helper_source(h) {
        return own.to_string();
    }
    match h {
        Helper::FloatToInteger(to, double) => super::convert::float_to_integer_source::<D>(double, to),
        Helper::BfloatFromUlong => super::convert::BFLOAT_FROM_ULONG.to_string(),
        Helper::Fp8ToFloat(d) => super::convert::decoder_source(d),
        Helper::Fp8FromFloat(d, double) => super::convert::encoder_source(d, double),
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
pub(crate) fn unsigned_of(d: DType) -> &'static str {
    match d {
        DType::I64 | DType::U64 => "ulong",
        _ => "uint",
    }
}

/// The error for f64 in a language without `double` (kernels using f64 are
/// refused for such targets before emission).
pub(crate) fn no_f64<D: Dialect>() -> String {
    format!("{} has no f64", D::NAME)
}

pub(crate) struct BodyWriter<'a, D: Dialect> {
    pub(crate) f: &'a GpuFunction,
    pub(crate) ranges: &'a Ranges,
    /// The spelling of each value, indexed by value.
    names: Vec<Name>,
    /// Pointer roots some store writes through, indexed by value.
    written: &'a [bool],
    pub(crate) out: String,
    pub(crate) helpers: BTreeSet<Helper>,
    /// Where in `out` each op's text starts, with the op's kernel source line
    /// (recorded when the line changes), so faults in the source map back to it.
    op_starts: Vec<(usize, Loc)>,
    /// What the dialect found in the function before the walk.
    pub(crate) state: D::State,
}

pub(crate) type EmitResult<T> = Result<T, String>;

impl<'a, D: Dialect> BodyWriter<'a, D> {
    pub fn new(
        f: &'a GpuFunction,
        ranges: &'a Ranges,
        names: Vec<Name>,
        written: &'a [bool],
    ) -> BodyWriter<'a, D> {
        BodyWriter {
            f,
            ranges,
            names,
            state: D::state(f),
            written,
            out: String::new(),
            helpers: BTreeSet::new(),
            op_starts: Vec::new(),
        }
    }

    pub fn finish(self) -> (String, BTreeSet<Helper>, Vec<(usize, Loc)>) {
        (self.out, self.helpers, self.op_starts)
    }

    pub fn line(&mut self, depth: usize, text: &str) {
        self.line_fmt(depth, format_args!("{text}"));
    }

    /// A line formatted straight into the output (no temporary string).
    pub(crate) fn line_fmt(&mut self, depth: usize, args: fmt::Arguments<'_>) {
        for _ in 0..depth {
            self.out.push_str("  ");
        }
        // Writing to a String cannot fail.
        let _ = self.out.write_fmt(args);
        self.out.push('\n');
    }

    pub(crate) fn name(&self, v: GpuValue) -> EmitResult<Name> {
        match self.names.get(v.index()) {
            Some(Name::Unset) | None => Err(format!("{v} has no name")),
            Some(n) => Ok(n.clone()),
        }
    }

    /// Names a value defined outside the body (threadgroup memory in CUDA).
    pub fn set_value_name(&mut self, v: GpuValue, name: Name) {
        self.set_name(v, name);
    }

    pub(crate) fn set_name(&mut self, v: GpuValue, name: Name) {
        if self.names.len() <= v.index() {
            self.names.resize(v.index() + 1, Name::Unset);
        }
        self.names[v.index()] = name;
    }

    pub(crate) fn dtype(&self, v: GpuValue) -> DType {
        self.f.ty(v).dtype()
    }

    /// The spelling of a GPU IR type in the output language.
    pub(crate) fn type_of(&self, t: GpuType) -> String {
        let mut out = String::new();
        D::push_type(&mut out, t);
        out
    }

    /// Declares the register arrays, then writes the function's body.
    pub fn registers_and_body(&mut self) -> EmitResult<()> {
        let f = self.f;
        for (i, r) in f.regs.iter().enumerate() {
            let ty = D::scalar(r.dtype);
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

    pub(crate) fn define(&mut self, depth: usize, result: GpuValue, rhs: &str) {
        let ty = self.type_of(self.f.ty(result));
        self.line_fmt(depth, format_args!("{ty} v{} = {rhs};", result.0));
        self.set_name(result, Name::Local(result.0));
    }

    /// [`BodyWriter::define`] with the right-hand side written by `rhs` straight
    /// into the output.
    pub(crate) fn define_with(
        &mut self,
        depth: usize,
        result: GpuValue,
        rhs: impl FnOnce(&Self, &mut String) -> EmitResult<()>,
    ) -> EmitResult<()> {
        let mut out = std::mem::take(&mut self.out);
        for _ in 0..depth {
            out.push_str("  ");
        }
        D::push_type(&mut out, self.f.ty(result));
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
                self.set_name(op.results[0], Name::text(literal::<D>(lit, d)));
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
                if *b == BinaryOp::FastDiv && self.fast_division(x).is_some() {
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
            GpuOpKind::MakeVector => {
                if D::make_vector(self, op, depth)? {
                    return Ok(());
                }
                let ty = self.type_of(self.f.ty(op.results[0]));
                let mut rhs = format!("{ty}(");
                for (i, &v) in op.operands.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    let _ = write!(rhs, "{sep}{}", self.name(v)?);
                }
                rhs.push(')');
                self.define(depth, op.results[0], &rhs);
            }
            GpuOpKind::Extract { lane } => {
                let field = *D::VECTOR_FIELDS
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
                            format!("{}({z})", D::vector(d, *width))
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
            GpuOpKind::RegWrite { reg, index } => {
                let value = arg(0)?;
                if D::register_write(self, *reg, *index, &value, depth) {
                    return Ok(());
                }
                let lhs = self.reg(*reg, *index);
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
            GpuOpKind::SimdShuffleXor | GpuOpKind::SimdBroadcast => {
                let xor = matches!(op.kind, GpuOpKind::SimdShuffleXor);
                let (x, lane) = (arg(0)?, arg(1)?);
                let rhs = D::shuffle(xor, &x, &lane, self.dtype(op.operands[0]))?;
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
            GpuOpKind::Mma(kind) => {
                let (na, nb, _) = kind.fragment_sizes();
                let names = op
                    .operands
                    .iter()
                    .map(|&v| self.name(v).map(|n| n.to_string()))
                    .collect::<EmitResult<Vec<String>>>()?;
                if names.len() < na + nb {
                    return Err(format!("an mma on {} lacks operands", kind.name()));
                }
                let (a, rest) = names.split_at(na);
                let (b, c) = rest.split_at(nb);
                D::mma(self, op, *kind, [a, b, c], depth)?
            }
            GpuOpKind::LdMatrix { .. }
            | GpuOpKind::SimdgroupLoad { .. }
            | GpuOpKind::AsyncCopy { .. }
            | GpuOpKind::AsyncCommit
            | GpuOpKind::AsyncWait { .. }
            | GpuOpKind::Wgmma { .. }
            | GpuOpKind::WgmmaRegA { .. }
            | GpuOpKind::WgmmaWait { .. }
            | GpuOpKind::WgmmaFence
            | GpuOpKind::ProxyFence
            | GpuOpKind::WgmmaCommit
            | GpuOpKind::AtomicAdd
            | GpuOpKind::MbarrierInit { .. }
            | GpuOpKind::MbarrierArrive { .. }
            | GpuOpKind::MbarrierWait
            | GpuOpKind::TmaLoad => D::own_op(self, op, depth)?,
            GpuOpKind::Barrier => self.line(depth, D::BARRIER),
            GpuOpKind::DeviceBarrier => self.line(depth, D::DEVICE_BARRIER),
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
                let statement = D::assert_statement(self.f, op, &cond, message);
                self.line(depth, &statement);
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

    pub(crate) fn reg(&self, reg: RegId, index: u32) -> RegText {
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
    pub(crate) fn assign_access(
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

    pub(crate) fn push_access(
        &self,
        out: &mut String,
        root: GpuValue,
        index: GpuValue,
        width: u8,
    ) -> EmitResult<()> {
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
        let _ = write!(
            out,
            "*(({})({r} + {i}))",
            D::vector_pointer(space, constness, d, width)
        );
        Ok(())
    }

    /// Starts a statement line: the indentation for `depth`.
    pub(crate) fn indent(&mut self, depth: usize) {
        for _ in 0..depth {
            self.out.push_str("  ");
        }
    }

    /// One `device_print` line: the C format and its arguments, printed as the
    /// dialect prints.
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
        let statement = D::print_statement(&format, &args);
        self.line(depth, &statement);
        Ok(())
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
}
