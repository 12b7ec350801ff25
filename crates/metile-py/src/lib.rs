//! The `metile._metile` extension module: tracing proxies, kernel objects and
//! launch, buffers, devices, exceptions and the layout algebra.

use pyo3::prelude::*;

mod aot;
pub mod args;
pub mod bench;
pub mod buffer;
mod captures;
mod compiled;
mod declared;
pub mod device_args;
pub mod device_state;
mod emu_profile;
pub mod errors;
pub mod kernel;
mod layout_pictures;
mod layout_py;
mod mlx;
mod placement;
mod portability;
mod rewrite_cache;
mod shared_buffer;
pub mod split_launch;
pub mod stages;
pub mod tracing;
mod value_key;

#[pymodule]
fn _metile(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("CompilationError", py.get_type::<errors::CompilationError>())?;
    m.add("MetileWarning", py.get_type::<errors::MetileWarning>())?;
    m.add_class::<buffer::Buffer>()?;
    m.add_class::<kernel::Kernel>()?;
    m.add_class::<kernel::Launcher>()?;
    m.add_class::<compiled::CompiledKernelInfo>()?;
    m.add_class::<compiled::KernelMetadata>()?;
    m.add_function(wrap_pyfunction!(device_state::set_device, m)?)?;
    m.add_function(wrap_pyfunction!(device_state::get_device, m)?)?;
    m.add_function(wrap_pyfunction!(device_state::synchronize, m)?)?;
    m.add_function(wrap_pyfunction!(device_state::device_available, m)?)?;
    stages::register(m)?;
    aot::register(m)?;
    m.add_function(wrap_pyfunction!(split_launch::split_k_py, m)?)?;
    bench::register(m)?;
    emu_profile::register(m)?;
    rewrite_cache::register(m)?;
    tracing::register(m)?;
    let layout = PyModule::new(py, "layout")?;
    layout_py::register(&layout)?;
    m.add_submodule(&layout)?;
    // Makes `import metile._metile.layout` work, which add_submodule alone does not.
    py.import("sys")?
        .getattr("modules")?
        .set_item("metile._metile.layout", &layout)?;
    Ok(())
}
