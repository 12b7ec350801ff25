//! The portability check: a kernel that one backend runs is compiled for every
//! GPU target as well, without a device, so that a target that refuses it is
//! found when the kernel is written rather than when it first meets that GPU.
//!
//! The cpu backend runs whatever traces; every GPU target must then compile the
//! same Tile IR or refuse it with a documented limit (a clear message naming the
//! op and the line). An internal compiler error there is a bug, and so is a panic,
//! which this check turns into one. `METILE_CHECK_TARGETS` switches the check on
//! for every launch that traces (the test suite runs with it).

use crate::error::{CompileError, INTERNAL};
use crate::pipeline::{compile, CompileOptions};
use crate::target::Target;
use metile_ir::{Function, Loc};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The targets `METILE_CHECK_TARGETS=all` names: both Apple families, and the
/// NVIDIA generations with different matrix machinery (mma.sync; wgmma and TMA).
pub const ALL_TARGETS: [&str; 4] = ["apple", "apple10", "sm_80", "sm_90"];

/// The targets a `METILE_CHECK_TARGETS` value names: `all`, or a comma list of
/// target names; an unknown name is an error naming it.
pub fn parse_targets(spec: &str) -> Result<Vec<Target>, String> {
    let names: Vec<&str> = match spec.trim() {
        "all" | "1" => ALL_TARGETS.to_vec(),
        list => list.split(',').map(str::trim).filter(|n| !n.is_empty()).collect(),
    };
    names
        .iter()
        .map(|&n| {
            Target::parse(n).ok_or_else(|| {
                format!(
                    "METILE_CHECK_TARGETS names an unknown target '{n}'; targets are 'all' or a comma list of {}",
                    ALL_TARGETS.join(", ")
                )
            })
        })
        .collect()
}

/// Compiles `func` to the source `target` runs (MSL or CUDA C++), turning a
/// panic anywhere in the compiler into an internal compiler error.
pub fn compile_source(
    func: &Function,
    options: &CompileOptions,
    target: &Target,
) -> Result<(), CompileError> {
    let compiled = catch_unwind(AssertUnwindSafe(|| compile(func, options, target).map(drop)));
    compiled.unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("a panic");
        Err(CompileError::new(
            "kernel",
            format!("{INTERNAL}: {what}"),
            Loc::unknown(),
        ))
    })
}

/// The internal compiler errors `func` meets on each of `targets`, with the
/// target's name. Refusals that are documented limits are not reported.
pub fn internal_errors(
    func: &Function,
    options: &CompileOptions,
    targets: &[Target],
) -> Vec<(String, CompileError)> {
    targets
        .iter()
        .filter_map(|t| match compile_source(func, options, t) {
            Err(e) if e.is_internal() => Some((t.arch_name(), e)),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_lists_parse_and_unknown_names_are_named() {
        let all: Vec<String> = parse_targets("all")
            .unwrap()
            .iter()
            .map(Target::arch_name)
            .collect();
        assert_eq!(all, ALL_TARGETS);
        let two: Vec<String> = parse_targets(" sm_90, apple ")
            .unwrap()
            .iter()
            .map(Target::arch_name)
            .collect();
        assert_eq!(two, ["sm_90", "apple"]);
        let err = parse_targets("apple,vulkan").unwrap_err();
        assert!(err.contains("'vulkan'"), "{err}");
    }
}
