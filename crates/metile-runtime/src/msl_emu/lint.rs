//! Checks for Metal-legal MSL that the emulator would compile but could not
//! run faithfully. Reading only: the MSL text itself is never changed.

use super::EmuError;

/// Replaces comments and string/character literals with spaces (keeping line
/// breaks) so that token scans see only code.
fn code_only(msl: &str) -> String {
    let bytes = msl.as_bytes();
    let mut out = String::with_capacity(msl.len());
    let mut i = 0;
    while i < bytes.len() {
        let rest = &bytes[i..];
        if rest.starts_with(b"//") {
            while i < bytes.len() && bytes[i] != b'\n' {
                out.push(' ');
                i += 1;
            }
        } else if rest.starts_with(b"/*") {
            let end = msl[i + 2..].find("*/").map_or(bytes.len(), |p| i + 2 + p + 2);
            for c in msl[i..end].chars() {
                out.push(if c == '\n' { '\n' } else { ' ' });
            }
            i = end;
        } else if bytes[i] == b'"' || bytes[i] == b'\'' {
            let quote = bytes[i];
            out.push(' ');
            i += 1;
            while i < bytes.len() && bytes[i] != quote && bytes[i] != b'\n' {
                if bytes[i] == b'\\' && i + 1 < bytes.len() {
                    out.push(' ');
                    i += 1;
                }
                out.push(' ');
                i += 1;
            }
            if i < bytes.len() && bytes[i] == quote {
                out.push(' ');
                i += 1;
            }
        } else {
            let c = msl[i..].chars().next().unwrap_or(' ');
            out.push(c);
            i += c.len_utf8().max(1);
        }
    }
    out
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Refuses `threadgroup T name[...];`-style variables. The emulator maps the
/// `threadgroup` qualifier onto `volatile`, so such a variable would silently
/// become private to each thread; threadgroup memory must come in through
/// `[[threadgroup(i)]]` parameters.
fn check_threadgroup_variables(code: &str) -> Result<(), EmuError> {
    for (pos, _) in code.match_indices("threadgroup") {
        let before_ok = code[..pos].chars().next_back().is_none_or(|c| !is_ident_char(c));
        let after = &code[pos + "threadgroup".len()..];
        if !before_ok || after.chars().next().is_some_and(is_ident_char) {
            continue;
        }
        // Walk the declaration: identifiers and template punctuation until the
        // first character that tells a pointer/reference/attribute/cast apart
        // from a variable.
        let mut words = 0;
        let mut in_word = false;
        let mut template_depth = 0usize;
        for c in after.chars() {
            if is_ident_char(c) {
                if !in_word {
                    words += 1;
                }
                in_word = true;
                continue;
            }
            in_word = false;
            match c {
                ' ' | '\t' | '\n' | '\r' | ':' => {}
                '<' => template_depth += 1,
                '>' if template_depth > 0 => template_depth -= 1,
                ',' if template_depth > 0 => {}
                '[' | ';' | '=' | '{' | ',' if words >= 2 => {
                    let line = code[..pos].matches('\n').count() + 1;
                    return Err(EmuError::Unsupported(format!(
                        "line {line}: threadgroup variable declared in a function; the emulator needs \
                         threadgroup memory passed as `threadgroup T* name [[threadgroup(i)]]` parameters"
                    )));
                }
                _ => break,
            }
        }
    }
    Ok(())
}

pub(crate) fn check(msl: &str) -> Result<(), EmuError> {
    let code = code_only(msl);
    check_threadgroup_variables(&code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threadgroup_pointers_attributes_and_barriers_pass() {
        let msl = "kernel void k(threadgroup float* tg0 [[threadgroup(0)]]) {\n\
                   threadgroup float* p = tg0 + 4; threadgroup_barrier(mem_flags::mem_threadgroup);\n\
                   threadgroup const half& r = *(threadgroup half*)p; // threadgroup float x[4];\n}";
        assert!(check(msl).is_ok());
    }

    #[test]
    fn threadgroup_arrays_and_scalars_are_refused() {
        for decl in [
            "threadgroup float buf[256];",
            "threadgroup int count;",
            "threadgroup metal::vec<float, 4> v = 0;",
        ] {
            let msl = format!("kernel void k() {{\n  {decl}\n}}");
            let err = check(&msl).expect_err(decl);
            assert!(err.to_string().contains("line 2"), "{err}");
        }
    }
}
