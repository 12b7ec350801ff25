//! Identifiers and scalar type names for GPU IR entities.
//!
//! Kernel and parameter names come from Python; they are kept when they are
//! valid C++ identifiers that cannot collide with C++ keywords, the writer's
//! vocabulary, the emitter's own names (`v12`, `r3`, `tg0`, `c7`, the
//! builtins), its helpers (`metile_*`) or a word of any dialect, and are
//! otherwise made so (invalid characters become `_`, a clash gets a `_`
//! suffix). Every dialect's words count on every target, so a kernel's
//! identifiers are the same in all its sources.

use metile_ir::DType;
use std::collections::HashSet;

const RESERVED: &[&str] = &[
    // C++ keywords and alternative tokens.
    "alignas",
    "alignof",
    "and",
    "and_eq",
    "asm",
    "auto",
    "bitand",
    "bitor",
    "bool",
    "break",
    "case",
    "catch",
    "char",
    "class",
    "compl",
    "const",
    "constexpr",
    "const_cast",
    "continue",
    "decltype",
    "default",
    "delete",
    "do",
    "double",
    "dynamic_cast",
    "else",
    "enum",
    "explicit",
    "export",
    "extern",
    "false",
    "float",
    "for",
    "friend",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "mutable",
    "namespace",
    "new",
    "noexcept",
    "not",
    "not_eq",
    "nullptr",
    "operator",
    "or",
    "or_eq",
    "private",
    "protected",
    "public",
    "register",
    "reinterpret_cast",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "static_assert",
    "static_cast",
    "struct",
    "switch",
    "template",
    "this",
    "thread_local",
    "throw",
    "true",
    "try",
    "typedef",
    "typeid",
    "typename",
    "union",
    "unsigned",
    "using",
    "virtual",
    "void",
    "volatile",
    "wchar_t",
    "while",
    "xor",
    "xor_eq",
    "main",
    // The writer's vocabulary, which every dialect defines (`mod.rs`).
    "half",
    "bfloat",
    "uchar",
    "schar",
    "ushort",
    "uint",
    "ulong",
    "as_type",
    "min",
    "max",
    "abs",
    "fabs",
    "fmax",
    "fmin",
    "fmod",
    "trunc",
    "exp",
    "log",
    "sqrt",
    "tanh",
    "clamp",
    "isnan",
    "isinf",
    "simd_sum",
    "simd_max",
    "simd_min",
    "INFINITY",
    "NAN",
    // The emitter's builtin parameter names.
    "tid",
    "lane",
    "sgid",
    "tgpig",
    "tgpg",
];

/// True for `v12`, `r3`, `c7`, `tg0`: names the emitter gives its own entities.
fn is_generated(name: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    name.strip_prefix("tg").is_some_and(digits)
        || ["v", "r", "c"]
            .iter()
            .any(|p| name.strip_prefix(p).is_some_and(digits))
}

/// A valid, non-clashing identifier for `name`, unique within `taken`, that
/// is no word `reserved` names.
pub fn identifier(name: &str, taken: &mut HashSet<String>, reserved: fn(&str) -> bool) -> String {
    let mut id: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if id.is_empty() || id.starts_with(|c: char| c.is_ascii_digit()) {
        id.insert_str(0, "p_");
    }
    // Leading underscores (and double underscores) are reserved in C++.
    if id.starts_with('_') || id.contains("__") {
        id = format!("p{}", id.replace("__", "_u_"));
    }
    if id.starts_with("metile_") {
        id.insert_str(0, "p_");
    }
    while RESERVED.contains(&id.as_str()) || is_generated(&id) || reserved(&id) || taken.contains(&id) {
        id.push('_');
    }
    taken.insert(id.clone());
    id
}

/// The vocabulary's name of a scalar type (a dialect may spell a type its own
/// way: [`Dialect::scalar`](super::Dialect::scalar)). fp8 values are their
/// bits: `uchar`.
pub fn scalar_type(d: DType) -> &'static str {
    match d {
        DType::Bool => "bool",
        DType::I8 => "char",
        DType::U8 | DType::F8E4M3 | DType::F8E5M2 => "uchar",
        DType::I16 => "short",
        DType::U16 => "ushort",
        DType::I32 => "int",
        DType::U32 => "uint",
        DType::I64 => "long",
        DType::U64 => "ulong",
        DType::F16 => "half",
        DType::BF16 => "bfloat",
        DType::F32 => "float",
        DType::F64 => "double",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_kept_when_safe_and_fixed_otherwise() {
        let mut taken = HashSet::new();
        let identifier =
            |name: &str, taken: &mut HashSet<String>| identifier(name, taken, crate::reserved_by_a_dialect);
        assert_eq!(identifier("X", &mut taken), "X");
        assert_eq!(identifier("X", &mut taken), "X_");
        assert_eq!(identifier("half", &mut taken), "half_");
        assert_eq!(identifier("v12", &mut taken), "v12_");
        assert_eq!(identifier("tg0", &mut taken), "tg0_");
        assert_eq!(identifier("float4", &mut taken), "float4_");
        assert_eq!(identifier("tid", &mut taken), "tid_");
        assert_eq!(identifier("1st", &mut taken), "p_1st");
        assert_eq!(identifier("_x", &mut taken), "p_x");
        assert_eq!(identifier("é", &mut taken), "p_");
        assert_eq!(identifier("metile_f", &mut taken), "p_metile_f");
        assert_eq!(identifier("vector", &mut taken), "vector");
        // Every dialect's words count on every target: the names are the same in all sources.
        assert_eq!(identifier("threadIdx", &mut taken), "threadIdx_");
        assert_eq!(identifier("kernel", &mut taken), "kernel_");
        assert_eq!(identifier("fmaxf", &mut taken), "fmaxf_");
    }
}
