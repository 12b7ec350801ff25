//! Exact keys for the Python values a kernel is specialised on: its constexpr
//! arguments and the globals and closure variables it reads.
//!
//! A key holds a value's type and its exact value, never a hash: `hash(-1) ==
//! hash(-2)` in CPython, ints beyond 64 bits hash modulo 2^61 - 1, and `4`,
//! `4.0` and `True` compare (and hash) equal in Python although a kernel traces
//! each differently. Functions, classes and modules are keyed by identity, and
//! the key holds a reference to them, so their address cannot be reused by
//! another object while the key lives. Anything else (arrays, lists, arbitrary
//! objects, whose contents can change under an unchanged identity) has no key.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyBytes, PyFloat, PyInt, PyModule, PyString, PyTuple, PyType};
use std::hash::{Hash, Hasher};

use crate::kernel::Kernel;

/// An object compared by identity (`is`), kept alive by the key.
pub struct Identity(Py<PyAny>);

impl Identity {
    fn of(obj: &Bound<'_, PyAny>) -> Identity {
        Identity(obj.clone().unbind())
    }

    fn address(&self) -> usize {
        self.0.as_ptr() as usize
    }
}

impl PartialEq for Identity {
    fn eq(&self, other: &Identity) -> bool {
        self.address() == other.address()
    }
}

impl Eq for Identity {}

impl Hash for Identity {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.address().hash(state);
    }
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Identity({:#x})", self.address())
    }
}

/// A value as it enters a specialisation key.
#[derive(Debug, PartialEq, Eq, Hash)]
pub enum ValueKey {
    None,
    /// A captured name that is not bound (an empty closure cell, a global not
    /// defined yet): binding it later selects another specialisation.
    Absent,
    Bool(bool),
    Int(i64),
    /// An int beyond 64 bits, by its decimal digits.
    BigInt(String),
    /// A float by its bits (so -0.0 and 0.0, and NaNs, stay apart).
    Float(u64),
    Str(String),
    /// A str that is not valid UTF-8 (lone surrogates), by its `surrogatepass` bytes.
    StrSurrogates(Vec<u8>),
    Tuple(Vec<ValueKey>),
    /// A numpy scalar: its dtype (`repr(dtype)`, byte order included) and its bytes.
    NumpyScalar(String, Vec<u8>),
    /// A numpy dtype object, by `repr(dtype)`.
    NumpyDtype(String),
    /// A value of a subclass of int, float, str or tuple (an `IntEnum` member, a
    /// named tuple): its class and its value as the base type.
    Subclass(Identity, Box<ValueKey>),
    /// A function, kernel, class, module or `Enum` member, by identity.
    Object(Identity),
}

/// Why a value has no key, for the caller's error message.
pub struct NoKey {
    pub type_name: String,
}

struct PythonTypes {
    function: Py<PyType>,
    builtin_function: Py<PyType>,
    module: Py<PyType>,
    enum_member: Py<PyType>,
    numpy_scalar: Option<Py<PyType>>,
    numpy_dtype: Option<Py<PyType>>,
    numpy_ufunc: Option<Py<PyType>>,
}

fn python_types(py: Python<'_>) -> PyResult<&PythonTypes> {
    static TYPES: PyOnceLock<PythonTypes> = PyOnceLock::new();
    TYPES.get_or_try_init(py, || {
        let types = py.import("types")?;
        let get = |module: &Bound<'_, PyModule>, name: &str| -> PyResult<Py<PyType>> {
            Ok(module.getattr(name)?.cast_into::<PyType>()?.unbind())
        };
        let numpy = py.import("numpy").ok();
        let numpy_type = |name: &str| numpy.as_ref().and_then(|np| get(np, name).ok());
        Ok(PythonTypes {
            function: get(&types, "FunctionType")?,
            builtin_function: get(&types, "BuiltinFunctionType")?,
            module: get(&types, "ModuleType")?,
            enum_member: get(&py.import("enum")?, "Enum")?,
            numpy_scalar: numpy_type("generic"),
            numpy_dtype: numpy_type("dtype"),
            numpy_ufunc: numpy_type("ufunc"),
        })
    })
}

/// `issubclass(ty, base)` by the type's MRO alone: no `__instancecheck__` call on
/// the launch path (a numpy scalar or dtype is one by its type).
fn subtype_of(ty: &Bound<'_, PyType>, base: &Option<Py<PyType>>) -> bool {
    base.as_ref().is_some_and(|base| {
        // SAFETY: both pointers are live type objects (held by `ty` and `base`).
        unsafe { pyo3::ffi::PyType_IsSubtype(ty.as_type_ptr(), base.bind(ty.py()).as_type_ptr()) != 0 }
    })
}

/// The exact key of `obj`, or why it has none (a Python error while reading
/// it is returned as such).
pub fn value_key(obj: &Bound<'_, PyAny>) -> PyResult<Result<ValueKey, NoKey>> {
    if obj.is_none() {
        return Ok(Ok(ValueKey::None));
    }
    // The exact built-in types first: the common case, and numpy's float64 and
    // str_ are subclasses of float and str that must keep their own type.
    if obj.is_exact_instance_of::<PyBool>() {
        return Ok(Ok(ValueKey::Bool(obj.is_truthy()?)));
    }
    if obj.is_exact_instance_of::<PyInt>() {
        return Ok(Ok(int_key(obj)?));
    }
    if obj.is_exact_instance_of::<PyFloat>() {
        return Ok(Ok(ValueKey::Float(obj.extract::<f64>()?.to_bits())));
    }
    if let Ok(s) = obj.cast_exact::<PyString>() {
        return Ok(Ok(str_key(s)?));
    }
    if let Ok(t) = obj.cast_exact::<PyTuple>() {
        return tuple_key(t);
    }
    let py = obj.py();
    let types = python_types(py)?;
    let ty = obj.get_type();
    // Functions and modules: the common captured names that are not values.
    if ty.is(types.function.bind(py))
        || ty.is(types.builtin_function.bind(py))
        || ty.is(types.module.bind(py))
    {
        return Ok(Ok(ValueKey::Object(Identity::of(obj))));
    }
    if subtype_of(&ty, &types.numpy_scalar) {
        let dtype = obj.getattr("dtype")?.repr()?.to_string();
        let bytes = obj.call_method0("tobytes")?;
        let bytes = bytes.cast::<PyBytes>()?.as_bytes().to_vec();
        return Ok(Ok(ValueKey::NumpyScalar(dtype, bytes)));
    }
    if subtype_of(&ty, &types.numpy_dtype) {
        return Ok(Ok(ValueKey::NumpyDtype(obj.repr()?.to_string())));
    }
    let base = if obj.is_instance_of::<PyInt>() {
        Some(Ok(int_key(obj)?))
    } else if obj.is_instance_of::<PyFloat>() {
        Some(Ok(ValueKey::Float(obj.extract::<f64>()?.to_bits())))
    } else if let Ok(s) = obj.cast::<PyString>() {
        Some(Ok(str_key(s)?))
    } else if let Ok(t) = obj.cast::<PyTuple>() {
        Some(tuple_key(t)?)
    } else {
        None
    };
    if let Some(base) = base {
        let class = Identity::of(obj.get_type().as_any());
        return Ok(base.map(|key| ValueKey::Subclass(class, Box::new(key))));
    }
    let by_identity = obj.is_instance_of::<PyType>()
        || obj.is_instance(types.function.bind(py))?
        || obj.is_instance(types.builtin_function.bind(py))?
        || obj.is_instance(types.module.bind(py))?
        || obj.is_instance(types.enum_member.bind(py))?
        || obj.cast::<Kernel>().is_ok()
        || subtype_of(&ty, &types.numpy_ufunc);
    if by_identity {
        return Ok(Ok(ValueKey::Object(Identity::of(obj))));
    }
    Ok(Err(NoKey {
        type_name: type_name(obj),
    }))
}

fn int_key(obj: &Bound<'_, PyAny>) -> PyResult<ValueKey> {
    Ok(match obj.extract::<i64>() {
        Ok(i) => ValueKey::Int(i),
        Err(_) => ValueKey::BigInt(obj.call_method0("__index__")?.str()?.to_string()),
    })
}

fn str_key(s: &Bound<'_, PyString>) -> PyResult<ValueKey> {
    if let Ok(text) = s.to_str() {
        return Ok(ValueKey::Str(text.to_string()));
    }
    let bytes = s.call_method1("encode", ("utf-8", "surrogatepass"))?;
    Ok(ValueKey::StrSurrogates(
        bytes.cast::<PyBytes>()?.as_bytes().to_vec(),
    ))
}

fn tuple_key(t: &Bound<'_, PyTuple>) -> PyResult<Result<ValueKey, NoKey>> {
    let mut items = Vec::with_capacity(t.len());
    for item in t.iter() {
        match value_key(&item)? {
            Ok(key) => items.push(key),
            Err(no) => return Ok(Err(no)),
        }
    }
    Ok(Ok(ValueKey::Tuple(items)))
}

/// `module.QualifiedName` of an object's type, for messages.
pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    let ty = obj.get_type();
    let name = ty
        .qualname()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_string());
    match ty.module().map(|m| m.to_string()) {
        Ok(module) if module != "builtins" => format!("{module}.{name}"),
        _ => name,
    }
}

/// The kinds of value that have a key, for error messages.
pub const KEYED_VALUES: &str = "None, bool, int, float, str, a tuple of these, a numpy scalar or dtype, \
     a metile dtype name such as metile.float16, an Enum member, a function, class or module";
