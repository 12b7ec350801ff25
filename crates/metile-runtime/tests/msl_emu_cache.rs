//! MSL emulator against a hostile disk cache: truncated, garbage and swapped
//! entries, a folder others can write, a 300-character kernel name. Each must
//! run the right kernel; none may crash the test process.

mod msl_emu_support;

use metile_runtime::msl_emu::{EmuCompiler, EmuKernel, EntrySpec};
use msl_emu_support::*;
use std::path::{Path, PathBuf};

/// `out[i] = x[i] <op> 3` for the first `n` elements.
fn kernel_source(name: &str, op: char) -> String {
    format!(
        "{HEADER}kernel void {name}(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],\n\
         constant int& n [[buffer(2)]], uint3 group [[threadgroup_position_in_grid]],\n\
         uint tid [[thread_index_in_threadgroup]])\n\
         {{\n    int i = int(group.x * 64 + tid);\n    if (i < n) {{ out[i] = x[i] {op} 3.0f; }}\n}}\n"
    )
}

fn kernel_entry(name: &str) -> EntrySpec {
    entry(
        name,
        vec![
            buffer("device const float*"),
            buffer("device float*"),
            scalar("constant int&"),
            builtin(metile_runtime::msl_emu::Builtin::ThreadgroupPositionInGrid),
            builtin(metile_runtime::msl_emu::Builtin::ThreadIndexInThreadgroup),
        ],
    )
}

/// Runs `kernel` over 200 elements (a ragged grid) and checks `x <op> 3`.
fn check(kernel: &EmuKernel, op: char) {
    let n: i32 = 200;
    let mut x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut out = vec![-1.0f32; n as usize];
    run(
        kernel,
        &[buf(&mut x), buf(&mut out), bytes_of(&n)],
        [(n as u32).div_ceil(64), 1, 1],
        64,
    );
    for (i, value) in out.iter().enumerate() {
        let expected = match op {
            '+' => i as f32 + 3.0,
            '*' => i as f32 * 3.0,
            _ => i as f32 - 3.0,
        };
        assert_eq!(*value, expected, "element {i} of {}", kernel.kernel_name());
    }
}

fn fresh_cache(name: &str) -> PathBuf {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("msl-emu-hostile-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn compile_checked(compiler: &EmuCompiler, name: &str, op: char) -> EmuKernel {
    let kernel = compile(compiler, &kernel_source(name, op), &kernel_entry(name));
    check(&kernel, op);
    kernel
}

#[test]
fn truncated_and_garbage_entries_are_rebuilt() {
    let Some(compiler) = compiler() else { return };
    let dir = fresh_cache("truncated");
    let compiler = compiler.with_cache_dir(&dir);
    let first = compile_checked(&compiler, "plus", '+');
    let entry = first.cache_entry().expect("stored").to_path_buf();
    let full = std::fs::read(&entry).expect("entry");
    let garbage: Vec<u8> = (0..full.len() as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect();
    for damaged in [
        &full[..full.len() / 2],
        &full[..full.len() - 1],
        &[][..],
        &garbage[..],
    ] {
        std::fs::write(&entry, damaged).expect("damage");
        let rebuilt = compile_checked(&compiler, "plus", '+');
        assert!(!rebuilt.from_disk_cache(), "a damaged entry is not loaded");
        assert_eq!(
            std::fs::read(&entry).expect("entry").len(),
            full.len(),
            "and is replaced"
        );
        assert!(compile_checked(&compiler, "plus", '+').from_disk_cache());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn swapped_entries_run_the_right_kernels() {
    let Some(compiler) = compiler() else { return };
    let dir = fresh_cache("swapped");
    let compiler = compiler.with_cache_dir(&dir);
    let plus = compile_checked(&compiler, "plus", '+')
        .cache_entry()
        .expect("stored")
        .to_path_buf();
    let times = compile_checked(&compiler, "times", '*')
        .cache_entry()
        .expect("stored")
        .to_path_buf();
    let (plus_bytes, times_bytes) = (
        std::fs::read(&plus).expect("plus"),
        std::fs::read(&times).expect("times"),
    );
    std::fs::write(&plus, &times_bytes).expect("swap");
    std::fs::write(&times, &plus_bytes).expect("swap");
    assert!(!compile_checked(&compiler, "plus", '+').from_disk_cache());
    assert!(!compile_checked(&compiler, "times", '*').from_disk_cache());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_long_kernel_name_compiles() {
    let Some(compiler) = compiler() else { return };
    let dir = fresh_cache("long-name");
    let compiler = compiler.with_cache_dir(&dir);
    let name = format!("minus_{}", "k".repeat(300));
    let kernel = compile_checked(&compiler, &name, '-');
    let entry = kernel.cache_entry().expect("stored");
    assert_eq!(entry.file_name().map(|n| n.len()), Some(64 + ".entry".len()));
    assert!(compile_checked(&compiler, &name, '-').from_disk_cache());
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(unix)]
#[test]
fn a_folder_others_can_write_is_not_used() {
    use std::os::unix::fs::PermissionsExt;
    let Some(compiler) = compiler() else { return };
    let dir = fresh_cache("shared");
    std::fs::create_dir_all(&dir).expect("create");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let compiler = compiler.with_cache_dir(&dir);
    assert_eq!(compiler.cache_dir(), None, "refused");
    let kernel = compile_checked(&compiler, "plus", '+');
    assert!(!kernel.from_disk_cache() && kernel.cache_entry().is_none());
    assert!(
        !compile_checked(&compiler, "plus", '+').from_disk_cache(),
        "no disk cache: clang runs"
    );
    assert_eq!(
        std::fs::read_dir(&dir).expect("list").count(),
        0,
        "nothing written there"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_a_disk_cache_every_compile_runs_clang() {
    let Some(compiler) = compiler() else { return };
    let compiler = compiler.without_disk_cache();
    assert!(!compile_checked(&compiler, "times", '*').from_disk_cache());
    assert!(!compile_checked(&compiler, "times", '*').from_disk_cache());
}
