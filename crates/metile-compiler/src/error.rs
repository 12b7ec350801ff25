//! The error every lowering stage returns: which Tile IR op could not be
//! compiled, why, and where it is in the kernel source. The Python side turns it
//! into `metile.CompilationError` showing that line.

use metile_ir::{IrError, Loc};
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileError {
    /// The Tile IR op's name (`dot`, `reduce_sum`, ...), or the stage for
    /// whole-kernel problems (`kernel`).
    pub op: String,
    pub reason: String,
    pub loc: Loc,
}

impl CompileError {
    pub fn new(op: impl Into<String>, reason: impl Into<String>, loc: Loc) -> CompileError {
        CompileError {
            op: op.into(),
            reason: reason.into(),
            loc,
        }
    }

    /// A compiler bug surfaced by a verifier: reported, never papered over.
    pub fn internal(stage: &str, err: IrError) -> CompileError {
        CompileError::new(
            "kernel",
            format!("{INTERNAL} after {stage}: {err}"),
            Loc::unknown(),
        )
    }
}

impl CompileError {
    /// Whether this is a compiler bug rather than a refusal the user can act on.
    pub fn is_internal(&self) -> bool {
        self.reason.contains(INTERNAL)
    }
}

/// The words every compiler-bug message carries ([`CompileError::is_internal`]).
pub(crate) const INTERNAL: &str = "internal compiler error";

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: cannot compile `{}`: {}", self.loc, self.op, self.reason)
    }
}

impl std::error::Error for CompileError {}

pub type CompileResult<T> = Result<T, CompileError>;
