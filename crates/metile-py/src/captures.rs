//! The globals and closure variables a kernel reads, as part of its
//! specialisation key.
//!
//! `metile._frontend.captures` finds them once, from the source of the kernel
//! and of the helper functions it calls (see docs/README.md); a launch then
//! only reads each one's current value (a dict lookup or a cell read, and the
//! attribute path for `module.NAME` and `Class.NAME`) and keys it exactly.

use std::sync::Arc;

use metile_ir::Loc;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};

use crate::errors::compilation_error;
use crate::value_key::{value_key, ValueKey, KEYED_VALUES};

/// Where a captured name lives.
enum Source {
    /// A module's globals dict.
    Global(Py<PyDict>),
    /// A closure cell of the kernel or of a helper.
    Cell(Py<PyAny>),
}

struct Capture {
    /// `SCALE`, `cfg.BLOCK`: how the kernel spells it.
    label: String,
    source: Source,
    name: Py<PyString>,
    /// Attributes read after the name (through modules and classes).
    attrs: Vec<Py<PyString>>,
    /// The first line that reads it.
    loc: Loc,
}

/// `(label, container, name, attrs, file, line)`, as `metile._frontend.captures` lists them.
type CaptureTuple<'py> = (
    String,
    Bound<'py, PyAny>,
    Bound<'py, PyString>,
    Vec<Bound<'py, PyString>>,
    String,
    u32,
);

/// The captured names of one kernel; `generation` changes whenever the list is
/// replaced, so that keys built from different lists never meet.
pub struct CaptureList {
    pub generation: u64,
    captures: Vec<Capture>,
}

impl CaptureList {
    pub fn empty(generation: u64) -> CaptureList {
        CaptureList {
            generation,
            captures: Vec::new(),
        }
    }

    /// Reads [`CaptureTuple`]s (container: a globals dict or a closure cell).
    pub fn from_py(list: &Bound<'_, PyList>, generation: u64) -> PyResult<CaptureList> {
        let mut captures = Vec::with_capacity(list.len());
        for item in list.iter() {
            let item = item.cast_into::<PyTuple>()?;
            let (label, container, name, attrs, file, line): CaptureTuple<'_> = item.extract()?;
            let source = match container.cast_into::<PyDict>() {
                Ok(globals) => Source::Global(globals.unbind()),
                Err(e) => Source::Cell(e.into_inner().unbind()),
            };
            captures.push(Capture {
                label,
                source,
                name: name.unbind(),
                attrs: attrs.into_iter().map(Bound::unbind).collect(),
                loc: Loc {
                    file: Arc::from(file),
                    line,
                },
            });
        }
        Ok(CaptureList { generation, captures })
    }

    /// Whether `other` reads the same names from the same places.
    pub fn same_as(&self, py: Python<'_>, other: &CaptureList) -> bool {
        self.captures.len() == other.captures.len()
            && self.captures.iter().zip(&other.captures).all(|(a, b)| {
                let source_eq = match (&a.source, &b.source) {
                    (Source::Global(x), Source::Global(y)) => x.is(y),
                    (Source::Cell(x), Source::Cell(y)) => x.is(y),
                    _ => false,
                };
                source_eq
                    && a.label == b.label
                    && a.name.bind(py).to_str().ok() == b.name.bind(py).to_str().ok()
            })
    }

    /// The current value of every captured name, keyed; a value that cannot be
    /// a compile-time constant is a `metile.CompilationError` naming it and the
    /// kernel line that reads it.
    pub fn values(&self, py: Python<'_>, kernel: &str) -> PyResult<Vec<ValueKey>> {
        let mut keys = Vec::with_capacity(self.captures.len());
        for capture in &self.captures {
            let Some(value) = capture.read(py)? else {
                keys.push(ValueKey::Absent);
                continue;
            };
            match value_key(&value)? {
                Ok(key) => keys.push(key),
                Err(no) => {
                    let kind = match capture.source {
                        Source::Global(_) if capture.attrs.is_empty() => "the global",
                        Source::Cell(_) if capture.attrs.is_empty() => "the closure variable",
                        _ => "",
                    };
                    let message = format!(
                        "kernel {kernel} reads {kind}{}{} (a {}), which cannot be a compile-time constant: a \
                         kernel is compiled for the values of the globals and closure variables it reads, \
                         which must be {KEYED_VALUES}; pass arrays as arguments and other values as \
                         constexpr arguments",
                        if kind.is_empty() { "" } else { " " },
                        capture.label,
                        no.type_name
                    );
                    return Err(compilation_error(py, &message, &capture.loc));
                }
            }
        }
        Ok(keys)
    }
}

impl Capture {
    /// The current value, `None` when the name (or an attribute on the path) is unbound.
    fn read<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let mut value = match &self.source {
            Source::Global(globals) => match globals.bind(py).get_item(self.name.bind(py))? {
                Some(v) => v,
                None => return Ok(None),
            },
            Source::Cell(cell) => match cell.bind(py).getattr(pyo3::intern!(py, "cell_contents")) {
                Ok(v) => v,
                // An empty cell: the enclosing function has not assigned it yet.
                Err(e) if e.is_instance_of::<PyValueError>(py) => return Ok(None),
                Err(e) => return Err(e),
            },
        };
        for attr in &self.attrs {
            match value.getattr(attr.bind(py)) {
                Ok(v) => value = v,
                Err(_) => return Ok(None),
            }
        }
        Ok(Some(value))
    }
}
