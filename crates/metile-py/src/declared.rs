//! Parameters whose annotation is a dtype (`X: metile.float8e4nv`,
//! `n: metile.int64`): the kernel says what the argument is.
//!
//! * A buffer must hold that dtype; for the fp8 types, a buffer of `uint8` (or
//!   `int8`) is taken as fp8 storage, byte for byte, so plain numpy arrays carry
//!   fp8 data without an fp8 dtype of their own.
//! * A Python `int` or `float` becomes a scalar of that dtype (integers must
//!   fit it; a float is rounded once to a float type); a bool needs `bool`; a
//!   numpy scalar must be of that dtype.

use crate::args::ArgKind;
use metile_interp::{KernelArg, ScalarValue};
use metile_ir::fp8::Fp8;
use metile_ir::DType;
use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt};

/// The declared dtype of each of `count` parameters, from their names (None: undeclared).
pub fn parse(names: Option<Vec<Option<String>>>, count: usize) -> PyResult<Vec<Option<DType>>> {
    let Some(names) = names else {
        return Ok(vec![None; count]);
    };
    if names.len() != count {
        return Err(PyValueError::new_err("params and dtypes differ in length"));
    }
    names
        .iter()
        .map(|n| match n {
            None => Ok(None),
            Some(n) => DType::parse(n)
                .map(Some)
                .ok_or_else(|| PyValueError::new_err(format!("unknown dtype {n:?}"))),
        })
        .collect()
}

/// The Triton-style name of a dtype, for messages (`metile.float8e4nv`).
fn language_name(d: DType) -> &'static str {
    match d {
        DType::Bool => "bool_",
        DType::I8 => "int8",
        DType::U8 => "uint8",
        DType::I16 => "int16",
        DType::U16 => "uint16",
        DType::I32 => "int32",
        DType::U32 => "uint32",
        DType::I64 => "int64",
        DType::U64 => "uint64",
        DType::F8E4M3 => "float8e4nv",
        DType::F8E5M2 => "float8e5",
        DType::F16 => "float16",
        DType::BF16 => "bfloat16",
        DType::F32 => "float32",
        DType::F64 => "float64",
    }
}

/// A buffer argument checked against (or, for fp8 storage, reinterpreted as)
/// the declared dtype.
pub fn pointer(
    declared: DType,
    (kind, arg): (ArgKind, KernelArg),
    what: &dyn Fn() -> String,
) -> PyResult<(ArgKind, KernelArg)> {
    let ArgKind::Pointer(found) = kind else {
        return Err(PyTypeError::new_err(format!(
            "{} is declared metile.{}, a buffer's dtype, but is a scalar",
            what(),
            language_name(declared)
        )));
    };
    if found == declared {
        return Ok((kind, arg));
    }
    let storage = declared.is_fp8() && matches!(found, DType::U8 | DType::I8);
    match arg {
        KernelArg::Buffer { ptr, len, .. } if storage => Ok((
            ArgKind::Pointer(declared),
            KernelArg::Buffer {
                ptr,
                len,
                dtype: declared,
            },
        )),
        _ => Err(PyTypeError::new_err(format!(
            "{} is declared metile.{} but is a buffer of {}{}",
            what(),
            language_name(declared),
            language_name(found),
            if declared.is_fp8() {
                "; pass uint8 storage or an array of that fp8 dtype"
            } else {
                ""
            }
        ))),
    }
}

/// `value` as a scalar of the integer dtype `d`, or an OverflowError.
fn int_scalar(value: i128, d: DType, what: &dyn Fn() -> String) -> PyResult<ScalarValue> {
    let overflow = || {
        PyOverflowError::new_err(format!(
            "{} = {value} does not fit its declared dtype metile.{}",
            what(),
            language_name(d)
        ))
    };
    Ok(match d {
        DType::I8 => ScalarValue::I8(i8::try_from(value).map_err(|_| overflow())?),
        DType::U8 => ScalarValue::U8(u8::try_from(value).map_err(|_| overflow())?),
        DType::I16 => ScalarValue::I16(i16::try_from(value).map_err(|_| overflow())?),
        DType::U16 => ScalarValue::U16(u16::try_from(value).map_err(|_| overflow())?),
        DType::I32 => ScalarValue::I32(i32::try_from(value).map_err(|_| overflow())?),
        DType::U32 => ScalarValue::U32(u32::try_from(value).map_err(|_| overflow())?),
        DType::I64 => ScalarValue::I64(i64::try_from(value).map_err(|_| overflow())?),
        _ => ScalarValue::U64(u64::try_from(value).map_err(|_| overflow())?),
    })
}

/// `x` rounded once to the float dtype `d`.
fn float_scalar(x: f64, d: DType) -> ScalarValue {
    match d {
        DType::F64 => ScalarValue::F64(x),
        DType::F16 => ScalarValue::F16(half::f16::from_f64(x)),
        DType::BF16 => ScalarValue::BF16(half::bf16::from_f64(x)),
        DType::F8E4M3 => ScalarValue::F8E4M3(Fp8::E4M3.encode(x)),
        DType::F8E5M2 => ScalarValue::F8E5M2(Fp8::E5M2.encode(x)),
        _ => ScalarValue::F32(x as f32),
    }
}

/// A Python number for a parameter declared `d`; `None` for other objects
/// (numpy scalars and the rest), whose own dtype is then checked by [`matches`].
pub fn python_scalar(
    obj: &Bound<'_, PyAny>,
    d: DType,
    what: &dyn Fn() -> String,
) -> PyResult<Option<(ArgKind, KernelArg)>> {
    let refuse = |found: &str| {
        Err(PyTypeError::new_err(format!(
            "{} is declared metile.{} but is {found}",
            what(),
            language_name(d)
        )))
    };
    let s = if obj.is_instance_of::<PyBool>() {
        if d != DType::Bool {
            return refuse("a bool");
        }
        ScalarValue::Bool(obj.extract()?)
    } else if obj.is_instance_of::<PyInt>() {
        let value: i128 = obj
            .extract()
            .map_err(|_| PyOverflowError::new_err(format!("{} = {obj} does not fit in 64 bits", what())))?;
        match d {
            d if d.is_int() => int_scalar(value, d, what)?,
            // An int converts to a float type exactly when it can, else rounds once.
            d if d.is_float() => float_scalar(value as f64, d),
            _ => return refuse("an int"),
        }
    } else if obj.is_instance_of::<PyFloat>() {
        if !d.is_float() {
            return refuse("a float");
        }
        float_scalar(obj.extract()?, d)
    } else {
        return Ok(None);
    };
    Ok(Some((ArgKind::Scalar(d), KernelArg::Scalar(s))))
}

/// Checks a converted scalar argument (a numpy scalar) against the declared dtype.
pub fn matches(
    declared: DType,
    (kind, arg): (ArgKind, KernelArg),
    what: &dyn Fn() -> String,
) -> PyResult<(ArgKind, KernelArg)> {
    match kind {
        ArgKind::Pointer(_) => pointer(declared, (kind, arg), what),
        ArgKind::Scalar(d) | ArgKind::DivisibleScalar(d, _) | ArgKind::One(d) if d == declared => {
            Ok((kind, arg))
        }
        ArgKind::Scalar(d) | ArgKind::DivisibleScalar(d, _) | ArgKind::One(d) => {
            Err(PyTypeError::new_err(format!(
                "{} is declared metile.{} but is a {} scalar",
                what(),
                language_name(declared),
                language_name(d)
            )))
        }
    }
}
