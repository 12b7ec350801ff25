//! The trace in progress: the thread's current [`Builder`], where in the
//! kernel's source each op comes from, which regions are open, and the
//! conversions between Python objects and builder operands.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use metile_ir::{Builder, IrResult, Loc, Operand, Type, ValueId};
use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt};
use rustc_hash::FxHashMap;

use super::tile::Tile;
use crate::errors::compilation_error;

/// Region ids: 0 is the kernel body, every pushed block gets a fresh one.
type ScopeId = u32;
const ROOT_SCOPE: ScopeId = 0;
const UNREGISTERED: ScopeId = ScopeId::MAX;

static NEXT_TRACE_ID: AtomicU64 = AtomicU64::new(1);

pub struct Trace {
    /// Distinguishes this trace's proxies from proxies left over from earlier ones.
    pub id: u64,
    pub builder: Builder,
    /// Regions open right now, innermost last.
    open_scopes: Vec<ScopeId>,
    next_scope: ScopeId,
    /// The region each proxied value was defined in, indexed by `ValueId`.
    value_scope: Vec<ScopeId>,
}

/// A block taken off the builder together with the region id it was traced under.
pub struct ClosedBlock {
    pub block: metile_ir::Block,
    scope: ScopeId,
}

thread_local! {
    static CURRENT: RefCell<Option<Trace>> = const { RefCell::new(None) };
    static CALLERS: RefCell<FxHashMap<usize, CallerCode>> = RefCell::new(FxHashMap::default());
}

/// What [`Trace::locate_caller`] learnt about a code object that called into a
/// trace, keyed by its address: a kernel's code calls in again at every trace.
struct CallerCode {
    /// Kept alive so that its address, the key, is not reused by another code object.
    _code: Py<PyAny>,
    /// Its file, `None` for metile's frontend modules.
    file: Option<Arc<str>>,
    /// The line of each instruction offset (`f_lasti`) asked for: Python finds
    /// a frame's line by reading the code's line table from its start.
    lines: FxHashMap<i64, u32>,
}

/// More code objects than this is no kernel's working set: the table starts over.
const MAX_CALLER_CODES: usize = 4096;

/// Installs `trace` as the thread's current trace until the guard drops.
pub struct ActiveTrace(());

impl ActiveTrace {
    pub fn install(builder: Builder) -> PyResult<ActiveTrace> {
        CURRENT.with(|cell| {
            let mut slot = cell
                .try_borrow_mut()
                .map_err(|_| PyRuntimeError::new_err("internal: the trace state is busy"))?;
            if slot.is_some() {
                return Err(PyRuntimeError::new_err(
                    "a kernel is already being traced on this thread; kernels cannot be traced or \
                     launched from inside another kernel",
                ));
            }
            *slot = Some(Trace {
                id: NEXT_TRACE_ID.fetch_add(1, Ordering::Relaxed),
                builder,
                open_scopes: vec![ROOT_SCOPE],
                next_scope: ROOT_SCOPE + 1,
                value_scope: vec![],
            });
            Ok(ActiveTrace(()))
        })
    }

    /// Ends the trace and hands back its builder.
    pub fn finish(self) -> PyResult<Builder> {
        let trace = CURRENT.with(|cell| cell.try_borrow_mut().ok().and_then(|mut slot| slot.take()));
        trace
            .map(|t| t.builder)
            .ok_or_else(|| PyRuntimeError::new_err("internal: the trace ended early"))
    }
}

impl Drop for ActiveTrace {
    fn drop(&mut self) {
        CURRENT.with(|cell| {
            if let Ok(mut slot) = cell.try_borrow_mut() {
                *slot = None;
            }
        });
    }
}

fn outside_kernel(what: &str) -> PyErr {
    PyRuntimeError::new_err(format!(
        "{what} can only be called inside a @metile.kernel function, while the kernel is being \
         traced; launch the kernel with kernel[grid](...) instead of calling this directly"
    ))
}

/// Runs `f` on the current trace with the location set to the calling Python
/// frame (the user's kernel or helper function). `what` names the eDSL function
/// (`"metile.load()"`) for the error raised outside a kernel.
pub fn with_trace<R>(py: Python<'_>, what: &str, f: impl FnOnce(&mut Trace) -> PyResult<R>) -> PyResult<R> {
    CURRENT.with(|cell| {
        let mut slot = cell.try_borrow_mut().map_err(|_| {
            PyRuntimeError::new_err(format!(
                "{what} was called while another meTile operation was running (from a \
                 conversion hook such as __index__); this is not supported"
            ))
        })?;
        let trace = slot.as_mut().ok_or_else(|| outside_kernel(what))?;
        trace.locate_caller(py);
        f(trace)
    })
}

/// Runs `f` on the current trace without touching its location (for setting it up).
pub fn with_root<R>(f: impl FnOnce(&mut Trace) -> PyResult<R>) -> PyResult<R> {
    CURRENT.with(|cell| {
        let mut slot = cell
            .try_borrow_mut()
            .map_err(|_| PyRuntimeError::new_err("internal: the trace state is busy"))?;
        let trace = slot
            .as_mut()
            .ok_or_else(|| PyRuntimeError::new_err("internal: no trace is active"))?;
        f(trace)
    })
}

/// Drops the innermost region after an error inside it, so a caller that
/// catches the error finds the builder as it was.
pub fn discard_region(py: Python<'_>) {
    let _ = with_trace(py, "a region", |t| t.pop_region(py).map(|_| ()));
}

/// Whether a kernel is being traced on this thread.
pub fn tracing_active() -> bool {
    CURRENT.with(|cell| cell.try_borrow().map(|s| s.is_some()).unwrap_or(true))
}

/// Whether `file` is one of metile's frontend modules (`metile/_frontend/*`,
/// `metile/language.py`), whose calls stand for the user's line that made them.
fn metile_package_file(py: Python<'_>, file: &str) -> bool {
    static FRONTEND: std::sync::OnceLock<Option<(String, String)>> = std::sync::OnceLock::new();
    let paths = FRONTEND.get_or_init(|| {
        let init: String = py
            .import("metile")
            .ok()?
            .getattr("__file__")
            .ok()?
            .extract()
            .ok()?;
        let dir = std::path::Path::new(&init).parent()?;
        let sep = std::path::MAIN_SEPARATOR;
        Some((
            format!("{}{sep}_frontend{sep}", dir.display()),
            format!("{}{sep}language.py", dir.display()),
        ))
    });
    paths
        .as_ref()
        .is_some_and(|(frontend, language)| file.starts_with(frontend.as_str()) || file == language)
}

/// The file and line `frame` (running `code`) is at, `None` when `code` is of
/// metile's frontend modules (its caller stands for it).
fn caller_line(py: Python<'_>, frame: &Bound<'_, PyAny>, code: Bound<'_, PyAny>) -> Option<(Arc<str>, u32)> {
    // SAFETY: `frame` is a live frame object and the GIL is held.
    let line_now =
        || u32::try_from(unsafe { ffi::PyFrame_GetLineNumber(frame.as_ptr().cast()) }).unwrap_or(0);
    // A tracer (debugger, coverage) may have set the frame's line itself: ask the frame.
    let untraced = frame
        .getattr(pyo3::intern!(py, "f_trace"))
        .is_ok_and(|t| t.is_none());
    let offset: Option<i64> = untraced
        .then(|| frame.getattr(pyo3::intern!(py, "f_lasti")).ok()?.extract().ok())
        .flatten();
    let key = code.as_ptr() as usize;
    let found = CALLERS.with(|cell| {
        let mut callers = cell.try_borrow_mut().ok()?;
        if callers.len() >= MAX_CALLER_CODES && !callers.contains_key(&key) {
            callers.clear();
        }
        let entry = callers.entry(key).or_insert_with(|| CallerCode {
            file: file_of(py, &code),
            _code: code.clone().unbind(),
            lines: FxHashMap::default(),
        });
        let Some(file) = entry.file.clone() else {
            return Some(None);
        };
        let line = match offset {
            Some(offset) => *entry.lines.entry(offset).or_insert_with(line_now),
            None => line_now(),
        };
        Some(Some((file, line)))
    });
    // The table busy (not expected: nothing above runs Python code): found directly.
    found.unwrap_or_else(|| file_of(py, &code).map(|file| (file, line_now())))
}

/// The file of a caller's code, `None` for metile's frontend modules.
fn file_of(py: Python<'_>, code: &Bound<'_, PyAny>) -> Option<Arc<str>> {
    let name: String = code
        .getattr("co_filename")
        .and_then(|f| f.extract())
        .unwrap_or_else(|_| "<unknown>".to_string());
    (!metile_package_file(py, &name)).then(|| Arc::from(name))
}

impl Trace {
    /// Sets the builder's location to the innermost Python frame of user code:
    /// frames of metile's own Python package (the helpers the frontend's
    /// rewrite calls, such as `min` on tiles) stand for the line that called them.
    fn locate_caller(&mut self, py: Python<'_>) {
        // SAFETY: called with the GIL held (we have `py`); `PyEval_GetFrame`
        // returns a borrowed frame or null.
        let mut frame: Option<Bound<'_, PyAny>> = unsafe {
            let f = ffi::PyEval_GetFrame();
            (!f.is_null()).then(|| Bound::from_borrowed_ptr(py, f.cast()))
        };
        while let Some(f) = frame {
            // SAFETY: `f` is a live frame object; `PyFrame_GetCode` returns a
            // new reference, which `from_owned_ptr` takes over.
            let code = unsafe {
                let code =
                    ffi::PyFrame_GetCode(f.as_ptr().cast::<ffi::PyFrameObject>()) as *mut ffi::PyObject;
                if code.is_null() {
                    return;
                }
                Bound::from_owned_ptr(py, code)
            };
            if let Some((file, line)) = caller_line(py, &f, code) {
                self.builder.set_loc(Loc { file, line });
                return;
            }
            frame = f.getattr("f_back").ok().filter(|b| !b.is_none());
        }
    }

    /// A `metile.CompilationError` at the current location.
    pub fn error(&self, py: Python<'_>, message: &str) -> PyErr {
        compilation_error(py, message, self.builder.loc())
    }

    /// Runs a builder call, turning its error into a `metile.CompilationError`
    /// at the current location.
    pub fn ir<T>(&mut self, py: Python<'_>, call: impl FnOnce(&mut Builder) -> IrResult<T>) -> PyResult<T> {
        let result = call(&mut self.builder);
        result.map_err(|e| self.error(py, &e.0))
    }

    // ------------------------------------------------------------ proxies

    /// A proxy for `value`, defined in the innermost open region.
    pub fn wrap(&mut self, py: Python<'_>, value: ValueId) -> PyResult<Py<Tile>> {
        // A value keeps the region it was first proxied in: ops that return an
        // operand unchanged (a cast to its own dtype) must not move it inward.
        let index = value.index();
        if self.value_scope.len() <= index {
            self.value_scope.resize(index + 1, UNREGISTERED);
        }
        if self.value_scope[index] == UNREGISTERED {
            self.value_scope[index] = self.innermost_scope();
        }
        Py::new(py, Tile::new(self.id, value))
    }

    pub fn wrap_any(&mut self, py: Python<'_>, value: ValueId) -> PyResult<Py<PyAny>> {
        Ok(self.wrap(py, value)?.into_any())
    }

    fn innermost_scope(&self) -> ScopeId {
        self.open_scopes.last().copied().unwrap_or(ROOT_SCOPE)
    }

    /// The value behind a proxy, if it belongs to this trace and its region is still open.
    pub fn value_of(&self, py: Python<'_>, tile: &Tile) -> PyResult<ValueId> {
        if tile.trace_id != self.id {
            return Err(self.error(
                py,
                "this tile comes from another trace (a kernel traced earlier, or a tile kept in a \
                 global variable); tiles only exist while their kernel is being traced",
            ));
        }
        let scope = self
            .value_scope
            .get(tile.value.index())
            .copied()
            .unwrap_or(UNREGISTERED);
        if !self.open_scopes.contains(&scope) {
            return Err(self.error(
                py,
                "this tile was computed inside a region that has ended (a loop body, a branch of an \
                 `if` on a traced condition, or a `with metile.simdgroup_role(...)` block) and cannot \
                 be used outside it; assign the variable before the region so it is carried out of it",
            ));
        }
        Ok(tile.value)
    }

    pub fn ty(&self, v: ValueId) -> &Type {
        self.builder.ty(v)
    }

    // ------------------------------------------------------------ operands

    /// A builder operand for a proxy or a Python number (`what` names the
    /// argument for the error message).
    pub fn operand(&self, obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Operand> {
        let py = obj.py();
        if let Ok(tile) = obj.cast::<Tile>() {
            return Ok(Operand::Value(self.value_of(py, tile.get())?));
        }
        match python_number(obj) {
            Some(Ok(n)) => Ok(n),
            Some(Err(msg)) => Err(self.error(py, &format!("{what}: {msg}"))),
            None if obj.cast::<super::control::Undefined>().is_ok() => Err(self.error(
                py,
                &format!(
                    "{what} is a variable without a value: it is only assigned in a branch or loop \
                     that did not run while tracing"
                ),
            )),
            None => Err(self.error(
                py,
                &format!("{what} must be a tile or a number, got {}", describe_object(obj)),
            )),
        }
    }

    pub fn optional_operand(&self, obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Option<Operand>> {
        match obj {
            Some(o) if !o.is_none() => Ok(Some(self.operand(o, what)?)),
            _ => Ok(None),
        }
    }

    /// A compile-time integer (a Python int or a constexpr), refusing traced values.
    pub fn static_int(&self, obj: &Bound<'_, PyAny>, what: &str) -> PyResult<i64> {
        let py = obj.py();
        if obj.cast::<Tile>().is_ok() {
            return Err(self.error(
                py,
                &format!(
                    "{what} must be known when the kernel is compiled (a Python int or a \
                     metile.constexpr parameter), but it is a value computed at run time"
                ),
            ));
        }
        match python_number(obj) {
            Some(Ok(Operand::Int(i))) => Ok(i),
            Some(Err(msg)) => Err(self.error(py, &format!("{what}: {msg}"))),
            _ => Err(self.error(
                py,
                &format!("{what} must be an int, got {}", describe_object(obj)),
            )),
        }
    }

    /// A tile shape: an int or a tuple/list of compile-time ints.
    pub fn static_shape(&self, obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<usize>> {
        let py = obj.py();
        let dims: Vec<Bound<'_, PyAny>> = if python_number(obj).is_some() || obj.cast::<Tile>().is_ok() {
            vec![obj.clone()]
        } else if let Ok(seq) = obj.try_iter() {
            seq.collect::<PyResult<_>>()?
        } else {
            return Err(self.error(
                py,
                &format!("{what} must be a tuple of ints, got {}", describe_object(obj)),
            ));
        };
        dims.iter()
            .map(|d| {
                let n = self.static_int(d, what)?;
                usize::try_from(n)
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| self.error(py, &format!("{what}: dimensions must be positive, got {n}")))
            })
            .collect()
    }

    // ------------------------------------------------------------ regions

    /// Opens a region with block arguments of `arg_types`.
    pub fn push_region(&mut self, arg_types: &[Type]) -> Vec<ValueId> {
        let scope = self.next_scope;
        self.next_scope += 1;
        self.open_scopes.push(scope);
        self.builder.push_block(arg_types)
    }

    /// Closes the innermost region; its values stop being usable from Python.
    pub fn pop_region(&mut self, py: Python<'_>) -> PyResult<ClosedBlock> {
        let block = self.ir(py, |bld| bld.pop_block())?;
        let scope = self.open_scopes.pop().unwrap_or(ROOT_SCOPE);
        Ok(ClosedBlock { block, scope })
    }

    /// Reopens a region closed by [`Trace::pop_region`] to append to it.
    pub fn resume_region(&mut self, closed: ClosedBlock) {
        self.open_scopes.push(closed.scope);
        self.builder.resume_block(closed.block);
    }
}

/// A Python number as a weak literal operand: `None` when `obj` is not a
/// number, `Some(Err)` when it is one we cannot represent.
pub fn python_number(obj: &Bound<'_, PyAny>) -> Option<Result<Operand, String>> {
    if obj.is_exact_instance_of::<PyBool>() {
        return Some(Ok(Operand::Bool(obj.is_truthy().unwrap_or(false))));
    }
    if obj.is_instance_of::<PyInt>() {
        return Some(
            obj.extract::<i64>()
                .map(Operand::Int)
                .map_err(|_| format!("the integer {obj} does not fit in 64 bits")),
        );
    }
    if obj.is_instance_of::<PyFloat>() {
        return Some(Ok(Operand::Float(obj.extract::<f64>().unwrap_or(f64::NAN))));
    }
    // numpy scalars and other number-likes.
    if obj.hasattr("__index__").unwrap_or(false) && obj.cast::<Tile>().is_err() {
        return Some(
            obj.call_method0("__index__")
                .and_then(|i| i.extract::<i64>())
                .map(Operand::Int)
                .map_err(|_| format!("{obj} cannot be used as a 64-bit integer")),
        );
    }
    if obj.hasattr("__float__").unwrap_or(false) && obj.cast::<Tile>().is_err() {
        return Some(
            obj.call_method0("__float__")
                .and_then(|f| f.extract::<f64>())
                .map(Operand::Float)
                .map_err(|_| format!("{obj} cannot be used as a float")),
        );
    }
    None
}

/// `type 'name'` (with the value for short reprs), for error messages.
pub fn describe_object(obj: &Bound<'_, PyAny>) -> String {
    let type_name = obj
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_string());
    match obj.repr() {
        Ok(r) if r.to_string().len() <= 40 => format!("{r} (of type {type_name})"),
        _ => format!("a value of type {type_name}"),
    }
}

pub fn type_error(message: impl Into<String>) -> PyErr {
    PyTypeError::new_err(message.into())
}

/// A dtype argument: `"f32"`, `"float32"`, a dtype name constant, or anything
/// with a numpy-style `name`/`__name__` (`numpy.float32`, `numpy.dtype("f4")`).
pub fn dtype_arg(obj: &Bound<'_, PyAny>) -> Result<metile_ir::DType, String> {
    let text: Option<String> = obj.extract::<String>().ok().or_else(|| {
        ["name", "__name__"]
            .iter()
            .find_map(|attr| obj.getattr(*attr).ok()?.extract::<String>().ok())
    });
    text.as_deref().and_then(metile_ir::DType::parse).ok_or_else(|| {
        format!(
            "unknown dtype {}; use one of metile.bool_, int8, uint8, int16, uint16, int32, uint32, int64, \
             uint64, float16, bfloat16, float32, float64, float8e4nv, float8e5 (or their names: \"i32\", \"f32\", ...)",
            describe_object(obj)
        )
    })
}
