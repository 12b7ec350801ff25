//! The printed names of the IRs' enums, read back: each table lists every
//! variant, and the name is looked up through the printers' own naming
//! functions, so a name cannot drift from what the printers write.

use crate::tile_ir::*;

pub const UNARY: [UnaryOp; 27] = [
    UnaryOp::Neg,
    UnaryOp::Not,
    UnaryOp::Exp,
    UnaryOp::Log,
    UnaryOp::Sqrt,
    UnaryOp::Abs,
    UnaryOp::Tanh,
    UnaryOp::Exp2,
    UnaryOp::Log2,
    UnaryOp::Log1p,
    UnaryOp::Expm1,
    UnaryOp::Sin,
    UnaryOp::Cos,
    UnaryOp::Tan,
    UnaryOp::Asin,
    UnaryOp::Acos,
    UnaryOp::Atan,
    UnaryOp::Sinh,
    UnaryOp::Cosh,
    UnaryOp::Erf,
    UnaryOp::Rsqrt,
    UnaryOp::Floor,
    UnaryOp::Ceil,
    UnaryOp::Round,
    UnaryOp::Rint,
    UnaryOp::FastExp,
    UnaryOp::FastExp2,
];

pub const BINARY: [BinaryOp; 17] = [
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Div,
    BinaryOp::FloorDiv,
    BinaryOp::Rem,
    BinaryOp::Max,
    BinaryOp::Min,
    BinaryOp::And,
    BinaryOp::Or,
    BinaryOp::Xor,
    BinaryOp::Shl,
    BinaryOp::Shr,
    BinaryOp::Pow,
    BinaryOp::Atan2,
    BinaryOp::MulHi,
    BinaryOp::FastDiv,
];

pub const COMPARE: [CmpOp; 6] = [CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge, CmpOp::Eq, CmpOp::Ne];

pub const REDUCE: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Xor];

pub const ATOMIC: [AtomicOp; 8] = [
    AtomicOp::Add,
    AtomicOp::Max,
    AtomicOp::Min,
    AtomicOp::And,
    AtomicOp::Or,
    AtomicOp::Xor,
    AtomicOp::Xchg,
    AtomicOp::Cas,
];

/// Tile IR ops whose text has no attributes, and the element-wise families.
pub fn plain_tile_kind(name: &str) -> Option<OpKind> {
    const PLAIN: [OpKind; 17] = [
        OpKind::Broadcast,
        OpKind::Reshape,
        OpKind::Cast,
        OpKind::Select,
        OpKind::CarryMerge,
        OpKind::AddPtr,
        OpKind::Dot,
        OpKind::Fma,
        OpKind::If,
        OpKind::Yield,
        OpKind::While,
        OpKind::ThreadId,
        OpKind::SimdLaneId,
        OpKind::SimdShuffleXor,
        OpKind::SimdBroadcast,
        OpKind::Barrier,
        OpKind::AssumeTrue,
    ];
    PLAIN
        .into_iter()
        .chain(elementwise_kinds())
        .find(|k| k.name() == name)
}

/// Unary, binary and comparison kinds (the GPU IR names them the same way).
pub fn elementwise_kinds() -> impl Iterator<Item = OpKind> {
    UNARY
        .into_iter()
        .map(OpKind::Unary)
        .chain(BINARY.into_iter().map(OpKind::Binary))
        .chain(COMPARE.into_iter().map(OpKind::Compare))
}

pub fn reduce_op(name: &str) -> Option<ReduceOp> {
    REDUCE
        .into_iter()
        .find(|&op| OpKind::Reduce { op, axis: None }.name() == name)
}

pub fn scan_op(name: &str) -> Option<ScanOp> {
    [ScanOp::Sum, ScanOp::Prod].into_iter().find(|&op| {
        OpKind::Scan {
            op,
            axis: 0,
            reverse: false,
        }
        .name()
            == name
    })
}

pub fn atomic_op(name: &str) -> Option<AtomicOp> {
    ATOMIC
        .into_iter()
        .find(|op| name.strip_prefix("atomic_") == Some(op.name()))
}

pub fn mem_sem(name: &str) -> Option<MemSem> {
    MemSem::ALL.into_iter().find(|s| s.name() == name)
}

pub fn mem_scope(name: &str) -> Option<MemScope> {
    MemScope::ALL.into_iter().find(|s| s.name() == name)
}

pub fn assume_fact(name: &str) -> Option<AssumeFact> {
    [
        AssumeFact::MultipleOf,
        AssumeFact::Contiguous,
        AssumeFact::Constant,
    ]
    .into_iter()
    .find(|f| f.name() == name)
}

pub fn swizzle_pattern(name: &str) -> Option<SwizzlePattern> {
    [SwizzlePattern::Morton, SwizzlePattern::Diagonal]
        .into_iter()
        .find(|p| p.name() == name)
}
