//! Tile IR: tile-granular SSA. One function per kernel specialisation; values are
//! scalars or tiles with static shapes; loops and ifs own regions whose block
//! arguments carry values around the loop. Every op records the kernel source line
//! it came from.
//!
//! Ops are kept *canonical* by the builder: operands of element-wise ops already
//! have the result's shape and dtype (explicit `broadcast`/`cast` ops are inserted),
//! so backends never re-derive promotion or broadcasting rules.

use crate::dtype::{DType, Type};
use std::fmt;
use std::sync::Arc;

/// An SSA value; an index into [`Function::values`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);

impl ValueId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for ValueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

/// Where an op came from in the kernel's source.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Loc {
    pub file: Arc<str>,
    pub line: u32,
}

impl Loc {
    pub fn unknown() -> Loc {
        Loc {
            file: Arc::from("<unknown>"),
            line: 0,
        }
    }
}

impl fmt::Display for Loc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let short = self.file.rsplit('/').next().unwrap_or(&self.file);
        write!(f, "{short}:{}", self.line)
    }
}

/// A literal carried by a `constant` op; its result type says how to read it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Literal {
    Bool(bool),
    Int(i64),
    Float(f64),
}

impl Literal {
    pub fn as_f64(self) -> f64 {
        match self {
            Literal::Bool(b) => f64::from(u8::from(b)),
            Literal::Int(i) => i as f64,
            Literal::Float(x) => x,
        }
    }

    pub fn as_i64(self) -> i64 {
        match self {
            Literal::Bool(b) => i64::from(b),
            Literal::Int(i) => i,
            Literal::Float(x) => x as i64,
        }
    }

    /// Bit-exact identity, used by CSE (so `0.0` and `-0.0` stay distinct).
    pub fn key(self) -> (u8, u64) {
        match self {
            Literal::Bool(b) => (0, u64::from(b)),
            Literal::Int(i) => (1, i as u64),
            Literal::Float(x) => (2, x.to_bits()),
        }
    }
}

/// Floats print in Rust's shortest round-trip form; a NaN other than
/// `f64::NAN` (another sign or payload) also prints its bits, `NaN(0x...)`,
/// so that the text reads back to the same value.
impl fmt::Display for Literal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Literal::Bool(b) => write!(f, "{b}"),
            Literal::Int(i) => write!(f, "{i}"),
            Literal::Float(x) if x.is_nan() && x.to_bits() != f64::NAN.to_bits() => {
                write!(f, "NaN({:#018x})", x.to_bits())
            }
            Literal::Float(x) => write!(f, "{x:?}"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Neg,
    /// Bitwise not on integers, logical not on bool.
    Not,
    Exp,
    Log,
    Sqrt,
    Abs,
    Tanh,
    // Float math (the builder converts integer operands to f32).
    Exp2,
    Log2,
    Log1p,
    Expm1,
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Erf,
    Rsqrt,
    Floor,
    Ceil,
    /// Rounds half-way cases away from zero (C's `round`).
    Round,
    /// Rounds half-way cases to even (C's `rint`, numpy's `round`).
    Rint,
    /// `exp` computed with the GPU's approximate base-2 exponential: a relative
    /// error of at most about 2^-16 over the whole f32 range (it grows with
    /// `|x|`). Written by the `relax_precision` pass where only a 16-bit result
    /// depends on the value, or by the kernel (`metile.math.fast_expf`).
    FastExp,
    /// `exp2` on the GPU's approximate base-2 exponential (about 2 ulp).
    FastExp2,
}

impl UnaryOp {
    /// Float functions: integer operands are converted to f32 first.
    pub fn is_float_math(self) -> bool {
        !matches!(self, UnaryOp::Neg | UnaryOp::Not | UnaryOp::Abs)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    /// Float division (integer operands are converted to f32 by the builder).
    Div,
    /// Integer division truncating toward zero; on floats, `trunc(a / b)`.
    FloorDiv,
    /// Remainder with the sign of the dividend (C's `%` and `fmod`).
    Rem,
    Max,
    Min,
    And,
    Or,
    Xor,
    Shl,
    Shr,
    /// `a ** b` on floats (C's `pow`).
    Pow,
    /// `atan2(a, b)`: the angle of the point `(b, a)`, as C's `atan2(y, x)`.
    Atan2,
    /// The high half of the double-width product of two integers, both read
    /// as unsigned (Triton's `umulhi`), in the operands' type.
    MulHi,
    /// Float division with an error of at most 2 ulp (the GPU's reciprocal
    /// and a product, with the range checks that keep it valid for every f32
    /// divisor). Written by the `relax_precision` pass or by the kernel
    /// (`metile.math.fast_dividef`).
    FastDiv,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
    /// Bitwise xor of integers (`xor_sum`).
    Xor,
}

/// The combining op of a scan (`cumsum`, `cumprod`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScanOp {
    Sum,
    Prod,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SwizzlePattern {
    Morton,
    Diagonal,
}

impl SwizzlePattern {
    pub fn name(self) -> &'static str {
        match self {
            SwizzlePattern::Morton => "morton",
            SwizzlePattern::Diagonal => "diagonal",
        }
    }
}

/// The read-modify-write of an [`OpKind::Atomic`]: the new value it stores
/// from the old one and the operand (Triton's `atomic_*` names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicOp {
    Add,
    /// Signed or unsigned by the dtype; on floats NaN operands are ignored and
    /// equal values (`-0.0`, `0.0`) keep the stored one.
    Max,
    Min,
    And,
    Or,
    Xor,
    /// Stores the operand.
    Xchg,
    /// Compare and swap: stores the operand where the old value equals the
    /// comparand (bit for bit on floats).
    Cas,
}

impl AtomicOp {
    pub fn name(self) -> &'static str {
        match self {
            AtomicOp::Add => "add",
            AtomicOp::Max => "max",
            AtomicOp::Min => "min",
            AtomicOp::And => "and",
            AtomicOp::Or => "or",
            AtomicOp::Xor => "xor",
            AtomicOp::Xchg => "xchg",
            AtomicOp::Cas => "cas",
        }
    }

    /// The element types the op is defined on. Backends may take fewer (f16,
    /// bf16 and i64 atomics are refused on Apple GPUs where they are compiled).
    pub fn accepts(self, d: DType) -> bool {
        use DType::*;
        match self {
            AtomicOp::Add => matches!(d, I32 | U32 | I64 | F32 | F16 | BF16),
            AtomicOp::Max | AtomicOp::Min | AtomicOp::Xchg | AtomicOp::Cas => {
                matches!(d, I32 | U32 | I64 | F32)
            }
            AtomicOp::And | AtomicOp::Or | AtomicOp::Xor => matches!(d, I32 | U32 | I64),
        }
    }
}

/// The memory ordering of an atomic (Triton's `sem=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemSem {
    Relaxed,
    Acquire,
    Release,
    AcqRel,
}

impl MemSem {
    pub const ALL: [MemSem; 4] = [MemSem::Relaxed, MemSem::Acquire, MemSem::Release, MemSem::AcqRel];

    pub fn name(self) -> &'static str {
        match self {
            MemSem::Relaxed => "relaxed",
            MemSem::Acquire => "acquire",
            MemSem::Release => "release",
            MemSem::AcqRel => "acq_rel",
        }
    }

    /// Later memory accesses stay after the atomic.
    pub fn acquires(self) -> bool {
        matches!(self, MemSem::Acquire | MemSem::AcqRel)
    }

    /// Earlier memory accesses stay before the atomic.
    pub fn releases(self) -> bool {
        matches!(self, MemSem::Release | MemSem::AcqRel)
    }
}

/// Which threads an atomic's ordering is promised to (Triton's `scope=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemScope {
    /// Every program of the launch.
    Gpu,
    /// The threads of one program (threadgroup).
    Cta,
    /// The GPU and the host (CUDA only).
    Sys,
}

impl MemScope {
    pub const ALL: [MemScope; 3] = [MemScope::Gpu, MemScope::Cta, MemScope::Sys];

    pub fn name(self) -> &'static str {
        match self {
            MemScope::Gpu => "gpu",
            MemScope::Cta => "cta",
            MemScope::Sys => "sys",
        }
    }
}

/// What an [`OpKind::Assume`] promises about `x` along its last axis, for `n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AssumeFact {
    /// The elements at positions that are multiples of the largest power of
    /// two dividing `n` are multiples of `n` (a scalar: it is a multiple of `n`).
    MultipleOf,
    /// Every aligned run of `n` positions holds consecutive integers.
    Contiguous,
    /// Every aligned run of `n` positions holds one value.
    Constant,
}

impl AssumeFact {
    pub fn name(self) -> &'static str {
        match self {
            AssumeFact::MultipleOf => "multiple_of",
            AssumeFact::Contiguous => "contiguous",
            AssumeFact::Constant => "constant",
        }
    }
}

/// What an op does. Operand and result conventions are listed per variant; the
/// verifier checks them.
#[derive(Clone, Debug, PartialEq)]
pub enum OpKind {
    /// `() -> i32`: this program instance's index along `axis`.
    ProgramId { axis: u8 },
    /// `() -> i32`: the launched grid's extent along `axis`.
    NumPrograms { axis: u8 },
    /// `() -> T` scalar.
    Constant(Literal),
    /// `() -> i32[end - start]`.
    Arange { start: i64, end: i64 },
    /// `(x) -> x'` with the result's shape: numpy broadcasting (scalars splat).
    Broadcast,
    /// `(x[..]) -> x[..1..]`: inserts a size-1 axis.
    ExpandDims { axis: usize },
    /// `(x) -> x'`: axis `i` of the result is axis `dims[i]` of `x` (a
    /// transpose; `dims` is a permutation of the axes, never the identity).
    Permute { dims: Vec<usize> },
    /// `(x) -> x'`: the same elements in the same row-major order, in another
    /// shape of the same size.
    Reshape,
    /// `(x[.., n, ..]) -> x[.., ..]`: the elements at position `index` along
    /// `axis`, which the result drops (numpy's `take` with one index; one
    /// half of `split`).
    Take { axis: usize, index: usize },
    /// `(x) -> x`, same shape, the result's element type.
    Cast,
    /// `(x) -> x`.
    Unary(UnaryOp),
    /// `(a, b) -> c`, all of one type.
    Binary(BinaryOp),
    /// `(a, b) -> bool`, operands of one type.
    Compare(CmpOp),
    /// `(cond: bool, a, b) -> a`, all of one shape.
    Select,
    /// `(new, old) -> new`, all of one type: the value a carried variable takes
    /// at the end of a traced loop iteration or at an `if` join: `new` where it is
    /// present, `old` where `new` is absent (a masked-off lane of a load without
    /// `other=`). The frontend emits it; the absent-lane pass replaces it with a
    /// `select` (or with `new` when nothing is absent), so no backend sees it.
    CarryMerge,
    /// `(ptr, offset: int) -> ptr`, one shape; offsets count elements.
    AddPtr,
    /// `(address: i64|u64 scalar) -> ptr<T>` scalar: an address read from
    /// memory (`x.to(pointer_type(T))`), which must point into a buffer
    /// argument of the launch.
    IntToPtr,
    /// `(ptrs [, mask [, other]]) -> values`; masked-off lanes read `other` (else 0).
    Load { has_mask: bool, has_other: bool },
    /// `(ptrs, values [, mask]) -> ()`; masked-off lanes are skipped.
    Store { has_mask: bool },
    /// `(ptrs, value [, mask]) -> old` (`(ptrs, cmp, value [, mask])` for
    /// `Cas`), all in the pointer's shape, pointers into kernel buffers: one
    /// atomic read-modify-write per element, returning the values it replaced;
    /// masked-off lanes touch nothing and return 0. A scalar pointer makes one
    /// atomic for the whole program instance.
    Atomic {
        op: AtomicOp,
        sem: MemSem,
        scope: MemScope,
        has_mask: bool,
    },
    /// `(base_ptr, row, col, stride) -> T[rows, cols]`: a row-major block at
    /// `base + (row + r) * stride + col + c`.
    TileLoad { rows: usize, cols: usize },
    /// `(base_ptr, row, col, stride, value[rows, cols]) -> ()`.
    TileStore { rows: usize, cols: usize },
    /// `(a[M,K], b[K,N], acc[M,N]) -> acc`: `acc + a @ b`, products summed in f32.
    Dot,
    /// `(x) -> r`: over all elements (`axis: None`, scalar result) or one axis.
    Reduce { op: ReduceOp, axis: Option<usize> },
    /// `(a, b, c) -> a`, all of one float type: `a * b + c` rounded once.
    Fma,
    /// `(x) -> x`: inclusive prefix sums or products along `axis`, from the
    /// last element backwards with `reverse`. f16/bf16 accumulate in f32.
    Scan { op: ScanOp, axis: usize, reverse: bool },
    /// `(x) -> x`: each line along `axis` (a power-of-two length) sorted,
    /// ascending or descending; NaN sorts above every number. The order of
    /// equal elements (and of NaNs) is that of a fixed bitonic network, the
    /// same on every backend.
    Sort { axis: usize, descending: bool },
    /// `(pid_m, pid_n) -> (pid_m', pid_n')`: a bijection over the launched 2-D grid.
    Swizzle {
        pattern: SwizzlePattern,
        block_size: u32,
    },
    /// `(start, end, step, init...) -> carried...`; region 0 has block arguments
    /// `(iv, carried...)` and ends in `yield carried...`. `num_stages`: the
    /// kernel's software-pipelining hint (`tile_range(..., num_stages=n)`): how
    /// many iterations' `dot` operands may be in flight (1: none ahead).
    For { num_stages: Option<u32> },
    /// `(cond: bool scalar, ...) -> results...`; regions 0 (then) and 1 (else) end in
    /// `yield results...`.
    If,
    /// Region terminator.
    Yield,
    /// `(init...) -> carried...`: a loop on a run-time condition. Region 0 (the
    /// condition) has block arguments `(carried...)` and ends in `yield cond`
    /// (a bool scalar); while it yields true, region 1 (the body) runs with
    /// block arguments `(carried...)` and ends in `yield carried...`. The
    /// results are the carried values the condition last saw.
    While,
    /// `(values...) -> ()`: prints `prefix` and every element of every value,
    /// one line per element, with the program id and the element's index
    /// (`hex`: integers in hexadecimal). See docs/language.md.
    Print { prefix: String, hex: bool },
    /// `(cond: bool) -> ()`, a scalar or a tile: where `cond` is false the launch
    /// fails with `message` and this op's source line.
    Assert { message: String },
    /// `(x) -> x`: a promise about an integer or pointer value along its last
    /// axis (Triton's `multiple_of`, `max_contiguous`, `max_constancy`), read
    /// by the axis analysis to allow vector accesses and checked by the
    /// interpreter; it never changes a value.
    Assume { fact: AssumeFact, value: u64 },
    /// `(cond: bool scalar) -> ()`: the kernel's promise that `cond` holds
    /// (Triton's `tl.assume`). The axis analysis reads `x >= c` / `x > c` with
    /// a constant `c` (and their mirrors) as "`x` is non-negative"; the
    /// interpreter checks the promise; GPU code emits nothing for it.
    AssumeTrue,
    /// `() -> i32[threads]`: each thread's index in its threadgroup.
    ThreadId,
    /// `() -> i32[threads]`: each thread's lane in its simdgroup.
    SimdLaneId,
    /// `(x[threads], mask: i32 scalar) -> x`.
    SimdShuffleXor,
    /// `(x[threads], lane: i32 scalar) -> x`.
    SimdBroadcast,
    /// `() -> shared_ptr<T>`: `size` elements of threadgroup memory.
    Shared { size: usize },
    /// `() -> ()`: threadgroup barrier.
    Barrier,
    /// `() -> ()`; region 0 runs only on the simdgroups of `role` out of `num_roles`.
    SimdgroupRole { role: u32, num_roles: u32 },
}

impl OpKind {
    /// The op's name in the IR text.
    pub fn name(&self) -> &'static str {
        match self {
            OpKind::ProgramId { .. } => "program_id",
            OpKind::NumPrograms { .. } => "num_programs",
            OpKind::Constant(_) => "constant",
            OpKind::Arange { .. } => "arange",
            OpKind::Broadcast => "broadcast",
            OpKind::ExpandDims { .. } => "expand_dims",
            OpKind::Permute { .. } => "permute",
            OpKind::Reshape => "reshape",
            OpKind::Take { .. } => "take",
            OpKind::Cast => "cast",
            OpKind::Unary(u) => match u {
                UnaryOp::Neg => "neg",
                UnaryOp::Not => "not",
                UnaryOp::Exp => "exp",
                UnaryOp::Log => "log",
                UnaryOp::Sqrt => "sqrt",
                UnaryOp::Abs => "abs",
                UnaryOp::Tanh => "tanh",
                UnaryOp::Exp2 => "exp2",
                UnaryOp::Log2 => "log2",
                UnaryOp::Log1p => "log1p",
                UnaryOp::Expm1 => "expm1",
                UnaryOp::Sin => "sin",
                UnaryOp::Cos => "cos",
                UnaryOp::Tan => "tan",
                UnaryOp::Asin => "asin",
                UnaryOp::Acos => "acos",
                UnaryOp::Atan => "atan",
                UnaryOp::Sinh => "sinh",
                UnaryOp::Cosh => "cosh",
                UnaryOp::Erf => "erf",
                UnaryOp::Rsqrt => "rsqrt",
                UnaryOp::Floor => "floor",
                UnaryOp::Ceil => "ceil",
                UnaryOp::Round => "round",
                UnaryOp::Rint => "rint",
                UnaryOp::FastExp => "fast_exp",
                UnaryOp::FastExp2 => "fast_exp2",
            },
            OpKind::Binary(b) => match b {
                BinaryOp::Add => "add",
                BinaryOp::Sub => "sub",
                BinaryOp::Mul => "mul",
                BinaryOp::Div => "div",
                BinaryOp::FloorDiv => "floordiv",
                BinaryOp::Rem => "rem",
                BinaryOp::Max => "max",
                BinaryOp::Min => "min",
                BinaryOp::And => "and",
                BinaryOp::Or => "or",
                BinaryOp::Xor => "xor",
                BinaryOp::Shl => "shl",
                BinaryOp::Shr => "shr",
                BinaryOp::Pow => "pow",
                BinaryOp::Atan2 => "atan2",
                BinaryOp::MulHi => "umulhi",
                BinaryOp::FastDiv => "fast_div",
            },
            OpKind::Compare(c) => match c {
                CmpOp::Lt => "cmp_lt",
                CmpOp::Le => "cmp_le",
                CmpOp::Gt => "cmp_gt",
                CmpOp::Ge => "cmp_ge",
                CmpOp::Eq => "cmp_eq",
                CmpOp::Ne => "cmp_ne",
            },
            OpKind::Select => "select",
            OpKind::CarryMerge => "carry_merge",
            OpKind::AddPtr => "add_ptr",
            OpKind::IntToPtr => "int_to_ptr",
            OpKind::Load { .. } => "load",
            OpKind::Store { .. } => "store",
            OpKind::Atomic { op, .. } => match op {
                AtomicOp::Add => "atomic_add",
                AtomicOp::Max => "atomic_max",
                AtomicOp::Min => "atomic_min",
                AtomicOp::And => "atomic_and",
                AtomicOp::Or => "atomic_or",
                AtomicOp::Xor => "atomic_xor",
                AtomicOp::Xchg => "atomic_xchg",
                AtomicOp::Cas => "atomic_cas",
            },
            OpKind::TileLoad { .. } => "tile_load",
            OpKind::TileStore { .. } => "tile_store",
            OpKind::Dot => "dot",
            OpKind::Reduce { op, .. } => match op {
                ReduceOp::Sum => "reduce_sum",
                ReduceOp::Max => "reduce_max",
                ReduceOp::Min => "reduce_min",
                ReduceOp::Xor => "reduce_xor",
            },
            OpKind::Fma => "fma",
            OpKind::Scan { op, .. } => match op {
                ScanOp::Sum => "cumsum",
                ScanOp::Prod => "cumprod",
            },
            OpKind::Sort { .. } => "sort",
            OpKind::Swizzle { .. } => "tile_swizzle",
            OpKind::For { .. } => "for",
            OpKind::If => "if",
            OpKind::Yield => "yield",
            OpKind::While => "while",
            OpKind::Print { .. } => "print",
            OpKind::Assert { .. } => "assert",
            OpKind::Assume { .. } => "assume",
            OpKind::AssumeTrue => "assume_true",
            OpKind::ThreadId => "thread_id",
            OpKind::SimdLaneId => "simd_lane_id",
            OpKind::SimdShuffleXor => "simd_shuffle_xor",
            OpKind::SimdBroadcast => "simd_broadcast",
            OpKind::Shared { .. } => "shared",
            OpKind::Barrier => "barrier",
            OpKind::SimdgroupRole { .. } => "simdgroup_role",
        }
    }

    /// Ops with effects beyond their results; never removed or merged.
    pub fn has_side_effects(&self) -> bool {
        matches!(
            self,
            OpKind::Store { .. }
                | OpKind::TileStore { .. }
                | OpKind::Atomic { .. }
                | OpKind::Yield
                | OpKind::Barrier
                | OpKind::SimdgroupRole { .. }
                | OpKind::Shared { .. }
                | OpKind::For { .. }
                | OpKind::If
                | OpKind::While
                | OpKind::Print { .. }
                | OpKind::Assert { .. }
                | OpKind::AssumeTrue
        )
    }

    /// `x.T` of a 2-D tile: a permute that swaps the two axes.
    pub fn is_transpose(&self) -> bool {
        matches!(self, OpKind::Permute { dims } if dims.as_slice() == [1, 0])
    }

    /// Ops whose result depends on memory, so two of them are not interchangeable.
    pub fn reads_memory(&self) -> bool {
        matches!(
            self,
            OpKind::Load { .. }
                | OpKind::TileLoad { .. }
                | OpKind::Atomic { .. }
                | OpKind::SimdShuffleXor
                | OpKind::SimdBroadcast
        )
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Op {
    pub kind: OpKind,
    pub operands: Vec<ValueId>,
    pub results: Vec<ValueId>,
    pub regions: Vec<Block>,
    pub loc: Loc,
}

/// A straight-line list of ops with block arguments (for loop bodies).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Block {
    pub args: Vec<ValueId>,
    pub ops: Vec<Op>,
}

/// How a kernel parameter is passed at launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParamKind {
    /// A buffer of elements of this dtype (numpy array, `metile.Buffer`, ...).
    Pointer(DType),
    /// A scalar passed by value.
    Scalar(DType),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub name: String,
    pub kind: ParamKind,
    pub value: ValueId,
    /// An integer scalar is a multiple of this at every launch of this
    /// specialisation (1: nothing known). The launch key guarantees it, as
    /// Triton's specialisation on multiples of 16 does; alignment analysis uses
    /// it to prove vector accesses through `row * N + cols`.
    pub divisibility: u64,
}

/// One specialised kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct Function {
    pub name: String,
    pub params: Vec<Param>,
    /// Constexpr names and values, as text, for the printer and cache keys.
    pub constexprs: Vec<(String, String)>,
    /// Threads per threadgroup the thread-level ops were traced against, if any.
    pub threads_per_group: Option<usize>,
    pub body: Block,
    /// The type of every value, indexed by `ValueId`.
    pub values: Vec<Type>,
}

impl Function {
    pub fn ty(&self, v: ValueId) -> &Type {
        &self.values[v.index()]
    }

    /// Visits every op, depth first, in program order.
    pub fn walk(&self, f: &mut impl FnMut(&Op)) {
        fn go(block: &Block, f: &mut impl FnMut(&Op)) {
            for op in &block.ops {
                f(op);
                for r in &op.regions {
                    go(r, f);
                }
            }
        }
        go(&self.body, f)
    }

    /// True when the kernel uses thread-level ops (thread ids, shuffles, shared memory).
    pub fn uses_thread_ops(&self) -> bool {
        let mut found = false;
        self.walk(&mut |op| {
            found |= matches!(
                op.kind,
                OpKind::ThreadId
                    | OpKind::SimdLaneId
                    | OpKind::SimdShuffleXor
                    | OpKind::SimdBroadcast
                    | OpKind::Shared { .. }
                    | OpKind::Barrier
                    | OpKind::SimdgroupRole { .. }
            )
        });
        found
    }
}
