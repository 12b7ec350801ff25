//! The C-family writer: one walk over GPU IR that prints a kernel body in a
//! C++ dialect, keeping the Tile IR's element semantics, for every target
//! language. It knows no vendor: what differs between languages is a
//! [`Dialect`], implemented by `msl/` (Metal Shading Language) and `cuda/`
//! (CUDA C++), and the kernel around the body (signature, attributes, headers)
//! is each emitter's own.
//!
//! The writer writes in one vocabulary that every dialect provides: the scalar
//! type names `bool char uchar short ushort int uint long ulong half bfloat
//! float double`, `as_type<T>(x)` for bit casts, `simd_sum`/`simd_max`/
//! `simd_min` over a simdgroup, C's math functions on double and `isnan`, and
//! the builtin names `tid lane sgid tgpig tgpg`. Metal has them natively; the
//! CUDA emitter's prelude defines them. Where spellings differ (vector and
//! pointer types, shuffles, barriers, single-precision math, matrix atoms,
//! atomics, printing and asserting, the ops only one vendor has) the writer
//! asks the dialect.
//!
//! The semantic rules the writer keeps are listed in `writer.rs`.

pub(crate) mod atomic;
pub(crate) mod convert;
pub(crate) mod ints;
pub(crate) mod math;
pub(crate) mod names;
pub(crate) mod ranges;
pub(crate) mod text;
pub(crate) mod writer;

mod arith;

use metile_ir::gpu_ir::*;
use metile_ir::{DType, Loc, MemScope, MemSem, UnaryOp};
use std::collections::HashSet;
use std::fmt::Write;
pub(crate) use text::Name;
pub(crate) use writer::{BodyWriter, EmitResult, Helper};

/// One read-modify-write's pieces, as C text (see `atomic.rs`).
pub(crate) struct Rmw {
    pub op: metile_ir::AtomicOp,
    pub dtype: DType,
    /// The element's address, `(X + i)`.
    pub address: String,
    pub cmp: Option<String>,
    pub value: String,
    /// The result variable.
    pub out: String,
}

/// What one target language spells its own way. The writer is generic over
/// it (static dispatch: each language gets its own copy of the walk, with no
/// indirect calls on the emitter's hot path).
pub(crate) trait Dialect: Sized {
    /// The language's name in the emitter's internal errors (`MSL`, `CUDA`).
    const NAME: &'static str;
    /// Whether the language has `double`.
    const HAS_F64: bool;
    /// The fields naming a vector value's lanes, in order.
    const VECTOR_FIELDS: &'static [&'static str];
    /// The statement of a threadgroup barrier (execution and threadgroup memory).
    const BARRIER: &'static str;
    /// The statement of a barrier that also orders device memory.
    const DEVICE_BARRIER: &'static str;

    /// What the dialect's own spellings need to know of the whole function,
    /// found once before the walk.
    type State;
    fn state(f: &GpuFunction) -> Self::State;

    /// Whether `name` is a word of the language (a keyword, type, builtin or
    /// library function) that a kernel's identifiers must not take.
    fn reserves(name: &str) -> bool;

    /// The name of a scalar type.
    fn scalar(d: DType) -> &'static str;
    /// The type of a vector of `lanes` elements of `d`.
    fn vector(d: DType, lanes: u8) -> String;
    /// Appends the spelling of a GPU IR type.
    fn push_type(out: &mut String, t: GpuType);
    /// The pointer type through which a vector of `width` elements of `d` in
    /// `space` is accessed (`constness` is `"const "` or empty).
    fn vector_pointer(space: MemSpace, constness: &str, d: DType, width: u8) -> String;

    /// A single-precision C math function whose every spelling rounds alike
    /// (`fabs`, `fmax`, `floor`, `fma`, ...).
    fn float_fn(name: &str) -> String;
    /// A correctly rounded (not fast-math) single-precision transcendental function.
    fn transcendental(name: &str) -> String;
    /// The helper that stands in for float function `u` where the language
    /// has none (its source is [`Dialect::helper_source`]).
    fn float_function_helper(_u: UnaryOp) -> Option<(Helper, &'static str)> {
        None
    }
    /// The source of a helper the dialect defines itself, or `None` for the
    /// writer's own.
    fn helper_source(_h: Helper) -> Option<&'static str> {
        None
    }
    /// The function computing the approximate f32 op `name` (`fast_exp`,
    /// `fast_exp2`, `fast_div`: Tile IR's relaxed ops) with the GPU's own
    /// approximation, defined by the dialect's [`Helper::FastMath`]; `None`
    /// (the default; MSL, whose `fast::` functions are unmeasured) where the
    /// dialect computes the exact op instead.
    fn approximation(_name: &str) -> Option<&'static str> {
        None
    }
    /// The high half of the unsigned product of `ua` and `ub`, both `uint`
    /// (or `ulong` when `wide`).
    fn mul_hi(ua: &str, ub: &str, wide: bool) -> String;
    /// A conversion of integer `a` (of dtype `from`) to `half` that the
    /// language needs spelled out, or `None` for the writer's `half(a)`.
    fn int_to_half(_from: DType, _a: &str) -> Option<String> {
        None
    }

    /// Value `x` (of dtype `d`) of the simdgroup's lane `own lane ^ lane`
    /// (`xor`) or of lane `lane`.
    fn shuffle(xor: bool, x: &Name, lane: &Name, d: DType) -> EmitResult<String>;
    /// One printed line: C format `format` (without newline) and `args`
    /// (each preceded by `, `).
    fn print_statement(format: &str, args: &str) -> String;
    /// The statement failing the launch where `cond` is false (`device_assert`).
    fn assert_statement(f: &GpuFunction, op: &GpuOp, cond: &Name, message: &str) -> String;
    /// The read-modify-write of an atomic, inside the block the writer opened,
    /// leaving the old value in `rmw.out`.
    fn atomic(
        w: &mut BodyWriter<'_, Self>,
        rmw: &Rmw,
        sem: MemSem,
        scope: MemScope,
        depth: usize,
    ) -> EmitResult<()>;
    /// One matrix atom: fragments `a`, `b`, `c` (this thread's values, as
    /// text) into `op`'s results.
    fn mma(
        w: &mut BodyWriter<'_, Self>,
        op: &GpuOp,
        kind: AtomKind,
        fragments: [&[String]; 3],
        depth: usize,
    ) -> EmitResult<()>;
    /// An op the language spells itself: asynchronous copies and their
    /// groups, and the ops only one vendor's GPUs have (GPU IR's
    /// [`GpuOpKind::vendor`]), which other dialects refuse.
    fn own_op(w: &mut BodyWriter<'_, Self>, op: &GpuOp, depth: usize) -> EmitResult<()>;
    /// Writes `reg[index] = value` where the dialect has its own statement for
    /// it, returning whether it did.
    fn register_write(
        _w: &mut BodyWriter<'_, Self>,
        _reg: RegId,
        _index: u32,
        _value: &Name,
        _depth: usize,
    ) -> bool {
        false
    }
    /// Defines a vector value the dialect builds its own way, returning whether it did.
    fn make_vector(_w: &mut BodyWriter<'_, Self>, _op: &GpuOp, _depth: usize) -> EmitResult<bool> {
        Ok(false)
    }
}

/// The identifiers an emitted kernel uses for itself and its parameters.
pub(crate) struct KernelNames {
    pub kernel_name: String,
    /// Each GPU IR parameter's identifier, in order.
    pub param_names: Vec<String>,
    /// The spelling of each value: the parameters named, the rest unset.
    pub value_names: Vec<Name>,
    /// Whether some store writes through each value (a pointer root).
    pub written: Vec<bool>,
}

/// Valid, distinct identifiers for the kernel and its parameters, avoiding
/// the words `reserved` says some language has: a kernel's names are the
/// same in the source of every target.
pub(crate) fn name_kernel(f: &GpuFunction, reserved: fn(&str) -> bool) -> KernelNames {
    let mut taken = HashSet::new();
    let kernel_name = names::identifier(&f.name, &mut taken, reserved);
    let mut value_names = vec![Name::Unset; f.values.len()];
    let param_names: Vec<String> = f
        .params
        .iter()
        .map(|p| {
            let name = names::identifier(&p.name, &mut taken, reserved);
            value_names[p.value.index()] = Name::text(name.clone());
            name
        })
        .collect();
    KernelNames {
        kernel_name,
        param_names,
        value_names,
        written: stored_roots(f),
    }
}

/// Appends the parameter list (one per line) after the kernel's opening line,
/// then the body and its closing brace; returns the line table of the body
/// (see [`line_table`]).
pub(crate) fn finish_kernel(
    source: &mut String,
    signature: &[String],
    body: &str,
    op_starts: Vec<(usize, Loc)>,
) -> Vec<(u32, Loc)> {
    for (i, s) in signature.iter().enumerate() {
        let sep = if i + 1 < signature.len() { "," } else { ") {" };
        let _ = writeln!(source, "    {s}{sep}");
    }
    if signature.is_empty() {
        source.push_str(") {\n");
    }
    let body_start = source.len();
    source.push_str(body);
    source.push_str("}\n");
    line_table(source, body_start, op_starts)
}

/// The kernel location line `line` (1-based) of an emitted source was written
/// for, from its line table.
pub(crate) fn loc_of_line(line_locs: &[(u32, Loc)], line: u32) -> Option<&Loc> {
    let i = line_locs.partition_point(|(first, _)| *first <= line);
    i.checked_sub(1)
        .map(|i| &line_locs[i].1)
        .filter(|loc| loc.line != 0)
}

/// `(first source line, kernel location)` pairs from byte offsets into the
/// body, in one pass over the source (offsets arrive in increasing order).
fn line_table(source: &str, body_start: usize, op_starts: Vec<(usize, Loc)>) -> Vec<(u32, Loc)> {
    let bytes = source.as_bytes();
    let (mut line, mut scanned) = (1u32, 0usize);
    op_starts
        .into_iter()
        .map(|(offset, loc)| {
            let end = (body_start + offset).min(bytes.len());
            line += bytes[scanned..end].iter().filter(|&&b| b == b'\n').count() as u32;
            scanned = end;
            (line, loc)
        })
        .collect()
}

/// Whether some store or atomic writes through each value (a pointer root), by value.
fn stored_roots(f: &GpuFunction) -> Vec<bool> {
    let mut out = vec![false; f.values.len()];
    f.walk(&mut |op| {
        if matches!(op.kind, GpuOpKind::Store { .. } | GpuOpKind::Atomic { .. }) {
            out[op.operands[0].index()] = true;
        }
    });
    out
}
