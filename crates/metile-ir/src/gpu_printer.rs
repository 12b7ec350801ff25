//! The textual form of GPU IR (`METILE_DEBUG=gpu_ir`). Deterministic: the same
//! function prints the same bytes in every process.

use crate::gpu_ir::*;
use crate::tile_ir::Literal;
use std::fmt::Write;

pub fn print_gpu_function(f: &GpuFunction) -> String {
    let mut out = String::new();
    let params: Vec<String> = f
        .params
        .iter()
        .map(|p| format!("{}: {} /*{}*/", p.value, f.ty(p.value), p.name))
        .collect();
    let _ = writeln!(
        out,
        "gpu.func @{}({}) threads {} {{",
        f.name,
        params.join(", "),
        f.threads_per_group
    );
    for (i, a) in f.threadgroup.iter().enumerate() {
        let purpose = match a.purpose {
            TgPurpose::User => "shared".to_string(),
            TgPurpose::Scratch => "scratch".to_string(),
            TgPurpose::Alias(of) => format!("reusing {of}"),
        };
        let _ = writeln!(
            out,
            "  threadgroup tg{i} {} = {}[{}] /*{purpose}, {} bytes*/",
            a.value,
            a.dtype,
            a.len,
            a.bytes()
        );
    }
    for (i, r) in f.regs.iter().enumerate() {
        let _ = writeln!(out, "  reg r{i}: {}[{}]", r.dtype, r.len);
    }
    print_block(f, &f.body, 1, &mut out);
    out.push_str("}\n");
    out
}

fn list(values: &[GpuValue]) -> String {
    values
        .iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn literal_text(l: &Literal) -> String {
    match l {
        Literal::Bool(b) => b.to_string(),
        Literal::Int(i) => i.to_string(),
        Literal::Float(x) => format!("{x:?}"),
    }
}

fn print_block(f: &GpuFunction, block: &GpuBlock, depth: usize, out: &mut String) {
    let pad = "  ".repeat(depth);
    for op in &block.ops {
        out.push_str(&pad);
        match &op.kind {
            GpuOpKind::For => {
                let iv = op
                    .regions
                    .first()
                    .and_then(|r| r.args.first())
                    .map(|v| v.to_string());
                let _ = write!(
                    out,
                    "for {} = {} {{",
                    iv.unwrap_or_else(|| "?".into()),
                    op.operands
                        .iter()
                        .zip(["", " to ", " step "])
                        .map(|(v, sep)| format!("{sep}{v}"))
                        .collect::<String>()
                );
                out.push('\n');
                if let Some(body) = op.regions.first() {
                    print_block(f, body, depth + 1, out);
                }
                let _ = writeln!(out, "{pad}}}");
                continue;
            }
            GpuOpKind::While => {
                out.push_str("while {\n");
                for (i, region) in op.regions.iter().enumerate() {
                    if i > 0 {
                        let _ = writeln!(out, "{pad}}} do {{");
                    }
                    print_block(f, region, depth + 1, out);
                }
                let _ = writeln!(out, "{pad}}}");
                continue;
            }
            GpuOpKind::If => {
                let _ = writeln!(out, "if {} {{", list(&op.operands));
                if let Some(then_b) = op.regions.first() {
                    print_block(f, then_b, depth + 1, out);
                }
                match op.regions.get(1) {
                    Some(else_b) if !else_b.ops.is_empty() => {
                        let _ = writeln!(out, "{pad}}} else {{");
                        print_block(f, else_b, depth + 1, out);
                        let _ = writeln!(out, "{pad}}}");
                    }
                    _ => {
                        let _ = writeln!(out, "{pad}}}");
                    }
                }
                continue;
            }
            _ => {}
        }
        if !op.results.is_empty() {
            let _ = write!(out, "{} = ", list(&op.results));
        }
        out.push_str(&op.kind.name());
        match &op.kind {
            GpuOpKind::Const(l) => {
                let _ = write!(out, " {}", literal_text(l));
            }
            GpuOpKind::RegRead { reg, index } => {
                let _ = write!(out, " {reg}[{index}]");
            }
            GpuOpKind::RegWrite { reg, index } => {
                let _ = write!(out, " {reg}[{index}] =");
            }
            GpuOpKind::Load {
                has_mask, has_other, ..
            } => {
                if *has_mask {
                    out.push_str(" masked");
                }
                if *has_other {
                    out.push_str(" other");
                }
            }
            GpuOpKind::Store { has_mask: true, .. } => out.push_str(" masked"),
            GpuOpKind::Atomic {
                sem, scope, has_mask, ..
            } => {
                let _ = write!(out, " {} {}", sem.name(), scope.name());
                if *has_mask {
                    out.push_str(" masked");
                }
            }
            GpuOpKind::Print { pieces, hex_from } => {
                let _ = write!(out, " {pieces:?}");
                if let Some(h) = hex_from {
                    let _ = write!(out, " hex_from={h}");
                }
            }
            GpuOpKind::Assert { message } => {
                let _ = write!(out, " {message:?}");
            }
            _ => {}
        }
        if !op.operands.is_empty() {
            let _ = write!(out, " {}", list(&op.operands));
        }
        if !op.results.is_empty() {
            let tys: Vec<String> = op.results.iter().map(|&r| f.ty(r).to_string()).collect();
            let _ = write!(out, " : {}", tys.join(", "));
        }
        let _ = writeln!(out, "  // {}", op.loc);
    }
}
