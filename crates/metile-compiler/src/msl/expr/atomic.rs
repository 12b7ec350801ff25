//! Atomics in both languages. The result is declared first (0 where the mask
//! is off), then one block does the read-modify-write.
//!
//! * **MSL**: Metal's device atomics are relaxed only, so `sem` becomes
//!   fences around a relaxed atomic: `atomic_thread_fence(mem_flags::mem_device,
//!   memory_order_seq_cst, thread_scope_device)` before it to release and after
//!   it to acquire (`thread_scope_threadgroup` for `scope="cta"`; Metal 3.2).
//!   Integers and f32 `add` use `atomic_fetch_*_explicit` on the element cast
//!   to `device atomic_int/uint/float*`; f32 `xchg` exchanges its bits as a
//!   uint; compare-and-swap and f32 `max`/`min` are loops of
//!   `atomic_compare_exchange_weak_explicit` (bits compared as uints).
//! * **CUDA**: inline PTX `atom.<sem>.<scope>.global.<op>.<type>`, which
//!   carries the ordering itself (`red`/`atom` with `.acquire`, `.release`,
//!   `.acq_rel`, `.relaxed` and `.cta`, `.gpu`, `.sys`, sm_70 on). f32
//!   `max`/`min` and bf16 `add` have no such instruction on every target: they
//!   are loops of relaxed `atom.cas` with `fence.acq_rel.<scope>` before and
//!   after as `sem` asks.

use super::{BodyWriter, EmitResult, Lang};
use crate::msl::names::scalar_type;
use crate::msl::text::zero_text;
use metile_ir::gpu_ir::{GpuOp, GpuOpKind};
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

/// The new value of a float `max`/`min`, in C: NaN operands are ignored and
/// ties keep the stored value (the interpreter's `float_update`).
fn float_choice(op: AtomicOp, old: &str, v: &str) -> String {
    let better = if op == AtomicOp::Max { ">" } else { "<" };
    format!("({v} {better} {old} || (isnan({old}) && !isnan({v}))) ? {v} : {old}")
}

impl BodyWriter<'_> {
    pub(super) fn atomic(&mut self, op: &GpuOp, depth: usize) -> EmitResult<()> {
        let GpuOpKind::Atomic {
            op: aop,
            sem,
            scope,
            has_mask,
        } = op.kind
        else {
            return Err(format!("{} is no atomic", op.kind.name()));
        };
        let arg = |i: usize| -> EmitResult<String> {
            let v = op
                .operands
                .get(i)
                .ok_or_else(|| format!("an atomic lacks operand {i}"))?;
            Ok(self.name(*v)?.to_string())
        };
        let d = self.dtype(op.operands[0]);
        let address = format!("({} + {})", arg(0)?, arg(1)?);
        let cas = aop == AtomicOp::Cas;
        let cmp = if cas { Some(arg(2)?) } else { None };
        let value = arg(2 + usize::from(cas))?;
        let mask = if has_mask {
            Some(arg(3 + usize::from(cas))?)
        } else {
            None
        };
        let result = op.results[0];
        let out = format!("v{}", result.0);
        let ty = scalar_type(d);
        self.line_fmt(depth, format_args!("{ty} {out} = {};", zero_text(d)));
        self.set_name(result, super::Name::Local(result.0));
        match &mask {
            Some(m) => self.line_fmt(depth, format_args!("if ({m}) {{")),
            None => self.line(depth, "{"),
        }
        let inner = depth + 1;
        let rmw = Rmw {
            op: aop,
            dtype: d,
            address,
            cmp,
            value,
            out,
        };
        match self.lang {
            Lang::Msl => self.msl_atomic(&rmw, sem, scope, inner)?,
            Lang::Cuda => self.cuda_atomic(&rmw, sem, scope, inner)?,
        }
        self.line(depth, "}");
        Ok(())
    }

    fn msl_fence(&mut self, scope: MemScope, depth: usize) {
        let scope = match scope {
            MemScope::Cta => "thread_scope_threadgroup",
            MemScope::Gpu | MemScope::Sys => "thread_scope_device",
        };
        self.line_fmt(
            depth,
            format_args!("atomic_thread_fence(mem_flags::mem_device, memory_order_seq_cst, {scope});"),
        );
    }

    fn msl_atomic(&mut self, rmw: &Rmw, sem: MemSem, scope: MemScope, depth: usize) -> EmitResult<()> {
        let Rmw {
            op,
            dtype: d,
            address,
            value: v,
            out,
            ..
        } = rmw;
        if !matches!(d, DType::I32 | DType::U32 | DType::F32) {
            return Err(format!("Metal has no {d} atomics"));
        }
        if sem.releases() {
            self.msl_fence(scope, depth);
        }
        let relaxed = "memory_order_relaxed";
        let native = match (op, d) {
            (AtomicOp::Add, _) => Some("atomic_fetch_add_explicit"),
            (AtomicOp::Max, DType::I32 | DType::U32) => Some("atomic_fetch_max_explicit"),
            (AtomicOp::Min, DType::I32 | DType::U32) => Some("atomic_fetch_min_explicit"),
            (AtomicOp::And, _) => Some("atomic_fetch_and_explicit"),
            (AtomicOp::Or, _) => Some("atomic_fetch_or_explicit"),
            (AtomicOp::Xor, _) => Some("atomic_fetch_xor_explicit"),
            (AtomicOp::Xchg, DType::I32 | DType::U32) => Some("atomic_exchange_explicit"),
            _ => None,
        };
        let atomic_ty = |d: DType| {
            format!(
                "device atomic_{}*",
                if d == DType::F32 { "float" } else { scalar_type(d) }
            )
        };
        if let Some(f) = native {
            self.line_fmt(
                depth,
                format_args!("{out} = {f}(({}){address}, {v}, {relaxed});", atomic_ty(*d)),
            );
        } else if *op == AtomicOp::Xchg {
            self.line_fmt(
                depth,
                format_args!(
                    "{out} = as_type<float>(atomic_exchange_explicit((device atomic_uint*){address}, as_type<uint>({v}), {relaxed}));"
                ),
            );
        } else {
            // Compare-and-swap loops on the bits; a weak exchange may fail
            // spuriously, leaving the expected bits as they were.
            let object = if *d == DType::I32 {
                atomic_ty(DType::I32)
            } else {
                atomic_ty(DType::U32)
            };
            let bits = if *d == DType::I32 { "int" } else { "uint" };
            let as_bits = |x: &str| {
                if *d == DType::F32 {
                    format!("as_type<uint>({x})")
                } else {
                    x.to_string()
                }
            };
            let exchange = |desired: &str| {
                format!(
                    "atomic_compare_exchange_weak_explicit(({object}){address}, &metile_seen, {desired}, {relaxed}, {relaxed})"
                )
            };
            if let Some(c) = &rmw.cmp {
                self.line_fmt(depth, format_args!("{bits} metile_seen = {};", as_bits(c)));
                self.line_fmt(
                    depth,
                    format_args!(
                        "while (!{} && metile_seen == {}) {{}}",
                        exchange(&as_bits(v)),
                        as_bits(c)
                    ),
                );
            } else {
                self.line_fmt(
                    depth,
                    format_args!(
                        "{bits} metile_seen = atomic_load_explicit(({object}){address}, {relaxed});"
                    ),
                );
                self.line(depth, "while (true) {");
                let choice = float_choice(*op, "metile_old", v);
                self.line_fmt(
                    depth + 1,
                    format_args!("float metile_old = as_type<float>(metile_seen);"),
                );
                self.line_fmt(depth + 1, format_args!("float metile_new = {choice};"));
                self.line_fmt(
                    depth + 1,
                    format_args!("if ({}) break;", exchange("as_type<uint>(metile_new)")),
                );
                self.line(depth, "}");
            }
            let read = if *d == DType::F32 {
                "as_type<float>(metile_seen)".to_string()
            } else {
                "metile_seen".to_string()
            };
            self.line_fmt(depth, format_args!("{out} = {read};"));
        }
        if sem.acquires() {
            self.msl_fence(scope, depth);
        }
        Ok(())
    }

    fn cuda_atomic(&mut self, rmw: &Rmw, sem: MemSem, scope: MemScope, depth: usize) -> EmitResult<()> {
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

/// One read-modify-write's pieces, as C text.
struct Rmw {
    op: AtomicOp,
    dtype: DType,
    /// The element's address, `(X + i)`.
    address: String,
    cmp: Option<String>,
    value: String,
    /// The result variable.
    out: String,
}
