use metile_ir::Loc;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum RuntimeError {
    /// A kernel touched memory outside an argument's extent (CPU backends check every access).
    #[error("{message}")]
    OutOfBounds { message: String, loc: Loc },
    /// An integer division or remainder by zero whose result the kernel used
    /// (the cpu backend checks; `loc` is the division).
    #[error("{message}")]
    DivisionByZero { message: String, loc: Loc },
    /// A shift by a negative count or by at least the bit width whose result the
    /// kernel used (the cpu backend checks; `loc` is the shift).
    #[error("{message}")]
    InvalidShift { message: String, loc: Loc },
    /// The host asked a running launch to stop (see `interrupt`).
    #[error("the launch was interrupted")]
    Interrupted,
    /// A `device_assert` failed; `loc` is its line, when known.
    #[error("{message}")]
    AssertionFailed { message: String, loc: Loc },
    /// The backend cannot compile this kernel; `loc` is the offending op, when known.
    #[error("{message}")]
    Compile { message: String, loc: Option<Loc> },
    /// Arguments that do not fit the compiled kernel.
    #[error("{0}")]
    BadArguments(String),
    /// A launch the target cannot run (a grid outside its limits).
    #[error("{0}")]
    InvalidLaunch(String),
    /// The device is missing or failed.
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Device(String),
    /// An ahead-of-time artifact that cannot be built or loaded (bad manifest,
    /// edited source, unknown target).
    #[error("{0}")]
    Artifact(String),
}
