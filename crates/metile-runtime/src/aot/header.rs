//! The C header of an artifact: the launch constants, a struct of the run-time
//! arguments in launch order, the grid rule as a C function, and the compiled
//! function's parameter list (what a C host passes to `cuLaunchKernel` or sets
//! on a Metal compute encoder).

use super::grid::GridRule;
use super::manifest::{EntryParameter, Extent, Language, Manifest, ParamKind, TensorMap};
use metile_ir::DType;
use std::fmt::Write;

/// A C identifier made of `name` (letters, digits and `_`).
pub fn c_identifier(name: &str) -> String {
    let mut id: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if id.is_empty() || id.starts_with(|c: char| c.is_ascii_digit()) {
        id.insert(0, '_');
    }
    id
}

/// The C type of a value of `dtype` (fp8 and 16-bit floats as their bits).
fn c_type(dtype: &str) -> &'static str {
    match DType::parse(dtype) {
        Some(DType::Bool) => "bool",
        Some(DType::I8) => "int8_t",
        Some(DType::U8 | DType::F8E4M3 | DType::F8E5M2) => "uint8_t",
        Some(DType::I16) => "int16_t",
        Some(DType::U16 | DType::F16 | DType::BF16) => "uint16_t",
        Some(DType::I32) => "int32_t",
        Some(DType::U32) => "uint32_t",
        Some(DType::I64) => "int64_t",
        Some(DType::U64) => "uint64_t",
        Some(DType::F32) => "float",
        Some(DType::F64) => "double",
        None => "void",
    }
}

/// What a tensor-map parameter holds: the matrix (or matrices, stacked) of
/// the buffer called `buffer` it describes, and the box one copy moves.
fn describe_tensor_map(m: &TensorMap, buffer: &str, manifest: &Manifest) -> String {
    let matrices = if m.stacked {
        "matrices, one after another, each a"
    } else {
        "a"
    };
    format!(
        "a CUtensorMap by value: {buffer} as {matrices} {} x {} matrix of {} (row stride {}), boxes of {} x {}, \
         {}-byte swizzle",
        describe_extent(m.rows, manifest),
        describe_extent(m.cols, manifest),
        m.dtype,
        describe_extent(m.stride, manifest),
        m.box_rows,
        m.box_cols,
        m.swizzle_bytes
    )
}

fn describe_extent(e: Extent, manifest: &Manifest) -> String {
    match e {
        Extent::Arg(i) => manifest
            .parameters
            .get(i)
            .map_or_else(|| format!("argument {i}"), |p| p.name.clone()),
        Extent::Const(c) => c.to_string(),
    }
}

/// The header's text.
pub fn header(manifest: &Manifest, rule: Option<&GridRule>) -> String {
    let id = c_identifier(&manifest.kernel);
    let upper = id.to_ascii_uppercase();
    let guard = format!("METILE_AOT_{upper}_H");
    let mut h = String::new();
    let language = match manifest.language {
        Language::Msl => format!("MSL {}", manifest.language_version),
        Language::Cuda => format!("CUDA C++ for {}", manifest.nvrtc_arch.as_deref().unwrap_or("?")),
    };
    let _ = writeln!(
        h,
        "/* meTile ahead-of-time artifact: kernel `{}` for {} ({language}).\n * Written by `python -m metile \
         compile`; manifest.json describes the same in full.\n * Source: {} (sha256 {}). */",
        manifest.kernel, manifest.target, manifest.source.file, manifest.source.sha256
    );
    let _ = writeln!(
        h,
        "#ifndef {guard}\n#define {guard}\n\n#include <stdbool.h>\n#include <stdint.h>\n"
    );
    let _ = writeln!(h, "#define {upper}_ENTRY_POINT \"{}\"", manifest.entry_point);
    let _ = writeln!(
        h,
        "#define {upper}_THREADS_PER_GROUP {}",
        manifest.threads_per_group
    );
    let _ = writeln!(
        h,
        "#define {upper}_SHARED_MEMORY_BYTES {}",
        manifest.shared_memory_bytes
    );
    let _ = writeln!(
        h,
        "#define {upper}_BUFFER_ALIGNMENT {}",
        manifest.buffer_alignment
    );
    for c in &manifest.constexprs {
        if c.value.is_number() {
            let _ = writeln!(
                h,
                "#define {upper}_{} {} /* constexpr */",
                c_identifier(&c.name),
                c.value
            );
        } else {
            let _ = writeln!(h, "/* constexpr {} = {} */", c.name, c.value);
        }
    }
    let _ = writeln!(
        h,
        "\n/* The run-time arguments, in launch order. */\ntypedef struct {{"
    );
    for p in &manifest.parameters {
        let name = c_identifier(&p.name);
        match p.kind {
            ParamKind::Pointer => {
                let constness = if p.written { "" } else { "const " };
                let access = if p.written { "written" } else { "read only" };
                let _ = writeln!(
                    h,
                    "    {constness}{}* {name}; /* {} elements, {access}; base aligned to {} bytes */",
                    c_type(&p.dtype),
                    p.dtype,
                    manifest.buffer_alignment
                );
            }
            ParamKind::Scalar => {
                let multiple = if p.multiple_of > 1 {
                    format!("; a multiple of {}", p.multiple_of)
                } else {
                    String::new()
                };
                let _ = writeln!(h, "    {} {name}; /* {}{multiple} */", c_type(&p.dtype), p.dtype);
            }
        }
    }
    let _ = writeln!(h, "}} {id}_args;\n");
    if let (Some(rule), Some(text)) = (rule, &manifest.grid) {
        let axes = rule.to_c(&|name| {
            if manifest.parameters.iter().any(|p| p.name == name) {
                format!("args->{}", c_identifier(name))
            } else {
                format!("{upper}_{}", c_identifier(name))
            }
        });
        let _ = writeln!(
            h,
            "/* The grid rule \"{text}\" (C division). An extent outside 0..UINT32_MAX is an error the Rust \
             runtime reports; check it here before launching. */\nstatic inline void {id}_grid(const {id}_args* \
             args, int64_t grid[3]) {{\n    (void)args;\n    grid[0] = {};\n    grid[1] = {};\n    grid[2] = {};\n}}\n",
            axes[0], axes[1], axes[2]
        );
    }
    let _ = writeln!(h, "/* The compiled function's parameters, in declaration order:");
    let mut tg = 0;
    for e in &manifest.entry_parameters {
        let name = |i: usize| manifest.parameters.get(i).map_or("?", |p| p.name.as_str());
        let line = match e {
            EntryParameter::Buffer { index, msl_type } => match msl_type {
                Some(t) => format!("{t} {} at [[buffer({index})]]", name(*index)),
                None => format!("the device address of {}", name(*index)),
            },
            EntryParameter::Scalar { index, msl_type } => match msl_type {
                Some(t) => format!("{t} {} at [[buffer({index})]]", name(*index)),
                None => format!("{} by value", name(*index)),
            },
            EntryParameter::Threadgroup { msl_type, bytes } => {
                tg += 1;
                format!("{msl_type} of {bytes} bytes at [[threadgroup({})]]", tg - 1)
            }
            EntryParameter::Builtin { builtin } => format!("[[{builtin}]] (set by Metal)"),
            EntryParameter::MinusOne => "an int holding -1".to_string(),
            EntryParameter::TensorMap(m) => describe_tensor_map(m, name(m.buffer), manifest),
            EntryParameter::TensorMapReady(m) => {
                format!(
                    "an int: 1 when the tensor map of {} was built, else 0",
                    name(m.buffer)
                )
            }
        };
        let _ = writeln!(h, " *   {line}");
    }
    let _ = writeln!(h, " */\n\n#endif /* {guard} */");
    h
}
