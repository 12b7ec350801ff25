//! Print → parse → print is the identity for every Tile IR function the
//! compiler's tests build (before and after the Tile IR passes, split-K's two
//! kernels) and for the GPU IR of each lowered for apple, apple10, sm_80 and
//! sm_90; the parsed functions verify.

mod common;

use metile_compiler::{compile_gpu_ir, optimize_tile_ir, split_k::split_k, CompileOptions, Target};
use metile_ir::text::{check_gpu_round_trip, check_tile_round_trip};
use metile_ir::{parse_function, parse_gpu_function, print_function, print_gpu_function, DType, Function};

/// Every kernel the compiler's tests build, by name.
pub fn corpus() -> Vec<(String, Function)> {
    let mut out: Vec<(String, Function)> = vec![
        ("add_f32".into(), common::add(256, DType::F32)),
        ("add_f16".into(), common::add(1024, DType::F16)),
        ("add_bf16_ragged".into(), common::add(100, DType::BF16)),
        ("softmax_1024".into(), common::softmax(1024)),
        ("softmax_128".into(), common::softmax(128)),
        ("gemm_f32".into(), common::gemm(32, 32, 16, DType::F32)),
        ("gemm_f16".into(), common::gemm(64, 64, 32, DType::F16)),
        ("gemm_bf16_128".into(), common::gemm(128, 128, 32, DType::BF16)),
        ("math".into(), common::zoo::math(256)),
        ("math_ragged".into(), common::zoo::math(48)),
        ("shapes".into(), common::zoo::shapes(16, 8)),
        ("threads".into(), common::zoo::threads(128)),
        (
            "pointer_gemm_f16".into(),
            common::zoo::pointer_gemm(64, 64, 32, DType::F16),
        ),
        (
            "pointer_gemm_f32".into(),
            common::zoo::pointer_gemm(32, 32, 16, DType::F32),
        ),
    ];
    for (name, f) in out.clone() {
        if name.contains("gemm") {
            if let Ok(split) = split_k(&f, 3) {
                out.push((format!("{name}_split_partial"), split.partial));
                out.push((format!("{name}_split_finish"), split.finish));
            }
        }
    }
    out
}

fn targets() -> Vec<Target> {
    ["apple", "apple10", "sm_80", "sm_90"]
        .iter()
        .map(|t| Target::parse(t).unwrap_or_else(|| panic!("no target {t}")))
        .collect()
}

/// Every value a GPU function defines: parameters, threadgroup roots, block
/// arguments (a `for`'s induction variable, whose type the text leaves out) and results.
fn defined_gpu_values(f: &metile_ir::gpu_ir::GpuFunction) -> Vec<metile_ir::gpu_ir::GpuValue> {
    let mut out: Vec<_> = f.params.iter().map(|p| p.value).collect();
    out.extend(f.threadgroup.iter().map(|a| a.value));
    f.walk(&mut |op| {
        out.extend(op.results.iter().copied());
        for r in &op.regions {
            out.extend(r.args.iter().copied());
        }
    });
    out
}

/// The default passes, and each switch that changes what lowering makes.
fn option_sets() -> Vec<(String, CompileOptions)> {
    let mut sets = vec![("defaults".to_string(), CompileOptions::default())];
    for (name, on) in [
        ("tf32", true),
        ("wgmma", false),
        ("async_copy", false),
        ("matrix_atoms", false),
        ("ldmatrix", false),
        ("stage_stores", false),
    ] {
        let mut options = CompileOptions::default();
        options.passes.set(name, on);
        sets.push((format!("{name}={on}"), options));
    }
    sets
}

#[test]
fn every_tile_ir_function_round_trips_and_verifies() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for (name, f) in corpus() {
        let optimized = optimize_tile_ir(f.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
        for (stage, f) in [("traced", f), ("optimized", optimized)] {
            checked += 1;
            if let Err(e) = check_tile_round_trip(&f) {
                failures.push(format!("{name} ({stage}): {e}"));
                continue;
            }
            let parsed = parse_function(&print_function(&f)).unwrap_or_else(|e| panic!("{e}"));
            if let Err(e) = metile_ir::verify(&parsed) {
                failures.push(format!(
                    "{name} ({stage}): the parsed function does not verify: {e}"
                ));
            }
            assert_eq!(parsed.params, f.params, "{name}");
            assert_eq!(parsed.constexprs, f.constexprs, "{name}");
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(checked >= 40, "{checked}");
}

#[test]
fn every_gpu_ir_function_round_trips_and_verifies() {
    let mut failures = Vec::new();
    let mut lowered = 0;
    for target in targets() {
        for (name, f) in corpus() {
            let f = optimize_tile_ir(f).unwrap_or_else(|e| panic!("{name}: {e}"));
            for (switches, options) in option_sets() {
                let gpu = match compile_gpu_ir(&f, &options, &target) {
                    Ok(gpu) => gpu,
                    // A refusal (a limit of the target) has no GPU IR to check.
                    Err(_) => continue,
                };
                lowered += 1;
                let at = format!("{name} on {} ({switches})", target.arch_name());
                if let Err(e) = check_gpu_round_trip(&gpu) {
                    failures.push(format!("{at}: {e}"));
                    continue;
                }
                let parsed = parse_gpu_function(&print_gpu_function(&gpu)).unwrap_or_else(|e| panic!("{e}"));
                if let Err(e) = metile_ir::verify_gpu(&parsed, target.vendor()) {
                    failures.push(format!("{at}: the parsed function does not verify: {e}"));
                }
                if parsed.params != gpu.params
                    || parsed.threadgroup != gpu.threadgroup
                    || parsed.regs != gpu.regs
                {
                    failures.push(format!(
                        "{at}: the parsed parameters, threadgroup memory or registers differ"
                    ));
                }
                if parsed.body != gpu.body {
                    failures.push(format!("{at}: the parsed body differs from the lowered one"));
                }
                let defined = defined_gpu_values(&gpu);
                if let Some(v) = defined
                    .iter()
                    .find(|v| parsed.values.get(v.index()) != Some(&gpu.ty(**v)))
                {
                    failures.push(format!("{at}: {v} has another type after parsing"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(lowered >= 300, "only {lowered} kernels lowered");
}

/// Printed texts to damage: Tile IR and GPU IR of a few kernels on every target.
fn damage_corpus() -> &'static [String] {
    static TEXTS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    TEXTS.get_or_init(|| {
        let mut texts = Vec::new();
        let kernels = [
            common::softmax(128),
            common::gemm(64, 64, 32, DType::F16),
            common::zoo::shapes(16, 8),
            common::zoo::threads(64),
        ];
        for f in kernels {
            let f = optimize_tile_ir(f).unwrap_or_else(|e| panic!("{e}"));
            texts.push(print_function(&f));
            for target in targets() {
                if let Ok(gpu) = compile_gpu_ir(&f, &CompileOptions::default(), &target) {
                    texts.push(print_gpu_function(&gpu));
                }
            }
        }
        texts
    })
}

/// Text a damaged IR may gain: punctuation, numbers at the limits, keywords
/// out of place, and characters of several bytes.
const INSERTIONS: [&str; 24] = [
    "%",
    "%99",
    "%1048575",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "=",
    "\"",
    "\\",
    "//",
    "/*",
    "*/",
    "-",
    "99999999999999999999",
    "\n",
    "f32x",
    "ptr<",
    "^(",
    " else {",
    "é",
    "\u{1F600}",
];

#[derive(Clone, Debug)]
enum Damage {
    Delete { at: usize, len: usize },
    Insert { at: usize, what: usize },
    DuplicateLine { line: usize },
    DeleteLine { line: usize },
    SwapLines { a: usize, b: usize },
}

fn damage(text: &str, damages: &[Damage]) -> String {
    let mut text = text.to_string();
    let boundary = |t: &str, at: usize| {
        let mut at = at % (t.len() + 1);
        while !t.is_char_boundary(at) {
            at -= 1;
        }
        at
    };
    for d in damages {
        match *d {
            Damage::Delete { at, len } => {
                let start = boundary(&text, at);
                let end = boundary(&text, (start + len).min(text.len()));
                text.replace_range(start..end.max(start), "");
            }
            Damage::Insert { at, what } => {
                let at = boundary(&text, at);
                text.insert_str(at, INSERTIONS[what % INSERTIONS.len()]);
            }
            Damage::DuplicateLine { line } | Damage::DeleteLine { line } => {
                let mut lines: Vec<&str> = text.lines().collect();
                if lines.is_empty() {
                    continue;
                }
                let i = line % lines.len();
                if matches!(d, Damage::DeleteLine { .. }) {
                    lines.remove(i);
                } else {
                    lines.insert(i, lines[i]);
                }
                text = lines.join("\n");
            }
            Damage::SwapLines { a, b } => {
                let mut lines: Vec<&str> = text.lines().collect();
                if lines.is_empty() {
                    continue;
                }
                let n = lines.len();
                lines.swap(a % n, b % n);
                text = lines.join("\n");
            }
        }
    }
    text
}

fn damage_strategy() -> impl proptest::strategy::Strategy<Value = Damage> {
    use proptest::prelude::*;
    prop_oneof![
        (any::<usize>(), 1usize..12).prop_map(|(at, len)| Damage::Delete { at, len }),
        (any::<usize>(), any::<usize>()).prop_map(|(at, what)| Damage::Insert { at, what }),
        any::<usize>().prop_map(|line| Damage::DuplicateLine { line }),
        any::<usize>().prop_map(|line| Damage::DeleteLine { line }),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Damage::SwapLines { a, b }),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

    /// A damaged text is an error with a position inside the text, or a
    /// function that prints and verifies (or not) without a panic.
    #[test]
    fn damaged_text_is_an_error_never_a_panic(
        which in 0usize..64,
        damages in proptest::collection::vec(damage_strategy(), 1..4),
    ) {
        let texts = damage_corpus();
        let text = damage(&texts[which % texts.len()], &damages);
        let lines = text.lines().count() + 1;
        match parse_function(&text) {
            Ok(f) => {
                let _ = metile_ir::verify(&f);
                let reprinted = print_function(&f);
                proptest::prop_assert!(parse_function(&reprinted).is_ok(), "{reprinted}");
            }
            Err(e) => proptest::prop_assert!(e.line >= 1 && e.line <= lines && e.column >= 1, "{e}"),
        }
        match parse_gpu_function(&text) {
            Ok(f) => {
                let _ = metile_ir::verify_gpu(&f, metile_ir::Vendor::Nvidia);
                let reprinted = print_gpu_function(&f);
                proptest::prop_assert!(parse_gpu_function(&reprinted).is_ok(), "{reprinted}");
            }
            Err(e) => proptest::prop_assert!(e.line >= 1 && e.line <= lines && e.column >= 1, "{e}"),
        }
    }
}
