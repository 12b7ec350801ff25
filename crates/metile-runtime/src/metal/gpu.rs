//! What meTile needs to know about the Apple GPU behind a Metal device, read
//! from the device itself: its name, the newest Apple GPU family it supports
//! (Apple10 brings Metal 4's `matmul2d`), and its threadgroup limits.

use crate::msl_launch::ThreadgroupLimits;
use objc2::runtime::ProtocolObject;
use objc2_metal::{MTLDevice, MTLGPUFamily};

/// The Apple figures of one Metal device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppleGpu {
    /// The device's name, e.g. "Apple M3 Max".
    pub name: String,
    /// The newest `MTLGPUFamilyAppleN` the device supports (7 for M1, 9 for M3/M4), 0 for none.
    pub apple_family: u32,
    /// Whether Metal 4 tensor ops (`matmul2d`) are available: Apple10 and later.
    pub has_matmul2d: bool,
    pub max_threadgroup_memory_bytes: usize,
    pub max_threads_per_threadgroup: u32,
}

/// The Apple GPU families, newest first, with their numbers.
const APPLE_FAMILIES: [(MTLGPUFamily, u32); 10] = [
    (MTLGPUFamily::Apple10, 10),
    (MTLGPUFamily::Apple9, 9),
    (MTLGPUFamily::Apple8, 8),
    (MTLGPUFamily::Apple7, 7),
    (MTLGPUFamily::Apple6, 6),
    (MTLGPUFamily::Apple5, 5),
    (MTLGPUFamily::Apple4, 4),
    (MTLGPUFamily::Apple3, 3),
    (MTLGPUFamily::Apple2, 2),
    (MTLGPUFamily::Apple1, 1),
];

impl AppleGpu {
    pub fn of(device: &ProtocolObject<dyn MTLDevice>) -> AppleGpu {
        let apple_family = APPLE_FAMILIES
            .iter()
            .find(|(family, _)| device.supportsFamily(*family))
            .map_or(0, |&(_, n)| n);
        let threads = device.maxThreadsPerThreadgroup();
        AppleGpu {
            name: device.name().to_string(),
            apple_family,
            has_matmul2d: apple_family >= 10,
            max_threadgroup_memory_bytes: device.maxThreadgroupMemoryLength(),
            max_threads_per_threadgroup: u32::try_from(threads.width).unwrap_or(u32::MAX),
        }
    }

    /// The family as it goes into cache keys and reports ("apple9").
    pub fn family_name(&self) -> String {
        format!("apple{}", self.apple_family)
    }

    /// The device's limits on one threadgroup, which every kernel is checked against.
    pub fn threadgroup_limits(&self) -> ThreadgroupLimits {
        ThreadgroupLimits {
            max_threads: self.max_threads_per_threadgroup,
            max_memory_bytes: self.max_threadgroup_memory_bytes,
        }
    }
}
