//! The single error type of the crate.
//!
//! Every fallible operation reports *which* precondition failed and on which
//! operands, so that a compiler diagnostic built from it can point at the
//! offending layout without re-deriving anything. Operands are stored in their
//! CuTe text form, which is also what a user would write to reproduce the case.

use std::fmt;

/// Why a layout operation refused to produce a result.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LayoutError {
    /// Text could not be read as CuTe notation.
    Parse {
        input: String,
        position: usize,
        reason: String,
    },
    /// A tuple with no elements appeared where a shape, stride or coordinate
    /// was expected; CuTe has no empty layouts.
    EmptyTuple { context: &'static str },
    /// A shape contained an extent below 1.
    NonPositiveShape { shape: String },
    /// Shape and stride do not have the same nesting profile.
    NotCongruent { shape: String, stride: String },
    /// An intermediate value does not fit in an `i64`.
    Overflow {
        operation: &'static str,
        operands: String,
    },
    /// A linear index outside `[0, size)`.
    IndexOutOfRange { index: i64, size: i64 },
    /// A coordinate whose nesting does not fit the shape, or whose entry is
    /// outside the extent of its mode.
    CoordinateMismatch { coord: String, shape: String },
    /// A mode index at or past the rank.
    ModeOutOfRange {
        mode: usize,
        rank: usize,
        layout: String,
    },
    /// Two operands (or an operand and a profile) have incompatible ranks.
    RankMismatch {
        operation: &'static str,
        lhs: String,
        rhs: String,
        detail: String,
    },
    /// Composition `lhs o rhs`: a stride of `rhs` neither divides nor is a
    /// multiple of the extent of the `lhs` mode it has to step over.
    StrideDivisibility {
        lhs: String,
        rhs: String,
        detail: String,
    },
    /// Composition `lhs o rhs`: an extent of `rhs` cannot be split across the
    /// modes of `lhs`.
    ShapeDivisibility {
        lhs: String,
        rhs: String,
        detail: String,
    },
    /// Composition `lhs o rhs`: modes of `rhs` overlap in a way that makes
    /// `lhs o rhs` differ from the sum of the per-mode compositions, so the
    /// function is not a layout shaped like `rhs`.
    CompositionOverlap {
        lhs: String,
        rhs: String,
        detail: String,
    },
    /// The operation is only defined for non-negative strides.
    NegativeStride { operation: &'static str, layout: String },
    /// Complement: two modes of the layout overlap or interleave, so no
    /// ordered layout can fill the holes.
    ComplementOverlap { layout: String, detail: String },
    /// Complement: the gap below a mode is not a whole number of repetitions
    /// of the modes under it.
    ComplementDivisibility { layout: String, detail: String },
    /// Complement needs a cotarget of at least 1.
    InvalidCotarget { cotarget: i64 },
    /// The operation needs operands of equal size.
    SizeMismatch {
        operation: &'static str,
        lhs: String,
        rhs: String,
    },
    /// Swizzle parameters outside CuTe's rules.
    InvalidSwizzle {
        bits: i64,
        base: i64,
        shift: i64,
        reason: &'static str,
    },
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutError::Parse {
                input,
                position,
                reason,
            } => write!(f, "parse error at offset {position} in {input:?}: {reason}"),
            LayoutError::EmptyTuple { context } => {
                write!(
                    f,
                    "empty tuple in {context}: CuTe tuples need at least one element"
                )
            }
            LayoutError::NonPositiveShape { shape } => {
                write!(f, "shape {shape} has an extent below 1")
            }
            LayoutError::NotCongruent { shape, stride } => write!(
                f,
                "shape {shape} and stride {stride} are not congruent (different nesting)"
            ),
            LayoutError::Overflow { operation, operands } => {
                write!(f, "{operation} of {operands}: value does not fit in i64")
            }
            LayoutError::IndexOutOfRange { index, size } => {
                write!(f, "index {index} is outside [0, {size})")
            }
            LayoutError::CoordinateMismatch { coord, shape } => {
                write!(f, "coordinate {coord} does not fit shape {shape}")
            }
            LayoutError::ModeOutOfRange { mode, rank, layout } => {
                write!(f, "mode {mode} does not exist in rank-{rank} layout {layout}")
            }
            LayoutError::RankMismatch {
                operation,
                lhs,
                rhs,
                detail,
            } => write!(f, "{operation}({lhs}, {rhs}): rank mismatch: {detail}"),
            LayoutError::StrideDivisibility { lhs, rhs, detail } => write!(
                f,
                "composition {lhs} o {rhs}: stride divisibility condition failed: {detail}"
            ),
            LayoutError::ShapeDivisibility { lhs, rhs, detail } => write!(
                f,
                "composition {lhs} o {rhs}: shape divisibility condition failed: {detail}"
            ),
            LayoutError::CompositionOverlap { lhs, rhs, detail } => write!(
                f,
                "composition {lhs} o {rhs}: the modes of the right operand overlap: {detail}"
            ),
            LayoutError::NegativeStride { operation, layout } => {
                write!(f, "{operation} needs non-negative strides, got {layout}")
            }
            LayoutError::ComplementOverlap { layout, detail } => write!(
                f,
                "complement of {layout}: layout is not injective or its modes interleave: {detail}"
            ),
            LayoutError::ComplementDivisibility { layout, detail } => write!(
                f,
                "complement of {layout}: stride divisibility condition failed: {detail}"
            ),
            LayoutError::InvalidCotarget { cotarget } => {
                write!(f, "complement cotarget must be at least 1, got {cotarget}")
            }
            LayoutError::SizeMismatch { operation, lhs, rhs } => {
                write!(f, "{operation}({lhs}, {rhs}): operands must have equal size")
            }
            LayoutError::InvalidSwizzle {
                bits,
                base,
                shift,
                reason,
            } => write!(f, "invalid swizzle Sw<{bits},{base},{shift}>: {reason}"),
        }
    }
}

impl std::error::Error for LayoutError {}
