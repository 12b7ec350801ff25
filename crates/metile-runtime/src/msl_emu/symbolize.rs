//! Mapping the program counter of a fault back to a line of the kernel's MSL
//! source, through the line tables (and inlining records) of the kernel
//! library's DWARF, read in-process with gimli: no binutils needed, so a
//! machine whose only compiler is zig's still gets lines. Best effort: a
//! library without usable debug information simply names no line.

use addr2line::gimli;
use object::{Object, ObjectSection};
use std::path::Path;

/// The line of `source_file` (the MSL source's name at compile time) that the
/// code at `pc` came from, innermost inlined frame in the kernel source first.
pub(crate) fn kernel_line(library: &Path, pc: usize, source_file: &str) -> Option<u32> {
    if pc == 0 {
        return None;
    }
    let offset = pc.checked_sub(library_base(pc)?)?;
    with_line_tables(library, |tables| tables.kernel_line(offset as u64, source_file))
}

/// The line of `source_file` that the first of `return_addresses` (innermost
/// call first, as a frame-pointer walk finds them) with one in the kernel
/// source was called from: the access check that failed may sit in a shim
/// function that the kernel called.
pub(crate) fn kernel_line_of_return_addresses(
    library: &Path,
    return_addresses: &[usize],
    source_file: &str,
) -> Option<u32> {
    let base = library_base(*return_addresses.first()?)?;
    with_line_tables(library, |tables| {
        return_addresses
            .iter()
            // A return address points after the call; look up the call itself.
            .filter_map(|&pc| pc.checked_sub(base + 1))
            .find_map(|offset| tables.kernel_line(offset as u64, source_file))
    })
}

/// `kernel_line_of_return_addresses` for each of `chains` (the line tables
/// read once): the kernel line each chain of return addresses was called from.
pub(crate) fn kernel_lines_of_call_chains(
    library: &Path,
    chains: &[[usize; 2]],
    source_file: &str,
) -> Vec<Option<u32>> {
    let lines = chains.iter().flatten().find(|&&a| a != 0).and_then(|&known| {
        let base = library_base(known)?;
        with_line_tables(library, |tables| {
            Some(
                chains
                    .iter()
                    .map(|chain| {
                        chain
                            .iter()
                            .filter_map(|&pc| pc.checked_sub(base + 1))
                            .find_map(|offset| tables.kernel_line(offset as u64, source_file))
                    })
                    .collect::<Vec<_>>(),
            )
        })
    });
    lines.unwrap_or_else(|| vec![None; chains.len()])
}

/// The DWARF of one kernel library.
struct LineTables<'data> {
    context: addr2line::Context<gimli::EndianSlice<'data, gimli::RunTimeEndian>>,
}

impl LineTables<'_> {
    /// The first frame at `address` (innermost inlined call first) whose file
    /// is `source_file`.
    fn kernel_line(&self, address: u64, source_file: &str) -> Option<u32> {
        let mut frames = self.context.find_frames(address).skip_all_loads().ok()?;
        while let Ok(Some(frame)) = frames.next() {
            let Some(location) = frame.location else { continue };
            if location
                .file
                .is_some_and(|file| is_source_file(file, source_file))
            {
                return location.line;
            }
        }
        None
    }
}

/// Reads `library` and runs `lookup` over its DWARF; `None` when the file or
/// its debug sections cannot be read.
fn with_line_tables<T>(library: &Path, lookup: impl FnOnce(&LineTables<'_>) -> Option<T>) -> Option<T> {
    let bytes = std::fs::read(library).ok()?;
    let file = object::File::parse(&*bytes).ok()?;
    let endian = if file.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    // Sections are borrowed from `bytes` (never compressed: the emulator
    // does not ask for it); a missing one reads as empty.
    let section =
        |id: gimli::SectionId| -> Result<gimli::EndianSlice<'_, gimli::RunTimeEndian>, gimli::Error> {
            let data = file
                .section_by_name(id.name())
                .and_then(|section| section.data().ok())
                .unwrap_or(&[]);
            Ok(gimli::EndianSlice::new(data, endian))
        };
    let dwarf = gimli::Dwarf::load(section).ok()?;
    let context = addr2line::Context::from_dwarf(dwarf).ok()?;
    lookup(&LineTables { context })
}

/// Whether `path` (as the line tables name it, often with its folder) is the
/// file called `source_file`.
fn is_source_file(path: &str, source_file: &str) -> bool {
    Path::new(path).file_name().and_then(|name| name.to_str()) == Some(source_file)
}

#[cfg(unix)]
fn library_base(pc: usize) -> Option<usize> {
    // SAFETY: dladdr only reads the loader's tables; `info` is written by it.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(pc as *const libc::c_void, &mut info) == 0 {
            return None;
        }
        Some(info.dli_fbase as usize)
    }
}

#[cfg(not(unix))]
fn library_base(_pc: usize) -> Option<usize> {
    None
}
