//! meTile runtime: devices, buffers, kernel caches and launch.

pub mod msl_emu;
