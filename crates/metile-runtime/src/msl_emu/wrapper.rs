//! The entry description of a kernel and the C++ entry wrapper generated from
//! it. The wrapper is appended after the MSL text (never edited into it): it
//! calls the kernel with the launch's buffers and scalars, the threadgroup
//! memory the emulator allocates and the builtin values of each thread, and
//! exports the C entry points of `ffi.rs`.

use super::threadgroup_vars::ThreadgroupVariable;
use super::EmuError;
use std::fmt::Write as _;

/// How to call one kernel: its name and its parameters in declaration order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EntrySpec {
    /// The kernel's name as declared, e.g. `softmax` (or `ns::softmax`).
    pub kernel_name: String,
    pub params: Vec<EntryParam>,
}

/// One kernel parameter. `msl_type` is the parameter's type exactly as written
/// in the MSL declaration.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum EntryParam {
    /// `device T*` / `device const T*` / `constant T*`; the launch passes the
    /// buffer's base pointer and byte length.
    Buffer { msl_type: String },
    /// `constant T&`; the launch passes the scalar's bytes.
    Scalar { msl_type: String },
    /// `threadgroup T*`, allocated by the emulator per threadgroup and filled
    /// with a poison pattern (all bytes 0xFF). Allocations are placed at
    /// multiples of 16 bytes, as Metal requires; accesses are checked against
    /// `bytes`.
    Threadgroup { msl_type: String, bytes: usize },
    /// A builtin attribute; the wrapper passes the right value in the type the
    /// kernel declared (`uint`, `ushort`, `uint3`, ...).
    Builtin(Builtin),
}

/// The builtin kernel attributes the emulator provides. Threadgroups are
/// one-dimensional: positions in the threadgroup are `(index, 0, 0)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    ThreadgroupPositionInGrid,
    ThreadgroupsPerGrid,
    ThreadPositionInThreadgroup,
    ThreadsPerThreadgroup,
    ThreadPositionInGrid,
    ThreadsPerGrid,
    ThreadIndexInThreadgroup,
    ThreadIndexInSimdgroup,
    SimdgroupIndexInThreadgroup,
    SimdgroupsPerThreadgroup,
    ThreadsPerSimdgroup,
}

impl Builtin {
    fn shim_kind(self) -> &'static str {
        match self {
            Builtin::ThreadgroupPositionInGrid => "threadgroup_position_in_grid",
            Builtin::ThreadgroupsPerGrid => "threadgroups_per_grid",
            Builtin::ThreadPositionInThreadgroup => "thread_position_in_threadgroup",
            Builtin::ThreadsPerThreadgroup => "threads_per_threadgroup",
            Builtin::ThreadPositionInGrid => "thread_position_in_grid",
            Builtin::ThreadsPerGrid => "threads_per_grid",
            Builtin::ThreadIndexInThreadgroup => "thread_index_in_threadgroup",
            Builtin::ThreadIndexInSimdgroup => "thread_index_in_simdgroup",
            Builtin::SimdgroupIndexInThreadgroup => "simdgroup_index_in_threadgroup",
            Builtin::SimdgroupsPerThreadgroup => "simdgroups_per_threadgroup",
            Builtin::ThreadsPerSimdgroup => "threads_per_simdgroup",
        }
    }
}

/// What the launch path needs to know about the parameters.
#[derive(Clone, Debug)]
pub(crate) struct EntryLayout {
    /// Kind of each launch argument (Buffer/Scalar params in order): true for a scalar.
    pub arg_is_scalar: Vec<bool>,
    /// Per launch argument: its MSL type, for error messages.
    pub arg_types: Vec<String>,
    /// Per threadgroup allocation (parameters, then variables declared in the
    /// kernel), what error messages call it.
    pub threadgroup_labels: Vec<String>,
}

fn round_up_16(n: usize) -> Option<usize> {
    n.checked_add(15).map(|v| v & !15)
}

fn check_identifier_path(name: &str) -> Result<(), EmuError> {
    let valid_part = |part: &str| {
        let mut chars = part.chars();
        matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    if name.split("::").all(valid_part) {
        Ok(())
    } else {
        Err(EmuError::BadEntry(format!(
            "kernel name {name:?} is not a C++ identifier"
        )))
    }
}

/// Checks a parameter type string before it is pasted into C++: only the
/// characters a type needs, and the expected shape (`*` or `&`, address space).
fn check_type(msl_type: &str, what: &str, ending: char, address_spaces: &[&str]) -> Result<String, EmuError> {
    let t = msl_type.trim();
    let allowed = |c: char| c.is_ascii_alphanumeric() || " _*&:<>,".contains(c);
    let has_space = t
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .any(|w| address_spaces.contains(&w));
    if t.is_empty() || !t.chars().all(allowed) || !t.ends_with(ending) || !has_space {
        return Err(EmuError::BadEntry(format!(
            "{what} parameter type {msl_type:?} must be a {} type ending in '{ending}'",
            address_spaces.join("/")
        )));
    }
    Ok(t.to_string())
}

/// Generates the wrapper appended after the MSL text; `variables` are the
/// kernel's own threadgroup variables (see `threadgroup_vars`).
pub(crate) fn generate(
    entry: &EntrySpec,
    variables: &[ThreadgroupVariable],
) -> Result<(String, EntryLayout), EmuError> {
    check_identifier_path(&entry.kernel_name)?;
    let mut call_args = Vec::new();
    let mut scalar_cases = String::new();
    let mut arg_is_scalar = Vec::new();
    let mut arg_types = Vec::new();
    let mut threadgroup_bytes = 0usize;
    let mut threadgroup_params: Vec<(usize, usize)> = Vec::new();
    let mut threadgroup_labels = Vec::new();
    for param in &entry.params {
        match param {
            EntryParam::Buffer { msl_type } => {
                let t = check_type(msl_type, "buffer", '*', &["device", "constant"])?;
                call_args.push(format!("({t})args[{}]", arg_is_scalar.len()));
                arg_is_scalar.push(false);
                arg_types.push(t);
            }
            EntryParam::Scalar { msl_type } => {
                let t = check_type(msl_type, "scalar", '&', &["constant"])?;
                let pointee = t.trim_end_matches('&').trim_end();
                let index = arg_is_scalar.len();
                call_args.push(format!("*({pointee}*)args[{index}]"));
                let _ = writeln!(scalar_cases, "    case {index}: return sizeof({pointee});");
                arg_is_scalar.push(true);
                arg_types.push(t);
            }
            EntryParam::Threadgroup { msl_type, bytes } => {
                let t = check_type(msl_type, "threadgroup", '*', &["threadgroup"])?;
                if *bytes == 0 {
                    return Err(EmuError::BadEntry(format!(
                        "threadgroup parameter {t:?} has zero bytes"
                    )));
                }
                call_args.push(format!(
                    "({t})metile_emu::threadgroup_address(group, {}, {threadgroup_bytes})",
                    threadgroup_params.len()
                ));
                threadgroup_labels.push(format!(
                    "threadgroup parameter {} ({t})",
                    threadgroup_params.len()
                ));
                threadgroup_params.push((threadgroup_bytes, *bytes));
                threadgroup_bytes = round_up_16(*bytes)
                    .and_then(|b| threadgroup_bytes.checked_add(b))
                    .ok_or_else(|| EmuError::BadEntry("threadgroup memory size overflows".into()))?;
            }
            EntryParam::Builtin(builtin) => {
                call_args.push(format!(
                    "metile_emu::builtin_value(group, tid, metile_emu::BuiltinKind::{})",
                    builtin.shim_kind()
                ));
            }
        }
    }
    let mut text = String::new();
    text.push_str(
        "\n\n// ---- meTile MSL emulator entry wrapper: appended after the kernel source, not part of it ----\n",
    );
    text.push_str("#include \"metile_emu/runtime_impl.h\"\n\n");
    text.push_str("namespace metile_emu_generated {\n");
    text.push_str("static void entry(metile_emu::Group* group, metile_emu::u32 tid) {\n");
    text.push_str("  const void* const* args = group->launch->args;\n");
    text.push_str("  (void)args;\n  (void)tid;\n");
    let _ = writeln!(text, "  ::{}(", entry.kernel_name);
    let joined = call_args
        .iter()
        .map(|a| format!("      {a}"))
        .collect::<Vec<_>>()
        .join(",\n");
    text.push_str(&joined);
    text.push_str(");\n}\n}  // namespace metile_emu_generated\n\n");
    text.push_str(&threadgroup_tables(
        entry,
        &threadgroup_params,
        threadgroup_bytes,
        variables,
    ));
    threadgroup_labels.extend(
        variables
            .iter()
            .map(|v| format!("threadgroup variable `{}` (declared at line {})", v.name, v.line)),
    );
    text.push_str(
        "METILE_EXPORT int metile_emu_run_group(const MetileEmuLaunch* launch, unsigned x, unsigned y, unsigned z) {\n\
         \x20 return metile_emu::run_group(launch, x, y, z, &metile_emu_generated::entry);\n}\n",
    );
    text.push_str(
        "METILE_EXPORT size_t metile_emu_scratch_bytes(unsigned threads) { return metile_emu::scratch_bytes(threads); }\n",
    );
    text.push_str(
        "METILE_EXPORT unsigned metile_emu_abi_version(void) { return metile_emu::abi_version; }\n",
    );
    text.push_str(
        "METILE_EXPORT void metile_emu_abort_after_fault(void) { metile_emu::abort_after_fault(); }\n",
    );
    text.push_str("METILE_EXPORT unsigned long metile_emu_scalar_param_bytes(unsigned index) {\n");
    text.push_str("  switch (index) {\n");
    text.push_str(&scalar_cases);
    text.push_str("    default: return 0;\n  }\n}\n");
    text.push_str(
        "METILE_EXPORT int metile_emu_checks(void) { return METILE_EMU_CHECKS; }\n\
         METILE_EXPORT void metile_emu_set_extent_table(void* table) { metile_emu::extent_table = (metile_emu::Extent*)table; }\n\
         METILE_EXPORT unsigned metile_emu_profile_counter_count(void) {\n\
         \x20 return METILE_EMU_PROFILE ? metile_emu::profile_counter_count : 0;\n}\n",
    );
    Ok((
        text,
        EntryLayout {
            arg_is_scalar,
            arg_types,
            threadgroup_labels,
        },
    ))
}

/// The threadgroup allocations as C++: the parameters' offsets and sizes
/// (known here), then the variables declared in the kernel, whose sizes only
/// the compiler knows (`sizeof` of their types, written in the kernel's
/// namespace so the names resolve as they do in the kernel), each at the next
/// multiple of 16 bytes. Exported so the host learns the layout.
fn threadgroup_tables(
    entry: &EntrySpec,
    params: &[(usize, usize)],
    params_end: usize,
    variables: &[ThreadgroupVariable],
) -> String {
    let mut text = String::new();
    let namespace = entry.kernel_name.rsplit_once("::").map(|(ns, _)| ns);
    let sizes: Vec<String> = variables
        .iter()
        .map(|v| format!("sizeof({})", v.type_id))
        .collect();
    let sizes_list = if sizes.is_empty() {
        "0".to_string()
    } else {
        sizes.join(", ")
    };
    let open = namespace
        .map(|ns| format!("namespace {ns} {{\n"))
        .unwrap_or_default();
    let close = if namespace.is_some() { "}\n" } else { "" };
    let _ = write!(
        text,
        "{open}constexpr unsigned long metile_emu_threadgroup_variable_sizes[] = {{{sizes_list}}};\n{close}"
    );
    let sizes_name = match namespace {
        Some(ns) => format!("{ns}::metile_emu_threadgroup_variable_sizes"),
        None => "::metile_emu_threadgroup_variable_sizes".to_string(),
    };
    let _ = write!(
        text,
        "namespace metile_emu_generated {{\n\
         constexpr unsigned long variable_offset(unsigned k) {{\n\
         \x20 unsigned long offset = {params_end};\n\
         \x20 for (unsigned i = 0; i < k; ++i) offset += ({sizes_name}[i] + 15) & ~15ul;\n\
         \x20 return offset;\n}}\n\
         constexpr unsigned long param_offsets[] = {{{}}};\n\
         constexpr unsigned long param_bytes[] = {{{}}};\n\
         }}  // namespace metile_emu_generated\n",
        params
            .iter()
            .map(|p| p.0.to_string())
            .chain(["0".into()])
            .collect::<Vec<_>>()
            .join(", "),
        params
            .iter()
            .map(|p| p.1.to_string())
            .chain(["0".into()])
            .collect::<Vec<_>>()
            .join(", "),
    );
    let offsets: Vec<String> = (0..=variables.len())
        .map(|k| format!("metile_emu_generated::variable_offset({k})"))
        .collect();
    let _ = write!(
        text,
        "extern \"C\" __attribute__((visibility(\"hidden\"))) const metile_emu::u32 \
         metile_emu_threadgroup_parameter_count = {};\n\
         extern \"C\" __attribute__((visibility(\"hidden\"))) const unsigned long \
         metile_emu_threadgroup_variable_offsets[] = {{{}}};\n",
        params.len(),
        offsets.join(", ")
    );
    let _ = write!(
        text,
        "#define METILE_EXPORT extern \"C\" __attribute__((visibility(\"default\")))\n\
         METILE_EXPORT unsigned metile_emu_threadgroup_allocation_count(void) {{ return {}; }}\n\
         METILE_EXPORT void metile_emu_threadgroup_allocation(unsigned i, unsigned long* offset, unsigned long* bytes) {{\n\
         \x20 if (i < {p}) {{ *offset = metile_emu_generated::param_offsets[i]; *bytes = metile_emu_generated::param_bytes[i]; }}\n\
         \x20 else {{ *offset = metile_emu_threadgroup_variable_offsets[i - {p}]; *bytes = {sizes_name}[i - {p}]; }}\n}}\n",
        params.len() + variables.len(),
        p = params.len(),
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapper_calls_kernel_with_each_parameter() {
        let entry = EntrySpec {
            kernel_name: "softmax".into(),
            params: vec![
                EntryParam::Buffer {
                    msl_type: "device const float*".into(),
                },
                EntryParam::Scalar {
                    msl_type: "constant int&".into(),
                },
                EntryParam::Threadgroup {
                    msl_type: "threadgroup float*".into(),
                    bytes: 100,
                },
                EntryParam::Threadgroup {
                    msl_type: "threadgroup half*".into(),
                    bytes: 16,
                },
                EntryParam::Builtin(Builtin::ThreadIndexInSimdgroup),
            ],
        };
        let variables = [ThreadgroupVariable {
            name: "partial".into(),
            type_id: "float[256]".into(),
            line: 7,
        }];
        let (text, layout) = generate(&entry, &variables).expect("valid entry");
        assert!(text.contains("(device const float*)args[0]"));
        assert!(text.contains("*(constant int*)args[1]"));
        assert!(text.contains("(threadgroup float*)metile_emu::threadgroup_address(group, 0, 0)"));
        assert!(text.contains("(threadgroup half*)metile_emu::threadgroup_address(group, 1, 112)"));
        assert!(text.contains("metile_emu_threadgroup_variable_sizes[] = {sizeof(float[256])}"));
        assert!(text.contains("unsigned long offset = 128;"));
        assert!(text.contains("BuiltinKind::thread_index_in_simdgroup"));
        assert!(text.contains("case 1: return sizeof(constant int);"));
        assert!(text.contains("metile_emu_abort_after_fault"));
        assert_eq!(layout.arg_is_scalar, vec![false, true]);
        assert_eq!(
            layout.threadgroup_labels,
            [
                "threadgroup parameter 0 (threadgroup float*)",
                "threadgroup parameter 1 (threadgroup half*)",
                "threadgroup variable `partial` (declared at line 7)"
            ]
        );
    }

    #[test]
    fn rejects_types_that_are_not_plain_types() {
        let entry = EntrySpec {
            kernel_name: "k".into(),
            params: vec![EntryParam::Buffer {
                msl_type: "device float*); evil(".into(),
            }],
        };
        assert!(matches!(generate(&entry, &[]), Err(EmuError::BadEntry(_))));
        let entry = EntrySpec {
            kernel_name: "k".into(),
            params: vec![EntryParam::Scalar {
                msl_type: "device int&".into(),
            }],
        };
        assert!(matches!(generate(&entry, &[]), Err(EmuError::BadEntry(_))));
        let entry = EntrySpec {
            kernel_name: "1k".into(),
            params: vec![],
        };
        assert!(matches!(generate(&entry, &[]), Err(EmuError::BadEntry(_))));
    }
}
