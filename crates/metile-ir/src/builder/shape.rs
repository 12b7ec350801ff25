//! Shape ops (Triton's names and rules): `permute`/`trans`, `reshape`,
//! `expand_dims` over several axes, `broadcast_to`, `join`/`split` and `cat`.
//!
//! `permute`, `reshape` and `take` are Tile IR ops (data movement the layouts
//! can often absorb); `join` and `cat` are composites of them and of
//! broadcasts and a `select`, so the absent-lane pass and every backend treat
//! each lane of a joined tile as the lane it came from.

use super::{Builder, Operand};
use crate::dtype::{Elem, Type};
use crate::error::IrResult;
use crate::ir_bail;
use crate::tile_ir::*;

/// Reads a list of axes of a tile of `rank` (negative counts from the end) and
/// checks that it names each axis once.
fn permutation(dims: &[i64], rank: usize) -> IrResult<Vec<usize>> {
    if dims.len() != rank {
        ir_bail!(
            "permute: dims {dims:?} must name each of the {rank} axes of the tile once (a permutation of 0..{rank})"
        );
    }
    let mut seen = vec![false; rank];
    let mut out = Vec::with_capacity(rank);
    for &d in dims {
        let a = if d < 0 { d + rank as i64 } else { d };
        if !(0..rank as i64).contains(&a) || seen[a as usize] {
            ir_bail!(
                "permute: dims {dims:?} must name each of the {rank} axes of the tile once (a permutation of 0..{rank})"
            );
        }
        seen[a as usize] = true;
        out.push(a as usize);
    }
    Ok(out)
}

/// A requested shape as sizes; each must be a positive integer.
fn sizes(shape: &[i64], what: &str) -> IrResult<Vec<usize>> {
    if let Some(&bad) = shape.iter().find(|&&d| d <= 0) {
        ir_bail!("{what}: shape {shape:?} has a size {bad}; every size must be a positive integer");
    }
    Ok(shape.iter().map(|&d| d as usize).collect())
}

impl Builder {
    /// `permute(x, dims)`: axis `i` of the result is axis `dims[i]` of `x`.
    pub fn permute(&mut self, x: Operand, dims: &[i64]) -> IrResult<ValueId> {
        let v = self.materialize(x, None);
        let ty = self.ty(v).clone();
        let dims = permutation(dims, ty.shape.len())?;
        if dims.iter().enumerate().all(|(i, &d)| i == d) {
            return Ok(v);
        }
        let shape: Vec<usize> = dims.iter().map(|&d| ty.shape[d]).collect();
        Ok(self.emit1(OpKind::Permute { dims }, vec![v], ty.with_shape(&shape)))
    }

    /// `reshape(x, shape)`: the same elements in row-major order; `()` turns a
    /// one-element tile into a scalar, and a scalar becomes a tile of one element.
    pub fn reshape(&mut self, x: Operand, shape: &[i64]) -> IrResult<ValueId> {
        let shape = sizes(shape, "reshape")?;
        let v = self.materialize(x, None);
        let ty = self.ty(v).clone();
        let numel: usize = shape.iter().product();
        if numel != ty.numel() {
            ir_bail!(
                "reshape: a tile of shape {:?} ({} elements) cannot take shape {shape:?} ({numel} elements)",
                ty.shape,
                ty.numel()
            );
        }
        if shape == ty.shape {
            return Ok(v);
        }
        if ty.is_scalar() {
            return self.broadcast_to(v, &shape);
        }
        Ok(self.emit1(OpKind::Reshape, vec![v], ty.with_shape(&shape)))
    }

    /// `expand_dims(x, axes)`: size-1 axes at the given positions of the result
    /// (negative counts from the end of the result).
    pub fn expand_dims_at(&mut self, x: Operand, axes: &[i64]) -> IrResult<ValueId> {
        let v = self.materialize(x, None);
        let rank = (self.ty(v).shape.len() + axes.len()) as i64;
        let mut wrapped = Vec::with_capacity(axes.len());
        for &a in axes {
            let w = if a < 0 { a + rank } else { a };
            if !(0..rank).contains(&w) {
                ir_bail!("expand_dims: axis {a} is out of range for a result of rank {rank}");
            }
            if wrapped.contains(&w) {
                ir_bail!("expand_dims: axes {axes:?} name axis {w} twice");
            }
            wrapped.push(w);
        }
        wrapped.sort_unstable();
        wrapped.into_iter().try_fold(v, |acc, a| self.expand_dims(acc, a))
    }

    /// `broadcast_to(x, shape)` with the shape checked first.
    pub fn broadcast_to_shape(&mut self, x: Operand, shape: &[i64]) -> IrResult<ValueId> {
        let shape = sizes(shape, "broadcast_to")?;
        let v = self.materialize(x, None);
        self.broadcast_to(v, &shape)
    }

    /// `broadcast(a, b)`: both operands broadcast to their common shape.
    pub fn broadcast_pair(&mut self, a: Operand, b: Operand) -> IrResult<(ValueId, ValueId)> {
        let shape = self.common_shape(&[a, b], "broadcast")?;
        let va = self.materialize(a, None);
        let vb = self.materialize(b, None);
        Ok((self.broadcast_to(va, &shape)?, self.broadcast_to(vb, &shape)?))
    }

    /// `join(a, b)`: a new last axis of size 2 holding `a` then `b`, both
    /// converted to their common type and broadcast to their common shape.
    pub fn join(&mut self, a: Operand, b: Operand) -> IrResult<ValueId> {
        let dtype = self.meet(a, b, "join")?;
        let shape = self.common_shape(&[a, b], "join")?;
        let mut joined = shape.clone();
        joined.push(2);
        let mut halves = Vec::with_capacity(2);
        for x in [a, b] {
            let v = self.coerce(x, dtype, &shape)?;
            let v = self.expand_dims(v, -1)?;
            halves.push(self.broadcast_to(v, &joined)?);
        }
        let index = self.arange(0, 2)?;
        let first = self.compare(CmpOp::Eq, index.into(), Operand::Int(0))?;
        let first = self.broadcast_to(first, &joined)?;
        Ok(self.emit1(
            OpKind::Select,
            vec![first, halves[0], halves[1]],
            Type::tile(dtype, &joined),
        ))
    }

    /// `split(x)`: the two halves of a last axis of size 2.
    pub fn split(&mut self, x: Operand) -> IrResult<(ValueId, ValueId)> {
        let v = self.materialize(x, None);
        let ty = self.ty(v).clone();
        if ty.shape.last() != Some(&2) {
            ir_bail!(
                "split needs a tile whose last axis has size 2 (as join makes), got shape {:?}",
                ty.shape
            );
        }
        Ok((
            self.take(v, ty.shape.len() - 1, 0)?,
            self.take(v, ty.shape.len() - 1, 1)?,
        ))
    }

    /// The elements at `index` along `axis`, which the result drops.
    fn take(&mut self, v: ValueId, axis: usize, index: usize) -> IrResult<ValueId> {
        let ty = self.ty(v).clone();
        let mut shape = ty.shape.clone();
        shape.remove(axis);
        Ok(self.emit1(OpKind::Take { axis, index }, vec![v], ty.with_shape(&shape)))
    }

    /// `cat(a, b)`: `a` then `b` along the first axis; both must have one
    /// shape (Triton's tiles have power-of-two sizes, so its `cat` concatenates
    /// equal halves too).
    pub fn cat(&mut self, a: Operand, b: Operand) -> IrResult<ValueId> {
        let (sa, sb) = (self.shape_of(a), self.shape_of(b));
        if sa.is_empty() || sa != sb {
            ir_bail!("cat needs two tiles of one shape, got shapes {sa:?} and {sb:?}");
        }
        for x in [a, b] {
            if let Some(Elem::Ptr(..)) = self.elem_of(x) {
                ir_bail!("cat does not accept a pointer operand");
            }
        }
        let joined = self.join(a, b)?;
        let rank = sa.len() as i64;
        let halves_first: Vec<i64> = std::iter::once(rank).chain(0..rank).collect();
        let halves = self.permute(joined.into(), &halves_first)?;
        let mut shape: Vec<i64> = sa.iter().map(|&d| d as i64).collect();
        shape[0] *= 2;
        self.reshape(halves.into(), &shape)
    }
}
