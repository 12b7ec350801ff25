//! The CUDA spelling of NVIDIA's warp-level matrix ops: `mma.sync` atoms,
//! `ldmatrix`, and the asynchronous copies into shared memory (`cp.async`,
//! sm_80) with their groups.

use super::Cuda;
use crate::cfamily::{BodyWriter, EmitResult, Name};
use metile_ir::gpu_ir::{AtomKind, GpuOp, GpuOpKind};

impl BodyWriter<'_, Cuda> {
    fn operand(&self, op: &GpuOp, i: usize) -> EmitResult<Name> {
        op.operands
            .get(i)
            .ok_or_else(|| format!("{} lacks operand {i}", op.kind.name()))
            .and_then(|&v| self.name(v))
    }

    /// One `mma.sync`: the fragments packed into the registers it takes (two
    /// 16-bit values per 32-bit register, the lower half first; tf32 as
    /// rounded f32 bits).
    pub(super) fn mma_sync(
        &mut self,
        op: &GpuOp,
        kind: AtomKind,
        [a, b, c]: [&[String]; 3],
        depth: usize,
    ) -> EmitResult<()> {
        let (_, _, nc) = kind.fragment_sizes();
        let operand = crate::cfamily::names::scalar_type(
            self.dtype(*op.operands.first().ok_or("an mma without operands")?),
        );
        let (ptx, a_regs, b_regs): (String, Vec<String>, Vec<String>) = match kind {
            AtomKind::NvidiaMmaM16N8K8Tf32 => (
                "m16n8k8.row.col.f32.tf32.tf32.f32".into(),
                a.iter().map(|x| format!("metile_tf32({x})")).collect(),
                b.iter().map(|x| format!("metile_tf32({x})")).collect(),
            ),
            AtomKind::NvidiaMmaM16N8K16 => {
                let ty = if operand == "half" { "f16" } else { "bf16" };
                let pairs = |v: &[String]| {
                    v.chunks(2)
                        .map(|p| format!("metile_pack2({}, {})", p[0], p[1]))
                        .collect()
                };
                (format!("m16n8k16.row.col.f32.{ty}.{ty}.f32"), pairs(a), pairs(b))
            }
            _ => return Err(format!("no CUDA spelling of the matrix atom {}", kind.name())),
        };
        let list = |from: usize, count: usize| {
            (from..from + count)
                .map(|i| format!("%{i}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let (nar, nbr) = (a_regs.len(), b_regs.len());
        let text = format!(
            "mma.sync.aligned.{ptx} {{{}}}, {{{}}}, {{{}}}, {{{}}};",
            list(0, nc),
            list(nc, nar),
            list(nc + nar, nbr),
            list(nc + nar + nbr, nc)
        );
        let results: Vec<String> = op.results.iter().map(|d| format!("v{}", d.0)).collect();
        self.line_fmt(depth, format_args!("float {};", results.join(", ")));
        let outs: Vec<String> = results.iter().map(|r| format!("\"=f\"({r})")).collect();
        let ins: Vec<String> = a_regs
            .iter()
            .chain(&b_regs)
            .map(|r| format!("\"r\"({r})"))
            .chain(c.iter().map(|x| format!("\"f\"({x})")))
            .collect();
        self.line_fmt(
            depth,
            format_args!("asm(\"{text}\" : {} : {});", outs.join(", "), ins.join(", ")),
        );
        for &d in op.results.iter() {
            self.set_name(d, Name::Local(d.0));
        }
        Ok(())
    }

    pub(super) fn ldmatrix(&mut self, op: &GpuOp, count: u8, trans: bool, depth: usize) -> EmitResult<()> {
        let (root, index) = (self.operand(op, 0)?, self.operand(op, 1)?);
        let regs: Vec<String> = op.results.iter().map(|d| format!("m{}", d.0)).collect();
        let list = (0..regs.len())
            .map(|i| format!("%{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        let outs = regs
            .iter()
            .map(|r| format!("\"=r\"({r})"))
            .collect::<Vec<_>>()
            .join(", ");
        self.line_fmt(depth, format_args!("uint {};", regs.join(", ")));
        self.line_fmt(
            depth,
            format_args!(
                "asm volatile(\"ldmatrix.sync.aligned.m8n8.x{count}{}.shared.b16 {{{list}}}, [%{}];\" : {outs} : \
                 \"r\"(uint(__cvta_generic_to_shared({root} + {index}))));",
                if trans { ".trans" } else { "" },
                regs.len()
            ),
        );
        for (d, r) in op.results.iter().zip(&regs) {
            let ty = self.type_of(self.f.ty(*d));
            self.define(depth, *d, &format!("as_type<{ty}>({r})"));
        }
        Ok(())
    }

    /// `cp.async` of `bytes` bytes, its groups and waits.
    pub(super) fn async_copy_op(&mut self, op: &GpuOp, depth: usize) -> EmitResult<()> {
        match op.kind {
            GpuOpKind::AsyncCopy {
                bytes,
                has_mask,
                zero_fill,
            } => {
                let (dst, di, src, si) = (
                    self.operand(op, 0)?,
                    self.operand(op, 1)?,
                    self.operand(op, 2)?,
                    self.operand(op, 3)?,
                );
                // .cg (L2 only) takes 16-byte copies; smaller ones go through .ca.
                let cache = if bytes == 16 { "cg" } else { "ca" };
                // In the 32-bit shared window, so that a constant added to the
                // index folds into the instruction's address.
                let dst_addr = format!(
                    "\"r\"(uint(__cvta_generic_to_shared({dst})) + uint({di}) * uint(sizeof(*{dst})))"
                );
                let copy = if zero_fill {
                    // Outside, zero source bytes are read (from the buffer's start)
                    // and the rest of the destination is zero-filled.
                    let inside = self.operand(op, 4 + usize::from(has_mask))?;
                    format!(
                        "asm volatile(\"cp.async.{cache}.shared.global [%0], [%1], {bytes}, %2;\" :: {dst_addr}, \
                         \"l\"({src} + ({inside} ? {si} : 0)), \"r\"({inside} ? {bytes} : 0) : \"memory\");"
                    )
                } else {
                    format!(
                        "asm volatile(\"cp.async.{cache}.shared.global [%0], [%1], {bytes};\" :: {dst_addr}, \
                         \"l\"({src} + {si}) : \"memory\");"
                    )
                };
                if has_mask {
                    let m = self.operand(op, 4)?;
                    self.line_fmt(depth, format_args!("if ({m}) {copy}"));
                } else {
                    self.line(depth, &copy);
                }
            }
            GpuOpKind::AsyncCommit => {
                self.line(depth, "asm volatile(\"cp.async.commit_group;\" ::: \"memory\");");
            }
            GpuOpKind::AsyncWait { pending } => {
                self.line_fmt(
                    depth,
                    format_args!("asm volatile(\"cp.async.wait_group {pending};\" ::: \"memory\");"),
                );
            }
            _ => return Err(format!("{} is no asynchronous copy", op.kind.name())),
        }
        Ok(())
    }
}
