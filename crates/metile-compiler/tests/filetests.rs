//! Per-pass golden tests as files, as Cranelift's filetests and Triton's lit
//! tests: each `tests/filetests/<pass>/*.mtir` holds a header of `; key: value`
//! lines (`; pass: l2_order`, `; target: sm_90`, ...), the input IR, a line
//! `; expected output:`, and the text the pass must produce. The pass is looked
//! up by name in `filetests/registry.rs`. `METILE_BLESS=1` rewrites the
//! expected outputs with what the passes produce (review the diff).
//! docs/ir.md describes the format.

#[path = "filetests/registry.rs"]
mod registry;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const SEPARATOR: &str = "; expected output:";

struct FileTest {
    header: BTreeMap<String, String>,
    /// The header and input, as written.
    head: String,
    input: String,
    expected: String,
}

fn parse_file(text: &str) -> Result<FileTest, String> {
    let (head, expected) = match text.split_once(&format!("\n{SEPARATOR}\n")) {
        Some((head, expected)) => (head.to_string(), expected.to_string()),
        None => (text.trim_end().to_string(), String::new()),
    };
    let mut header = BTreeMap::new();
    let mut input = String::new();
    for line in head.lines() {
        match line.strip_prefix("; ").and_then(|l| l.split_once(':')) {
            Some((key, value)) if input.is_empty() && !key.contains(' ') => {
                header.insert(key.trim().to_string(), value.trim().to_string());
            }
            _ if input.is_empty() && (line.starts_with(';') || line.trim().is_empty()) => {}
            _ => {
                input.push_str(line);
                input.push('\n');
            }
        }
    }
    Ok(FileTest {
        header,
        head,
        input,
        expected,
    })
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|x| x == "mtir") {
            out.push(path);
        }
    }
}

/// The first line where two texts differ, both versions.
fn first_difference(expected: &str, actual: &str) -> String {
    let line = expected
        .lines()
        .zip(actual.lines())
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| expected.lines().count().min(actual.lines().count()));
    format!(
        "first difference at output line {}:\n  expected: {}\n  actual:   {}",
        line + 1,
        expected.lines().nth(line).unwrap_or("<end>"),
        actual.lines().nth(line).unwrap_or("<end>")
    )
}

fn run(path: &Path, bless: bool) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let test = parse_file(&text)?;
    let pass = test.header.get("pass").ok_or("no `; pass:` line")?;
    let (_, run) = registry::PASSES
        .iter()
        .find(|(name, _)| name == pass)
        .ok_or_else(|| format!("unknown pass `{pass}`"))?;
    let cx = registry::Context::from_header(&test.header)?;
    let actual = run(&test.input, &cx)?;
    if actual != test.expected {
        if !bless {
            return Err(format!(
                "{}\n(METILE_BLESS=1 rewrites the expected output)",
                first_difference(&test.expected, &actual)
            ));
        }
        std::fs::write(path, format!("{}\n{SEPARATOR}\n{actual}", test.head)).map_err(|e| e.to_string())?;
    }
    Ok(pass.clone())
}

#[test]
fn every_filetest_passes_and_every_pass_has_one() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests");
    let bless = std::env::var("METILE_BLESS").is_ok_and(|v| v == "1");
    let mut paths = Vec::new();
    files(&root, &mut paths);
    let mut failures = Vec::new();
    let mut tested = Vec::new();
    for path in &paths {
        match run(path, bless) {
            Ok(pass) => tested.push(pass),
            Err(e) => failures.push(format!("{}: {e}", path.display())),
        }
    }
    for (name, _) in registry::PASSES {
        if !tested.iter().any(|t| t == name) {
            failures.push(format!("no filetest runs the pass `{name}`"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn a_bad_header_or_input_is_reported() {
    let cx = |pairs: &[(&str, &str)]| {
        let header: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        registry::Context::from_header(&header).err()
    };
    assert_eq!(
        cx(&[("target", "sm_9")]).as_deref(),
        Some("unknown target `sm_9`")
    );
    assert_eq!(
        cx(&[("threads", "many")]).as_deref(),
        Some("`threads` takes a number, got `many`")
    );
    assert_eq!(
        cx(&[("passes", "fast=true")]).as_deref(),
        Some("unknown pass switch `fast`")
    );
    let context = registry::Context::from_header(&BTreeMap::new()).unwrap_or_else(|e| panic!("{e}"));
    let (_, clean_up) = registry::PASSES[0];
    let err = clean_up("tile.func @k() {\n  %1 = neg %0 : i32  // k.py:1\n}\n", &context).unwrap_err();
    assert_eq!(err, "input: 2:12: value %0 is used before it is defined");
}

#[test]
fn a_wrong_expectation_fails_and_blessing_rewrites_it() {
    let path = std::env::temp_dir().join(format!("metile-filetest-{}.mtir", std::process::id()));
    let input = "; pass: dce\n\ntile.func @k(%0: i32 /*N*/) {\n  %1 = neg %0 : i32  // k.py:1\n}\n";
    let wrong =
        format!("{input}\n{SEPARATOR}\ntile.func @k(%0: i32 /*N*/) {{\n  %1 = neg %0 : i32  // k.py:1\n}}\n");
    std::fs::write(&path, &wrong).unwrap_or_else(|e| panic!("{e}"));
    let err = run(&path, false).unwrap_err();
    assert_eq!(
        err,
        "first difference at output line 2:\n  expected:   %1 = neg %0 : i32  // k.py:1\n  actual:   }\n\
         (METILE_BLESS=1 rewrites the expected output)"
    );
    assert_eq!(run(&path, true).as_deref(), Ok("dce"));
    let blessed = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        blessed,
        format!("{input}\n{SEPARATOR}\ntile.func @k(%0: i32 /*N*/) {{\n}}\n")
    );
    assert_eq!(run(&path, false).as_deref(), Ok("dce"));
    let _ = std::fs::remove_file(&path);
}
