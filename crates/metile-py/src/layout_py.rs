//! Python bindings for `metile_layout`, exposed as `metile.layout`.
//!
//! Shapes, strides and coordinates cross the boundary as Python ints and
//! (nested) tuples; lists are accepted on input too. Every `LayoutError`
//! becomes a `ValueError` carrying the same message.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use metile_layout as ml;
use pyo3::exceptions::{PyIndexError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyList, PyModule, PyTuple};
use pyo3::IntoPyObjectExt;

fn layout_error(error: ml::LayoutError) -> PyErr {
    PyValueError::new_err(error.to_string())
}

/// Deepest tuple nesting accepted from Python, matching the text parser.
const MAX_NESTING: usize = 64;

fn int_tuple_from_py(obj: &Bound<'_, PyAny>) -> PyResult<ml::IntTuple> {
    int_tuple_at_depth(obj, 0)
}

fn int_tuple_at_depth(obj: &Bound<'_, PyAny>, depth: usize) -> PyResult<ml::IntTuple> {
    let elements: Option<Vec<Bound<'_, PyAny>>> = if let Ok(tuple) = obj.cast::<PyTuple>() {
        Some(tuple.iter().collect())
    } else if let Ok(list) = obj.cast::<PyList>() {
        Some(list.iter().collect())
    } else {
        None
    };
    if let Some(items) = elements {
        if depth >= MAX_NESTING {
            return Err(PyValueError::new_err(format!(
                "tuples nested deeper than {MAX_NESTING} levels"
            )));
        }
        return items
            .iter()
            .map(|item| int_tuple_at_depth(item, depth + 1))
            .collect::<PyResult<Vec<_>>>()
            .map(ml::IntTuple::Tuple);
    }
    if obj.is_instance_of::<PyInt>() {
        // Out-of-range ints raise OverflowError from here, which is accurate.
        return obj.extract::<i64>().map(ml::IntTuple::Int);
    }
    let type_name = obj
        .get_type()
        .name()
        .map(|name| name.to_string())
        .unwrap_or_else(|_| "?".to_string());
    Err(PyTypeError::new_err(format!(
        "expected an int or a (nested) tuple of ints, got {type_name}"
    )))
}

fn int_tuple_to_py(py: Python<'_>, value: &ml::IntTuple) -> PyResult<Py<PyAny>> {
    match value {
        ml::IntTuple::Int(v) => v.into_py_any(py),
        ml::IntTuple::Tuple(elements) => {
            let items = elements
                .iter()
                .map(|e| int_tuple_to_py(py, e))
                .collect::<PyResult<Vec<_>>>()?;
            PyTuple::new(py, items)?.into_py_any(py)
        }
    }
}

/// A coordinate given as `f(c)` or `f(c0, c1, ...)`.
fn coordinate_from_args(args: &Bound<'_, PyTuple>) -> PyResult<ml::IntTuple> {
    match args.len() {
        0 => Err(PyTypeError::new_err("expected an index or a coordinate")),
        1 => int_tuple_from_py(&args.get_item(0)?),
        _ => int_tuple_from_py(args.as_any()),
    }
}

fn eval_at(layout: &ml::Layout, coord: &ml::IntTuple) -> Result<i64, ml::LayoutError> {
    match coord {
        ml::IntTuple::Int(index) => layout.eval(*index),
        _ => layout.eval_coord(coord),
    }
}

fn hash_of(value: &impl Hash) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

/// A CuTe layout `shape:stride`: a function from coordinates to offsets.
///
/// `Layout(shape, stride=None)` takes ints or nested tuples; without a
/// stride the layout is compact column-major (first mode fastest).
#[pyclass(name = "Layout", module = "metile.layout", frozen)]
#[derive(Clone)]
pub struct PyLayout {
    inner: ml::Layout,
}

impl From<ml::Layout> for PyLayout {
    fn from(inner: ml::Layout) -> Self {
        PyLayout { inner }
    }
}

#[pymethods]
impl PyLayout {
    #[new]
    #[pyo3(signature = (shape, stride=None))]
    fn new(shape: &Bound<'_, PyAny>, stride: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let shape = int_tuple_from_py(shape)?;
        let layout = match stride {
            Some(stride) => ml::Layout::new(shape, int_tuple_from_py(stride)?),
            None => ml::Layout::column_major(shape),
        };
        layout.map(PyLayout::from).map_err(layout_error)
    }

    /// Parses CuTe notation such as `"((2,2),3):((24,2),8)"` or `"(4,8)"`.
    #[staticmethod]
    fn parse(text: &str) -> PyResult<Self> {
        ml::Layout::parse(text).map(PyLayout::from).map_err(layout_error)
    }

    /// The compact layout of `shape` with the last mode fastest.
    #[staticmethod]
    fn row_major(shape: &Bound<'_, PyAny>) -> PyResult<Self> {
        row_major(shape)
    }

    /// The compact layout of `shape` with the first mode fastest.
    #[staticmethod]
    fn column_major(shape: &Bound<'_, PyAny>) -> PyResult<Self> {
        column_major(shape)
    }

    /// `layout(i)` for a linear index in `[0, size)`, or `layout(coord)` /
    /// `layout(c0, c1, ...)` for a coordinate of any compatible nesting.
    #[pyo3(signature = (*coord))]
    fn __call__(&self, coord: &Bound<'_, PyTuple>) -> PyResult<i64> {
        eval_at(&self.inner, &coordinate_from_args(coord)?).map_err(layout_error)
    }

    fn size(&self) -> i64 {
        self.inner.size()
    }

    fn cosize(&self) -> i64 {
        self.inner.cosize()
    }

    fn rank(&self) -> usize {
        self.inner.rank()
    }

    fn depth(&self) -> usize {
        self.inner.depth()
    }

    #[getter]
    fn shape(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        int_tuple_to_py(py, self.inner.shape())
    }

    #[getter]
    fn stride(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        int_tuple_to_py(py, self.inner.stride())
    }

    /// The top-level mode `mode` (negative counts from the end). A scalar
    /// layout is its own mode 0. Raises IndexError past the rank.
    fn __getitem__(&self, mode: isize) -> PyResult<Self> {
        let rank = self.inner.rank();
        let index = if mode < 0 { mode + rank as isize } else { mode };
        usize::try_from(index)
            .ok()
            .filter(|&i| i < rank)
            .and_then(|i| self.inner.mode(i).ok())
            .map(PyLayout::from)
            .ok_or_else(|| {
                PyIndexError::new_err(format!(
                    "mode {mode} out of range for rank-{rank} layout {}",
                    self.inner
                ))
            })
    }

    /// The sub-layout at a mode path, e.g. `layout.sub_layout((1, 0))`.
    fn sub_layout(&self, path: Vec<usize>) -> PyResult<Self> {
        self.inner
            .sub_layout(&path)
            .map(PyLayout::from)
            .map_err(layout_error)
    }

    /// The top-level modes as a list of layouts.
    fn modes(&self) -> Vec<Self> {
        self.inner.modes().into_iter().map(PyLayout::from).collect()
    }

    /// All leaves as one flat tuple of modes.
    fn flatten(&self) -> Self {
        self.inner.flatten().into()
    }

    fn __str__(&self) -> String {
        self.inner.to_string()
    }

    fn __repr__(&self) -> String {
        self.inner.to_string()
    }

    fn __eq__(&self, other: PyRef<'_, Self>) -> bool {
        self.inner == other.inner
    }

    fn __hash__(&self) -> u64 {
        hash_of(&self.inner)
    }
}

/// CuTe's `Swizzle<B, M, S>`: `x ^ ((x & yyy_mask) >> S)`, a bijection that
/// keeps the low `M` bits.
#[pyclass(name = "Swizzle", module = "metile.layout", frozen)]
#[derive(Clone)]
pub struct PySwizzle {
    inner: ml::Swizzle,
}

#[pymethods]
impl PySwizzle {
    #[new]
    fn new(b: i64, m: i64, s: i64) -> PyResult<Self> {
        ml::Swizzle::new(b, m, s)
            .map(|inner| PySwizzle { inner })
            .map_err(layout_error)
    }

    fn __call__(&self, offset: i64) -> i64 {
        self.inner.apply(offset)
    }

    #[getter]
    fn bits(&self) -> i64 {
        self.inner.bits()
    }

    #[getter]
    fn base(&self) -> i64 {
        self.inner.base()
    }

    #[getter]
    fn shift(&self) -> i64 {
        self.inner.shift()
    }

    fn __str__(&self) -> String {
        self.inner.to_string()
    }

    fn __repr__(&self) -> String {
        self.inner.to_string()
    }

    fn __eq__(&self, other: PyRef<'_, Self>) -> bool {
        self.inner == other.inner
    }

    fn __hash__(&self) -> u64 {
        hash_of(&self.inner)
    }
}

/// `swizzle o offset o layout`: evaluates `swizzle(offset + layout(i))`.
#[pyclass(name = "SwizzledLayout", module = "metile.layout", frozen)]
#[derive(Clone)]
pub struct PySwizzledLayout {
    inner: ml::SwizzledLayout,
}

#[pymethods]
impl PySwizzledLayout {
    #[new]
    #[pyo3(signature = (swizzle, layout, offset=0))]
    fn new(swizzle: PyRef<'_, PySwizzle>, layout: PyRef<'_, PyLayout>, offset: i64) -> Self {
        PySwizzledLayout {
            inner: ml::SwizzledLayout::new(swizzle.inner, offset, layout.inner.clone()),
        }
    }

    #[pyo3(signature = (*coord))]
    fn __call__(&self, coord: &Bound<'_, PyTuple>) -> PyResult<i64> {
        let coord = coordinate_from_args(coord)?;
        match coord {
            ml::IntTuple::Int(index) => self.inner.eval(index),
            _ => self.inner.eval_coord(&coord),
        }
        .map_err(layout_error)
    }

    fn size(&self) -> i64 {
        self.inner.size()
    }

    #[getter]
    fn swizzle(&self) -> PySwizzle {
        PySwizzle {
            inner: self.inner.swizzle(),
        }
    }

    #[getter]
    fn layout(&self) -> PyLayout {
        self.inner.layout().clone().into()
    }

    #[getter]
    fn offset(&self) -> i64 {
        self.inner.offset()
    }

    fn __str__(&self) -> String {
        self.inner.to_string()
    }

    fn __repr__(&self) -> String {
        self.inner.to_string()
    }

    fn __eq__(&self, other: PyRef<'_, Self>) -> bool {
        self.inner == other.inner
    }

    fn __hash__(&self) -> u64 {
        hash_of(&self.inner)
    }
}

/// A tiler from Python: a `Layout`, an int `n` (the layout `n:1`), or a
/// tuple/list of tilers applied mode by mode.
fn tiler_from_py(obj: &Bound<'_, PyAny>) -> PyResult<ml::Tiler> {
    tiler_at_depth(obj, 0)
}

fn tiler_at_depth(obj: &Bound<'_, PyAny>, depth: usize) -> PyResult<ml::Tiler> {
    if let Ok(layout) = obj.cast::<PyLayout>() {
        return Ok(ml::Tiler::Layout(layout.get().inner.clone()));
    }
    let elements: Option<Vec<Bound<'_, PyAny>>> = if let Ok(tuple) = obj.cast::<PyTuple>() {
        Some(tuple.iter().collect())
    } else if let Ok(list) = obj.cast::<PyList>() {
        Some(list.iter().collect())
    } else {
        None
    };
    match elements {
        Some(items) if items.is_empty() => Err(PyValueError::new_err("a tiler needs at least one mode")),
        Some(_) if depth >= MAX_NESTING => Err(PyValueError::new_err(format!(
            "tilers nested deeper than {MAX_NESTING} levels"
        ))),
        Some(items) => items
            .iter()
            .map(|item| tiler_at_depth(item, depth + 1))
            .collect::<PyResult<Vec<_>>>()
            .map(ml::Tiler::Modes),
        None => {
            let extent = int_tuple_from_py(obj)?;
            ml::Tiler::from_shape(&extent).map_err(layout_error)
        }
    }
}

fn layout_result(result: Result<ml::Layout, ml::LayoutError>) -> PyResult<PyLayout> {
    result.map(PyLayout::from).map_err(layout_error)
}

/// The compact layout of `shape` with the last mode fastest.
#[pyfunction]
fn row_major(shape: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
    layout_result(ml::Layout::row_major(int_tuple_from_py(shape)?))
}

/// The compact layout of `shape` with the first mode fastest (CuTe's default).
#[pyfunction]
fn column_major(shape: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
    layout_result(ml::Layout::column_major(int_tuple_from_py(shape)?))
}

/// Simplifies a layout without changing it as a function of the linear
/// index. With `profile` (e.g. `(1, 1)`), coalesces each mode separately.
#[pyfunction]
#[pyo3(signature = (layout, profile=None))]
fn coalesce(layout: PyRef<'_, PyLayout>, profile: Option<&Bound<'_, PyAny>>) -> PyResult<PyLayout> {
    layout_result(match profile {
        Some(profile) => ml::coalesce_by_mode(&layout.inner, &int_tuple_from_py(profile)?),
        None => ml::coalesce(&layout.inner),
    })
}

/// `coalesce` after dropping stride-0 modes. With `profile`, by mode.
#[pyfunction]
#[pyo3(signature = (layout, profile=None))]
fn filter(layout: PyRef<'_, PyLayout>, profile: Option<&Bound<'_, PyAny>>) -> PyResult<PyLayout> {
    layout_result(match profile {
        Some(profile) => ml::filter_by_mode(&layout.inner, &int_tuple_from_py(profile)?),
        None => ml::filter(&layout.inner),
    })
}

/// `lhs o rhs`. `lhs` is a Layout, a Swizzle or a SwizzledLayout; `rhs` is
/// a Layout, an int, or a tuple of tilers applied mode by mode. A Swizzle on
/// the left needs a Layout on the right and gives a SwizzledLayout.
#[pyfunction]
fn composition(py: Python<'_>, lhs: &Bound<'_, PyAny>, rhs: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    if let Ok(swizzle) = lhs.cast::<PySwizzle>() {
        let layout = rhs
            .cast::<PyLayout>()
            .map_err(|_| PyTypeError::new_err("composition(Swizzle, x) needs a Layout as x"))?;
        let inner = swizzle.get().inner.compose(layout.get().inner.clone());
        return PySwizzledLayout { inner }.into_py_any(py);
    }
    let tiler = tiler_from_py(rhs)?;
    if let Ok(swizzled) = lhs.cast::<PySwizzledLayout>() {
        let inner = swizzled.get().inner.compose(tiler).map_err(layout_error)?;
        return PySwizzledLayout { inner }.into_py_any(py);
    }
    let layout = lhs.cast::<PyLayout>().map_err(|_| {
        PyTypeError::new_err("composition needs a Layout, Swizzle or SwizzledLayout on the left")
    })?;
    layout_result(ml::composition(&layout.get().inner, tiler))?.into_py_any(py)
}

/// The layout of the offsets `layout` does not reach, up to `cotarget`.
#[pyfunction]
fn complement(layout: PyRef<'_, PyLayout>, cotarget: i64) -> PyResult<PyLayout> {
    layout_result(ml::complement(&layout.inner, cotarget))
}

/// `R` with `layout(R(i)) == i` for `i < R.size()`.
#[pyfunction]
fn right_inverse(layout: PyRef<'_, PyLayout>) -> PyResult<PyLayout> {
    layout_result(ml::right_inverse(&layout.inner))
}

/// `R` with `R(layout(i)) == i` for an injective `layout`.
#[pyfunction]
fn left_inverse(layout: PyRef<'_, PyLayout>) -> PyResult<PyLayout> {
    layout_result(ml::left_inverse(&layout.inner))
}

/// `layout o (tiler, complement(tiler, size(layout)))`: (tile, rest).
#[pyfunction]
fn logical_divide(layout: PyRef<'_, PyLayout>, tiler: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
    layout_result(ml::logical_divide(&layout.inner, tiler_from_py(tiler)?))
}

/// `logical_divide` regrouped as `((tiles...), (rests..., untiled...))`.
#[pyfunction]
fn zipped_divide(layout: PyRef<'_, PyLayout>, tiler: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
    layout_result(ml::zipped_divide(&layout.inner, tiler_from_py(tiler)?))
}

/// `zipped_divide` with the rest mode unpacked.
#[pyfunction]
fn tiled_divide(layout: PyRef<'_, PyLayout>, tiler: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
    layout_result(ml::tiled_divide(&layout.inner, tiler_from_py(tiler)?))
}

/// `zipped_divide` with both modes unpacked.
#[pyfunction]
fn flat_divide(layout: PyRef<'_, PyLayout>, tiler: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
    layout_result(ml::flat_divide(&layout.inner, tiler_from_py(tiler)?))
}

/// `(block, complement(block, size(block)*cosize(tiler)) o tiler)`.
#[pyfunction]
fn logical_product(block: PyRef<'_, PyLayout>, tiler: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
    layout_result(ml::logical_product(&block.inner, tiler_from_py(tiler)?))
}

/// `block` repeated as contiguous blocks over `arrangement`, mode by mode.
#[pyfunction]
fn blocked_product(block: PyRef<'_, PyLayout>, arrangement: PyRef<'_, PyLayout>) -> PyResult<PyLayout> {
    layout_result(ml::blocked_product(&block.inner, &arrangement.inner))
}

/// `block` interleaved (cyclically) over `arrangement`, mode by mode.
#[pyfunction]
fn raked_product(block: PyRef<'_, PyLayout>, arrangement: PyRef<'_, PyLayout>) -> PyResult<PyLayout> {
    layout_result(ml::raked_product(&block.inner, &arrangement.inner))
}

/// How many leading elements `a` and `b` store identically and contiguously.
#[pyfunction]
fn max_common_vector(a: PyRef<'_, PyLayout>, b: PyRef<'_, PyLayout>) -> PyResult<i64> {
    ml::max_common_vector(&a.inner, &b.inner).map_err(layout_error)
}

/// The natural (fully nested) coordinate of `coord` within `shape`.
#[pyfunction]
fn idx2crd(py: Python<'_>, coord: &Bound<'_, PyAny>, shape: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    let natural =
        ml::idx2crd(&int_tuple_from_py(coord)?, &int_tuple_from_py(shape)?).map_err(layout_error)?;
    int_tuple_to_py(py, &natural)
}

/// The offset of `coord` within `shape` under `stride`.
#[pyfunction]
fn crd2idx(coord: &Bound<'_, PyAny>, shape: &Bound<'_, PyAny>, stride: &Bound<'_, PyAny>) -> PyResult<i64> {
    ml::crd2idx(
        &int_tuple_from_py(coord)?,
        &int_tuple_from_py(shape)?,
        &int_tuple_from_py(stride)?,
    )
    .map_err(layout_error)
}

/// Adds the layout algebra to `m` (the `metile._metile.layout` submodule).
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyLayout>()?;
    m.add_class::<PySwizzle>()?;
    m.add_class::<PySwizzledLayout>()?;
    m.add_function(wrap_pyfunction!(row_major, m)?)?;
    m.add_function(wrap_pyfunction!(column_major, m)?)?;
    m.add_function(wrap_pyfunction!(coalesce, m)?)?;
    m.add_function(wrap_pyfunction!(filter, m)?)?;
    m.add_function(wrap_pyfunction!(composition, m)?)?;
    m.add_function(wrap_pyfunction!(complement, m)?)?;
    m.add_function(wrap_pyfunction!(right_inverse, m)?)?;
    m.add_function(wrap_pyfunction!(left_inverse, m)?)?;
    m.add_function(wrap_pyfunction!(logical_divide, m)?)?;
    m.add_function(wrap_pyfunction!(zipped_divide, m)?)?;
    m.add_function(wrap_pyfunction!(tiled_divide, m)?)?;
    m.add_function(wrap_pyfunction!(flat_divide, m)?)?;
    m.add_function(wrap_pyfunction!(logical_product, m)?)?;
    m.add_function(wrap_pyfunction!(blocked_product, m)?)?;
    m.add_function(wrap_pyfunction!(raked_product, m)?)?;
    m.add_function(wrap_pyfunction!(max_common_vector, m)?)?;
    m.add_function(wrap_pyfunction!(idx2crd, m)?)?;
    m.add_function(wrap_pyfunction!(crd2idx, m)?)?;
    Ok(())
}
