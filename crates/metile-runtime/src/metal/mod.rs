//! probe
use objc2_metal::MTLCreateSystemDefaultDevice;
pub fn probe() -> bool { MTLCreateSystemDefaultDevice().is_some() }
