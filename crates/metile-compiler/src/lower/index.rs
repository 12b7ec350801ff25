//! Thread-index arithmetic: builtins, each layout's per-thread offset and
//! coordinates, and "canonical owner" predicates. All of it depends only on the
//! thread index and constants, so it is emitted once at the top of the kernel and
//! cached; the values are small non-negative integers (bounded by tile sizes).

use super::{CacheKey, Cached, Lowering};
use crate::dist_layout::ThreadTerm;
use crate::layout_assign::LayoutId;
use metile_ir::gpu_ir::*;
use metile_ir::{BinaryOp, CmpOp, DType, Literal};

const I32: GpuType = GpuType::Scalar(DType::I32);

impl<'f> Lowering<'f> {
    fn top_cached(&mut self, key: CacheKey, make: impl FnOnce(&mut Self) -> GpuValue) -> GpuValue {
        if let Some(Cached::One(v)) = self.cached(&key, 0) {
            return v;
        }
        self.at_depth(0, |this| {
            let v = make(this);
            this.cache(key, Cached::One(v));
            v
        })
    }

    pub(super) fn builtin(&mut self, b: Builtin) -> GpuValue {
        self.top_cached(CacheKey::Builtin(b), |this| {
            this.emit1(GpuOpKind::Builtin(b), ValueList::new(), I32)
        })
    }

    /// An i32 constant, emitted once at the top level.
    pub(super) fn const_i32(&mut self, c: i32) -> GpuValue {
        self.top_cached(CacheKey::ConstI32(c), |this| {
            this.konst(Literal::Int(i64::from(c)), DType::I32)
        })
    }

    /// `(tid / position) % extent`, the thread's coordinate along one thread leaf.
    /// The thread index relative to the first thread of a layout (`tid - base`).
    pub(super) fn local_tid(&mut self, base: usize) -> GpuValue {
        let tid = self.builtin(Builtin::ThreadIndex);
        if base == 0 {
            return tid;
        }
        self.top_cached(CacheKey::LocalTid(base), |this| {
            let b = this.const_i32(base as i32);
            this.binary(BinaryOp::Sub, tid, b)
        })
    }

    /// True on the threads `base .. base + threads` (a role's threads).
    pub(super) fn in_thread_range(&mut self, base: usize, threads: usize) -> GpuValue {
        let local = self.local_tid(base);
        self.top_cached(CacheKey::InRange(base, threads), |this| {
            let zero = this.const_i32(0);
            let n = this.const_i32(threads as i32);
            let ge = this.compare(CmpOp::Ge, local, zero);
            let lt = this.compare(CmpOp::Lt, local, n);
            this.binary(BinaryOp::And, ge, lt)
        })
    }

    fn thread_digit(&mut self, base: usize, position: i64, extent: i64, threads: i64) -> GpuValue {
        let mut x = self.local_tid(base);
        if position > 1 {
            let p = self.const_i32(position as i32);
            x = self.binary(BinaryOp::FloorDiv, x, p);
        }
        // The last leaf needs no modulo: the thread index stays below its end.
        if position * extent < threads {
            let e = self.const_i32(extent as i32);
            x = self.binary(BinaryOp::Rem, x, e);
        }
        x
    }

    /// `sum(((tid / position) % extent) * stride)` over the terms with a nonzero stride.
    pub(super) fn sum_terms(&mut self, base: usize, terms: &[ThreadTerm], threads: i64) -> GpuValue {
        let mut acc: Option<GpuValue> = None;
        for t in terms.iter().filter(|t| t.stride != 0) {
            let digit = self.thread_digit(base, t.position, t.extent, threads);
            let scaled = if t.stride == 1 {
                digit
            } else {
                let s = self.const_i32(t.stride as i32);
                self.binary(BinaryOp::Mul, digit, s)
            };
            acc = Some(self.accumulate(BinaryOp::Add, acc, scaled));
        }
        match acc {
            Some(a) => a,
            None => self.const_i32(0),
        }
    }

    /// `thread_offset(tid)` of a layout: the element index of the thread's register 0
    /// minus `value_offset(0)`.
    pub(super) fn thread_offset(&mut self, l: LayoutId) -> GpuValue {
        let terms = self.layout(l).thread_terms();
        let threads = self.layout(l).threads() as i64;
        let base = self.layout(l).thread_base();
        self.top_cached(CacheKey::ThreadOffset(l), |this| {
            this.sum_terms(base, &terms, threads)
        })
    }

    /// The thread part of the coordinate along `axis` (separable layouts).
    pub(super) fn thread_coord(&mut self, l: LayoutId, axis: usize) -> GpuValue {
        let terms = self.layout(l).thread_coord_terms(axis);
        let threads = self.layout(l).threads() as i64;
        let base = self.layout(l).thread_base();
        self.top_cached(CacheKey::ThreadCoord(l, axis), |this| {
            this.sum_terms(base, &terms, threads)
        })
    }

    /// The part of the thread coordinate along `axis` that its simdgroup
    /// gives (the thread leaves at positions of a simdgroup's width and
    /// beyond), computed from the simdgroup index so that it is one value
    /// for the whole simdgroup. `None` where a leaf straddles lanes and
    /// simdgroups or the layout's threads do not start at a simdgroup.
    pub(super) fn simdgroup_coord(&mut self, l: LayoutId, axis: usize) -> Option<GpuValue> {
        let simd = self.a.target.simd_width as i64;
        let layout = self.layout(l);
        let (base, threads) = (layout.thread_base() as i64, layout.threads() as i64);
        let all = layout.thread_coord_terms(axis);
        if base % simd != 0
            || all
                .iter()
                .any(|t| t.position < simd && t.position * t.extent > simd)
        {
            return None;
        }
        let terms: Vec<ThreadTerm> = all.into_iter().filter(|t| t.position >= simd).collect();
        Some(self.top_cached(CacheKey::SimdgroupCoord(l, axis), |this| {
            let mut sg = this.builtin(Builtin::SimdgroupIndex);
            if base != 0 {
                let first = this.const_i32((base / simd) as i32);
                sg = this.binary(BinaryOp::Sub, sg, first);
            }
            let mut acc: Option<GpuValue> = None;
            for t in terms.iter().filter(|t| t.stride != 0) {
                let mut digit = sg;
                if t.position > simd {
                    let p = this.const_i32((t.position / simd) as i32);
                    digit = this.binary(BinaryOp::FloorDiv, digit, p);
                }
                if t.position * t.extent < threads {
                    let e = this.const_i32(t.extent as i32);
                    digit = this.binary(BinaryOp::Rem, digit, e);
                }
                if t.stride != 1 {
                    let s = this.const_i32(t.stride as i32);
                    digit = this.binary(BinaryOp::Mul, digit, s);
                }
                acc = Some(this.accumulate(BinaryOp::Add, acc, digit));
            }
            acc.unwrap_or_else(|| this.const_i32(0))
        }))
    }

    /// The element index of register `v` in this thread.
    pub(super) fn element_index(&mut self, l: LayoutId, v: usize) -> GpuValue {
        let base = self.thread_offset(l);
        let off = self.layout(l).value_offsets()[v];
        if off == 0 {
            return base;
        }
        let c = self.const_i32(off as i32);
        self.top_cached(CacheKey::ElementIndex(l, v), |this| {
            this.binary(BinaryOp::Add, base, c)
        })
    }

    /// True on the one thread among those that differ only along `terms` (thread
    /// leaves as (position, extent)): the thread whose coordinate is 0 on each.
    /// `None` when there are no such leaves (every thread is an owner).
    pub(super) fn owner_of_terms(&mut self, l: LayoutId, terms: Vec<(i64, i64)>) -> Option<GpuValue> {
        if terms.is_empty() {
            return None;
        }
        let threads = self.layout(l).threads() as i64;
        let base = self.layout(l).thread_base();
        let key = CacheKey::Owner(l, terms.clone());
        Some(self.top_cached(key, |this| {
            let zero = this.const_i32(0);
            let mut acc = this.bool_const(true);
            for &(position, extent) in &terms {
                let digit = this.thread_digit(base, position, extent, threads);
                let is_zero = this.compare(CmpOp::Eq, digit, zero);
                acc = this.binary(BinaryOp::And, acc, is_zero);
            }
            acc
        }))
    }

    /// The canonical owners of a (possibly replicated) layout's elements.
    pub(super) fn owner(&mut self, l: LayoutId) -> Option<GpuValue> {
        let terms = self
            .layout(l)
            .replication_terms()
            .iter()
            .map(|t| (t.position, t.extent))
            .collect();
        self.owner_of_terms(l, terms)
    }

    /// `a && b` where either may be absent.
    pub(super) fn and_opt(&mut self, a: Option<GpuValue>, b: Option<GpuValue>) -> Option<GpuValue> {
        match (a, b) {
            (Some(x), Some(y)) => Some(self.binary(BinaryOp::And, x, y)),
            (x, None) => x,
            (None, y) => y,
        }
    }
}
