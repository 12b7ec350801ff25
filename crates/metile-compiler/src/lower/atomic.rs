//! Atomics: one GPU atomic per element, issued by the element's owner.
//!
//! * A tile atomic lives in its result's layout. Every element is issued once,
//!   by its canonical owner (replicated layouts hold an element in several
//!   threads, and an atomic must not run twice); when the layout is replicated
//!   and the old values are used, the owners share them through threadgroup
//!   memory. Its `sem` orders the issuing thread's own accesses, as in Triton.
//! * A scalar atomic is the program instance's one atomic: the first thread
//!   issues it and the old value reaches every thread through threadgroup
//!   memory. Since the program, not a thread, is the actor, its ordering covers
//!   every thread: with release semantics a barrier that orders device memory
//!   precedes it (all the program's earlier accesses are done), with acquire
//!   semantics one follows it (no thread reads before the atomic has run). A
//!   lock taken with `while atomic_cas(lock, 0, 1) == 1` thus protects what every
//!   thread of the program does until `atomic_xchg(lock, 0)`.
//!
//! What a target lacks is refused here, naming the op: Apple GPUs have no
//! 16-bit float or returning 64-bit atomics and no system scope.

use super::{Home, Lowering};
use crate::error::CompileResult;
use crate::layout_assign::{Class, LayoutId};
use crate::target::TargetKind;
use metile_ir::gpu_ir::*;
use metile_ir::{AtomicOp, CmpOp, DType, MemScope, Op, OpKind, ValueId};

impl<'f> Lowering<'f> {
    /// Refuses what the target's atomics cannot do.
    fn check_atomic_target(&self, op: AtomicOp, dtype: DType, scope: MemScope) -> CompileResult<()> {
        let name = format!("atomic_{}", op.name());
        if let TargetKind::Apple(_) = self.a.target.kind {
            match dtype {
                DType::F16 | DType::BF16 => {
                    return Err(self.err(format!(
                        "{name} on {dtype} is not available on Apple GPUs: Metal has no 16-bit float \
                         atomics; accumulate into an f32 buffer instead"
                    )))
                }
                DType::I64 => {
                    return Err(self.err(format!(
                        "{name} on i64 is not available on Apple GPUs: Metal's 64-bit atomics \
                         (atomic_ulong) only store a minimum or maximum and return nothing"
                    )))
                }
                _ => {}
            }
            if scope == MemScope::Sys {
                return Err(self.err(format!(
                    "{name} with scope=\"sys\" is not available on Apple GPUs: Metal's widest scope \
                     is the device; use scope=\"gpu\""
                )));
            }
        }
        Ok(())
    }

    pub(super) fn atomic(&mut self, op: &'f Op) -> CompileResult<()> {
        let OpKind::Atomic {
            op: aop,
            sem,
            scope,
            has_mask,
        } = op.kind
        else {
            return Err(self.internal("not an atomic"));
        };
        let r = op.results[0];
        let dtype = self.elem_dtype(r);
        self.check_atomic_target(aop, dtype, scope)?;
        let ptr = op.operands[0];
        let root = self.root_value(ptr)?;
        if !matches!(self.ty_of(root), GpuType::Ptr(_, MemSpace::Device)) {
            return Err(self.err("atomics need a pointer into a kernel buffer"));
        }
        let data_end = 2 + usize::from(aop == AtomicOp::Cas);
        let data = &op.operands[1..data_end];
        let mask = has_mask.then(|| op.operands[data_end]);
        let atomic = Atomic {
            kind: GpuOpKind::Atomic {
                op: aop,
                sem,
                scope,
                has_mask: false,
            },
            root,
            dtype,
        };
        match self.a.class(r) {
            Class::Fixed(l) => self.tile_atomic(&atomic, r, (ptr, data, mask), l),
            _ => self.program_atomic(&atomic, r, (ptr, data, mask)),
        }
    }

    /// One atomic per element of layout `l`, each by its owner.
    fn tile_atomic(
        &mut self,
        atomic: &Atomic,
        r: ValueId,
        (ptr, data, mask): (ValueId, &[ValueId], Option<ValueId>),
        l: LayoutId,
    ) -> CompileResult<()> {
        if self.layout(l).value_leaves().iter().any(|leaf| leaf.stride == 0) {
            return Err(self.internal("an atomic in a layout that repeats elements within a thread"));
        }
        let index = self.elems(ptr, l)?;
        let operands: Vec<Vec<GpuValue>> = data
            .iter()
            .map(|&v| self.elems(v, l))
            .collect::<CompileResult<_>>()?;
        let masks = mask.map(|m| self.elems(m, l)).transpose()?;
        let owner = self.owner(l);
        let mut old = Vec::with_capacity(index.len());
        for (v, &at) in index.iter().enumerate() {
            let m = self.and_opt(masks.as_ref().map(|ms| ms[v]), owner);
            let values: Vec<GpuValue> = operands.iter().map(|o| o[v]).collect();
            old.push(self.emit_atomic(atomic, at, &values, m));
        }
        if owner.is_some() && self.uses[r.index()] > 0 {
            old = self.share_from_owners(old, l, atomic.dtype)?;
        }
        self.set_home(
            r,
            Home::Regs {
                layout: l,
                elems: old,
            },
        )
    }

    /// The old values of a replicated layout's owners, in every thread that
    /// holds the element.
    fn share_from_owners(
        &mut self,
        old: Vec<GpuValue>,
        l: LayoutId,
        dtype: DType,
    ) -> CompileResult<Vec<GpuValue>> {
        let numel = self.layout(l).numel();
        if numel > self.scratch_capacity(dtype) {
            return Err(self.err(format!(
                "sharing the old values of {numel} replicated elements needs {} bytes of threadgroup \
                 memory, more than is left; use a tile with at least as many elements as threads",
                numel * dtype.size_bytes()
            )));
        }
        let scratch = self.scratch(dtype, numel)?;
        let owner = self.owner(l);
        self.barrier()?;
        for (v, &x) in old.iter().enumerate() {
            let at = self.element_index(l, v);
            self.mem_store(scratch, at, x, 1, owner);
        }
        self.barrier()?;
        Ok((0..old.len())
            .map(|v| {
                let at = self.element_index(l, v);
                self.mem_load(scratch, at, 1, None, None)
            })
            .collect())
    }

    /// The program's one atomic, by its first thread, the old value broadcast.
    fn program_atomic(
        &mut self,
        atomic: &Atomic,
        r: ValueId,
        (ptr, data, mask): (ValueId, &[ValueId], Option<ValueId>),
    ) -> CompileResult<()> {
        let GpuOpKind::Atomic { sem, .. } = atomic.kind else {
            return Err(self.internal("not an atomic"));
        };
        let index = self.uniform(ptr)?;
        let values: Vec<GpuValue> = data
            .iter()
            .map(|&v| self.uniform(v))
            .collect::<CompileResult<_>>()?;
        let mask = mask.map(|m| self.uniform(m)).transpose()?;
        let base = self.a.role.map_or(0, |role| role.base);
        let tid = self.local_tid(base);
        let zero = self.const_i32(0);
        let first = self.compare(CmpOp::Eq, tid, zero);
        let m = self.and_opt(mask, Some(first));
        let shared = self.uses[r.index()] > 0;
        // The barrier before also keeps the scratch from a reader before it.
        if sem.releases() {
            self.device_barrier()?;
        } else if shared {
            self.barrier()?;
        }
        let old = self.emit_atomic(atomic, index, &values, m);
        if !shared {
            if sem.acquires() {
                self.device_barrier()?;
            }
            return self.set_home(r, Home::Uniform(old));
        }
        let scratch = self.scratch(atomic.dtype, 1)?;
        self.mem_store(scratch, zero, old, 1, Some(first));
        if sem.acquires() {
            self.device_barrier()?;
        } else {
            self.barrier()?;
        }
        let x = self.mem_load(scratch, zero, 1, None, None);
        self.set_home(r, Home::Uniform(x))
    }

    fn emit_atomic(
        &mut self,
        atomic: &Atomic,
        index: GpuValue,
        values: &[GpuValue],
        mask: Option<GpuValue>,
    ) -> GpuValue {
        let mut kind = atomic.kind.clone();
        if let GpuOpKind::Atomic { has_mask, .. } = &mut kind {
            *has_mask = mask.is_some();
        }
        let mut operands = vec![atomic.root, index];
        operands.extend_from_slice(values);
        operands.extend(mask);
        self.emit1(kind, operands, GpuType::Scalar(atomic.dtype))
    }

    /// A threadgroup barrier that also orders device memory.
    fn device_barrier(&mut self) -> CompileResult<()> {
        if self.in_role_body() {
            return Err(self.err(
                "a program's atomic with acquire or release semantics (or whose old value is used) \
                 needs a threadgroup barrier, which cannot run inside simdgroup_role: only some \
                 simdgroups execute its body; use sem=\"relaxed\" there",
            ));
        }
        self.emit(GpuOpKind::DeviceBarrier, ValueList::new(), vec![]);
        Ok(())
    }
}

/// An atomic's GPU op kind (mask flag set per element), root and element type.
struct Atomic {
    kind: GpuOpKind,
    root: GpuValue,
    dtype: DType,
}
