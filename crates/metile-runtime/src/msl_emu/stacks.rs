//! Per-worker memory for running threadgroups: fiber stacks (with a guard page
//! below each, so an overflowing fiber faults instead of corrupting its
//! neighbour), the scheduler's scratch area and threadgroup memory. Allocated
//! once per worker thread and reused by every launch of every kernel.

use super::EmuError;
use std::cell::RefCell;

/// Usable stack per fiber.
pub(crate) const FIBER_STACK_BYTES: usize = 64 * 1024;

/// Memory of one worker thread; grows to the largest launch it has served.
pub(crate) struct WorkerMemory {
    pub stacks: FiberStacks,
    pub scratch: AlignedBuffer,
    pub threadgroup: AlignedBuffer,
}

thread_local! {
    static WORKER_MEMORY: RefCell<Option<WorkerMemory>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's worker memory, sized for the request.
pub(crate) fn with_worker_memory<R>(
    fibers: usize,
    scratch_bytes: usize,
    threadgroup_bytes: usize,
    f: impl FnOnce(&mut WorkerMemory) -> Result<R, EmuError>,
) -> Result<R, EmuError> {
    WORKER_MEMORY.with(|cell| {
        let mut slot = cell
            .try_borrow_mut()
            .map_err(|_| EmuError::BadLaunch("re-entrant launch on one worker thread".into()))?;
        if slot.as_ref().is_none_or(|m| m.stacks.count < fibers) {
            // Allocate for a full 1024-thread group at once: it is only address space until touched.
            let count = fibers.max(super::kernel::MAX_THREADS_PER_GROUP as usize);
            *slot = Some(WorkerMemory {
                stacks: FiberStacks::new(count)?,
                scratch: AlignedBuffer::default(),
                threadgroup: AlignedBuffer::default(),
            });
        }
        let memory = slot
            .as_mut()
            .ok_or_else(|| EmuError::BadLaunch("worker memory missing".into()))?;
        memory.scratch.ensure(scratch_bytes);
        memory.threadgroup.ensure(threadgroup_bytes);
        f(memory)
    })
}

/// A heap buffer aligned to 64 bytes.
#[derive(Default)]
pub(crate) struct AlignedBuffer {
    blocks: Vec<Block>,
}

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Block([u8; 64]);

impl AlignedBuffer {
    fn ensure(&mut self, bytes: usize) {
        let blocks = bytes.div_ceil(64);
        if self.blocks.len() < blocks {
            self.blocks.resize(blocks, Block([0; 64]));
        }
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.blocks.as_mut_ptr().cast()
    }

    pub fn len(&self) -> usize {
        self.blocks.len() * 64
    }
}

/// `count` fiber stacks, each `stride` bytes: a guard page then the usable stack.
pub(crate) struct FiberStacks {
    base: *mut u8,
    total: usize,
    pub stride: usize,
    pub count: usize,
}

// The stacks are plain memory owned by one worker at a time.
unsafe impl Send for FiberStacks {}

impl FiberStacks {
    pub fn base(&self) -> *mut u8 {
        self.base
    }

    #[cfg(unix)]
    fn new(count: usize) -> Result<Self, EmuError> {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .unwrap_or(4096)
            .max(4096);
        let stride = FIBER_STACK_BYTES.div_ceil(page) * page + page;
        let total = stride
            .checked_mul(count)
            .ok_or_else(|| EmuError::BadLaunch("fiber stack size overflows".into()))?;
        // SAFETY: anonymous private mapping; the result is checked below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANON | MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(EmuError::io(
                "reserving fiber stacks",
                std::io::Error::last_os_error(),
            ));
        }
        let base = base.cast::<u8>();
        for i in 0..count {
            // SAFETY: the guard page lies inside the mapping made above.
            let rc = unsafe { libc::mprotect(base.add(i * stride).cast(), page, libc::PROT_NONE) };
            if rc != 0 {
                let err = std::io::Error::last_os_error();
                // SAFETY: unmapping exactly the mapping made above.
                unsafe { libc::munmap(base.cast(), total) };
                return Err(EmuError::io("protecting fiber stack guard pages", err));
            }
        }
        Ok(FiberStacks {
            base,
            total,
            stride,
            count,
        })
    }

    #[cfg(not(unix))]
    fn new(count: usize) -> Result<Self, EmuError> {
        let _ = count;
        Err(EmuError::BadLaunch("the MSL emulator needs a Unix host".into()))
    }
}

#[cfg(target_os = "linux")]
const MAP_NORESERVE: libc::c_int = libc::MAP_NORESERVE;
#[cfg(all(unix, not(target_os = "linux")))]
const MAP_NORESERVE: libc::c_int = 0;

impl Drop for FiberStacks {
    fn drop(&mut self) {
        #[cfg(unix)]
        // SAFETY: base/total describe the mapping made in `new`, unmapped once.
        unsafe {
            libc::munmap(self.base.cast(), self.total);
        }
    }
}
