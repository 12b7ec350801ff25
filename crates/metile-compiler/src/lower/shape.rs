//! `permute`, `reshape` and `take` (the shape ops that move elements): each
//! is computed in a layout by asking for its operand in the layout that holds
//! every needed element in the same registers (`DistLayout::permuted`,
//! `reshaped`, or the result's layout grown by the taken axis), so the op
//! itself is register renaming; whatever data movement remains is the
//! operand's ordinary layout conversion. Layout assignment gives each result
//! the layout that makes that conversion a register copy where one exists.

use super::Lowering;
use crate::dist_layout::{row_major_strides, DistLayout};
use crate::error::CompileResult;
use crate::layout_assign::LayoutId;
use metile_ir::gpu_ir::*;
use metile_ir::{Op, OpKind};

/// For `take(axis, index)` of a tile of `shape`: the source element of result
/// element `e`.
fn taken_from(shape: &[usize], axis: usize, index: usize) -> impl Fn(i64) -> i64 {
    let inner = row_major_strides(shape)[axis];
    let extent = shape[axis] as i64;
    move |e| (e / inner) * extent * inner + index as i64 * inner + e % inner
}

impl<'f> Lowering<'f> {
    /// A shape op's result in layout `l`.
    pub(super) fn shape_op_in(&mut self, op: &Op, l: LayoutId) -> CompileResult<Vec<GpuValue>> {
        let x = op.operands[0];
        if self.is_uniform(x) {
            let u = self.uniform(x)?;
            return Ok(vec![u; self.values_of(l)]);
        }
        let dst = self.layout(l).clone();
        let src_shape = self.f.ty(x).shape.clone();
        match &op.kind {
            OpKind::Permute { dims } => {
                let mut inverse = vec![0; dims.len()];
                for (i, &d) in dims.iter().enumerate() {
                    inverse[d] = i;
                }
                match dst.permuted(&inverse) {
                    Some(src) => {
                        let src = self.a.layouts.intern(src);
                        self.elems(x, src)
                    }
                    // `l` is not axis-separable: transpose into the default
                    // layout (which is), then convert.
                    None => self.via_default_layout(op, l),
                }
            }
            OpKind::Reshape => match dst.reshaped(&src_shape) {
                Some(src) => {
                    let src = self.a.layouts.intern(src);
                    self.elems(x, src)
                }
                // `l` does not split at the operand's axes: the operand in its
                // default layout, converted (the row-major index is the same in
                // both shapes, which is all a conversion goes by).
                None => {
                    let from = self.a.blocked(&src_shape)?;
                    let xs = self.elems(x, from)?;
                    let dtype = self.elem_dtype(x);
                    self.convert(xs, from, l, dtype)
                }
            },
            OpKind::Take { axis, index } => self.take_in(op, (*axis, *index), l),
            _ => Err(self.internal("not a shape op")),
        }
    }

    /// A permute or take computed in the default layout of its result (which
    /// is axis-separable), then converted to `l`.
    fn via_default_layout(&mut self, op: &Op, l: LayoutId) -> CompileResult<Vec<GpuValue>> {
        let r = op.results[0];
        let shape = self.f.ty(r).shape.clone();
        let m = self.a.blocked(&shape)?;
        if m == l {
            return Err(self.internal(format!("the default layout of {shape:?} is not axis-separable")));
        }
        let elems = self.shape_op_in(op, m)?;
        let dtype = self.elem_dtype(r);
        self.convert(elems, m, l, dtype)
    }

    /// `take` in `l`: the operand in `l` grown by the taken axis (every thread
    /// holds the whole line along it, the axis' positions in registers of
    /// their own), from which each register is picked.
    fn take_in(
        &mut self,
        op: &Op,
        (axis, index): (usize, usize),
        l: LayoutId,
    ) -> CompileResult<Vec<GpuValue>> {
        let x = op.operands[0];
        let dst = self.layout(l).clone();
        let shape = self.f.ty(x).shape.clone();
        let mut line = shape.clone();
        line[axis] = 1;
        let grown = match dst.with_shape(&line).extend_to(&shape) {
            Ok(g) if dst.is_separable() => g,
            _ => return self.via_default_layout(op, l),
        };
        let src = self.a.layouts.intern(grown.clone());
        let xs = self.elems(x, src)?;
        let map = DistLayout::register_map(&grown, &dst, taken_from(&shape, axis, index))
            .ok_or_else(|| self.internal("a take from its grown layout is not register-local"))?;
        Ok(map.into_iter().map(|u| xs[u]).collect())
    }

    /// A shape op whose result is one value every thread holds (a scalar from
    /// a one-element tile, or one half of a `split` of two elements): the
    /// operand in a layout where every thread holds all of it, then the one
    /// register.
    pub(super) fn shape_op_uniform(&mut self, op: &Op) -> CompileResult<GpuValue> {
        let x = op.operands[0];
        if self.is_uniform(x) {
            return self.uniform(x);
        }
        let shape = self.f.ty(x).shape.clone();
        let element = match op.kind {
            OpKind::Take { axis, index } => taken_from(&shape, axis, index)(0),
            _ => 0,
        };
        let ones = vec![1; shape.len()];
        let one = self.a.blocked(&ones)?;
        let everywhere = self.layout(one).extend_to(&shape).map_err(|e| self.internal(e))?;
        let register = everywhere
            .value_offsets()
            .iter()
            .position(|&o| o == element)
            .ok_or_else(|| self.internal("a replicated layout lacks an element"))?;
        let all = self.a.layouts.intern(everywhere);
        let xs = self.elems(x, all)?;
        Ok(xs[register])
    }
}
