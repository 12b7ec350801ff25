//! The stage table against the policy table and docs/pipeline.md, and
//! single stages run by name.

use super::*;
use crate::policy::SWITCHES;

#[test]
fn stage_switches_are_policy_switches_that_name_their_stage() {
    for stage in STAGES {
        if let Some(switch) = stage.switch {
            let spec = SWITCHES.iter().find(|s| s.name == switch);
            assert_eq!(spec.map(|s| s.stage), Some(stage.name), "{}", stage.name);
        }
    }
    for spec in SWITCHES {
        assert!(stage(spec.stage).is_some(), "{} steers no stage", spec.name);
    }
}

#[test]
fn stage_names_are_snake_case_and_listed_once() {
    let names = stage_names();
    for name in &names {
        assert!(
            name.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
            "{name}"
        );
    }
    let mut sorted = names.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), names.len());
    assert_eq!(names.first(), Some(&"check_kernel"));
    assert_eq!(names.last(), Some(&"emit"));
}

#[test]
fn switches_off_are_reported_off() {
    let mut passes = Passes::default();
    passes.set("l2_order", false);
    let target = Target::nvidia(9, 0);
    let pipeline = Pipeline::new(&target, &passes);
    let l2 = stage("l2_order").map(|s| pipeline.enabled(s));
    assert_eq!(l2, Some(false));
    let prefetch = stage("prefetch_dot_operands").map(|s| pipeline.enabled(s));
    assert_eq!(prefetch, Some(false), "off by default on NVIDIA GPUs");
}

/// The rows of the table under the heading `section` of docs/pipeline.md
/// (above its subsections).
fn doc_rows(section: &str) -> Vec<Vec<String>> {
    let doc = include_str!("../../../../docs/pipeline.md");
    doc.split("\n## ")
        .find(|s| s.starts_with(section))
        .unwrap_or("")
        .lines()
        // The section's own table, before any subsection's.
        .take_while(|l| !l.starts_with("### "))
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

/// docs/pipeline.md lists every stage in order with its level, phase and
/// switch, and every switch with its stage and defaults.
#[test]
fn the_docs_tables_agree_with_the_stage_and_switch_tables() {
    let stages = doc_rows("Stages");
    assert_eq!(stages.len(), STAGES.len());
    for (row, stage) in stages.iter().zip(STAGES) {
        assert_eq!(row[0], format!("`{}`", stage.name));
        assert_eq!(row[1], stage.level.name(), "{}", stage.name);
        let phase = if stage.phase == Phase::Trace {
            "trace"
        } else {
            "target"
        };
        assert_eq!(row[2], phase, "{}", stage.name);
        assert_eq!(row[3], stage.switch.map(|s| format!("`{s}`")).unwrap_or_default());
    }
    let switches = doc_rows("Pass switches");
    assert_eq!(switches.len(), SWITCHES.len());
    let on = |b: bool| if b { "on" } else { "off" };
    for (row, spec) in switches.iter().zip(SWITCHES) {
        assert_eq!(row[0], format!("`{}`", spec.name));
        assert!(row[1].starts_with(&format!("`{}`", spec.stage)), "{}", spec.name);
        assert_eq!(
            (row[2].as_str(), row[3].as_str()),
            (on(spec.on_apple), on(spec.on_nvidia)),
            "{}",
            spec.name
        );
    }
}

#[test]
fn single_stages_run_by_name_and_unknown_names_are_refused() {
    let target = Target::apple();
    let mut b = metile_ir::Builder::new("empty");
    b.set_threads_per_group(32);
    let mut f = b.finish().expect("an empty kernel");
    assert_eq!(run_tile_stage("l2_order", &mut f, &target), Ok(false));
    let err = run_tile_stage("lower", &mut f, &target).unwrap_err();
    assert!(
        err.reason.contains("no tile stage is called 'lower'"),
        "{}",
        err.reason
    );
    assert!(
        err.reason.contains("l2_order") && err.reason.contains("clean_up"),
        "{}",
        err.reason
    );
    let mut gpu = metile_ir::gpu_ir::GpuBuilder::new("empty", 32).finish();
    assert_eq!(run_gpu_stage("eliminate_dead_code", &mut gpu, &target), Ok(false));
    let err = run_gpu_stage("l2_order", &mut gpu, &target).unwrap_err();
    assert!(
        err.reason.contains("no gpu stage is called 'l2_order'"),
        "{}",
        err.reason
    );
}

/// GPU IR with a dead constant (so dead-code elimination changes it and the
/// verifier runs) and one vendor's op, storing `stored`.
fn with_vendor_op(op: &str, stored: &str) -> GpuFunction {
    let text = format!(
        "gpu.func @k(%0: ptr<f32, device> /*Out*/) threads 128 {{
  %1 = const 1.0 : f32  // k.py:2
  %2 = const 7 : i32  // k.py:3
{op}
  %9 = builtin thread_index : i32  // k.py:5
  store %0, %9, {stored}  // k.py:5
}}
"
    );
    metile_ir::parse_gpu_function(&text).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn the_verifier_after_a_gpu_stage_refuses_another_vendors_op_naming_op_and_target() {
    let nvidia = with_vendor_op("  wgmma_fence  // k.py:4", "%1");
    let apple = with_vendor_op(
        "  %3 = const 1.0 : f16  // k.py:4\n  %4, %5 = mma.simdgroup8x8 %3, %3, %3, %3, %1, %1 : f32, f32  // k.py:4",
        "%4",
    );
    for (gpu, target) in [(&nvidia, Target::nvidia(9, 0)), (&apple, Target::apple())] {
        assert_eq!(
            run_gpu_stage("eliminate_dead_code", &mut gpu.clone(), &target),
            Ok(true)
        );
    }
    let err = run_gpu_stage("eliminate_dead_code", &mut nvidia.clone(), &Target::apple10()).unwrap_err();
    assert!(err.is_internal(), "{err}");
    assert_eq!(
        err.reason,
        "internal compiler error after eliminate_dead_code for apple10: invalid GPU IR at k.py:4 (wgmma_fence): \
         the op is NVIDIA only, and this function is for an Apple GPU"
    );
    let err = run_gpu_stage("eliminate_dead_code", &mut apple.clone(), &Target::nvidia(8, 0)).unwrap_err();
    assert_eq!(
        err.reason,
        "internal compiler error after eliminate_dead_code for sm_80: invalid GPU IR at k.py:4 \
         (mma.simdgroup8x8): the matrix atom simdgroup8x8 is Apple only, and this function is for an NVIDIA GPU"
    );
}
