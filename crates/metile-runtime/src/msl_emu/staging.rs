//! Bounds checking by placement: each buffer argument is copied into its own
//! mapping that ends where an inaccessible guard zone begins (another guard
//! zone sits before its page), so an access past the end, or more than a page
//! before the start, faults and `trap.rs` reports it. The accessible bytes
//! around the data (the rest of the first page, up to 15 bytes of padding at
//! the end) hold a canary pattern that is checked after the launch, which
//! catches writes there. Writable buffers are copied back after the launch.
//! Arguments whose host ranges overlap share one staged region, so in-place
//! kernels (the same buffer bound twice) keep their meaning.

use super::trap::GuardedRange;
use super::EmuError;

/// Bytes of inaccessible address space on each side of a staged buffer.
const GUARD_BYTES: usize = 1 << 20;
/// Fills the accessible bytes around staged data.
const CANARY: u8 = 0xa5;

/// One buffer argument of a launch.
pub(crate) struct HostBuffer {
    /// Index of the launch argument.
    pub arg: usize,
    pub ptr: *mut u8,
    pub len: usize,
    pub writable: bool,
}

struct Region {
    map: *mut u8,
    map_len: usize,
    /// The accessible pages: [usable, usable + usable_len).
    usable: *mut u8,
    usable_len: usize,
    data: *mut u8,
    host: *mut u8,
    len: usize,
    writable: bool,
    /// Indices into the `buffers` given to `stage`.
    members: Vec<usize>,
    /// The launch arguments staged in this region.
    args: Vec<usize>,
}

/// The staged copies of a launch's buffers.
pub(crate) struct StagedBuffers {
    regions: Vec<Region>,
    /// Per entry of the `buffers` given to `stage`: the pointer the kernel gets.
    pub pointers: Vec<*mut u8>,
    pub guards: Vec<GuardedRange>,
}

impl StagedBuffers {
    /// Copies `buffers` into guarded mappings.
    ///
    /// # Safety
    /// Each buffer must be valid for reads of `len` bytes.
    pub unsafe fn stage(buffers: &[HostBuffer]) -> Result<Self, EmuError> {
        let mut order: Vec<usize> = (0..buffers.len()).collect();
        order.sort_by_key(|&i| buffers[i].ptr as usize);
        // Group arguments whose host ranges overlap.
        let mut groups: Vec<(usize, usize, bool, Vec<usize>)> = Vec::new();
        for i in order {
            let start = buffers[i].ptr as usize;
            let end = start.checked_add(buffers[i].len).ok_or_else(|| {
                EmuError::BadLaunch(format!("argument {i}: buffer length overflows the address space"))
            })?;
            match groups.last_mut() {
                Some((_, group_end, writable, members)) if start < *group_end => {
                    *group_end = (*group_end).max(end);
                    *writable |= buffers[i].writable;
                    members.push(i);
                }
                _ => groups.push((start, end, buffers[i].writable, vec![i])),
            }
        }
        let mut staged = StagedBuffers {
            regions: Vec::new(),
            pointers: vec![std::ptr::null_mut(); buffers.len()],
            guards: Vec::new(),
        };
        for (start, end, writable, members) in groups {
            let args = members.iter().map(|&m| buffers[m].arg).collect();
            let region = map_region(start as *mut u8, end - start, writable, members, args)?;
            for &m in &region.members {
                let offset = buffers[m].ptr as usize - start;
                staged.pointers[m] = region.data.add(offset);
            }
            staged.guards.push(GuardedRange {
                map_start: region.map as usize,
                map_end: region.map as usize + region.map_len,
                data_start: region.data as usize,
            });
            staged.regions.push(region);
        }
        Ok(staged)
    }

    /// Launch argument indices and length of staged region `region`.
    pub fn region_info(&self, region: usize) -> Option<(&[usize], usize)> {
        self.regions.get(region).map(|r| (r.args.as_slice(), r.len))
    }

    /// The first staged region whose canary bytes changed, with the byte
    /// offset of the change from the region's data start.
    pub fn damaged_canary(&self) -> Option<(usize, isize)> {
        for (index, r) in self.regions.iter().enumerate() {
            // SAFETY: the usable pages stay mapped until drop.
            let usable = unsafe { std::slice::from_raw_parts(r.usable, r.usable_len) };
            let data_from = r.data as usize - r.usable as usize;
            let data_to = data_from + r.len;
            let changed = usable
                .iter()
                .enumerate()
                .find(|&(i, &b)| (i < data_from || i >= data_to) && b != CANARY)
                .map(|(i, _)| i as isize - data_from as isize);
            if let Some(offset) = changed {
                return Some((index, offset));
            }
        }
        None
    }

    /// Copies writable regions back to the host buffers.
    ///
    /// # Safety
    /// The host buffers must still be valid for writes and not in use elsewhere.
    pub unsafe fn copy_back(&self) {
        for r in self.regions.iter().filter(|r| r.writable) {
            std::ptr::copy_nonoverlapping(r.data, r.host, r.len);
        }
    }
}

impl Drop for StagedBuffers {
    fn drop(&mut self) {
        for r in &self.regions {
            // SAFETY: unmapping exactly the mapping made in `map_region`.
            unsafe { libc::munmap(r.map.cast(), r.map_len) };
        }
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .unwrap_or(4096)
        .max(4096)
}

/// Maps guard + data pages + guard and copies the host bytes so that they end
/// at the second guard (up to 15 bytes earlier, keeping 16-byte alignment).
unsafe fn map_region(
    host: *mut u8,
    len: usize,
    writable: bool,
    members: Vec<usize>,
    args: Vec<usize>,
) -> Result<Region, EmuError> {
    let page = page_size();
    let padded = len.div_ceil(16) * 16;
    let data_pages = padded.div_ceil(page) * page;
    let map_len = GUARD_BYTES + data_pages + GUARD_BYTES;
    let map = libc::mmap(
        std::ptr::null_mut(),
        map_len,
        libc::PROT_NONE,
        libc::MAP_PRIVATE | libc::MAP_ANON,
        -1,
        0,
    );
    if map == libc::MAP_FAILED {
        return Err(EmuError::io(
            "mapping a staged buffer",
            std::io::Error::last_os_error(),
        ));
    }
    let map = map.cast::<u8>();
    if data_pages > 0
        && libc::mprotect(
            map.add(GUARD_BYTES).cast(),
            data_pages,
            libc::PROT_READ | libc::PROT_WRITE,
        ) != 0
    {
        let err = std::io::Error::last_os_error();
        libc::munmap(map.cast(), map_len);
        return Err(EmuError::io("mapping a staged buffer", err));
    }
    let usable = map.add(GUARD_BYTES);
    std::ptr::write_bytes(usable, CANARY, data_pages);
    let data = usable.add(data_pages - padded);
    if len > 0 {
        std::ptr::copy_nonoverlapping(host, data, len);
    }
    Ok(Region {
        map,
        map_len,
        usable,
        usable_len: data_pages,
        data,
        host,
        len,
        writable,
        members,
        args,
    })
}
