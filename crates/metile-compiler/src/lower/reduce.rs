//! Reductions (`sum`/`max`/`min`/`xor_sum`, whole tile or one axis).
//!
//! Three stages, each deterministic so that every thread holding a result
//! element computes the same bits:
//! 1. in-thread: each thread folds its registers that differ only along the
//!    reduced axes, in register order;
//! 2. in-simdgroup: thread leaves of the reduced axes that lie inside the 32
//!    lanes (power-of-two positions and extents) are folded with an xor-shuffle
//!    butterfly (every lane of a group ends with the same value), or with one
//!    `simd_sum`/`simd_max`/`simd_min` when those leaves are exactly the 5 lane
//!    bits and the op is exact there (integer max/min, any sum);
//! 3. across simdgroups (and any leaf the butterfly cannot take): one canonical
//!    thread per (partial index `j`, result element `r`) writes its partial to
//!    threadgroup scratch at `j * R + r`, a barrier, then every thread folds the
//!    `J` partials of each of its result elements in `j` order.
//!
//! The result is in the operand layout with the reduced axes *collapsed* (their
//! thread leaves become replication): the slice layout layout assignment chose.
//! Float max/min keep `fmax`/`fmin` semantics (a NaN operand yields the other)
//! because the butterfly uses the same ops; f16/bf16 accumulate in f32 and bool
//! in i32, rounded back once at the end.

use super::{Home, Lowering};
use crate::dist_layout::ThreadTerm;
use crate::error::CompileResult;
use metile_ir::gpu_ir::*;
use metile_ir::{BinaryOp, DType, Op, ReduceOp};
use std::collections::HashMap;

fn combine_op(op: ReduceOp) -> BinaryOp {
    match op {
        ReduceOp::Sum => BinaryOp::Add,
        ReduceOp::Max => BinaryOp::Max,
        ReduceOp::Min => BinaryOp::Min,
        ReduceOp::Xor => BinaryOp::Xor,
    }
}

fn is_pow2(x: i64) -> bool {
    x > 0 && x & (x - 1) == 0
}

impl<'f> Lowering<'f> {
    pub(super) fn reduce(&mut self, op: &'f Op, red: ReduceOp, axis: Option<usize>) -> CompileResult<()> {
        let (x, r) = (op.operands[0], op.results[0]);
        let dtype = self.elem_dtype(x);
        let acc_dtype = match dtype {
            DType::F16 | DType::BF16 | DType::F8E4M3 | DType::F8E5M2 => DType::F32,
            DType::Bool => DType::I32,
            d => d,
        };
        let combine = combine_op(red);
        let lx = self.natural_layout(x)?;
        let layout = self.layout(lx).clone();
        let rank = layout.shape().len();
        let reduced: Vec<usize> = match axis {
            Some(a) => vec![a],
            None => (0..rank).collect(),
        };
        let collapsed = layout.collapse(&reduced).map_err(|e| self.internal(e))?;
        let xs = self.elems(x, lx)?;
        let xs: Vec<GpuValue> = xs.into_iter().map(|v| self.cast(v, acc_dtype)).collect();

        // 1. In-thread: group registers by their coordinates off the reduced axes.
        let slots: HashMap<Vec<i64>, usize> = (0..collapsed.values())
            .map(|v| (collapsed.value_coords(v), v))
            .collect();
        let mut partial: Vec<Option<GpuValue>> = vec![None; collapsed.values()];
        for (v, &xv) in xs.iter().enumerate() {
            let mut key = layout.value_coords(v);
            for &a in &reduced {
                key[a] = 0;
            }
            let slot = *slots
                .get(&key)
                .ok_or_else(|| self.internal("a register without a reduction slot"))?;
            partial[slot] = Some(match partial[slot] {
                None => xv,
                Some(acc) => self.binary(combine, acc, xv),
            });
        }
        let mut partial: Vec<GpuValue> = partial
            .into_iter()
            .map(|p| p.ok_or_else(|| self.internal("an empty reduction slot")))
            .collect::<CompileResult<_>>()?;

        // 2. In-simdgroup.
        let reduced_terms: Vec<ThreadTerm> = layout
            .thread_terms()
            .into_iter()
            .filter(|t| {
                t.stride != 0
                    && layout
                        .axis_of(crate::dist_layout::Leaf {
                            extent: t.extent,
                            stride: t.stride,
                        })
                        .is_some_and(|a| reduced.contains(&a))
            })
            .collect();
        // A leaf that straddles the lane/simdgroup boundary is split there.
        let reduced_terms: Vec<ThreadTerm> = reduced_terms
            .into_iter()
            .flat_map(|t| {
                let straddles =
                    is_pow2(t.position) && is_pow2(t.extent) && t.position < 32 && t.position * t.extent > 32;
                if straddles {
                    let lanes = 32 / t.position;
                    vec![
                        ThreadTerm { extent: lanes, ..t },
                        ThreadTerm {
                            position: 32,
                            extent: t.extent / lanes,
                            stride: t.stride * lanes,
                        },
                    ]
                } else {
                    vec![t]
                }
            })
            .collect();
        let (lane_terms, rest_terms): (Vec<ThreadTerm>, Vec<ThreadTerm>) = reduced_terms
            .into_iter()
            .partition(|t| is_pow2(t.position) && is_pow2(t.extent) && t.position * t.extent <= 32);
        let lane_extent: i64 = lane_terms.iter().map(|t| t.extent).product();
        let hardware_ok = match red {
            ReduceOp::Sum => matches!(acc_dtype, DType::I32 | DType::U32 | DType::F32),
            ReduceOp::Max | ReduceOp::Min => matches!(acc_dtype, DType::I32 | DType::U32),
            ReduceOp::Xor => false,
        };
        if lane_extent == 32 && hardware_ok {
            for p in partial.iter_mut() {
                *p = self.emit1(GpuOpKind::SimdReduce(red), [*p], GpuType::Scalar(acc_dtype));
            }
        } else {
            for t in &lane_terms {
                let mut bit = t.position;
                while bit < t.position * t.extent {
                    let mask = self.const_i32(bit as i32);
                    for p in partial.iter_mut() {
                        let other =
                            self.emit1(GpuOpKind::SimdShuffleXor, [*p, mask], GpuType::Scalar(acc_dtype));
                        *p = self.binary(combine, *p, other);
                    }
                    bit *= 2;
                }
            }
        }

        // 3. Across simdgroups, through threadgroup memory.
        let cid = self.a.layouts.intern(collapsed.clone());
        if !rest_terms.is_empty() {
            let parts: i64 = rest_terms.iter().map(|t| t.extent).product();
            let results = collapsed.numel() as i64;
            let need = (parts * results) as usize;
            if need > self.scratch_capacity(acc_dtype) {
                return Err(self.err(format!(
                    "this reduction exchanges {parts} partial results for each of {results} elements, {} bytes of \
                     threadgroup memory, more than is free; reduce a smaller tile or use fewer simdgroups",
                    need * acc_dtype.size_bytes()
                )));
            }
            let root = self.scratch(acc_dtype, need)?;
            let mut prefix = 1;
            let index_terms: Vec<ThreadTerm> = rest_terms
                .iter()
                .map(|t| {
                    let term = ThreadTerm {
                        stride: prefix * results,
                        ..*t
                    };
                    prefix *= t.extent;
                    term
                })
                .collect();
            let threads = layout.threads() as i64;
            let base = layout.thread_base();
            let slot_base = self.at_depth(0, |this| this.sum_terms(base, &index_terms, threads));
            let mut writer_terms: Vec<(i64, i64)> =
                lane_terms.iter().map(|t| (t.position, t.extent)).collect();
            writer_terms.extend(layout.replication_terms().iter().map(|t| (t.position, t.extent)));
            let writer = self.owner_of_terms(lx, writer_terms);
            self.barrier()?;
            for (v, &p) in partial.iter().enumerate() {
                let e = self.element_index(cid, v);
                let idx = self.binary(BinaryOp::Add, slot_base, e);
                self.mem_store(root, idx, p, 1, writer);
            }
            self.barrier()?;
            for (v, p) in partial.iter_mut().enumerate() {
                let e = self.element_index(cid, v);
                let mut acc: Option<GpuValue> = None;
                for j in 0..parts {
                    let idx = if j == 0 {
                        e
                    } else {
                        let off = self.const_i32((j * results) as i32);
                        self.binary(BinaryOp::Add, e, off)
                    };
                    let y = self.mem_load(root, idx, 1, None, None);
                    acc = Some(self.accumulate(combine, acc, y));
                }
                *p = acc.ok_or_else(|| self.internal("an empty exchange"))?;
            }
        }

        let result: Vec<GpuValue> = partial.into_iter().map(|p| self.cast(p, dtype)).collect();
        let shape = self.f.ty(r).shape.clone();
        match axis.filter(|_| !shape.is_empty()) {
            None => {
                let same = self.emit1(GpuOpKind::AssumeUniform, [result[0]], GpuType::Scalar(dtype));
                self.set_home(r, Home::Uniform(same))
            }
            Some(_) => {
                let sliced = self.a.layouts.intern(collapsed.with_shape(&shape));
                self.set_home(
                    r,
                    Home::Regs {
                        layout: sliced,
                        elems: result,
                    },
                )
            }
        }
    }
}
