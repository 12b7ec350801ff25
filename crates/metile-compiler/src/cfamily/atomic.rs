//! Atomics: the result is declared first (0 where the mask is off), then one
//! block does the read-modify-write, which the dialect spells
//! ([`Dialect::atomic`]: `msl/atomic.rs`, `cuda/atomic.rs`).

use super::names::scalar_type;
use super::text::zero_text;
use super::{BodyWriter, Dialect, EmitResult, Rmw};
use metile_ir::gpu_ir::{GpuOp, GpuOpKind};
use metile_ir::AtomicOp;

/// The new value of a float `max`/`min`, in C: NaN operands are ignored and
/// ties keep the stored value (the interpreter's `float_update`).
pub(crate) fn float_choice(op: AtomicOp, old: &str, v: &str) -> String {
    let better = if op == AtomicOp::Max { ">" } else { "<" };
    format!("({v} {better} {old} || (isnan({old}) && !isnan({v}))) ? {v} : {old}")
}

impl<D: Dialect> BodyWriter<'_, D> {
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
        D::atomic(self, &rmw, sem, scope, inner)?;
        self.line(depth, "}");
        Ok(())
    }
}
