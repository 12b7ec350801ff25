//! Errors a launch can report. Every message names what the kernel author needs to
//! find the problem: the kernel line, the parameter, the index and the extent.

use metile_ir::Loc;
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Error)]
pub enum ExecError {
    /// A load or store touched an element outside its buffer (or shared allocation).
    #[error("{loc}: out-of-bounds access to `{param}`: element index {index} is outside [0, {len})")]
    OutOfBounds {
        loc: Loc,
        param: String,
        index: i64,
        len: usize,
    },
    /// The launch arguments do not fit the kernel's parameters or the grid is invalid.
    #[error("bad kernel arguments: {0}")]
    BadArguments(String),
    /// The interpreter cannot execute this op with these types.
    #[error("{loc}: `{op}` is not supported by the CPU interpreter: {reason}")]
    Unsupported { loc: Loc, op: String, reason: String },
    /// A run-time value makes the op meaningless (a zero loop step, ...).
    #[error("{loc}: {message}")]
    InvalidValue { loc: Loc, message: String },
    /// An integer division or remainder by zero whose result the kernel used.
    #[error("{loc}: {message}")]
    DivisionByZero { loc: Loc, message: String },
    /// A shift by a negative count or by at least the bit width whose result the
    /// kernel used.
    #[error("{loc}: {message}")]
    InvalidShift { loc: Loc, message: String },
    /// The launch was stopped before every program instance ran, at the caller's
    /// request (see `Executable::launch_interruptible`).
    #[error("the launch was interrupted")]
    Interrupted,
    /// A `device_assert` found its condition false (`at`: the program and element).
    #[error("{loc}: device_assert failed: {message} ({at})")]
    AssertionFailed { loc: Loc, message: String, at: String },
    /// The function failed the Tile IR verifier.
    #[error("invalid Tile IR: {0}")]
    InvalidIr(String),
    /// An invariant of the interpreter itself broke; always a bug here, never in the kernel.
    #[error("internal interpreter error: {0}")]
    Internal(String),
}

pub(crate) fn internal(message: impl Into<String>) -> ExecError {
    ExecError::Internal(message.into())
}
