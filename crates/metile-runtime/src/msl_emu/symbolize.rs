//! Mapping the program counter of a fault back to a line of the kernel's MSL
//! source, through the kernel library's line tables and binutils' addr2line.
//! Best effort: without addr2line the error simply names no line.

use std::path::Path;
use std::process::Command;

/// The line of `source_file` (the MSL source's name at compile time) that the
/// code at `pc` came from, innermost inlined frame in the kernel source first.
pub(crate) fn kernel_line(library: &Path, pc: usize, source_file: &str) -> Option<u32> {
    if pc == 0 {
        return None;
    }
    let offset = pc.checked_sub(library_base(pc)?)?;
    let output = Command::new("addr2line")
        .arg("-i")
        .arg("-e")
        .arg(library)
        .arg(format!("{offset:#x}"))
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines().find_map(|line| line_in(line, source_file))
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
    // A return address points after the call; look up the call itself.
    let offsets: Vec<String> = return_addresses
        .iter()
        .filter_map(|&pc| pc.checked_sub(base + 1))
        .map(|offset| format!("{offset:#x}"))
        .collect();
    let output = Command::new("addr2line")
        .arg("-a")
        .arg("-i")
        .arg("-e")
        .arg(library)
        .args(&offsets)
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    // "-a" prints each address on its own line before its (inlined) frames.
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|line| !line.starts_with("0x"))
        .find_map(|line| line_in(line, source_file))
}

/// The line number of "path/to/name.metal:12" or "name.metal:12 (discriminator 3)"
/// when the file is `source_file`.
fn line_in(line: &str, source_file: &str) -> Option<u32> {
    let location = line.split_whitespace().next()?;
    let (file, number) = location.rsplit_once(':')?;
    let file_name = file.rsplit('/').next()?;
    (file_name == source_file).then(|| number.parse().ok()).flatten()
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
