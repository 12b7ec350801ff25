//! Element-wise ops, `arange`, broadcasts and reshapes: one scalar GPU op per
//! register. Pointer arithmetic is integer arithmetic on the offsets.

use super::{Home, Lowering};
use crate::dist_layout::{row_major_strides, DistLayout};
use crate::error::CompileResult;
use crate::layout_assign::{Class, LayoutId};
use crate::target::TargetKind;
use metile_ir::gpu_ir::*;
use metile_ir::{BinaryOp, DType, Literal, Op, OpKind, UnaryOp, ValueId};

/// Maps an element of a tile of `dst_shape` to the element of the broadcast
/// source (same rank, size-1 axes where it was broadcast) that it copies.
pub(super) fn broadcast_source(src_shape: &[usize], dst_shape: &[usize], e: i64) -> i64 {
    let (ds, ss) = (row_major_strides(dst_shape), row_major_strides(src_shape));
    let mut rest = e;
    let mut out = 0;
    for a in 0..dst_shape.len() {
        let c = rest / ds[a];
        rest %= ds[a];
        if src_shape[a] != 1 {
            out += c * ss[a];
        }
    }
    out
}

/// A source shape padded with leading 1s to `rank` (numpy broadcasting).
pub(super) fn pad_shape(shape: &[usize], rank: usize) -> Vec<usize> {
    let mut s = vec![1; rank.saturating_sub(shape.len())];
    s.extend_from_slice(shape);
    s
}

impl<'f> Lowering<'f> {
    pub(super) fn elementwise(&mut self, op: &'f Op) -> CompileResult<()> {
        let r = op.results[0];
        match self.a.class(r) {
            Class::Uniform => {
                let x = self.elementwise_uniform(op)?;
                self.set_home(r, Home::Uniform(x))
            }
            Class::Flexible => self.set_home(r, Home::Flexible),
            Class::Fixed(l) => {
                let elems = self.elementwise_in(op, l)?;
                self.set_home(r, Home::Regs { layout: l, elems })
            }
        }
    }

    fn elementwise_uniform(&mut self, op: &Op) -> CompileResult<GpuValue> {
        match op.kind {
            OpKind::Broadcast | OpKind::ExpandDims { .. } => self.uniform(op.operands[0]),
            OpKind::Permute { .. } | OpKind::Reshape | OpKind::Take { .. } => self.shape_op_uniform(op),
            _ => {
                let xs = op
                    .operands
                    .iter()
                    .map(|&v| self.uniform(v))
                    .collect::<CompileResult<Vec<_>>>()?;
                let d = self.elem_dtype(op.results[0]);
                Ok(self.scalar_op(&op.kind, &xs, d))
            }
        }
    }

    /// The result of an element-wise op (or arange/broadcast/reshape) in `l`.
    pub(super) fn elementwise_in(&mut self, op: &Op, l: LayoutId) -> CompileResult<Vec<GpuValue>> {
        let count = self.values_of(l);
        match op.kind {
            OpKind::Arange { start, .. } => {
                let mut out = Vec::with_capacity(count);
                for v in 0..count {
                    let e = self.element_index(l, v);
                    out.push(if start == 0 {
                        e
                    } else {
                        let s = self.const_i32(start as i32);
                        self.binary(BinaryOp::Add, e, s)
                    });
                }
                Ok(out)
            }
            OpKind::Broadcast => self.broadcast_in(op, l),
            OpKind::Permute { .. } | OpKind::Reshape | OpKind::Take { .. } => self.shape_op_in(op, l),
            OpKind::ExpandDims { .. } => {
                let x = op.operands[0];
                let shape = self.f.ty(x).shape.clone();
                let src = self.layout(l).with_shape(&shape);
                let src = self.a.layouts.intern(src);
                self.elems(x, src)
            }
            _ => {
                let mut inputs = Vec::with_capacity(op.operands.len());
                for &x in &op.operands {
                    inputs.push(self.elems(x, l)?);
                }
                let d = self.elem_dtype(op.results[0]);
                // Where the axis analysis proves the result constant over aligned
                // runs that a thread holds in consecutive registers (a bounds
                // check `cols < N` with `N` a multiple of the run), the run's
                // first register stands for the others: one compare per run,
                // and one predicate live instead of one per element.
                let run = self.constant_register_run(op.results[0], l);
                let mut out: Vec<GpuValue> = Vec::with_capacity(count);
                for v in 0..count {
                    let x = if v % run == 0 {
                        let xs: Vec<GpuValue> = inputs.iter().map(|e| e[v]).collect();
                        self.scalar_op(&op.kind, &xs, d)
                    } else {
                        out[v - v % run]
                    };
                    out.push(x);
                }
                Ok(out)
            }
        }
    }

    /// The length of the aligned runs of registers of `v` in `l` that the axis
    /// analysis proves hold one value (1: none).
    fn constant_register_run(&self, v: ValueId, l: LayoutId) -> usize {
        let constancy = self.info.get(v).constancy;
        let run = self.layout_run(l);
        let mut g = 1;
        while g * 2 <= run && (g * 2) as u64 <= constancy && run % (g * 2) == 0 {
            g *= 2;
        }
        g
    }

    /// A broadcast into `l`: the source is taken in the layout `l` collapses to
    /// along the broadcast axes, from which every thread already holds its copies.
    fn broadcast_in(&mut self, op: &Op, l: LayoutId) -> CompileResult<Vec<GpuValue>> {
        let x = op.operands[0];
        if self.is_uniform(x) {
            let u = self.uniform(x)?;
            return Ok(vec![u; self.values_of(l)]);
        }
        let dst: DistLayout = self.layout(l).clone();
        let src_shape = self.f.ty(x).shape.clone();
        let padded = pad_shape(&src_shape, dst.shape().len());
        let grown: Vec<usize> = (0..padded.len())
            .filter(|&a| padded[a] == 1 && dst.shape()[a] > 1)
            .collect();
        let collapsed = dst.collapse(&grown).map_err(|e| self.internal(e))?;
        let src_id = self.a.layouts.intern(collapsed.with_shape(&src_shape));
        let xs = self.elems(x, src_id)?;
        let dst_shape = dst.shape().to_vec();
        let map = DistLayout::register_map(&collapsed, &dst, |e| broadcast_source(&padded, &dst_shape, e))
            .ok_or_else(|| self.internal("a broadcast from its collapsed layout is not register-local"))?;
        Ok(map.into_iter().map(|u| xs[u]).collect())
    }

    /// One element of an element-wise op.
    pub(super) fn scalar_op(&mut self, kind: &OpKind, xs: &[GpuValue], dtype: DType) -> GpuValue {
        let scalar = GpuType::Scalar(dtype);
        match kind {
            OpKind::Unary(UnaryOp::Neg) if self.opaque_negation(dtype) => {
                let m = self.minus_one(dtype);
                self.binary(BinaryOp::Mul, xs[0], m)
            }
            OpKind::Unary(u) => self.emit1(GpuOpKind::Unary(*u), [xs[0]], scalar),
            OpKind::Binary(b) => self.emit1(GpuOpKind::Binary(*b), [xs[0], xs[1]], scalar),
            OpKind::Compare(c) => self.compare(*c, xs[0], xs[1]),
            OpKind::Select => self.select(xs[0], xs[1], xs[2]),
            OpKind::Fma => self.emit1(GpuOpKind::Fma, [xs[0], xs[1], xs[2]], scalar),
            OpKind::Cast => self.cast(xs[0], dtype),
            OpKind::AddPtr => {
                let off = self.cast(xs[1], dtype);
                self.binary(BinaryOp::Add, xs[0], off)
            }
            // Broadcasts and reshapes of one element are the element.
            _ => xs[0],
        }
    }

    /// Whether negating a `dtype` multiplies by an opaque -1 instead. ptxas
    /// (CUDA 12.8 to 13.3 at least, sm_90 and later, any -O above 0) fuses
    /// chains of 32-bit integer min/max into a three-input `VIMNMX3` and can
    /// drop a negation it folded into one of the operands: `max(-a, -b, -c)`
    /// becomes `max(-a, b, -c)`. Found by the differential fuzzer on an H200
    /// (a row max of `-x` returned `max(x)` in one lane); the PTX is right and
    /// `-Xptxas -O0` gives the right answer. A multiplier the compiler cannot
    /// see is an instruction of its own, never an operand modifier.
    fn opaque_negation(&self, dtype: DType) -> bool {
        matches!(dtype, DType::I32 | DType::U32) && matches!(self.a.target.kind, TargetKind::Nvidia { .. })
    }

    /// -1 as a `dtype` the device compiler cannot fold (a launch parameter).
    fn minus_one(&mut self, dtype: DType) -> GpuValue {
        let m = match self.minus_one {
            Some(m) => m,
            None => {
                let m = self.b.add_param("metile_minus_one", GpuParamKind::MinusOne, 0);
                self.minus_one = Some(m);
                m
            }
        };
        if dtype == DType::I32 {
            m
        } else {
            self.cast(m, dtype)
        }
    }

    /// A zero of `dtype` (what a masked-off load reads without `other`).
    pub(super) fn zero_of(&mut self, dtype: DType) -> GpuValue {
        let lit = match dtype {
            DType::Bool => Literal::Bool(false),
            d if d.is_float() => Literal::Float(0.0),
            _ => Literal::Int(0),
        };
        self.konst(lit, dtype)
    }
}
