//! Memory that the host and a device address alike (Apple's unified memory),
//! which `metile.Buffer` uses so that `numpy()` is a view, not a copy.
//!
//! A backend hands out [`SharedMemory`] from `Device::allocate_shared`; at
//! launch it finds the allocation a buffer argument's pointer lies in with a
//! [`Registry`] (numpy slices of a Buffer point into its middle), and binds the
//! device object with the right offset.

use crate::error::RuntimeError;
use crate::msl_launch::BoundArg;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Host-visible memory owned by a device allocation; freed on drop.
pub trait SharedMemory: Send + Sync {
    /// The first byte; stays valid, and at the same address, while `self` lives.
    fn as_ptr(&self) -> *mut u8;
    /// Usable bytes from `as_ptr`.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The host's page size (16 KiB on Apple Silicon, usually 4 KiB elsewhere).
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).ok().filter(|&s| s > 0).unwrap_or(4096)
}

/// `bytes` rounded up to whole pages (at least one page).
pub fn page_rounded(bytes: usize) -> usize {
    let page = page_size();
    bytes.max(1).div_ceil(page) * page
}

/// Zero-filled, page-aligned anonymous memory.
pub struct HostPages {
    ptr: *mut u8,
    len: usize,
    mapped: usize,
}

// SAFETY: the pages are plain memory owned by this value; whoever writes through
// the pointer synchronises as with any shared buffer.
unsafe impl Send for HostPages {}
unsafe impl Sync for HostPages {}

impl HostPages {
    pub fn zeroed(len: usize) -> Result<HostPages, RuntimeError> {
        let mapped = page_rounded(len);
        // SAFETY: an anonymous private mapping with no address hint.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(RuntimeError::Device(format!(
                "cannot allocate a buffer of {len} bytes: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(HostPages {
            ptr: ptr.cast(),
            len,
            mapped,
        })
    }
}

impl SharedMemory for HostPages {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl Drop for HostPages {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `zeroed`.
        unsafe { libc::munmap(self.ptr.cast(), self.mapped) };
    }
}

/// Live allocations by address, each with the handle a backend binds.
pub struct Registry<H> {
    by_base: Mutex<BTreeMap<usize, (usize, H)>>,
}

impl<H: Clone> Default for Registry<H> {
    fn default() -> Self {
        Registry {
            by_base: Mutex::new(BTreeMap::new()),
        }
    }
}

impl<H: Clone> Registry<H> {
    pub fn insert(&self, base: *const u8, len: usize, handle: H) {
        if let Ok(mut map) = self.by_base.lock() {
            map.insert(base as usize, (len, handle));
        }
    }

    pub fn remove(&self, base: *const u8) {
        if let Ok(mut map) = self.by_base.lock() {
            map.remove(&(base as usize));
        }
    }

    /// The allocation that holds all of `ptr .. ptr + len`, and `ptr`'s offset in it.
    pub fn find(&self, ptr: *const u8, len: usize) -> Option<(H, usize)> {
        let map = self.by_base.lock().ok()?;
        let address = ptr as usize;
        let (&base, (size, handle)) = map.range(..=address).next_back()?;
        let offset = address - base;
        (offset.checked_add(len)? <= *size).then(|| (handle.clone(), offset))
    }
}

/// Where one buffer argument's memory lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BufferSource<H> {
    /// Inside a live shared allocation, at `offset` bytes.
    Shared { handle: H, offset: usize },
    /// Host memory no allocation owns: region `region` of the plan.
    Host { region: usize },
}

/// A stretch of host memory one or more arguments name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostRegion {
    pub ptr: *mut u8,
    pub len: usize,
    /// Some argument bound to it is written by the kernel.
    pub written: bool,
}

/// The memory behind each buffer argument of one launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BufferPlan<H> {
    /// `([[buffer(index)]], source)` for each buffer argument, in order.
    pub args: Vec<(usize, BufferSource<H>)>,
    pub host: Vec<HostRegion>,
}

/// Finds each buffer argument in `registry`, else gives it a host region.
/// Arguments naming the same host memory share one region (so a device that
/// copies host memory keeps them aliased); host arguments that overlap
/// without being the same array are refused, as a copy of each could not see
/// the other's writes.
pub fn plan_buffers<H: Clone>(
    kernel_name: &str,
    bound: &[BoundArg],
    registry: &Registry<H>,
) -> Result<BufferPlan<H>, RuntimeError> {
    let mut plan = BufferPlan {
        args: Vec::new(),
        host: Vec::new(),
    };
    for arg in bound {
        let BoundArg::Buffer {
            index,
            ptr,
            len_bytes,
            writable,
        } = *arg
        else {
            continue;
        };
        if let Some((handle, offset)) = registry.find(ptr, len_bytes) {
            plan.args.push((index, BufferSource::Shared { handle, offset }));
            continue;
        }
        if let Some(region) = plan.host.iter().position(|h| h.ptr == ptr && h.len == len_bytes) {
            plan.host[region].written |= writable;
            plan.args.push((index, BufferSource::Host { region }));
            continue;
        }
        let start = ptr as usize;
        let overlaps = |h: &&HostRegion| {
            let other = h.ptr as usize;
            len_bytes > 0 && h.len > 0 && start < other + h.len && other < start + len_bytes
        };
        if let Some(other) = plan.host.iter().find(overlaps) {
            return Err(RuntimeError::BadArguments(format!(
                "kernel `{kernel_name}`: argument {index} ({len_bytes} bytes at {start:#x}) overlaps another \
                 numpy argument ({} bytes at {:p}) without being the same array; this device copies such \
                 arrays one at a time, so pass one metile.Buffer and slices of its numpy() view",
                other.len, other.ptr
            )));
        }
        plan.args.push((
            index,
            BufferSource::Host {
                region: plan.host.len(),
            },
        ));
        plan.host.push(HostRegion {
            ptr,
            len: len_bytes,
            written: writable,
        });
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_pages_are_zeroed_page_aligned_and_writable() {
        let pages = HostPages::zeroed(10_000).unwrap();
        assert_eq!(pages.as_ptr() as usize % page_size(), 0);
        assert_eq!(pages.len(), 10_000);
        // SAFETY: the mapping holds at least len bytes.
        let bytes = unsafe { std::slice::from_raw_parts_mut(pages.as_ptr(), pages.len()) };
        assert!(bytes.iter().all(|&b| b == 0));
        bytes[9_999] = 7;
        assert_eq!(page_rounded(0), page_size());
        assert_eq!(page_rounded(page_size() + 1), 2 * page_size());
    }

    #[test]
    fn the_registry_finds_the_allocation_around_a_slice() {
        let registry = Registry::default();
        let a = [0u8; 64];
        let b = [0u8; 32];
        registry.insert(a.as_ptr(), 64, "a");
        registry.insert(b.as_ptr(), 32, "b");
        assert_eq!(registry.find(a.as_ptr(), 64), Some(("a", 0)));
        assert_eq!(registry.find(a[16..].as_ptr(), 48), Some(("a", 16)));
        assert_eq!(registry.find(a[16..].as_ptr(), 49), None, "runs past the end");
        assert_eq!(registry.find(b[31..].as_ptr(), 1), Some(("b", 31)));
        registry.remove(a.as_ptr());
        assert_eq!(registry.find(a.as_ptr(), 1), None);
        let elsewhere = [0u8; 4];
        assert_eq!(registry.find(elsewhere.as_ptr(), 4), None);
    }

    fn buffer(index: usize, ptr: *mut u8, len_bytes: usize, writable: bool) -> BoundArg {
        BoundArg::Buffer {
            index,
            ptr,
            len_bytes,
            writable,
        }
    }

    #[test]
    fn plans_bind_shared_slices_and_share_host_regions() {
        let mut shared = [0u8; 64];
        let mut host = [0u8; 32];
        let registry = Registry::default();
        registry.insert(shared.as_ptr(), 64, "mtl");
        let s = shared.as_mut_ptr();
        let h = host.as_mut_ptr();
        let bound = [
            buffer(0, h, 32, false),
            BoundArg::Scalar {
                index: 1,
                bytes: vec![1, 0, 0, 0],
            },
            buffer(2, s.wrapping_add(16), 48, true),
            buffer(3, h, 32, true),
        ];
        let plan = plan_buffers("k", &bound, &registry).unwrap();
        assert_eq!(
            plan.args,
            vec![
                (0, BufferSource::Host { region: 0 }),
                (
                    2,
                    BufferSource::Shared {
                        handle: "mtl",
                        offset: 16
                    }
                ),
                (3, BufferSource::Host { region: 0 }),
            ]
        );
        assert_eq!(
            plan.host,
            vec![HostRegion {
                ptr: h,
                len: 32,
                written: true
            }]
        );
    }

    #[test]
    fn plans_refuse_partly_overlapping_host_arguments() {
        let mut host = [0u8; 32];
        let h = host.as_mut_ptr();
        let registry: Registry<()> = Registry::default();
        let bound = [buffer(0, h, 32, false), buffer(1, h.wrapping_add(8), 8, true)];
        let err = plan_buffers("k", &bound, &registry).unwrap_err().to_string();
        assert!(
            err.starts_with("kernel `k`: argument 1 (8 bytes at ")
                && err.contains("overlaps another numpy argument (32 bytes at "),
            "{err}"
        );
        let empty = [buffer(0, h, 32, false), buffer(1, h.wrapping_add(8), 0, true)];
        assert_eq!(plan_buffers("k", &empty, &registry).unwrap().host.len(), 2);
    }
}
