//! `METILE_DEBUG`, a comma list of what to print to stderr while compiling:
//! `tile_ir`, `gpu_ir`, `msl`, `cuda`; `repack`: the operands a cuda kernel's
//! first launch copies into aligned rows (`all`: each of these); `pipeline`: the
//! compile pipeline's stages with what each did; a stage's name
//! (`metile_compiler::pipeline::stage_names`): the IR after that stage. Read at
//! compile time only, never on the launch path.

use metile_compiler::pipeline::{describe_run, stage_names, StageRecord};

/// The values `METILE_DEBUG` takes besides the stage names.
pub const DEBUG_VALUES: [&str; 8] = [
    "tile_ir", "gpu_ir", "msl", "cuda", "all", "pipeline", "repack", "layouts",
];

/// Every value `METILE_DEBUG` takes: [`DEBUG_VALUES`], then the stage names.
pub fn debug_names() -> Vec<&'static str> {
    let mut names = DEBUG_VALUES.to_vec();
    names.extend(stage_names());
    names
}

fn requested() -> Option<String> {
    std::env::var("METILE_DEBUG").ok()
}

/// Whether `METILE_DEBUG` names `stage`; `all` names every value it named
/// before the pipeline's own (`pipeline` and the stage names need asking for).
pub fn debug_enabled(stage: &str) -> bool {
    requested().is_some_and(|v| {
        v.split(',').map(str::trim).any(|s| {
            s == stage || (s == "all" && matches!(stage, "tile_ir" | "gpu_ir" | "msl" | "cuda" | "repack"))
        })
    })
}

/// What `METILE_DEBUG` asks of a pipeline run (one read of the variable):
/// the stages whose IR to print, and whether to time and list the stages
/// (`pipeline`).
pub fn pipeline_requests() -> (Vec<String>, bool) {
    pipeline_requests_in(requested().as_deref())
}

/// [`pipeline_requests`] of a `METILE_DEBUG` value already read (`None`: unset).
pub fn pipeline_requests_in(value: Option<&str>) -> (Vec<String>, bool) {
    let Some(v) = value else {
        return (Vec::new(), false);
    };
    let stages = stage_names();
    let names: Vec<&str> = v.split(',').map(str::trim).collect();
    let print_after = names
        .iter()
        .filter(|s| stages.contains(s))
        .map(|s| s.to_string())
        .collect();
    (print_after, names.contains(&"pipeline"))
}

/// Prints what `METILE_DEBUG` asked of one pipeline run over `kernel`
/// ([`pipeline_requests`]): the IR after each stage it names, and the stage
/// list when `pipeline` was asked for (the run then timed its stages).
pub fn report_run(
    kernel: &str,
    target: &str,
    printed: &[(&'static str, String)],
    records: &[StageRecord],
    pipeline: bool,
) {
    for (stage, text) in printed {
        eprintln!("// {kernel} after {stage} ({target})\n{text}");
    }
    if pipeline {
        eprint!("{}", describe_run(&format!("{kernel} ({target})"), records));
    }
}

/// Compiles `func` for `target` through the pipeline, printing what
/// `METILE_DEBUG` asks for along the way (the stages it names, the pipeline
/// report, the GPU IR); every GPU backend compiles this way.
pub fn compile_reporting(
    func: &metile_ir::Function,
    options: &crate::device::CompileOptions,
    target: &metile_compiler::Target,
) -> Result<metile_compiler::Compilation, metile_compiler::CompileError> {
    let (print_after, pipeline) = pipeline_requests();
    let compile_options = metile_compiler::CompileOptions {
        num_sgs: options.num_sgs,
        keep_gpu_ir: debug_enabled("gpu_ir"),
        passes: options.passes,
        print_after,
        record_stages: pipeline,
        keep_layouts: false,
    };
    let compiled = metile_compiler::compile(func, &compile_options, target)?;
    report_run(
        &func.name,
        &target.arch_name(),
        &compiled.printed,
        &compiled.records,
        pipeline,
    );
    if let Some(gpu_ir) = &compiled.gpu_ir {
        eprintln!("// GPU IR of {}\n{gpu_ir}", func.name);
    }
    Ok(compiled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use metile_compiler::pipeline::{stage, STAGES};

    /// Every stage of the table is a `METILE_DEBUG` value, and no fixed value
    /// shadows a stage.
    #[test]
    fn debug_names_are_the_fixed_values_and_every_stage() {
        let names = debug_names();
        for s in STAGES {
            assert!(names.contains(&s.name), "{}", s.name);
        }
        for value in DEBUG_VALUES {
            assert!(stage(value).is_none(), "{value} is also a stage");
        }
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), names.len());
    }
}
