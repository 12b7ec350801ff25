//! meTile runtime: the device interface and its backends, compiled-kernel launch.

pub mod aot;
pub mod cpu;
pub mod cuda;
pub mod debug;
pub mod device;
pub mod disk_cache;
pub mod emu_profiling;
pub mod error;
pub mod interrupt;
pub mod launch_plan;
#[cfg(any(target_os = "macos", metile_metal_check))]
pub mod metal;
pub mod msl_emu;
pub mod msl_emu_device;
pub mod msl_launch;
pub mod notices;
pub mod shared_memory;
pub mod stream;
pub mod workspace;

pub use device::{
    check_grid, default_device_name, grid_is_empty, open_device, open_device_with, CompileOptions,
    CompiledKernel, Device, DeviceAllocation, DeviceMemory, Fence, HostTools, KernelResources, Prebuilt,
    DEVICE_NAMES,
};
pub use error::RuntimeError;
pub use metile_interp::{KernelArg, ScalarValue};
pub use stream::{launch_stream, LaunchStream};
pub use workspace::{Workspace, WorkspacePool};
