//! Python exception types and the formatting every kernel error shares: the
//! message, then the kernel's file, line and source text.

use metile_ir::Loc;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyRuntimeWarning};
use pyo3::prelude::*;

create_exception!(
    _metile,
    CompilationError,
    PyException,
    "A kernel that meTile cannot compile: the message names the op, the reason and the kernel's source line."
);

create_exception!(
    _metile,
    MetileWarning,
    PyRuntimeWarning,
    "Every warning meTile issues: work it does on the user's behalf that costs time (arrays copied to a \
     GPU and back at every launch) or that it refused (a disk cache folder other users could write). A \
     RuntimeWarning, so filters on RuntimeWarning keep applying."
);

/// Issues `message` as a `metile.MetileWarning`; `stacklevel` as in
/// `warnings.warn` (1: the Python frame that called into meTile).
pub fn warn(py: Python<'_>, message: &str, stacklevel: i32) -> PyResult<()> {
    let category = py.get_type::<MetileWarning>();
    let message = std::ffi::CString::new(message.replace('\0', " "))?;
    PyErr::warn(py, &category, &message, stacklevel)
}

/// The source text of `loc`'s line, read through Python's `linecache` (the same
/// cache `inspect.getsource` fills), or `None` when unavailable.
pub fn source_line(py: Python<'_>, loc: &Loc) -> Option<String> {
    let linecache = py.import("linecache").ok()?;
    let line: String = linecache
        .call_method1("getline", (&*loc.file, loc.line))
        .ok()?
        .extract()
        .ok()?;
    let trimmed = line.trim();
    (!trimmed.is_empty()).then(|| trimmed.to_string())
}

/// `message` followed by where in the kernel it happened.
pub fn with_location(py: Python<'_>, message: &str, loc: &Loc) -> String {
    if loc.line == 0 {
        return message.to_string();
    }
    let mut text = format!("{message}\n  File \"{}\", line {}", loc.file, loc.line);
    if let Some(src) = source_line(py, loc) {
        text.push_str("\n    ");
        text.push_str(&src);
    }
    text
}

pub fn compilation_error(py: Python<'_>, message: &str, loc: &Loc) -> PyErr {
    CompilationError::new_err(with_location(py, message, loc))
}
