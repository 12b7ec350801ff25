//! The textual form of Tile IR (`METILE_DEBUG=tile_ir`). Deterministic: the same
//! function prints the same bytes in every process, so the text doubles as a cache key.

use crate::tile_ir::*;
use std::fmt::Write;

pub fn print_function(f: &Function) -> String {
    let mut out = String::new();
    let params: Vec<String> = f
        .params
        .iter()
        .map(|p| match p.divisibility {
            1 => format!("{}: {} /*{}*/", p.value, f.ty(p.value), p.name),
            d => format!("{}: {} {{divisible {d}}} /*{}*/", p.value, f.ty(p.value), p.name),
        })
        .collect();
    let _ = write!(out, "tile.func @{}({})", f.name, params.join(", "));
    if !f.constexprs.is_empty() {
        let cs: Vec<String> = f
            .constexprs
            .iter()
            .map(|(k, v)| format!("{k}={}", constexpr_text(v)))
            .collect();
        let _ = write!(out, " constexprs {{{}}}", cs.join(", "));
    }
    if let Some(t) = f.threads_per_group {
        let _ = write!(out, " threads {t}");
    }
    out.push_str(" {\n");
    print_block_ops(f, &f.body, 1, &mut out);
    out.push_str("}\n");
    out
}

/// A constexpr's value as written (its Python `repr`), quoted as a Rust
/// string when it would not read back as one value (`(1, 2)`, `''`, text
/// with braces, quotes or surrounding spaces).
fn constexpr_text(value: &str) -> String {
    let bare =
        !value.is_empty() && value.trim() == value && !value.contains([',', '{', '}', '"', '\\', '\n', '=']);
    if bare {
        value.to_string()
    } else {
        format!("{value:?}")
    }
}

fn attrs(kind: &OpKind) -> String {
    match kind {
        OpKind::ProgramId { axis } | OpKind::NumPrograms { axis } => format!(" {axis}"),
        OpKind::Constant(l) => format!(" {l}"),
        OpKind::Arange { start, end } => format!(" {start}, {end}"),
        OpKind::ExpandDims { axis } => format!(" axis={axis}"),
        OpKind::Permute { dims } => {
            let dims: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
            format!(" dims=[{}]", dims.join(","))
        }
        OpKind::Take { axis, index } => format!(" axis={axis} index={index}"),
        OpKind::Load { has_mask, has_other } => {
            format!("{}{}", flag(*has_mask, " masked"), flag(*has_other, " other"))
        }
        OpKind::Store { has_mask } => flag(*has_mask, " masked").to_string(),
        OpKind::Atomic {
            sem, scope, has_mask, ..
        } => format!(" {} {}{}", sem.name(), scope.name(), flag(*has_mask, " masked")),
        OpKind::TileLoad { rows, cols } | OpKind::TileStore { rows, cols } => {
            format!(" [{rows},{cols}]")
        }
        OpKind::Reduce { axis: Some(a), .. } => format!(" axis={a}"),
        OpKind::Scan { axis, reverse, .. } => format!(" axis={axis}{}", flag(*reverse, " reverse")),
        OpKind::Sort { axis, descending } => format!(" axis={axis}{}", flag(*descending, " descending")),
        OpKind::Swizzle { pattern, block_size } => format!(" {} block={block_size}", pattern.name()),
        OpKind::Shared { size } => format!(" size={size}"),
        OpKind::SimdgroupRole { role, num_roles } => format!(" role={role}/{num_roles}"),
        OpKind::For { num_stages: Some(n) } => format!(" stages={n}"),
        // Strings print as Rust debug strings: quoted and escaped, one line.
        OpKind::Print { prefix, hex } => format!(" {prefix:?}{}", flag(*hex, " hex")),
        OpKind::Assert { message } => format!(" {message:?}"),
        OpKind::Assume { fact, value } => format!(" {}={value}", fact.name()),
        _ => String::new(),
    }
}

fn flag(on: bool, text: &'static str) -> &'static str {
    if on {
        text
    } else {
        ""
    }
}

fn list(values: &[ValueId]) -> String {
    values
        .iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn print_block_ops(f: &Function, block: &Block, depth: usize, out: &mut String) {
    let pad = "  ".repeat(depth);
    for op in &block.ops {
        out.push_str(&pad);
        if !op.results.is_empty() {
            let _ = write!(out, "{} = ", list(&op.results));
        }
        let _ = write!(out, "{}{}", op.kind.name(), attrs(&op.kind));
        if !op.operands.is_empty() {
            let _ = write!(out, " {}", list(&op.operands));
        }
        if !op.results.is_empty() {
            let tys: Vec<String> = op.results.iter().map(|&r| f.ty(r).to_string()).collect();
            let _ = write!(out, " : {}", tys.join(", "));
        }
        for (i, region) in op.regions.iter().enumerate() {
            if i > 0 {
                out.push_str(if matches!(op.kind, OpKind::While) {
                    " do"
                } else {
                    " else"
                });
            }
            out.push_str(" {");
            if !region.args.is_empty() {
                let args: Vec<String> = region.args.iter().map(|&a| format!("{a}: {}", f.ty(a))).collect();
                let _ = write!(out, " ^({})", args.join(", "));
            }
            out.push('\n');
            print_block_ops(f, region, depth + 1, out);
            out.push_str(&pad);
            out.push('}');
        }
        let _ = writeln!(out, "  // {}", op.loc);
    }
}
