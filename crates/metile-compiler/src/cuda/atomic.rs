//! Atomics in CUDA C++: inline PTX `atom.<sem>.<scope>.global.<op>.<type>`,
//! which carries the ordering itself (`red`/`atom` with `.acquire`,
//! `.release`, `.acq_rel`, `.relaxed` and `.cta`, `.gpu`, `.sys`, sm_70 on).
//! f32 `max`/`min` and bf16 `add` have no such instruction on every target:
//! they are loops of relaxed `atom.cas` with `fence.acq_rel.<scope>` before
//! and after as `sem` asks.

use super::Cuda;
use crate::cfamily::atomic::float_choice;
use crate::cfamily::names::scalar_type;
use crate::cfamily::{BodyWriter, EmitResult, Rmw};
use metile_ir::{AtomicOp, DType, MemScope, MemSem};

/// The unsigned integer of a float's width (its bits).
fn bits_type(d: DType) -> &'static str {
    match d {
        DType::F16 | DType::BF16 => "ushort",
        DType::I64 => "long",
        DType::F32 => "uint",
        other => scalar_type(other),
    }
}

impl BodyWriter<'_, Cuda> {
    pub(super) fn cuda_atomic(
        &mut self,
        rmw: &Rmw,
        sem: MemSem,
        scope: MemScope,
        depth: usize,
    ) -> EmitResult<()> {
        let Rmw {
            op,
            dtype: d,
            address,
            value: v,
            out,
            ..
        } = rmw;
        let scope_text = scope.name();
        let ptx_type = match (op, d) {
            (AtomicOp::Add, DType::I32 | DType::U32) => Some("add.u32"),
            (AtomicOp::Add, DType::I64) => Some("add.u64"),
            (AtomicOp::Add, DType::F32) => Some("add.f32"),
            (AtomicOp::Add, DType::F16) => Some("add.noftz.f16"),
            (AtomicOp::Max, DType::I32) => Some("max.s32"),
            (AtomicOp::Max, DType::U32) => Some("max.u32"),
            (AtomicOp::Max, DType::I64) => Some("max.s64"),
            (AtomicOp::Min, DType::I32) => Some("min.s32"),
            (AtomicOp::Min, DType::U32) => Some("min.u32"),
            (AtomicOp::Min, DType::I64) => Some("min.s64"),
            (AtomicOp::And, DType::I64) => Some("and.b64"),
            (AtomicOp::Or, DType::I64) => Some("or.b64"),
            (AtomicOp::Xor, DType::I64) => Some("xor.b64"),
            (AtomicOp::And, _) => Some("and.b32"),
            (AtomicOp::Or, _) => Some("or.b32"),
            (AtomicOp::Xor, _) => Some("xor.b32"),
            (AtomicOp::Xchg | AtomicOp::Cas, DType::I64) => Some(if *op == AtomicOp::Cas {
                "cas.b64"
            } else {
                "exch.b64"
            }),
            (AtomicOp::Xchg | AtomicOp::Cas, DType::I32 | DType::U32 | DType::F32) => {
                Some(if *op == AtomicOp::Cas {
                    "cas.b32"
                } else {
                    "exch.b32"
                })
            }
            _ => None,
        };
        // Registers: 32-bit integers "r", 64-bit "l", 16-bit "h"; floats go
        // through their bits except in f32 add.
        let (reg, bits) = match d {
            DType::I64 => ("l", "long"),
            DType::F16 | DType::BF16 => ("h", "ushort"),
            _ => ("r", if *d == DType::I32 { "int" } else { "uint" }),
        };
        let as_bits = |x: &str| match d {
            DType::I32 | DType::U32 | DType::I64 => x.to_string(),
            other => format!("as_type<{}>({x})", bits_type(*other)),
        };
        if let Some(ptx) = ptx_type {
            let sem_text = sem.name();
            if (*op, *d) == (AtomicOp::Add, DType::F32) {
                self.line_fmt(
                    depth,
                    format_args!(
                        "asm volatile(\"atom.{sem_text}.{scope_text}.global.{ptx} %0, [%1], %2;\" : \"=f\"({out}) : \"l\"({address}), \"f\"({v}) : \"memory\");"
                    ),
                );
                return Ok(());
            }
            let operands = match &rmw.cmp {
                Some(c) => format!("\"{reg}\"({}), \"{reg}\"({})", as_bits(c), as_bits(v)),
                None => format!("\"{reg}\"({})", as_bits(v)),
            };
            let places = if rmw.cmp.is_some() { "%2, %3" } else { "%2" };
            self.line_fmt(depth, format_args!("{bits} metile_seen;"));
            self.line_fmt(
                depth,
                format_args!(
                    "asm volatile(\"atom.{sem_text}.{scope_text}.global.{ptx} %0, [%1], {places};\" : \"={reg}\"(metile_seen) : \"l\"({address}), {operands} : \"memory\");"
                ),
            );
            let read = match d {
                DType::I32 | DType::U32 | DType::I64 => "metile_seen".to_string(),
                other => format!("as_type<{}>(metile_seen)", scalar_type(*other)),
            };
            self.line_fmt(depth, format_args!("{out} = {read};"));
            return Ok(());
        }
        // A compare-and-swap loop: f32 max/min, bf16 add.
        let (width, new) = match (op, d) {
            (AtomicOp::Max | AtomicOp::Min, DType::F32) => ("b32", float_choice(*op, "metile_old", v)),
            (AtomicOp::Add, DType::BF16) => (
                "b16",
                format!("__float2bfloat16_rn(__bfloat162float(metile_old) + __bfloat162float({v}))"),
            ),
            _ => return Err(format!("no CUDA spelling of atomic_{} on {d}", op.name())),
        };
        let fence = format!("asm volatile(\"fence.acq_rel.{scope_text};\" ::: \"memory\");");
        if sem.releases() {
            self.line(depth, &fence);
        }
        let value_ty = scalar_type(*d);
        self.line_fmt(
            depth,
            format_args!("{bits} metile_seen = as_type<{bits}>(*{address});"),
        );
        self.line(depth, "while (true) {");
        let body = depth + 1;
        self.line_fmt(
            body,
            format_args!("{value_ty} metile_old = as_type<{value_ty}>(metile_seen);"),
        );
        self.line_fmt(
            body,
            format_args!("{bits} metile_new = as_type<{bits}>({value_ty}({new}));"),
        );
        self.line_fmt(body, format_args!("{bits} metile_prev;"));
        self.line_fmt(
            body,
            format_args!(
                "asm volatile(\"atom.relaxed.{scope_text}.global.cas.{width} %0, [%1], %2, %3;\" : \"={reg}\"(metile_prev) : \"l\"({address}), \"{reg}\"(metile_seen), \"{reg}\"(metile_new) : \"memory\");"
            ),
        );
        self.line(body, "if (metile_prev == metile_seen) break;");
        self.line(body, "metile_seen = metile_prev;");
        self.line(depth, "}");
        self.line_fmt(depth, format_args!("{out} = as_type<{value_ty}>(metile_seen);"));
        if sem.acquires() {
            self.line(depth, &fence);
        }
        Ok(())
    }
}
