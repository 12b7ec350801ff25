//! Layout conversions and compiler scratch memory.
//!
//! Converting a tile between two layouts is a register copy when every thread
//! already holds the elements it needs (at registers that do not depend on the
//! thread). Otherwise the tile goes through threadgroup memory: a barrier (the
//! scratch may still be read by an earlier user), every element written once by
//! its canonical owner at its row-major index, a barrier, every thread reads what
//! it needs. A tile larger than the free threadgroup memory is moved in chunks of
//! consecutive elements, each write and read predicated on its chunk.
//!
//! Scratch is one threadgroup allocation per dtype, sized to the largest use and
//! shared by every conversion, reduction and `dot` staging: each user starts with
//! a barrier, so it never overwrites data an earlier user still reads.

use super::Lowering;
use crate::dist_layout::DistLayout;
use crate::error::CompileResult;
use crate::layout_assign::LayoutId;
use metile_ir::gpu_ir::*;
use metile_ir::{BinaryOp, CmpOp, DType};

fn rounded(bytes: usize) -> usize {
    bytes.div_ceil(16) * 16
}

impl<'f> Lowering<'f> {
    /// Threadgroup bytes taken by everything except the scratch of `dtype`.
    fn bytes_besides_scratch(&self, dtype: DType) -> usize {
        let own = self.scratch.iter().find(|(d, _)| *d == dtype).map(|&(_, v)| v);
        self.b
            .func()
            .threadgroup
            .iter()
            .filter(|a| Some(a.value) != own)
            .map(|a| a.footprint())
            .sum()
    }

    /// Elements of `dtype` the scratch may grow to without passing the limit.
    pub(super) fn scratch_capacity(&self, dtype: DType) -> usize {
        self.a
            .target
            .max_threadgroup_bytes
            .saturating_sub(self.bytes_besides_scratch(dtype))
            / dtype.size_bytes()
    }

    /// The scratch allocation of `dtype`, grown to at least `len` elements.
    pub(super) fn scratch(&mut self, dtype: DType, len: usize) -> CompileResult<GpuValue> {
        let others = self.bytes_besides_scratch(dtype);
        let need = rounded(len * dtype.size_bytes());
        let max_bytes = self.a.target.max_threadgroup_bytes;
        if others + need > max_bytes {
            return Err(self.err(format!(
                "needs {} bytes of threadgroup memory ({need} for this op); at most {max_bytes} are allowed",
                others + need
            )));
        }
        if let Some(&(_, root)) = self.scratch.iter().find(|(d, _)| *d == dtype) {
            self.b.grow_threadgroup(root, len);
            return Ok(root);
        }
        let root = self.b.add_threadgroup(dtype, len, TgPurpose::Scratch);
        self.scratch.push((dtype, root));
        Ok(root)
    }

    /// Scratch for a `dot` that has ops held back until after its staging
    /// (`Lowering::block`): those may use the shared scratch themselves (a
    /// layout conversion, between barriers), so the staged operands get
    /// threadgroup memory of their own.
    pub(super) fn dot_scratch(&mut self, dtype: DType, len: usize) -> CompileResult<GpuValue> {
        if self.deferred.is_empty() {
            return self.scratch(dtype, len);
        }
        let used: usize = self.b.func().threadgroup.iter().map(|a| a.footprint()).sum();
        let need = rounded(len * dtype.size_bytes());
        let max_bytes = self.a.target.max_threadgroup_bytes;
        if used + need > max_bytes {
            return Err(self.err(format!(
                "needs {} bytes of threadgroup memory ({need} for this op); at most {max_bytes} are allowed",
                used + need
            )));
        }
        Ok(self.b.add_threadgroup(dtype, len, TgPurpose::Scratch))
    }

    /// Elements of `dtype` a `dot`'s staging may take (see [`Lowering::dot_scratch`]).
    pub(super) fn dot_scratch_capacity(&self, dtype: DType) -> usize {
        if self.deferred.is_empty() {
            return self.scratch_capacity(dtype);
        }
        let used: usize = self.b.func().threadgroup.iter().map(|a| a.footprint()).sum();
        self.a.target.max_threadgroup_bytes.saturating_sub(used) / dtype.size_bytes()
    }

    pub(super) fn mem_load(
        &mut self,
        root: GpuValue,
        index: GpuValue,
        width: u8,
        mask: Option<GpuValue>,
        other: Option<GpuValue>,
    ) -> GpuValue {
        let dtype = self.dtype_of(root);
        let mut operands = vec![root, index];
        operands.extend(mask);
        let has_other = mask.is_some() && other.is_some();
        if has_other {
            operands.extend(other);
        }
        self.emit1(
            GpuOpKind::Load {
                width,
                has_mask: mask.is_some(),
                has_other,
            },
            operands,
            GpuType::loaded(dtype, width),
        )
    }

    pub(super) fn mem_store(
        &mut self,
        root: GpuValue,
        index: GpuValue,
        value: GpuValue,
        width: u8,
        mask: Option<GpuValue>,
    ) {
        let mut operands = vec![root, index, value];
        operands.extend(mask);
        self.emit(
            GpuOpKind::Store {
                width,
                has_mask: mask.is_some(),
            },
            operands,
            vec![],
        );
    }

    /// `lo <= x < lo + len` as a bool, for chunked exchanges; returns `x - lo` too.
    fn chunk_membership(&mut self, x: GpuValue, lo: i64, len: i64) -> (GpuValue, GpuValue) {
        let lo_v = self.const_i32(lo as i32);
        let rel = if lo == 0 {
            x
        } else {
            self.binary(BinaryOp::Sub, x, lo_v)
        };
        let zero = self.const_i32(0);
        let len_v = self.const_i32(len as i32);
        let above = self.compare(CmpOp::Ge, rel, zero);
        let below = self.compare(CmpOp::Lt, rel, len_v);
        (self.binary(BinaryOp::And, above, below), rel)
    }

    /// For a layout over only some of the threadgroup's threads, the predicate
    /// selecting them.
    pub(super) fn partial_range(&mut self, layout: &DistLayout) -> Option<GpuValue> {
        let whole = layout.thread_base() == 0 && layout.threads() == self.a.threads as usize;
        (!whole).then(|| self.in_thread_range(layout.thread_base(), layout.threads()))
    }

    /// Moves a tile's registers from layout `from` to layout `to`.
    pub(super) fn convert(
        &mut self,
        elems: Vec<GpuValue>,
        from: LayoutId,
        to: LayoutId,
        dtype: DType,
    ) -> CompileResult<Vec<GpuValue>> {
        if from == to {
            return Ok(elems);
        }
        let (src, dst) = (self.layout(from).clone(), self.layout(to).clone());
        if let Some(map) = DistLayout::register_map(&src, &dst, |e| e) {
            return Ok(map.into_iter().map(|u| elems[u]).collect());
        }
        let numel = src.numel();
        let capacity = self.scratch_capacity(dtype);
        if capacity == 0 {
            return Err(self.err("no threadgroup memory is left for a layout conversion"));
        }
        // A conversion takes at most half the threadgroup memory (in more
        // chunks if need be), so that a `dot` staging operands of another
        // dtype next to it still finds room.
        let half = (self.a.target.max_threadgroup_bytes / 2 / dtype.size_bytes()).max(1);
        let chunk = numel.min(capacity).min(half);
        let root = self.scratch(dtype, chunk)?;
        // A conversion into or out of a `simdgroup_role`'s layout runs (before the
        // role) on every thread; only the layout's own threads may write or read.
        let src_range = self.partial_range(&src);
        let dst_range = self.partial_range(&dst);
        let owner = self.owner(from);
        let owner = self.and_opt(owner, src_range);
        let mut out: Vec<Option<GpuValue>> = vec![None; dst.values()];
        for lo in (0..numel).step_by(chunk) {
            self.barrier()?;
            for (v, &x) in elems.iter().enumerate() {
                let idx = self.element_index(from, v);
                if chunk == numel {
                    self.mem_store(root, idx, x, 1, owner);
                } else {
                    let (inside, rel) = self.chunk_membership(idx, lo as i64, chunk as i64);
                    let mask = self.and_opt(Some(inside), owner);
                    self.mem_store(root, rel, x, 1, mask);
                }
            }
            self.barrier()?;
            for (v, slot) in out.iter_mut().enumerate() {
                let idx = self.element_index(to, v);
                *slot = Some(if chunk == numel {
                    self.mem_load(root, idx, 1, dst_range, None)
                } else {
                    let (inside, rel) = self.chunk_membership(idx, lo as i64, chunk as i64);
                    let inside = self.and_opt(Some(inside), dst_range).unwrap_or(inside);
                    let previous = match *slot {
                        Some(p) => p,
                        None => self.zero_of(dtype),
                    };
                    self.mem_load(root, rel, 1, Some(inside), Some(previous))
                });
            }
        }
        out.into_iter()
            .map(|x| x.ok_or_else(|| self.internal("a conversion left a register unset")))
            .collect()
    }
}
