//! The on-disk cache of the frontend's rewritten kernel code (`metile._frontend.code_cache`):
//! the compiled Python code of a kernel's or helper's rewrite, keyed by everything it is made
//! from, so that a later process skips the parse and the rewrite passes. The runtime's
//! [`DiskCache`] keeps it: a private folder, entries checked against their key and checksum.

use std::borrow::Cow;

use metile_runtime::disk_cache::{cache_key, DiskCache};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::bench::COMPILER_VERSION;
use crate::device_state::show_runtime_warnings;

const REWRITE_CACHE: &str = "rewrite";

fn rewrite_key(parts: &[Bound<'_, PyBytes>]) -> String {
    let mut all: Vec<&[u8]> = vec![COMPILER_VERSION.as_bytes(), REWRITE_CACHE.as_bytes()];
    all.extend(parts.iter().map(|p| p.as_bytes()));
    cache_key(&all)
}

/// The entry stored for `parts`, or `None` when absent, corrupt (then removed)
/// or when the cache is off.
#[pyfunction]
pub fn rewrite_cache_get(
    py: Python<'_>,
    parts: Vec<Bound<'_, PyBytes>>,
) -> PyResult<Option<Cow<'static, [u8]>>> {
    let key = rewrite_key(&parts);
    let cache = DiskCache::open(REWRITE_CACHE);
    show_runtime_warnings(py)?;
    Ok(cache.get(&key).map(Cow::Owned))
}

/// Stores `entry` for `parts`; whether it was written (a cache that cannot be
/// written only costs the rewrite again in the next process).
#[pyfunction]
pub fn rewrite_cache_put(py: Python<'_>, parts: Vec<Bound<'_, PyBytes>>, entry: &[u8]) -> PyResult<bool> {
    let key = rewrite_key(&parts);
    let cache = DiskCache::open(REWRITE_CACHE);
    show_runtime_warnings(py)?;
    Ok(cache.put(&key, entry).is_ok())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(rewrite_cache_get, m)?)?;
    m.add_function(wrap_pyfunction!(rewrite_cache_put, m)?)?;
    Ok(())
}
