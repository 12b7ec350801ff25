//! The CUDA spelling of NVIDIA's warpgroup MMA ops (sm_90a): `wgmma.mma_async`
//! on shared-memory descriptors (`metile_wgmma_desc` in the prelude), its
//! fences, commit and wait.
//!
//! `wgmma` writes its accumulators asynchronously: they are `"+f"` operands
//! of the instruction, and after `wgmma.wait_group` each value passed through
//! gets an empty `asm volatile` with a `"+f"` operand, so the compiler cannot
//! move a read of an accumulator above the wait (as CUTLASS fences them).

use super::{BodyWriter, EmitResult};
use crate::msl::text::Name;
use metile_ir::gpu_ir::{GpuOp, WgmmaOperand};
use metile_ir::DType;

/// The descriptor's swizzle mode field for a swizzle of `bytes` bytes.
fn swizzle_mode(bytes: u16) -> EmitResult<u32> {
    match bytes {
        128 => Ok(1),
        64 => Ok(2),
        32 => Ok(3),
        _ => Err(format!("wgmma has no {bytes}-byte swizzle")),
    }
}

impl BodyWriter<'_> {
    /// Declares each result initialised from the matching input, for `"+f"`.
    fn pass_through(&mut self, op: &GpuOp, first_input: usize, depth: usize) -> EmitResult<Vec<String>> {
        let mut names = Vec::with_capacity(op.results.len());
        for (j, &d) in op.results.iter().enumerate() {
            let x = self.name(op.operands[first_input + j])?;
            self.line_fmt(depth, format_args!("float v{} = {x};", d.0));
            self.set_name(d, Name::Local(d.0));
            names.push(format!("v{}", d.0));
        }
        Ok(names)
    }

    pub(super) fn wgmma(
        &mut self,
        op: &GpuOp,
        n: u16,
        a: WgmmaOperand,
        b: WgmmaOperand,
        depth: usize,
    ) -> EmitResult<()> {
        let ty = match self.dtype(op.operands[0]) {
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            d => return Err(format!("wgmma does not take {d}")),
        };
        let desc = |this: &Self, at: usize, m: WgmmaOperand| -> EmitResult<String> {
            let (root, index) = (this.name(op.operands[at])?, this.name(op.operands[at + 1])?);
            Ok(format!(
                "metile_wgmma_desc({root} + {index}, {}, {}, {})",
                m.lbo,
                m.sbo,
                swizzle_mode(m.swizzle_bytes)?
            ))
        };
        let (da, db) = (desc(self, 0, a)?, desc(self, 2, b)?);
        let acc = self.pass_through(op, 4, depth)?;
        let nc = acc.len();
        let regs = (0..nc).map(|i| format!("%{i}")).collect::<Vec<_>>().join(", ");
        let trans = |m: WgmmaOperand| u8::from(m.mn_major);
        let text = format!(
            "{{ .reg .pred p; setp.ne.b32 p, %{}, 0; wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ty}.{ty} \
             {{{regs}}}, %{nc}, %{}, p, 1, 1, {}, {}; }}",
            nc + 2,
            nc + 1,
            trans(a),
            trans(b)
        );
        let outs = acc
            .iter()
            .map(|v| format!("\"+f\"({v})"))
            .collect::<Vec<_>>()
            .join(", ");
        self.line_fmt(
            depth,
            format_args!(
                "asm volatile(\"{text}\" : {outs} : \"l\"({da}), \"l\"({db}), \"r\"(1) : \"memory\");"
            ),
        );
        Ok(())
    }

    pub(super) fn wgmma_wait(&mut self, op: &GpuOp, pending: u8, depth: usize) -> EmitResult<()> {
        self.line_fmt(
            depth,
            format_args!("asm volatile(\"wgmma.wait_group.sync.aligned {pending};\" ::: \"memory\");"),
        );
        for v in self.pass_through(op, 0, depth)? {
            self.line_fmt(
                depth,
                format_args!("asm volatile(\"\" : \"+f\"({v}) :: \"memory\");"),
            );
        }
        Ok(())
    }
}
