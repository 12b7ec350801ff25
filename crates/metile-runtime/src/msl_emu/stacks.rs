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
    _signal_stack: SignalStack,
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
                _signal_stack: SignalStack::ensure(),
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

/// `count` fiber stacks, each `stride` bytes: a guard page then the usable
/// stack, plus one spare stack after them that the fault handler resumes on.
pub(crate) struct FiberStacks {
    base: *mut u8,
    total: usize,
    pub stride: usize,
    pub count: usize,
    pub guard: usize,
}

// The stacks are plain memory owned by one worker at a time.
unsafe impl Send for FiberStacks {}

impl FiberStacks {
    pub fn base(&self) -> *mut u8 {
        self.base
    }

    /// Top of the spare stack (16-byte aligned).
    pub fn spare_top(&self) -> usize {
        self.base as usize + (self.count + 1) * self.stride
    }

    #[cfg(unix)]
    fn new(count: usize) -> Result<Self, EmuError> {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .unwrap_or(4096)
            .max(4096);
        let stride = FIBER_STACK_BYTES.div_ceil(page) * page + page;
        let total = stride
            .checked_mul(count + 1)
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
        for i in 0..=count {
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
            guard: page,
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

/// An alternate signal stack for this thread, so the fault handler can run
/// when a fiber has exhausted its own stack. Installed only if the thread has
/// none (Rust's runtime gives its threads one, but not threads of a host
/// process such as Python's); removed when the worker memory is dropped.
pub(crate) struct SignalStack {
    memory: Vec<u8>,
}

impl SignalStack {
    const BYTES: usize = 64 * 1024;

    #[cfg(target_os = "linux")]
    fn ensure() -> SignalStack {
        // SAFETY: querying and setting this thread's alternate signal stack
        // with memory owned by the returned value.
        unsafe {
            let mut current: libc::stack_t = std::mem::zeroed();
            if libc::sigaltstack(std::ptr::null(), &mut current) != 0
                || current.ss_flags & libc::SS_DISABLE == 0
            {
                return SignalStack { memory: Vec::new() };
            }
            let mut memory = vec![0u8; Self::BYTES];
            let stack = libc::stack_t {
                ss_sp: memory.as_mut_ptr().cast(),
                ss_flags: 0,
                ss_size: Self::BYTES,
            };
            if libc::sigaltstack(&stack, std::ptr::null_mut()) != 0 {
                return SignalStack { memory: Vec::new() };
            }
            SignalStack { memory }
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn ensure() -> SignalStack {
        SignalStack { memory: Vec::new() }
    }
}

impl Drop for SignalStack {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        if !self.memory.is_empty() {
            // SAFETY: removes the alternate stack installed in `ensure` before its memory is freed.
            unsafe {
                let disable = libc::stack_t {
                    ss_sp: std::ptr::null_mut(),
                    ss_flags: libc::SS_DISABLE,
                    ss_size: 0,
                };
                libc::sigaltstack(&disable, std::ptr::null_mut());
            }
        }
    }
}
