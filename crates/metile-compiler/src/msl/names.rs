//! MSL identifiers and types for GPU IR entities.
//!
//! Kernel and parameter names come from Python; they are kept when they are
//! valid C++ identifiers that cannot collide with MSL keywords, types, the
//! emitter's own names (`v12`, `r3`, `tg0`, `c7`, the builtins) or its helpers
//! (`metile_*`), and are otherwise made so (invalid characters become `_`, a
//! clash gets a `_` suffix).

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
    // MSL qualifiers, types and namespaces.
    "kernel",
    "vertex",
    "fragment",
    "device",
    "constant",
    "threadgroup",
    "threadgroup_imageblock",
    "thread",
    "ray_data",
    "object_data",
    "half",
    "bfloat",
    "uchar",
    "schar",
    "ushort",
    "uint",
    "ulong",
    "size_t",
    "ptrdiff_t",
    "metal",
    "precise",
    "fast",
    "vec",
    "packed_vec",
    "simdgroup_matrix",
    // Metal 4 tensor ops (`using namespace mpp::tensor_ops`).
    "mpp",
    "tensor_ops",
    "matmul2d",
    "matmul2d_descriptor",
    "execution_simdgroup",
    "remove_addrspace_t",
    "texture",
    "sampler",
    "array",
    "atomic",
    "mem_flags",
    "as_type",
    "select",
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
    "simd_shuffle_xor",
    "simd_broadcast",
    "threadgroup_barrier",
    "INFINITY",
    "NAN",
    // CUDA builtins and the float math functions the CUDA emitter calls.
    "threadIdx",
    "blockIdx",
    "blockDim",
    "gridDim",
    "warpSize",
    "uint3",
    "dim3",
    "memcpy",
    "expf",
    "logf",
    "sqrtf",
    "tanhf",
    "fabsf",
    "fmaxf",
    "fminf",
    "fmodf",
    "truncf",
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

/// True for vector type names such as `float4` or `half2`.
fn is_vector_type(name: &str) -> bool {
    let base = name.trim_end_matches(|c: char| c.is_ascii_digit());
    base.len() < name.len()
        && [
            "bool", "char", "uchar", "short", "ushort", "int", "uint", "long", "ulong", "half", "bfloat",
            "float",
        ]
        .contains(&base.trim_start_matches("packed_"))
}

/// A valid, non-clashing MSL identifier for `name`, unique within `taken`.
pub fn identifier(name: &str, taken: &mut HashSet<String>) -> String {
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
    while RESERVED.contains(&id.as_str()) || is_generated(&id) || is_vector_type(&id) || taken.contains(&id) {
        id.push('_');
    }
    taken.insert(id.clone());
    id
}

/// The MSL name of a scalar type (CUDA's are the same but for i8, see
/// `Lang::scalar`). fp8 values are their bits: `uchar`. Metal has no `double`;
/// kernels using f64 are refused before emission (`portability.rs`).
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

pub fn vector_type(d: DType, lanes: u8) -> String {
    format!("{}{lanes}", scalar_type(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_kept_when_safe_and_fixed_otherwise() {
        let mut taken = HashSet::new();
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
    }
}
