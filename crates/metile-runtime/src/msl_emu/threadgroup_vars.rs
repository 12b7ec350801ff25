//! Threadgroup variables declared inside a kernel (`threadgroup float
//! partial[256];`, `threadgroup atomic_uint count;`), as Metal allows.
//!
//! The shim spells `threadgroup` as `volatile`, so such a declaration would
//! compile into a variable private to each fiber. Before compiling, the
//! emulator rewrites each one, on its own line, into a reference to storage
//! the shim provides in the group's threadgroup memory, after the
//! `[[threadgroup(i)]]` parameters:
//!
//! ```text
//! threadgroup float partial[256];
//! threadgroup float (&partial)[256] = *::metile_emu::threadgroup_variable<float[256]>(0);
//! ```
//!
//! Everything else is left byte for byte, and line breaks inside a rewritten
//! declaration are kept after it, so every line keeps its number for
//! diagnostics and fault reports. MSL without such declarations (everything
//! meTile emits) is not touched at all.

use super::EmuError;
use std::borrow::Cow;

/// One rewritten declaration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ThreadgroupVariable {
    pub name: String,
    /// The variable's type as a type-id: `float[256]`, `atomic_uint`.
    pub type_id: String,
    /// 1-based line of the declaration.
    pub line: usize,
}

/// Replaces comments and string/character literals with spaces, byte for
/// byte (line breaks kept), so that scans see only code at the same offsets.
fn code_only(msl: &str) -> Vec<u8> {
    let bytes = msl.as_bytes();
    let mut out = bytes.to_vec();
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for b in &mut out[from..to] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
    };
    while i < bytes.len() {
        let rest = &bytes[i..];
        if rest.starts_with(b"//") {
            let end = rest
                .iter()
                .position(|&b| b == b'\n')
                .map_or(bytes.len(), |p| i + p);
            blank(&mut out, i, end);
            i = end;
        } else if rest.starts_with(b"/*") {
            let end = msl[i + 2..].find("*/").map_or(bytes.len(), |p| i + 2 + p + 2);
            blank(&mut out, i, end);
            i = end;
        } else if bytes[i] == b'"' || bytes[i] == b'\'' {
            let quote = bytes[i];
            let mut end = i + 1;
            while end < bytes.len() && bytes[end] != quote && bytes[end] != b'\n' {
                end += if bytes[end] == b'\\' { 2 } else { 1 };
            }
            let end = (end + 1).min(bytes.len());
            blank(&mut out, i, end);
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn skip_spaces(code: &[u8], mut at: usize) -> usize {
    while at < code.len() && code[at].is_ascii_whitespace() {
        at += 1;
    }
    at
}

/// Index just past the bracket group opening at `at` (`<...>`, `[...]`).
fn skip_group(code: &[u8], at: usize, open: u8, close: u8) -> Option<usize> {
    let mut depth = 0usize;
    for (i, &b) in code.iter().enumerate().skip(at) {
        if b == open {
            depth += 1;
        } else if b == close {
            depth -= 1;
            if depth == 0 {
                return Some(i + 1);
            }
        } else if b == b';' || b == b'{' || b == b'}' {
            return None;
        }
    }
    None
}

/// A parsed declaration: the byte range it covers (from `threadgroup` to its
/// `;` inclusive), its type text and its declarators (name, array suffix).
struct Declaration {
    range: std::ops::Range<usize>,
    type_text: String,
    declarators: Vec<(String, String)>,
}

/// The code (comments blanked) between two offsets at ASCII characters.
fn code_text(code: &[u8], range: std::ops::Range<usize>) -> Result<&str, String> {
    std::str::from_utf8(&code[range]).map_err(|_| "unreadable threadgroup declaration".to_string())
}

/// Parses a declaration starting at the `threadgroup` keyword at `at`; `None`
/// when the keyword begins anything else (a pointer or reference type, a cast,
/// an attribute). Errors are Metal rules the declaration breaks. The texts it
/// keeps come from `code`, so comments inside the declaration are dropped.
fn parse_declaration(code: &[u8], at: usize) -> Result<Option<Declaration>, String> {
    let type_start = skip_spaces(code, at + "threadgroup".len());
    // Type words, `::` and template arguments, up to the declarator's name.
    let mut i = type_start;
    let mut last_word: Option<std::ops::Range<usize>> = None;
    let mut words = 0;
    loop {
        i = skip_spaces(code, i);
        let Some(&b) = code.get(i) else { return Ok(None) };
        if is_ident(b) {
            let start = i;
            while i < code.len() && is_ident(code[i]) {
                i += 1;
            }
            last_word = Some(start..i);
            words += 1;
        } else if code[i..].starts_with(b"::") {
            i += 2;
            last_word = None;
        } else if b == b'<' {
            match skip_group(code, i, b'<', b'>') {
                Some(end) => i = end,
                None => return Ok(None),
            }
            last_word = None;
        } else if matches!(b, b'[' | b';' | b',' | b'=' | b'{') {
            break;
        } else {
            return Ok(None);
        }
    }
    let Some(first_name) = last_word.filter(|_| words >= 2) else {
        return Ok(None);
    };
    let type_text = code_text(code, type_start..first_name.start)?
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let mut declarators = Vec::new();
    let mut name = first_name;
    let mut i = name.end;
    loop {
        let dims_start = i;
        loop {
            let next = skip_spaces(code, i);
            if code.get(next) == Some(&b'[') && code.get(next + 1) != Some(&b'[') {
                i = skip_group(code, next, b'[', b']').ok_or("unbalanced array bounds")?;
            } else {
                break;
            }
        }
        let dims: String = code_text(code, dims_start..i)?.split_whitespace().collect();
        declarators.push((code_text(code, name.clone())?.to_string(), dims));
        i = skip_spaces(code, i);
        match code.get(i) {
            Some(b';') => break,
            Some(b',') => {
                let start = skip_spaces(code, i + 1);
                let mut end = start;
                while end < code.len() && is_ident(code[end]) {
                    end += 1;
                }
                if end == start {
                    return Err("expected a variable name after ','".into());
                }
                name = start..end;
                i = end;
            }
            Some(b'=') | Some(b'{') => {
                return Err(
                    "threadgroup variables cannot have initializers (Metal leaves them undefined)".into(),
                )
            }
            _ => return Err("expected ';' after the threadgroup variable".into()),
        }
    }
    Ok(Some(Declaration {
        range: at..i + 1,
        type_text,
        declarators,
    }))
}

/// Rewrites every threadgroup variable declared in a function of `msl`;
/// returns the text (borrowed when there are none) and the variables in order.
pub(crate) fn move_threadgroup_variables(
    msl: &str,
) -> Result<(Cow<'_, str>, Vec<ThreadgroupVariable>), EmuError> {
    let code = code_only(msl);
    let keyword = b"threadgroup";
    let mut depth = 0i64;
    let mut edits: Vec<(std::ops::Range<usize>, String)> = Vec::new();
    let mut variables = Vec::new();
    let mut i = 0;
    while i < code.len() {
        match code[i] {
            b'{' => depth += 1,
            b'}' => depth -= 1,
            _ => {}
        }
        let starts_keyword = code[i..].starts_with(keyword)
            && (i == 0 || !is_ident(code[i - 1]))
            && code.get(i + keyword.len()).is_none_or(|&b| !is_ident(b));
        if !starts_keyword {
            i += 1;
            continue;
        }
        let line = code[..i].iter().filter(|&&b| b == b'\n').count() + 1;
        let unsupported = |reason: String| EmuError::Unsupported(format!("line {line}: {reason}"));
        let Some(declaration) = parse_declaration(&code, i).map_err(unsupported)? else {
            i += keyword.len();
            continue;
        };
        if depth <= 0 {
            return Err(unsupported(
                "threadgroup variables must be declared inside a kernel function".into(),
            ));
        }
        let mut text = format!("threadgroup {} ", declaration.type_text);
        for (k, (name, dims)) in declaration.declarators.iter().enumerate() {
            let type_id = format!("{}{dims}", declaration.type_text);
            if k > 0 {
                text.push_str(", ");
            }
            text.push_str(&format!(
                "(&{name}){dims} = *::metile_emu::threadgroup_variable<{type_id}>({})",
                variables.len()
            ));
            variables.push(ThreadgroupVariable {
                name: name.clone(),
                type_id,
                line,
            });
        }
        text.push(';');
        let breaks = code[declaration.range.clone()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        text.push_str(&"\n".repeat(breaks));
        i = declaration.range.end;
        edits.push((declaration.range, text));
    }
    if edits.is_empty() {
        return Ok((Cow::Borrowed(msl), variables));
    }
    let mut out = String::with_capacity(msl.len() + 64 * edits.len());
    let mut copied = 0;
    for (range, text) in edits {
        out.push_str(&msl[copied..range.start]);
        out.push_str(&text);
        copied = range.end;
    }
    out.push_str(&msl[copied..]);
    Ok((Cow::Owned(out), variables))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_pointers_casts_and_barriers_are_left_alone() {
        let msl = "kernel void k(threadgroup float* tg0 [[threadgroup(0)]]) {\n\
                   threadgroup float* p = tg0 + 4; threadgroup_barrier(mem_flags::mem_threadgroup);\n\
                   threadgroup const half& r = *(threadgroup half*)p; // threadgroup float x[4];\n}";
        let (text, variables) = move_threadgroup_variables(msl).expect("rewrite");
        assert!(matches!(text, Cow::Borrowed(_)));
        assert!(variables.is_empty());
    }

    #[test]
    fn declarations_become_references_on_the_same_lines() {
        let msl = "kernel void k() {\n  threadgroup float partial[256];\n  threadgroup uint count, flags[2][4];\n  \
                   threadgroup metal::vec<float, 4>\n     v[8]; x();\n}";
        let (text, variables) = move_threadgroup_variables(msl).expect("rewrite");
        assert_eq!(
            text,
            "kernel void k() {\n  threadgroup float (&partial)[256] = *::metile_emu::threadgroup_variable<float[256]>(0);\n  \
             threadgroup uint (&count) = *::metile_emu::threadgroup_variable<uint>(1), (&flags)[2][4] = \
             *::metile_emu::threadgroup_variable<uint[2][4]>(2);\n  threadgroup metal::vec<float, 4> (&v)[8] = \
             *::metile_emu::threadgroup_variable<metal::vec<float, 4>[8]>(3);\n x();\n}"
        );
        assert_eq!(text.lines().count(), msl.lines().count());
        let names: Vec<(&str, &str, usize)> = variables
            .iter()
            .map(|v| (v.name.as_str(), v.type_id.as_str(), v.line))
            .collect();
        assert_eq!(
            names,
            [
                ("partial", "float[256]", 2),
                ("count", "uint", 3),
                ("flags", "uint[2][4]", 3),
                ("v", "metal::vec<float, 4>[8]", 4)
            ]
        );
    }

    #[test]
    fn initializers_and_file_scope_variables_are_refused() {
        let err = move_threadgroup_variables("kernel void k() {\n threadgroup int n = 0;\n}").unwrap_err();
        assert_eq!(
            err.to_string(),
            "MSL emulator: unsupported MSL: line 2: threadgroup variables cannot have initializers (Metal leaves them undefined)"
        );
        let err = move_threadgroup_variables("threadgroup float g[4];\nkernel void k() {}").unwrap_err();
        assert!(
            err.to_string()
                .contains("line 1: threadgroup variables must be declared inside a kernel function"),
            "{err}"
        );
    }

    #[test]
    fn comments_inside_a_declaration_are_dropped() {
        let msl =
            "kernel void k() {\n  threadgroup float // partial sums\n    sums /* one per lane */ [32];\n}";
        let (text, variables) = move_threadgroup_variables(msl).expect("rewrite");
        assert_eq!(
            text,
            "kernel void k() {\n  threadgroup float (&sums)[32] = *::metile_emu::threadgroup_variable<float[32]>(0);\n\n}"
        );
        assert_eq!(variables[0].type_id, "float[32]");
    }

    #[test]
    fn comments_and_strings_keep_their_offsets() {
        let msl = "/* é */ kernel void k() { threadgroup float a[2]; }";
        let (text, variables) = move_threadgroup_variables(msl).expect("rewrite");
        assert_eq!(variables.len(), 1);
        assert!(
            text.starts_with("/* é */ kernel void k() { threadgroup float (&a)[2] = "),
            "{text}"
        );
    }
}
