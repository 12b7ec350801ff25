//! Scratch memory the runtime hands a kernel as an extra argument (split-K's
//! partial tiles), on every backend: a device allocation where kernels cannot
//! read host memory (cuda), the device's shared memory where it has some
//! (metal, msl-emu: a Metal buffer must be one the device knows, or writes of
//! one launch would not reach the next), else host pages (cpu).
//!
//! [`WorkspacePool`] keeps one workspace per device between launches and grows
//! it on demand, so a steady stream of launches allocates nothing. A launch
//! takes the workspace out of the pool and gives it back after enqueueing its
//! kernels: launches from several threads never share one. On a GPU with
//! streams the workspace carries a fence of the stream it was last used on,
//! and the launch that takes it next makes its own stream wait for it, so its
//! kernels never overwrite partial results that a kernel queued on another
//! stream still reads.

use crate::device::{Device, DeviceAllocation, Fence};
use crate::error::RuntimeError;
use crate::shared_memory::{HostPages, SharedMemory};
use metile_interp::KernelArg;
use metile_ir::DType;
use std::sync::{Arc, Mutex, Weak};

enum Memory {
    Device(Arc<dyn DeviceAllocation>),
    Shared(Arc<dyn SharedMemory>),
    Host(HostPages),
}

/// Scratch memory of one device.
pub struct Workspace {
    memory: Memory,
    bytes: usize,
    /// Where the work of its last user stands, for the next one to wait on.
    fence: Option<Box<dyn Fence>>,
}

impl Workspace {
    /// At least `bytes` bytes of scratch memory that `device`'s kernels can use.
    pub fn alloc(device: &dyn Device, bytes: usize) -> Result<Workspace, RuntimeError> {
        let memory = if let Some(memory) = device.memory() {
            Memory::Device(memory.alloc(bytes)?)
        } else if let Some(shared) = device.allocate_shared(bytes) {
            Memory::Shared(shared?)
        } else {
            Memory::Host(HostPages::zeroed(bytes)?)
        };
        Ok(Workspace {
            memory,
            bytes,
            fence: None,
        })
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Where the workspace starts, as the device's kernels address it.
    pub fn address(&self) -> u64 {
        match &self.memory {
            Memory::Device(a) => a.ptr(),
            Memory::Shared(s) => s.as_ptr() as u64,
            Memory::Host(h) => h.as_ptr() as u64,
        }
    }

    /// The first `len` f32 elements, as a kernel argument.
    pub fn f32_arg(&self, len: usize) -> KernelArg {
        KernelArg::Buffer {
            ptr: self.address() as usize as *mut u8,
            len: len.min(self.bytes / DType::F32.size_bytes()),
            dtype: DType::F32,
        }
    }
}

struct Slot {
    device: Weak<dyn Device>,
    workspace: Workspace,
}

/// One reusable workspace per live device.
#[derive(Default)]
pub struct WorkspacePool {
    slots: Mutex<Vec<Slot>>,
}

fn same_device(slot: &Slot, device: &Arc<dyn Device>) -> bool {
    std::ptr::addr_eq(slot.device.as_ptr(), Arc::as_ptr(device))
}

impl WorkspacePool {
    pub const fn new() -> WorkspacePool {
        WorkspacePool {
            slots: Mutex::new(Vec::new()),
        }
    }

    /// A workspace of at least `bytes` bytes for `device`: the pooled one when
    /// it is large enough and free, else a new one (twice the pooled size at
    /// least, so growing workloads reallocate only a few times).
    pub fn take(&self, device: &Arc<dyn Device>, bytes: usize) -> Result<Workspace, RuntimeError> {
        let mut pooled = 0;
        let mut reused = None;
        if let Ok(mut slots) = self.slots.lock() {
            slots.retain(|s| s.device.strong_count() > 0);
            if let Some(i) = slots.iter().position(|s| same_device(s, device)) {
                if slots[i].workspace.bytes >= bytes {
                    reused = Some(slots.swap_remove(i).workspace);
                } else {
                    pooled = slots[i].workspace.bytes;
                }
            }
        }
        if let Some(mut workspace) = reused {
            if let Some(fence) = workspace.fence.take() {
                fence.wait()?;
            }
            return Ok(workspace);
        }
        let size = if pooled > 0 {
            bytes.max(pooled.saturating_mul(2))
        } else {
            bytes
        };
        Workspace::alloc(device.as_ref(), size)
    }

    /// Returns `workspace` to the pool, keeping the larger one when the device
    /// already has one there.
    pub fn give_back(&self, device: &Arc<dyn Device>, mut workspace: Workspace) {
        if let Some(memory) = device.memory() {
            match memory.fence() {
                Ok(fence) => workspace.fence = fence,
                // Without a fence the next user could overtake this one's kernels.
                Err(_) => {
                    let _ = device.synchronize();
                }
            }
        }
        let dropped = {
            let Ok(mut slots) = self.slots.lock() else {
                return;
            };
            match slots.iter_mut().find(|s| same_device(s, device)) {
                Some(slot) if slot.workspace.bytes >= workspace.bytes => Some(workspace),
                Some(slot) => Some(std::mem::replace(&mut slot.workspace, workspace)),
                None => {
                    slots.push(Slot {
                        device: Arc::downgrade(device),
                        workspace,
                    });
                    None
                }
            }
        };
        // Kernels still queued may use the one dropped: wait for them rather
        // than rely on the driver's free to do so.
        if let Some(Workspace {
            memory: Memory::Device(_),
            ..
        }) = dropped
        {
            let _ = device.synchronize();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_reuses_and_grows_one_workspace_per_device() {
        let cpu: Arc<dyn Device> = Arc::new(crate::cpu::CpuDevice);
        let pool = WorkspacePool::new();
        let w = pool.take(&cpu, 1000).unwrap();
        assert_eq!(w.bytes(), 1000);
        let KernelArg::Buffer { ptr, len, .. } = w.f32_arg(10) else {
            panic!("a workspace is a buffer")
        };
        assert_eq!(len, 10);
        pool.give_back(&cpu, w);
        let again = pool.take(&cpu, 500).unwrap();
        assert!(matches!(again.f32_arg(1), KernelArg::Buffer { ptr: p, .. } if p == ptr));
        // Taken out, it is not handed to a second launch meanwhile.
        let other = pool.take(&cpu, 500).unwrap();
        assert!(!matches!(other.f32_arg(1), KernelArg::Buffer { ptr: p, .. } if p == ptr));
        pool.give_back(&cpu, again);
        pool.give_back(&cpu, other);
        assert_eq!(pool.take(&cpu, 1500).unwrap().bytes(), 2000);
    }

    /// Each wait on a fence: the stream the fence was made on, and the one that waited.
    type Waits = Arc<std::sync::Mutex<Vec<(Option<u64>, Option<u64>)>>>;

    /// A device with memory of its own whose fences record the launch stream
    /// they were made on and the streams that waited for them.
    #[derive(Default)]
    struct Streamed {
        waits: Waits,
    }

    struct HostAllocation(Vec<u8>);

    impl DeviceAllocation for HostAllocation {
        fn ptr(&self) -> u64 {
            self.0.as_ptr() as u64
        }
        fn bytes(&self) -> usize {
            self.0.len()
        }
    }

    struct Marked {
        made_on: Option<u64>,
        waits: Waits,
    }

    impl Fence for Marked {
        fn wait(&self) -> Result<(), RuntimeError> {
            let waiter = crate::stream::launch_stream();
            self.waits.lock().unwrap().push((self.made_on, waiter));
            Ok(())
        }
    }

    impl crate::device::DeviceMemory for Streamed {
        fn alloc(&self, bytes: usize) -> Result<Arc<dyn DeviceAllocation>, RuntimeError> {
            Ok(Arc::new(HostAllocation(vec![0; bytes])))
        }
        unsafe fn upload(&self, _: u64, _: *const u8, _: usize) -> Result<(), RuntimeError> {
            Ok(())
        }
        unsafe fn download(&self, _: u64, _: *mut u8, _: usize) -> Result<(), RuntimeError> {
            Ok(())
        }
        fn fence(&self) -> Result<Option<Box<dyn Fence>>, RuntimeError> {
            Ok(Some(Box::new(Marked {
                made_on: crate::stream::launch_stream(),
                waits: self.waits.clone(),
            })))
        }
    }

    impl Device for Streamed {
        fn name(&self) -> &'static str {
            "streamed"
        }
        fn compile(
            &self,
            _: Arc<metile_ir::Function>,
            _: &crate::device::CompileOptions,
        ) -> Result<Arc<dyn crate::device::CompiledKernel>, RuntimeError> {
            Err(RuntimeError::Device("compiles nothing".into()))
        }
        fn synchronize(&self) -> Result<(), RuntimeError> {
            Ok(())
        }
        fn memory(&self) -> Option<&dyn crate::device::DeviceMemory> {
            Some(self)
        }
    }

    #[test]
    fn a_reused_workspace_makes_the_next_stream_wait_for_the_last_one() {
        let streamed = Streamed::default();
        let waits = streamed.waits.clone();
        let device: Arc<dyn Device> = Arc::new(streamed);
        let pool = WorkspacePool::new();
        {
            let _first = crate::stream::LaunchStream::enter(Some(11));
            let w = pool.take(&device, 64).unwrap();
            pool.give_back(&device, w);
        }
        assert!(
            waits.lock().unwrap().is_empty(),
            "a new workspace has no one to wait for"
        );
        {
            let _second = crate::stream::LaunchStream::enter(Some(22));
            let w = pool.take(&device, 32).unwrap();
            assert_eq!(*waits.lock().unwrap(), vec![(Some(11), Some(22))]);
            pool.give_back(&device, w);
        }
        // Taken again outside any scope: the legacy stream waits for stream 22.
        let _again = pool.take(&device, 16).unwrap();
        assert_eq!(waits.lock().unwrap().last(), Some(&(Some(22), None)));
    }
}
