//! The extent table that checked kernels consult on every access (see
//! `msl_emu_shim/metile_emu/checks.h`): tag → tagged address of the first
//! byte and length of one buffer argument, scalar argument or threadgroup
//! allocation. A kernel receives `tag << 48 | address` for each of them.
//!
//! One table serves the whole process; kernels get its address when loaded.
//! Tags are handed out per launch (buffers and scalars, returned when the
//! launch ends) and per worker thread (a block for threadgroup memory, which
//! each worker owns, rewritten before every threadgroup it runs).

use super::EmuError;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Bits below the tag: user-space addresses must fit.
pub(crate) const TAG_SHIFT: u32 = 48;
const ADDRESS_MASK: u64 = (1 << TAG_SHIFT) - 1;
const TABLE_LEN: usize = 1 << 16;
/// Tags `1..FIRST_WORKER_TAG` name launch arguments; tag 0 is "untagged".
const FIRST_WORKER_TAG: usize = 1 << 13;
/// Threadgroup allocations (parameters and variables) one kernel may have.
pub(crate) const MAX_THREADGROUP_ALLOCATIONS: usize = 64;
const WORKER_BLOCKS: usize = (TABLE_LEN - FIRST_WORKER_TAG) / MAX_THREADGROUP_ALLOCATIONS;

/// Mirrors `metile_emu::Extent`. Written here, read by kernel code on other
/// threads once the launch has handed them its work (which orders the writes
/// before the reads).
#[repr(C)]
pub(crate) struct Extent {
    tagged_base: AtomicU64,
    bytes: AtomicU64,
}

impl Extent {
    fn set(&self, tag: usize, address: u64, bytes: u64) {
        self.tagged_base
            .store(((tag as u64) << TAG_SHIFT) | address, Ordering::Relaxed);
        self.bytes.store(bytes, Ordering::Relaxed);
    }

    fn clear(&self) {
        self.tagged_base.store(0, Ordering::Relaxed);
        self.bytes.store(0, Ordering::Relaxed);
    }

    fn get(&self) -> (u64, u64) {
        (
            self.tagged_base.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }
}

static TABLE: [Extent; TABLE_LEN] = [const {
    Extent {
        tagged_base: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
    }
}; TABLE_LEN];

/// The table's address, handed to every checked kernel library.
pub(crate) fn table_address() -> *mut std::ffi::c_void {
    TABLE.as_ptr().cast_mut().cast()
}

/// Launch tags not in use, and the lowest never handed out.
struct LaunchTagPool {
    free: Vec<u16>,
    next: usize,
}

static LAUNCH_TAGS: Mutex<LaunchTagPool> = Mutex::new(LaunchTagPool {
    free: Vec::new(),
    next: 1,
});

fn address_of(pointer: *const u8) -> Result<u64, EmuError> {
    let address = pointer as u64;
    if address & !ADDRESS_MASK != 0 {
        return Err(EmuError::BadLaunch(format!(
            "buffer at {address:#x} lies above 2^48; the emulator's checked pointers cannot tag it"
        )));
    }
    Ok(address)
}

/// The tags of one launch's arguments; they return to the pool on drop.
pub(crate) struct LaunchTags {
    /// Per launch argument, its tag.
    tags: Vec<u16>,
}

impl LaunchTags {
    /// Tags each `(pointer, bytes)` argument and returns the tagged pointers.
    pub fn register(arguments: &[(*const u8, usize)]) -> Result<(LaunchTags, Vec<*const u8>), EmuError> {
        let addresses = arguments
            .iter()
            .map(|&(pointer, _)| address_of(pointer))
            .collect::<Result<Vec<_>, _>>()?;
        let mut tags = LaunchTags {
            tags: Vec::with_capacity(arguments.len()),
        };
        {
            let mut pool = LAUNCH_TAGS
                .lock()
                .map_err(|_| EmuError::BadLaunch("extent table lock poisoned".into()))?;
            for _ in arguments {
                let tag = match pool.free.pop() {
                    Some(tag) => tag,
                    None if pool.next < FIRST_WORKER_TAG => {
                        pool.next += 1;
                        (pool.next - 1) as u16
                    }
                    None => {
                        return Err(EmuError::BadLaunch(format!(
                            "more than {} buffer arguments in launches running at once",
                            FIRST_WORKER_TAG - 1
                        )))
                    }
                };
                tags.tags.push(tag);
            }
        }
        let mut tagged = Vec::with_capacity(arguments.len());
        for ((&(_, bytes), &address), &tag) in arguments.iter().zip(&addresses).zip(&tags.tags) {
            TABLE[usize::from(tag)].set(usize::from(tag), address, bytes as u64);
            tagged.push((((u64::from(tag)) << TAG_SHIFT) | address) as usize as *const u8);
        }
        Ok((tags, tagged))
    }

    /// The launch argument a tag names, if it is one of this launch's.
    pub fn argument_of(&self, tag: usize) -> Option<usize> {
        self.tags.iter().position(|&t| usize::from(t) == tag)
    }
}

impl Drop for LaunchTags {
    fn drop(&mut self) {
        for &tag in &self.tags {
            TABLE[usize::from(tag)].clear();
        }
        if let Ok(mut pool) = LAUNCH_TAGS.lock() {
            pool.free.extend_from_slice(&self.tags);
        }
    }
}

/// Worker blocks not in use, and the lowest never handed out.
static WORKER_POOL: Mutex<LaunchTagPool> = Mutex::new(LaunchTagPool {
    free: Vec::new(),
    next: 0,
});

/// A worker thread's block of threadgroup tags, returned when the thread ends.
struct WorkerBlock {
    block: u16,
}

impl WorkerBlock {
    fn first_tag(&self) -> usize {
        FIRST_WORKER_TAG + usize::from(self.block) * MAX_THREADGROUP_ALLOCATIONS
    }
}

impl Drop for WorkerBlock {
    fn drop(&mut self) {
        let first = self.first_tag();
        for entry in &TABLE[first..first + MAX_THREADGROUP_ALLOCATIONS] {
            entry.clear();
        }
        if let Ok(mut pool) = WORKER_POOL.lock() {
            pool.free.push(self.block);
        }
    }
}

thread_local! {
    static WORKER_BLOCK: RefCell<Option<WorkerBlock>> = const { RefCell::new(None) };
}

/// Tags this worker's threadgroup allocations, `(offset, bytes)` into
/// `memory`, for the next threadgroup it runs; returns the first tag.
pub(crate) fn tag_threadgroup_memory(
    memory: *const u8,
    allocations: &[(usize, usize)],
) -> Result<u32, EmuError> {
    if allocations.len() > MAX_THREADGROUP_ALLOCATIONS {
        return Err(EmuError::BadLaunch(format!(
            "{} threadgroup allocations; the emulator checks at most {MAX_THREADGROUP_ALLOCATIONS}",
            allocations.len()
        )));
    }
    let base = address_of(memory)?;
    WORKER_BLOCK.with(|cell| {
        let mut slot = cell
            .try_borrow_mut()
            .map_err(|_| EmuError::BadLaunch("re-entrant launch on one worker thread".into()))?;
        if slot.is_none() {
            let mut pool = WORKER_POOL
                .lock()
                .map_err(|_| EmuError::BadLaunch("extent table lock poisoned".into()))?;
            let block = match pool.free.pop() {
                Some(block) => block,
                None if pool.next < WORKER_BLOCKS => {
                    pool.next += 1;
                    (pool.next - 1) as u16
                }
                None => {
                    return Err(EmuError::BadLaunch(format!(
                        "more than {WORKER_BLOCKS} threads running emulator threadgroups"
                    )))
                }
            };
            *slot = Some(WorkerBlock { block });
        }
        let first = slot.as_ref().map_or(0, WorkerBlock::first_tag);
        for (i, entry) in TABLE[first..first + MAX_THREADGROUP_ALLOCATIONS]
            .iter()
            .enumerate()
        {
            match allocations.get(i) {
                Some(&(offset, bytes)) => entry.set(first + i, base + offset as u64, bytes as u64),
                None => entry.clear(),
            }
        }
        Ok(first as u32)
    })
}

/// Where a failed access's pointer points: its tag's allocation and the
/// signed byte offset from its start, and that allocation's length.
pub(crate) fn locate(pointer: u64) -> (usize, i64, u64) {
    let tag = (pointer >> TAG_SHIFT) as usize;
    let (tagged_base, bytes) = TABLE[tag].get();
    (tag, pointer.wrapping_sub(tagged_base) as i64, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_tags_name_their_arguments_and_are_reused() {
        let a = [0u8; 16];
        let b = [0u8; 32];
        let (tags, tagged) = LaunchTags::register(&[(a.as_ptr(), 16), (b.as_ptr(), 32)]).expect("tags");
        let tag_b = tagged[1] as u64 >> TAG_SHIFT;
        assert_eq!(tagged[1] as u64 & ADDRESS_MASK, b.as_ptr() as u64);
        assert_eq!(tags.argument_of(tag_b as usize), Some(1));
        let (tag, offset, bytes) = locate(tagged[1] as u64 + 40);
        assert_eq!((tag as u64, offset, bytes), (tag_b, 40, 32));
        let (_, offset, _) = locate((tagged[0] as u64).wrapping_sub(4));
        assert_eq!(offset, -4);
        drop(tags);
        assert_eq!(
            locate(tagged[1] as u64).2,
            0,
            "a finished launch's tags name nothing"
        );
    }

    #[test]
    fn threadgroup_tags_belong_to_the_worker() {
        let memory = [0u8; 64];
        let first = tag_threadgroup_memory(memory.as_ptr(), &[(0, 16), (16, 48)]).expect("tags") as usize;
        assert!(first >= FIRST_WORKER_TAG);
        let pointer = ((first as u64 + 1) << TAG_SHIFT) | (memory.as_ptr() as u64 + 20);
        assert_eq!(locate(pointer), (first + 1, 4, 48));
        let again = tag_threadgroup_memory(memory.as_ptr(), &[(0, 64)]).expect("tags") as usize;
        assert_eq!(again, first, "a worker keeps its block");
        assert_eq!(
            locate(pointer).2,
            0,
            "allocations of an earlier kernel are cleared"
        );
        let too_many = vec![(0, 1); MAX_THREADGROUP_ALLOCATIONS + 1];
        assert!(tag_threadgroup_memory(memory.as_ptr(), &too_many).is_err());
    }
}
