//! Memory-check instrumentation of a kernel's LLVM IR.
//!
//! A checked kernel is compiled in two steps: clang turns MSL + wrapper into
//! unoptimised LLVM IR, this pass inserts a call to one of the shim's
//! `metile_emu_check_*` functions (`checks.h`) before every access to device
//! (`addrspace(1)`), constant (`addrspace(2)`) and threadgroup memory (the
//! shim spells `threadgroup` as `volatile`, so: every volatile access), and
//! clang optimises and links the result, inlining the checks. The access then
//! goes through the pointer the check returns. Working on the IR rather than
//! the MSL text keeps the kernel's text byte for byte what the emitter wrote,
//! and catches every access however the source spells it: subscripts, vector
//! casts, pointer arithmetic, swizzle proxies, simdgroup matrix loads, memory
//! intrinsics.
//!
//! The IR is unoptimised, so every access is one of the instructions below
//! with its pointer as an operand: `load`, `store`, `atomicrmw`, `cmpxchg`,
//! and calls to `llvm.memcpy`/`memmove`/`memset`. The pass also defines the
//! list of program-scope `constant` variables, the one kind of constant
//! memory no tagged pointer names.

use super::EmuError;
use std::fmt::Write as _;

/// The memory an access touches, as the checks tell them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Space {
    Device,
    Constant,
    Threadgroup,
}

impl Space {
    fn of(address_space: u32, volatile: bool) -> Option<Space> {
        match (address_space, volatile) {
            (1, _) => Some(Space::Device),
            (2, _) => Some(Space::Constant),
            (0, true) => Some(Space::Threadgroup),
            _ => None,
        }
    }

    fn check_function(self) -> &'static str {
        match self {
            Space::Device => "metile_emu_check_device",
            Space::Constant => "metile_emu_check_constant",
            Space::Threadgroup => "metile_emu_check_threadgroup",
        }
    }

    fn pointer_type(self) -> &'static str {
        match self {
            Space::Device => "ptr addrspace(1)",
            Space::Constant => "ptr addrspace(2)",
            Space::Threadgroup => "ptr",
        }
    }
}

/// `access_write` in checks.h.
const WRITE_FLAG: u32 = 1;

/// One access to check: where its pointer operand is in the line, how many
/// bytes it touches (an IR constant or value) and whether it writes.
struct Access {
    space: Space,
    operand: std::ops::Range<usize>,
    bytes: String,
    write: bool,
}

/// Instruments `ir` (the text clang wrote with `-emit-llvm -S`).
pub(crate) fn instrument(ir: &str) -> Result<String, EmuError> {
    let mut out = String::with_capacity(ir.len() + ir.len() / 4);
    let mut counter = 0usize;
    let mut constant_globals = Vec::new();
    let mut in_shim = false;
    for line in ir.lines() {
        if line.starts_with('@') {
            if let Some(global) = constant_global(line) {
                constant_globals.push(global);
            }
        }
        if line.starts_with("define ") {
            in_shim = is_shim_function(line);
        }
        if !in_shim {
            if let Some(tagged) = tag_loaded_address(line, &mut counter) {
                out.push_str(&tagged);
                continue;
            }
        }
        let accesses = accesses_of(line).map_err(|reason| {
            EmuError::Unsupported(format!(
                "memory-check instrumentation: {reason} in `{}`",
                line.trim()
            ))
        })?;
        if accesses.is_empty() {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let indent = &line[..line.len() - line.trim_start().len()];
        let debug_location = debug_attachment(line);
        let mut rewritten = line.to_string();
        // Replace operands from the right so earlier ranges stay valid.
        let mut sorted = accesses;
        sorted.sort_by_key(|a| std::cmp::Reverse(a.operand.start));
        let mut calls = Vec::new();
        for access in &sorted {
            counter += 1;
            let name = format!("%__metile_check.{counter}");
            let pointer_type = access.space.pointer_type();
            let flags = if access.write { WRITE_FLAG } else { 0 };
            let mut call = String::new();
            let _ = write!(
                call,
                "{indent}{name} = call {pointer_type} @{}({pointer_type} {}, i64 {}, i32 {flags}){debug_location}",
                access.space.check_function(),
                &line[access.operand.clone()],
                access.bytes,
            );
            calls.push(call);
            rewritten.replace_range(access.operand.clone(), &name);
        }
        for call in calls.iter().rev() {
            out.push_str(call);
            out.push('\n');
        }
        out.push_str(&rewritten);
        out.push('\n');
    }
    Ok(define_constant_globals(&out, &constant_globals))
}

/// Whether a `define` line opens a function of the shim (namespaces `metal` and
/// `metile_emu`, the `metile_emu_*` checks): its integer-to-pointer casts make
/// the untagged addresses a check returns, which must stay untagged.
fn is_shim_function(define: &str) -> bool {
    define.contains("metile_emu") || define.contains("5metal")
}

/// An integer cast to a device pointer (`%p = inttoptr i64 %a to ptr
/// addrspace(1)`, a kernel's pointer from memory) goes through
/// `metile_emu_tag_loaded_address`, which gives it the tag of the buffer
/// argument holding it, so its accesses are checked like any other.
fn tag_loaded_address(line: &str, counter: &mut usize) -> Option<String> {
    const CAST: &str = " = inttoptr i64 ";
    const TO_DEVICE: &str = " to ptr addrspace(1)";
    let cast = line.find(CAST)?;
    let operand_start = cast + CAST.len();
    let operand_end = operand_start + line[operand_start..].find(TO_DEVICE)?;
    let rest = &line[operand_end + TO_DEVICE.len()..];
    if !(rest.is_empty() || rest.starts_with(',')) {
        return None;
    }
    *counter += 1;
    let indent = &line[..line.len() - line.trim_start().len()];
    let name = format!("%__metile_tagged.{counter}");
    let operand = &line[operand_start..operand_end];
    Some(format!(
        "{indent}{name} = call i64 @metile_emu_tag_loaded_address(i64 {operand}){}\n{}{name}{}\n",
        debug_attachment(line),
        &line[..operand_start],
        &line[operand_end..]
    ))
}

/// `, !dbg !N` of an instruction, copied onto its check so that the check's
/// failure path maps back to the access's source line.
fn debug_attachment(line: &str) -> String {
    match line.rfind(", !dbg !") {
        Some(at) => {
            let rest = &line[at + ", !dbg !".len()..];
            let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
            if digits.is_empty() {
                String::new()
            } else {
                format!(", !dbg !{digits}")
            }
        }
        None => String::new(),
    }
}

/// The size in bytes of a value of IR type `ty`, as a constant expression.
fn size_of(ty: &str) -> String {
    format!("ptrtoint (ptr getelementptr ({ty}, ptr null, i32 1) to i64)")
}

/// The accesses of one line of IR that need a check (none for most lines).
fn accesses_of(line: &str) -> Result<Vec<Access>, String> {
    let code = line.trim_start();
    let offset = line.len() - code.len();
    // `%x = opcode ...` or `opcode ...`
    let instruction = match code.strip_prefix('%') {
        Some(_) => match code.find(" = ") {
            Some(eq) => &code[eq + 3..],
            None => return Ok(Vec::new()),
        },
        None => code,
    };
    let start = offset + (code.len() - instruction.len());
    let (opcode, _) = instruction.split_once(' ').unwrap_or((instruction, ""));
    let body_start = start + opcode.len() + 1;
    if body_start > line.len() {
        return Ok(Vec::new());
    }
    match opcode {
        "load" => load_access(line, body_start),
        "store" => store_access(line, body_start),
        "atomicrmw" | "cmpxchg" => rmw_access(line, body_start),
        "call" | "tail" | "notail" | "musttail" => intrinsic_accesses(line, start),
        _ => Ok(Vec::new()),
    }
}

/// Skips leading keywords (`atomic`, `volatile`, `weak`), returning how many
/// bytes were skipped and whether `volatile` was among them.
fn skip_keywords(text: &str, keywords: &[&str]) -> (usize, bool) {
    let mut skipped = 0;
    let mut volatile = false;
    loop {
        let rest = &text[skipped..];
        let Some(word) = keywords.iter().find(|k| rest.starts_with(&format!("{k} "))) else {
            return (skipped, volatile);
        };
        volatile |= *word == "volatile";
        skipped += word.len() + 1;
    }
}

/// `ptr` or `ptr addrspace(N)` at the start of `text`: (bytes, N).
fn pointer_type(text: &str) -> Option<(usize, u32)> {
    let rest = text.strip_prefix("ptr")?;
    if let Some(after) = rest.strip_prefix(" addrspace(") {
        let close = after.find(')')?;
        let space = after[..close].parse().ok()?;
        return Some((3 + " addrspace(".len() + close + 1, space));
    }
    (rest.is_empty() || rest.starts_with(' ') || rest.starts_with(',')).then_some((3, 0))
}

/// The pointer operand of a field `ptr [addrspace(N)] VALUE ...` starting at
/// `at` in `line`: (its address space, its byte range).
fn pointer_operand(line: &str, mut at: usize) -> Result<Option<(u32, std::ops::Range<usize>)>, String> {
    while line[at..].starts_with(' ') {
        at += 1;
    }
    let field = &line[at..];
    let Some((type_len, space)) = pointer_type(field) else {
        return Ok(None);
    };
    let mut value_start = at + type_len;
    while line[value_start..].starts_with(' ') {
        value_start += 1;
    }
    let len = value_len(&line[value_start..]).ok_or("unreadable pointer operand")?;
    Ok(Some((space, value_start..value_start + len)))
}

fn load_access(line: &str, body: usize) -> Result<Vec<Access>, String> {
    let (skip, volatile) = skip_keywords(&line[body..], &["atomic", "volatile"]);
    let fields = top_level_fields(line, body + skip);
    let [ty, pointer, ..] = fields.as_slice() else {
        return Err("load without a pointer operand".into());
    };
    let Some((space, operand)) = pointer_operand(line, pointer.start)? else {
        return Err("load from a non-pointer".into());
    };
    Ok(Space::of(space, volatile)
        .map(|space| Access {
            space,
            operand,
            bytes: size_of(line[ty.clone()].trim()),
            write: false,
        })
        .into_iter()
        .collect())
}

fn store_access(line: &str, body: usize) -> Result<Vec<Access>, String> {
    let (skip, volatile) = skip_keywords(&line[body..], &["atomic", "volatile"]);
    let fields = top_level_fields(line, body + skip);
    let [value, pointer, ..] = fields.as_slice() else {
        return Err("store without a pointer operand".into());
    };
    let value_text = &line[value.clone()];
    let ty_len = type_len(value_text).ok_or("unreadable stored type")?;
    let Some((space, operand)) = pointer_operand(line, pointer.start)? else {
        return Err("store to a non-pointer".into());
    };
    Ok(Space::of(space, volatile)
        .map(|space| Access {
            space,
            operand,
            bytes: size_of(&value_text[..ty_len]),
            write: true,
        })
        .into_iter()
        .collect())
}

/// `atomicrmw [volatile] OP ptr P, T V ...` and `cmpxchg [weak] [volatile] ptr P, T C, T N ...`.
fn rmw_access(line: &str, body: usize) -> Result<Vec<Access>, String> {
    let fields = top_level_fields(line, body);
    let [head, value, ..] = fields.as_slice() else {
        return Err("atomic without operands".into());
    };
    let head_text = &line[head.clone()];
    let volatile = head_text.split_whitespace().any(|w| w == "volatile");
    let Some(ptr_at) = head_text.find("ptr") else {
        return Err("atomic without a pointer operand".into());
    };
    let Some((space, operand)) = pointer_operand(line, head.start + ptr_at)? else {
        return Err("atomic on a non-pointer".into());
    };
    let value_text = line[value.clone()].trim_start();
    let ty_len = type_len(value_text).ok_or("unreadable atomic operand type")?;
    Ok(Space::of(space, volatile)
        .map(|space| Access {
            space,
            operand,
            bytes: size_of(&value_text[..ty_len]),
            write: true,
        })
        .into_iter()
        .collect())
}

/// `llvm.memcpy`, `llvm.memmove` (destination written, source read) and
/// `llvm.memset` (destination written), with a length operand.
fn intrinsic_accesses(line: &str, start: usize) -> Result<Vec<Access>, String> {
    let text = &line[start..];
    let Some(at) = text.find("@llvm.mem") else {
        return Ok(Vec::new());
    };
    let name_start = start + at + 1;
    let name_len = line[name_start..]
        .find('(')
        .ok_or("memory intrinsic without arguments")?;
    let name = &line[name_start..name_start + name_len];
    let kind = name.split('.').nth(1).unwrap_or("");
    if !matches!(kind, "memcpy" | "memmove" | "memset") {
        return Ok(Vec::new());
    }
    let args_start = name_start + name_len + 1;
    let close = matching_close(line, args_start - 1).ok_or("unbalanced intrinsic call")?;
    let args = top_level_fields(&line[..close], args_start);
    let [dst, second, length, is_volatile, ..] = args.as_slice() else {
        return Err("memory intrinsic with unexpected arguments".into());
    };
    let volatile = line[is_volatile.clone()].trim() == "i1 true";
    let length_text = line[length.clone()].trim();
    let bytes = length_text
        .split_once(' ')
        .map(|(_, v)| v.trim().to_string())
        .ok_or("memory intrinsic without a length")?;
    let mut accesses = Vec::new();
    let mut operands = vec![(dst.clone(), true)];
    if kind != "memset" {
        operands.push((second.clone(), false));
    }
    for (field, write) in operands {
        let field_start = field.start + (line[field.clone()].len() - line[field.clone()].trim_start().len());
        let Some((type_len, space)) = pointer_type(&line[field_start..field.end]) else {
            return Err("memory intrinsic on a non-pointer".into());
        };
        let Some(space) = Space::of(space, volatile) else {
            continue;
        };
        let value =
            last_value(line, field_start + type_len, field.end).ok_or("unreadable intrinsic operand")?;
        accesses.push(Access {
            space,
            operand: value,
            bytes: bytes.clone(),
            write,
        });
    }
    Ok(accesses)
}

/// The value at the end of an argument `ptr ATTRIBUTES... VALUE`, skipping
/// parameter attributes such as `align 4`, `noundef`, `dereferenceable(16)`.
fn last_value(line: &str, mut at: usize, end: usize) -> Option<std::ops::Range<usize>> {
    loop {
        while at < end && line.as_bytes()[at] == b' ' {
            at += 1;
        }
        let rest = &line[at..end];
        let word: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let attribute = matches!(
            word.as_str(),
            "noundef"
                | "nonnull"
                | "noalias"
                | "nocapture"
                | "readonly"
                | "writeonly"
                | "nofree"
                | "returned"
        );
        if attribute && !rest[word.len()..].starts_with('(') {
            at += word.len();
            continue;
        }
        if word == "align" {
            at += word.len();
            while at < end && line.as_bytes()[at] == b' ' {
                at += 1;
            }
            at += line[at..end].chars().take_while(char::is_ascii_digit).count();
            continue;
        }
        if matches!(
            word.as_str(),
            "dereferenceable" | "dereferenceable_or_null" | "captures"
        ) && rest[word.len()..].starts_with('(')
        {
            at = matching_close(line, at + word.len())? + 1;
            continue;
        }
        let len = value_len(rest)?;
        return Some(at..at + len);
    }
}

/// Byte ranges of the comma-separated fields of `line[start..]` at bracket
/// depth 0 (brackets: () [] {} <>; quoted strings skipped).
fn top_level_fields(line: &str, start: usize) -> Vec<std::ops::Range<usize>> {
    let bytes = line.as_bytes();
    let mut fields = Vec::new();
    let mut depth = 0i32;
    let mut field_start = start;
    let mut i = start;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += 1;
                }
            }
            b'(' | b'[' | b'{' | b'<' => depth += 1,
            b')' | b']' | b'}' | b'>' => depth -= 1,
            b',' if depth == 0 => {
                fields.push(field_start..i);
                field_start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    fields.push(field_start..bytes.len());
    fields
}

/// Index of the bracket closing the one at `open`.
fn matching_close(line: &str, open: usize) -> Option<usize> {
    let bytes = line.as_bytes();
    let mut depth = 0i32;
    let mut i = open;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += 1;
                }
            }
            b'(' | b'[' | b'{' | b'<' => depth += 1,
            b')' | b']' | b'}' | b'>' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Length of the IR type at the start of `text`.
fn type_len(text: &str) -> Option<usize> {
    let first = *text.as_bytes().first()?;
    let len = match first {
        b'[' | b'{' | b'<' => matching_close(text, 0)? + 1,
        b'%' => 1 + name_len(&text[1..])?,
        _ => {
            if let Some((len, _)) = pointer_type(text) {
                len
            } else {
                text.chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .count()
            }
        }
    };
    (len > 0).then_some(len)
}

/// Length of an identifier after its sigil: `"quoted name"` or `name.with-dots`.
fn name_len(text: &str) -> Option<usize> {
    if let Some(quoted) = text.strip_prefix('"') {
        return Some(quoted.find('"')? + 2);
    }
    let len = text
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || "._$-".contains(*c))
        .count();
    (len > 0).then_some(len)
}

/// Length of the value at the start of `text`: a local or global name, a
/// literal, or a constant expression `keyword ... (...)`.
fn value_len(text: &str) -> Option<usize> {
    let first = *text.as_bytes().first()?;
    if first == b'%' || first == b'@' {
        return Some(1 + name_len(&text[1..])?);
    }
    let mut at = 0;
    loop {
        let word = text[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.' || *c == '-')
            .count();
        if word == 0 {
            return (at > 0).then_some(at);
        }
        at += word;
        if text[at..].starts_with(" (") {
            return Some(matching_close(text, at + 1)? + 1);
        }
        if text[at..].starts_with('(') {
            return Some(matching_close(text, at)? + 1);
        }
        // Constant-expression keywords (`getelementptr inbounds (...)`) come
        // in runs of words before the parenthesis; a plain literal ends here.
        let next = &text[at..];
        let continues = next.starts_with(' ')
            && next[1..].chars().next().is_some_and(|c| c.is_ascii_lowercase())
            && !next[1..].starts_with("to ")
            && text[..at].chars().all(|c| c.is_ascii_lowercase());
        if !continues || ends_value(&text[..at]) {
            return Some(at);
        }
        at += 1;
    }
}

/// Literals that are complete values on their own.
fn ends_value(word: &str) -> bool {
    matches!(
        word,
        "null" | "undef" | "poison" | "zeroinitializer" | "true" | "false" | "none"
    ) || word.starts_with(|c: char| c.is_ascii_digit() || c == '-')
}

/// `@name = ... addrspace(2) ... constant|global TYPE ...` (not a declaration):
/// (name, type) of a program-scope `constant` variable.
fn constant_global(line: &str) -> Option<(String, String)> {
    let (name, rest) = line.split_once(" = ")?;
    let head_end = [" constant ", " global "]
        .iter()
        .filter_map(|k| rest.find(k).map(|p| (p, k.len())))
        .min()?;
    let head = &rest[..head_end.0];
    if !head.contains("addrspace(2)")
        || head
            .split_whitespace()
            .any(|w| w == "external" || w == "extern_weak")
    {
        return None;
    }
    let ty_text = &rest[head_end.0 + head_end.1..];
    let ty = &ty_text[..type_len(ty_text)?];
    Some((name.to_string(), ty.to_string()))
}

const CONSTANT_GLOBALS: &str = "@metile_emu_constant_globals";
const CONSTANT_GLOBAL_COUNT: &str = "@metile_emu_constant_global_count";

/// Replaces the shim's declarations of the constant-variable list with its
/// definition (the IR refers to a global by name whatever its type).
fn define_constant_globals(ir: &str, globals: &[(String, String)]) -> String {
    let entries: Vec<String> = globals
        .iter()
        .map(|(name, ty)| {
            format!(
                "{{ ptr addrspace(2), i64 }} {{ ptr addrspace(2) {name}, i64 {} }}",
                size_of(ty)
            )
        })
        .collect();
    let list = format!(
        "{CONSTANT_GLOBALS} = hidden constant [{} x {{ ptr addrspace(2), i64 }}] [{}], align 8",
        entries.len(),
        entries.join(", ")
    );
    let count = format!(
        "{CONSTANT_GLOBAL_COUNT} = hidden constant i64 {}, align 8",
        globals.len()
    );
    let mut out = String::with_capacity(ir.len() + list.len());
    for line in ir.lines() {
        if line.starts_with(&format!("{CONSTANT_GLOBALS} = ")) {
            out.push_str(&list);
        } else if line.starts_with(&format!("{CONSTANT_GLOBAL_COUNT} = ")) {
            out.push_str(&count);
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(line: &str) -> String {
        instrument(line).expect("instrumentable")
    }

    #[test]
    fn device_loads_and_stores_go_through_the_check() {
        let out = checked("  %16 = load float, ptr addrspace(1) %15, align 4, !dbg !639");
        assert_eq!(
            out,
            "  %__metile_check.1 = call ptr addrspace(1) @metile_emu_check_device(ptr addrspace(1) %15, \
             i64 ptrtoint (ptr getelementptr (float, ptr null, i32 1) to i64), i32 0), !dbg !639\n\
             \x20 %16 = load float, ptr addrspace(1) %__metile_check.1, align 4, !dbg !639\n"
        );
        let out = checked(
            "  store <4 x float> <float 1.0, float 2.0, float 3.0, float 4.0>, ptr addrspace(1) %p, align 16",
        );
        assert!(out.contains("@metile_emu_check_device(ptr addrspace(1) %p, i64 ptrtoint (ptr getelementptr (<4 x float>, ptr null, i32 1) to i64), i32 1)\n"), "{out}");
        assert!(out.ends_with("store <4 x float> <float 1.0, float 2.0, float 3.0, float 4.0>, ptr addrspace(1) %__metile_check.1, align 16\n"), "{out}");
    }

    #[test]
    fn integers_cast_to_device_pointers_are_tagged() {
        let out = checked("  %5 = inttoptr i64 %4 to ptr addrspace(1), !dbg !77");
        assert!(out.contains("  %__metile_tagged.1 = call i64 @metile_emu_tag_loaded_address(i64 %4), !dbg !77\n  %5 = inttoptr i64 %__metile_tagged.1 to ptr addrspace(1), !dbg !77\n"), "{out}");
    }

    #[test]
    fn the_shims_own_casts_are_not_tagged() {
        let ir =
            "define linkonce_odr hidden ptr addrspace(1) @metile_emu_check_device(ptr addrspace(1) %0) {\n\
                  \x20 %13 = inttoptr i64 %12 to ptr addrspace(1)\n}\n\
                  define void @k(ptr addrspace(1) %0) {\n\
                  \x20 %5 = inttoptr i64 %4 to ptr addrspace(1)\n}\n";
        let out = instrument(ir).expect("instrumentable");
        assert!(
            out.contains("  %13 = inttoptr i64 %12 to ptr addrspace(1)\n"),
            "{out}"
        );
        assert!(
            out.contains("  %5 = inttoptr i64 %__metile_tagged.1 to ptr addrspace(1)\n"),
            "{out}"
        );
    }

    #[test]
    fn storing_a_device_pointer_to_the_stack_is_not_an_access() {
        let line = "  store ptr addrspace(1) %0, ptr %9, align 8";
        assert_eq!(checked(line), format!("{line}\n"));
        let line = "  %271 = load ptr addrspace(1), ptr %9, align 8, !dbg !101";
        assert_eq!(checked(line), format!("{line}\n"));
    }

    #[test]
    fn volatile_accesses_are_threadgroup_accesses() {
        let out = checked("  store volatile float %403, ptr %407, align 4, !dbg !232");
        assert!(out.contains("call ptr @metile_emu_check_threadgroup(ptr %407, i64 ptrtoint (ptr getelementptr (float, ptr null, i32 1) to i64), i32 1), !dbg !232"), "{out}");
        assert_eq!(
            checked("  %5 = load i32, ptr %4, align 4"),
            "  %5 = load i32, ptr %4, align 4\n"
        );
    }

    #[test]
    fn constant_expression_operands_and_constant_space() {
        let line = "  %1 = load i32, ptr addrspace(2) getelementptr inbounds ([4 x i32], ptr addrspace(2) @t, i64 0, i64 1), align 4";
        let out = checked(line);
        assert!(out.contains("@metile_emu_check_constant(ptr addrspace(2) getelementptr inbounds ([4 x i32], ptr addrspace(2) @t, i64 0, i64 1), i64"), "{out}");
        assert!(
            out.contains("%1 = load i32, ptr addrspace(2) %__metile_check.1, align 4"),
            "{out}"
        );
    }

    #[test]
    fn atomics_and_memory_intrinsics() {
        let out = checked("  %r = atomicrmw add ptr addrspace(1) %p, i32 %v monotonic, align 4");
        assert!(out.contains("@metile_emu_check_device(ptr addrspace(1) %p, i64 ptrtoint (ptr getelementptr (i32, ptr null, i32 1) to i64), i32 1)"), "{out}");
        let out =
            checked("  %r = cmpxchg weak ptr addrspace(1) %p, i32 %e, i32 %d monotonic monotonic, align 4");
        assert!(
            out.contains("cmpxchg weak ptr addrspace(1) %__metile_check.1, i32 %e"),
            "{out}"
        );
        let out = checked(
            "  call void @llvm.memcpy.p1.p2.i64(ptr addrspace(1) align 4 %dst, ptr addrspace(2) noundef align 4 dereferenceable(8) %src, i64 %n, i1 false), !dbg !7",
        );
        assert!(
            out.contains("@metile_emu_check_device(ptr addrspace(1) %dst, i64 %n, i32 1), !dbg !7"),
            "{out}"
        );
        assert!(
            out.contains("@metile_emu_check_constant(ptr addrspace(2) %src, i64 %n, i32 0), !dbg !7"),
            "{out}"
        );
        assert!(out.contains("(ptr addrspace(1) align 4 %__metile_check.2, ptr addrspace(2) noundef align 4 dereferenceable(8) %__metile_check.1, i64 %n"), "{out}");
        let line = "  call void @llvm.memcpy.p0.p0.i64(ptr align 4 %a, ptr align 4 %b, i64 16, i1 false)";
        assert_eq!(checked(line), format!("{line}\n"));
        let out = checked("  call void @llvm.memset.p0.i64(ptr align 4 %a, i8 0, i64 16, i1 true)");
        assert!(
            out.contains("@metile_emu_check_threadgroup(ptr %a, i64 16, i32 1)"),
            "{out}"
        );
    }

    #[test]
    fn program_scope_constants_are_listed() {
        let ir = "@_ZL1w = internal addrspace(2) constant [4 x float] [float 1.0, float 2.0, float 3.0, float 4.0], align 4\n\
                  @metile_emu_constant_globals = external hidden constant [0 x %\"struct.metile_emu::ConstantGlobal\"], align 8\n\
                  @metile_emu_constant_global_count = external hidden constant i64, align 8\n";
        let out = checked(ir);
        assert!(out.contains("@metile_emu_constant_globals = hidden constant [1 x { ptr addrspace(2), i64 }] [{ ptr addrspace(2), i64 } { ptr addrspace(2) @_ZL1w, i64 ptrtoint (ptr getelementptr ([4 x float], ptr null, i32 1) to i64) }], align 8"), "{out}");
        assert!(
            out.contains("@metile_emu_constant_global_count = hidden constant i64 1, align 8"),
            "{out}"
        );
    }

    #[test]
    fn unreadable_accesses_are_refused() {
        assert!(instrument("  %1 = load float").is_err());
    }
}
