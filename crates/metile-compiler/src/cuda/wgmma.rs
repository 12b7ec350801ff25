//! The CUDA spelling of NVIDIA's warpgroup MMA ops (sm_90a): `wgmma.mma_async`
//! on shared-memory descriptors (`metile_wgmma_desc` in the prelude) or, for
//! tf32, with A in registers; its fences, commit and wait. fp8 operands
//! (`.e4m3`, `.e5m2`, mixed or not) take `k32` steps and, being read K-major
//! only, no transpose immediates.
//!
//! `wgmma` writes its accumulators asynchronously: they are `"+f"` operands
//! naming the accumulator array's registers themselves (a copy in between
//! would make ptxas serialize the `wgmma`s), and after `wgmma.wait_group`
//! each gets an empty `asm volatile` with a `"+f"` operand, so the compiler
//! cannot move an access to it above the wait (as CUTLASS fences them).

use super::Cuda;
use crate::cfamily::{BodyWriter, EmitResult, Name};
use metile_ir::gpu_ir::{GpuFunction, GpuOp, GpuOpKind, RegId, WgmmaOperand};
use metile_ir::DType;

/// The register arrays `wgmma`s accumulate into.
pub(super) fn accumulators(f: &GpuFunction) -> Vec<RegId> {
    let mut regs = vec![];
    f.walk(&mut |op| {
        if let GpuOpKind::Wgmma { acc, .. } | GpuOpKind::WgmmaRegA { acc, .. } = op.kind {
            if !regs.contains(&acc) {
                regs.push(acc);
            }
        }
    });
    regs
}

/// The descriptor's swizzle mode field for a swizzle of `bytes` bytes.
fn swizzle_mode(bytes: u16) -> EmitResult<u32> {
    match bytes {
        128 => Ok(1),
        64 => Ok(2),
        32 => Ok(3),
        _ => Err(format!("wgmma has no {bytes}-byte swizzle")),
    }
}

/// `%0, %1, .., %{count - 1}`: the asm placeholders of the accumulators.
fn placeholders(count: usize) -> String {
    (0..count).map(|i| format!("%{i}")).collect::<Vec<_>>().join(", ")
}

impl BodyWriter<'_, Cuda> {
    /// `reg[index] = value` through an `asm` move. ptxas may otherwise
    /// rematerialise a constant (the accumulators' zeros) next to the
    /// `wgmma`s of a loop, and then serializes them all.
    pub(super) fn opaque_write(&mut self, reg: RegId, index: u32, value: &Name, depth: usize) {
        let target = self
            .accumulator_operands(reg, index, 1)
            .replace("\"+f\"", "\"=f\"");
        let mut v = String::new();
        value.push_to(&mut v);
        self.line_fmt(
            depth,
            format_args!("asm volatile(\"mov.b32 %0, %1;\" : {target} : \"f\"({v}));"),
        );
    }

    /// `"+f"(r[first]), ...` for `count` registers of an accumulator array.
    fn accumulator_operands(&self, acc: RegId, first: u32, count: u32) -> String {
        (first..first + count)
            .map(|i| {
                let mut r = String::new();
                self.reg(acc, i).push_to(&mut r);
                format!("\"+f\"({r})")
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The shared-memory descriptor of the operand whose threadgroup array
    /// and index are `op`'s operands `at` and `at + 1`, laid out as `m` says.
    fn descriptor(&self, op: &GpuOp, at: usize, m: WgmmaOperand) -> EmitResult<String> {
        let (root, index) = (self.name(op.operands[at])?, self.name(op.operands[at + 1])?);
        Ok(format!(
            "metile_wgmma_desc({root} + {index}, {}, {}, {})",
            m.lbo,
            m.sbo,
            swizzle_mode(m.swizzle_bytes)?
        ))
    }

    pub(super) fn wgmma(
        &mut self,
        op: &GpuOp,
        n: u16,
        (a, b): (WgmmaOperand, WgmmaOperand),
        (acc, first, accumulate): (RegId, u32, bool),
        depth: usize,
    ) -> EmitResult<()> {
        let spelling = |d: DType| match d {
            DType::F16 => Ok("f16"),
            DType::BF16 => Ok("bf16"),
            DType::F8E4M3 => Ok("e4m3"),
            DType::F8E5M2 => Ok("e5m2"),
            d => Err(format!("wgmma does not take {d}")),
        };
        let (dtype_a, dtype_b) = (self.dtype(op.operands[0]), self.dtype(op.operands[2]));
        let (ty_a, ty_b) = (spelling(dtype_a)?, spelling(dtype_b)?);
        let (da, db) = (self.descriptor(op, 0, a)?, self.descriptor(op, 2, b)?);
        let nc = usize::from(n) / 2;
        let regs = placeholders(nc);
        // 8-bit operands: k32 and no transpose immediates (K-major only).
        let (k, transposes) = if dtype_a.is_fp8() {
            if a.mn_major || b.mn_major {
                return Err("fp8 wgmma reads its operands K-major only".into());
            }
            (32, String::new())
        } else {
            let trans = |m: WgmmaOperand| u8::from(m.mn_major);
            (16, format!(", {}, {}", trans(a), trans(b)))
        };
        let text = format!(
            "{{ .reg .pred p; setp.ne.b32 p, %{}, 0; wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{ty_a}.{ty_b} \
             {{{regs}}}, %{nc}, %{}, p, 1, 1{transposes}; }}",
            nc + 2,
            nc + 1,
        );
        let outs = self.accumulator_operands(acc, first, nc as u32);
        // scale-d: 0 overwrites the accumulators instead of adding to them.
        let scale_d = u8::from(accumulate);
        self.line_fmt(
            depth,
            format_args!(
                "asm volatile(\"{text}\" : {outs} : \"l\"({da}), \"l\"({db}), \"r\"({scale_d}) : \"memory\");"
            ),
        );
        Ok(())
    }

    /// The `wgmma` with A in registers (`GpuOpKind::WgmmaRegA`). tf32: the
    /// register array's elements themselves are the operands, so the
    /// registers the tensor cores read are the ones the wait holds. f16 and
    /// bf16: pairs of the array's values packed into 32-bit operands, values
    /// the kernel never writes again, so nothing needs holding.
    pub(super) fn wgmma_reg_a(
        &mut self,
        op: &GpuOp,
        (n, b): (u16, WgmmaOperand),
        (acc, first): (RegId, u32),
        (a, a_first): (RegId, u32),
        depth: usize,
    ) -> EmitResult<()> {
        let desc = self.descriptor(op, 0, b)?;
        let reg = |w: &Self, i: u32| {
            let mut r = String::new();
            w.reg(a, i).push_to(&mut r);
            r
        };
        let (shape, fragment) = match self.dtype(op.operands[0]) {
            DType::F32 => (
                "k8.f32.tf32.tf32".to_string(),
                (a_first..a_first + 4)
                    .map(|i| format!("\"r\"(__float_as_uint({}))", reg(self, i)))
                    .collect::<Vec<_>>(),
            ),
            d @ (DType::F16 | DType::BF16) => {
                let ty = if d == DType::F16 { "f16" } else { "bf16" };
                (
                    format!("k16.f32.{ty}.{ty}"),
                    (a_first..a_first + 8)
                        .step_by(2)
                        .map(|i| format!("\"r\"(metile_pack2({}, {}))", reg(self, i), reg(self, i + 1)))
                        .collect(),
                )
            }
            d => return Err(format!("wgmma does not take {d} from registers")),
        };
        let tf32 = shape.contains("tf32");
        let nc = usize::from(n) / 2;
        let regs = placeholders(nc);
        // tf32 takes no transpose immediate; 16-bit types take B's.
        let trans_b = if tf32 {
            String::new()
        } else {
            format!(", {}", u8::from(b.mn_major))
        };
        let text = format!(
            "{{ .reg .pred p; setp.ne.b32 p, %{}, 0; wgmma.mma_async.sync.aligned.m64n{n}{shape} \
             {{{regs}}}, {{%{}, %{}, %{}, %{}}}, %{}, p, 1, 1{trans_b}; }}",
            nc + 5,
            nc,
            nc + 1,
            nc + 2,
            nc + 3,
            nc + 4,
        );
        let outs = self.accumulator_operands(acc, first, nc as u32);
        let fragment = fragment.join(", ");
        self.line_fmt(
            depth,
            format_args!(
                "asm volatile(\"{text}\" : {outs} : {fragment}, \"l\"({desc}), \"r\"(1) : \"memory\");"
            ),
        );
        Ok(())
    }

    pub(super) fn wgmma_wait(
        &mut self,
        pending: u8,
        (acc, count): (RegId, u32),
        held: Option<(RegId, u32, u32)>,
        depth: usize,
    ) {
        self.line_fmt(
            depth,
            format_args!("asm volatile(\"wgmma.wait_group.sync.aligned {pending};\" ::: \"memory\");"),
        );
        for i in 0..count {
            let fence = self.accumulator_operands(acc, i, 1);
            self.line_fmt(depth, format_args!("asm volatile(\"\" : {fence} :: \"memory\");"));
        }
        // A use after the wait keeps each register operand's register from
        // being reused while the tensor cores may still read it.
        if let Some((reg, first, count)) = held {
            for i in first..first + count {
                let mut r = String::new();
                self.reg(reg, i).push_to(&mut r);
                self.line_fmt(
                    depth,
                    format_args!("asm volatile(\"\" :: \"f\"({r}) : \"memory\");"),
                );
            }
        }
    }
}
