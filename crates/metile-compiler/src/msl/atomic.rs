//! Atomics in MSL. Metal's device atomics are relaxed only, so `sem` becomes
//! fences around a relaxed atomic: `atomic_thread_fence(mem_flags::mem_device,
//! memory_order_seq_cst, thread_scope_device)` before it to release and after
//! it to acquire (`thread_scope_threadgroup` for `scope="cta"`; Metal 3.2).
//! Integers and f32 `add` use `atomic_fetch_*_explicit` on the element cast to
//! `device atomic_int/uint/float*`; f32 `xchg` exchanges its bits as a uint;
//! compare-and-swap and f32 `max`/`min` are loops of
//! `atomic_compare_exchange_weak_explicit` (bits compared as uints).

use super::Msl;
use crate::cfamily::atomic::float_choice;
use crate::cfamily::names::scalar_type;
use crate::cfamily::{BodyWriter, EmitResult, Rmw};
use metile_ir::{AtomicOp, DType, MemScope, MemSem};

impl BodyWriter<'_, Msl> {
    fn fence(&mut self, scope: MemScope, depth: usize) {
        let scope = match scope {
            MemScope::Cta => "thread_scope_threadgroup",
            MemScope::Gpu | MemScope::Sys => "thread_scope_device",
        };
        self.line_fmt(
            depth,
            format_args!("atomic_thread_fence(mem_flags::mem_device, memory_order_seq_cst, {scope});"),
        );
    }

    pub(super) fn msl_atomic(
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
        if !matches!(d, DType::I32 | DType::U32 | DType::F32) {
            return Err(format!("Metal has no {d} atomics"));
        }
        if sem.releases() {
            self.fence(scope, depth);
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
            self.fence(scope, depth);
        }
        Ok(())
    }
}
