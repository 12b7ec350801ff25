use thiserror::Error;

/// A kernel the IR cannot represent: a type or shape rule was broken. The message
/// names the op and the operands; the frontend adds the kernel's source line.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0}")]
pub struct IrError(pub String);

impl IrError {
    pub fn new(message: impl Into<String>) -> IrError {
        IrError(message.into())
    }
}

pub type IrResult<T> = Result<T, IrError>;

/// Returns early with an [`IrError`] built from a format string.
#[macro_export]
macro_rules! ir_bail {
    ($($arg:tt)*) => {
        return Err($crate::error::IrError(format!($($arg)*)))
    };
}
