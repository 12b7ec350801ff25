//! The error message of a failed access check (see `checks.h`): what was
//! accessed, by which thread, where it lies relative to the buffer or
//! threadgroup allocation its pointer came from, and the MSL line.

use super::extents::{self, LaunchTags, TAG_SHIFT};
use super::ffi::{AccessRecord, ACCESS_SPACE_SHIFT, ACCESS_WRITE};
use super::wrapper::EntryLayout;
use std::path::Path;

pub(crate) struct AccessReport<'a> {
    pub record: &'a AccessRecord,
    /// The launch's argument tags (checked kernels always have them).
    pub launch_tags: Option<&'a LaunchTags>,
    /// Tag of this worker's threadgroup allocation 0.
    pub threadgroup_tag_base: u32,
    pub layout: &'a EntryLayout,
    pub library: &'a Path,
    pub source_file: &'a str,
}

impl AccessReport<'_> {
    /// "thread 17: out-of-bounds access to buffer argument 0 (device const
    /// float*): a 4-byte read at byte offset 400; the buffer has 400 bytes at
    /// line 16 of copy.metal"
    pub fn describe(&self) -> String {
        let record = self.record;
        let kind = if record.flags & ACCESS_WRITE != 0 {
            "write"
        } else {
            "read"
        };
        let space = match record.flags >> ACCESS_SPACE_SHIFT {
            0 => "device",
            1 => "constant",
            _ => "threadgroup",
        };
        let access = format!("a {}-byte {space} {kind}", record.bytes);
        let (tag, offset, bytes) = extents::locate(record.pointer);
        let argument = self.launch_tags.and_then(|tags| tags.argument_of(tag));
        let first_threadgroup = self.threadgroup_tag_base as usize;
        let allocation = (first_threadgroup != 0 && tag >= first_threadgroup)
            .then(|| self.layout.threadgroup_labels.get(tag - first_threadgroup))
            .flatten();
        let what = match (argument, allocation) {
            (Some(arg), _) => {
                let kind = if self.layout.arg_is_scalar[arg] {
                    "scalar"
                } else {
                    "buffer"
                };
                format!(
                    "out-of-bounds access to {kind} argument {arg} ({}): {access} at byte offset {offset}; \
                     the {kind} has {bytes} bytes",
                    self.layout.arg_types[arg]
                )
            }
            (None, Some(label)) => {
                format!(
                    "out-of-bounds access to {label}: {access} at byte offset {offset}; it has {bytes} bytes"
                )
            }
            (None, None) => format!(
                "out-of-bounds access at address {:#x}: {access} through a pointer that comes from no buffer \
                 argument or threadgroup allocation of this launch (a pointer made from an integer, or one \
                 offset by 2^48 bytes or more)",
                record.pointer & ((1u64 << TAG_SHIFT) - 1)
            ),
        };
        let frames: Vec<usize> = record
            .frames
            .iter()
            .take_while(|&&f| f != 0)
            .map(|&f| f as usize)
            .collect();
        let at = super::symbolize::kernel_line_of_return_addresses(self.library, &frames, self.source_file)
            .map(|line| format!(" at line {line} of {}", self.source_file))
            .unwrap_or_default();
        format!("thread {}: {what}{at}", record.thread_index)
    }
}
