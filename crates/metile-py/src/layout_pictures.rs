//! `METILE_DEBUG=layouts`: after a kernel compiles, one SVG per tile value
//! that lives in registers, showing which thread holds which element (drawn by
//! `metile._layout_draw`; docs/layouts.md). The layouts are those of the
//! launch's device target; the cpu backend, which has no threads, shows the
//! default Apple target's.

use crate::errors::compilation_error;
use metile_compiler::compile;
use metile_ir::{Function, ValueId};
use metile_runtime::{CompileOptions, Device};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::collections::HashMap;
use std::sync::Arc;

/// Draws the register layouts of `func` as compiled for `device` when
/// `METILE_DEBUG` names `layouts`; does nothing otherwise.
pub fn draw_if_asked(
    py: Python<'_>,
    kernel: &str,
    func: &Function,
    options: &CompileOptions,
    device: &Arc<dyn Device>,
) -> PyResult<()> {
    if !metile_runtime::debug::debug_enabled("layouts") {
        return Ok(());
    }
    let target = device
        .compile_target(options)
        .unwrap_or_else(|| options.apple_arch.unwrap_or_default().target());
    let compile_options = metile_compiler::CompileOptions {
        num_sgs: options.num_sgs,
        passes: options.passes,
        keep_layouts: true,
        ..Default::default()
    };
    let compiled = py
        .detach(|| compile(func, &compile_options, &target))
        .map_err(|e| compilation_error(py, &format!("{}: {}", e.op, e.reason), &e.loc))?;
    let mut defined_by: HashMap<ValueId, (String, String)> = HashMap::new();
    func.walk(&mut |op| {
        for &r in &op.results {
            defined_by.insert(r, (op.kind.name().to_string(), op.loc.to_string()));
        }
    });
    let tiles = PyList::empty(py);
    for tile in &compiled.layouts {
        let layout = &tile.layout;
        let ty = func.ty(tile.value);
        let (op, line) = defined_by
            .get(&tile.value)
            .cloned()
            .unwrap_or_else(|| ("block_argument".to_string(), String::new()));
        let threads: Vec<i64> = (0..layout.threads()).map(|t| layout.thread_offset(t)).collect();
        let entry = PyDict::new(py);
        entry.set_item("value", tile.value.to_string())?;
        entry.set_item("op", op)?;
        entry.set_item("line", line)?;
        entry.set_item("shape", layout.shape().to_vec())?;
        entry.set_item("dtype", ty.dtype().map(|d| d.name()).unwrap_or("ptr"))?;
        entry.set_item("thread_base", layout.thread_base())?;
        entry.set_item("thread_offsets", threads)?;
        entry.set_item("value_offsets", layout.value_offsets().to_vec())?;
        tiles.append(entry)?;
    }
    py.import("metile._layout_draw")?
        .call_method1("write_kernel_layouts", (kernel, target.arch_name(), tiles))?;
    Ok(())
}
