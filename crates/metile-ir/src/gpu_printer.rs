//! The textual form of GPU IR (`METILE_DEBUG=gpu_ir`). Deterministic: the same
//! function prints the same bytes in every process.

use crate::gpu_ir::*;
use std::fmt::Write;

pub fn print_gpu_function(f: &GpuFunction) -> String {
    let mut out = String::new();
    let params: Vec<String> = f
        .params
        .iter()
        .enumerate()
        .map(|(i, p)| {
            format!(
                "{}: {} /*{}*/{}",
                p.value,
                f.ty(p.value),
                p.name,
                param_kind_text(f, i)
            )
        })
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

/// What a parameter's type does not say: the tensor map's description, the
/// runtime's -1, and the Tile IR parameter index where it is not the usual
/// one (the position among buffers and scalars; a tensor map's buffer).
fn param_kind_text(f: &GpuFunction, i: usize) -> String {
    let p = &f.params[i];
    let (mut text, usual_index) = match p.kind {
        GpuParamKind::Buffer(_) | GpuParamKind::Scalar(_) => {
            let position = f.params[..i]
                .iter()
                .filter(|q| matches!(q.kind, GpuParamKind::Buffer(_) | GpuParamKind::Scalar(_)))
                .count();
            (String::new(), position)
        }
        GpuParamKind::TensorMap(spec) => (format!(" {{tensor_map {}}}", spec_text(&spec)), spec.buffer),
        GpuParamKind::TensorMapReady(spec) => {
            (format!(" {{tensor_map_ready {}}}", spec_text(&spec)), spec.buffer)
        }
        GpuParamKind::MinusOne => (" {minus_one}".to_string(), 0),
    };
    if p.tile_index != usual_index {
        let _ = write!(text, " {{arg {}}}", p.tile_index);
    }
    text
}

fn spec_text(s: &TensorMapSpec) -> String {
    let launch = |v: LaunchValue| match v {
        LaunchValue::Arg(i) => format!("arg{i}"),
        LaunchValue::Const(c) => c.to_string(),
    };
    format!(
        "buffer={} dtype={} rows={} cols={} stride={} box={}x{} swizzle={}{}",
        s.buffer,
        s.dtype,
        launch(s.rows),
        launch(s.cols),
        launch(s.stride),
        s.box_rows,
        s.box_cols,
        s.swizzle_bytes,
        if s.stacked { " stacked" } else { "" }
    )
}

fn operand_text(o: &WgmmaOperand) -> String {
    format!(
        "{{swizzle={} lbo={} sbo={} {}}}",
        o.swizzle_bytes,
        o.lbo,
        o.sbo,
        if o.mn_major { "mn_major" } else { "k_major" }
    )
}

fn list(values: &[GpuValue]) -> String {
    values
        .iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(", ")
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
                let _ = writeln!(out, "{pad}}}  // {}", op.loc);
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
                let _ = writeln!(out, "{pad}}}  // {}", op.loc);
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
                        let _ = writeln!(out, "{pad}}}  // {}", op.loc);
                    }
                    _ => {
                        let _ = writeln!(out, "{pad}}}  // {}", op.loc);
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
                let _ = write!(out, " {l}");
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
            GpuOpKind::Mma(
                AtomKind::NvidiaWgmmaM64K16 { n }
                | AtomKind::NvidiaWgmmaM64K32F8 { n }
                | AtomKind::NvidiaWgmmaM64K8Tf32 { n },
            ) => {
                let _ = write!(out, " n={n}");
            }
            GpuOpKind::AsyncCopy {
                has_mask, zero_fill, ..
            } => {
                if *has_mask {
                    out.push_str(" masked");
                }
                if *zero_fill {
                    out.push_str(" zero_fill");
                }
            }
            GpuOpKind::Wgmma {
                a,
                b,
                acc,
                first,
                accumulate,
                ..
            } => {
                let _ = write!(
                    out,
                    " acc={acc}[{first}] a={} b={}",
                    operand_text(a),
                    operand_text(b)
                );
                if !accumulate {
                    out.push_str(" overwrite");
                }
            }
            GpuOpKind::WgmmaRegA {
                b,
                acc,
                first,
                a,
                a_first,
                ..
            } => {
                let _ = write!(out, " acc={acc}[{first}] a={a}[{a_first}] b={}", operand_text(b));
            }
            GpuOpKind::WgmmaWait { acc, count, held, .. } => {
                let _ = write!(out, " acc={acc} count={count}");
                if let Some((reg, first, count)) = held {
                    let _ = write!(out, " held={reg}[{first}..{}]", first + count);
                }
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
