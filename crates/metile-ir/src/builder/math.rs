//! The builder's math beyond single element-wise ops: `fma`, and the functions
//! Triton's standard library composes from core ops (`clamp`, `sigmoid`,
//! `softmax`); reductions (with or without kept dimensions), `argmax`/`argmin`,
//! scans and `sort`.
//!
//! Composites are spelled with ordinary Tile IR ops, so every backend (and the
//! absent-lane pass) handles them with no new lowering: `argmax` is a `max`
//! followed by the smallest index holding it, which is deterministic whatever
//! order a backend reduces in.

use super::{Builder, Operand};
use crate::dtype::{DType, Elem, Type};
use crate::error::IrResult;
use crate::ir_bail;
use crate::tile_ir::*;

/// Reads an axis argument against a tile of `rank` (negative counts from the end).
fn normalize_axis(axis: i64, rank: usize, what: &str) -> IrResult<usize> {
    let rank_i = rank as i64;
    let a = if axis < 0 { axis + rank_i } else { axis };
    if !(0..rank_i).contains(&a) {
        ir_bail!("{what}: axis {axis} is out of range for a tile of rank {rank}");
    }
    Ok(a as usize)
}

impl Builder {
    /// Runs `op` on `values`, converted to f32 when they are of an fp8 type,
    /// and rounds its result back to that type; other values pass as they are.
    pub(crate) fn in_f32(
        &mut self,
        values: &[ValueId],
        op: impl FnOnce(&mut Self, &[ValueId]) -> IrResult<ValueId>,
    ) -> IrResult<ValueId> {
        let fp8 = values
            .iter()
            .find_map(|&v| self.ty(v).dtype().filter(|d| d.is_fp8()));
        let Some(storage) = fp8 else {
            return op(self, values);
        };
        let wide = values
            .iter()
            .map(|&v| self.cast(v, DType::F32))
            .collect::<IrResult<Vec<_>>>()?;
        let r = op(self, &wide)?;
        if self.ty(r).dtype() == Some(DType::F32) {
            self.cast(r, storage)
        } else {
            Ok(r)
        }
    }

    /// The dtype several operands meet at (strong types promote, literals are weak).
    fn meet_all(&self, ops: &[Operand], what: &str) -> IrResult<DType> {
        let mut strong: Option<DType> = None;
        for &op in ops {
            match self.elem_of(op) {
                Some(Elem::Scalar(d)) => strong = Some(strong.map_or(d, |s| DType::promote(s, d))),
                Some(Elem::Ptr(..)) => ir_bail!("{what} does not accept a pointer operand"),
                None => {}
            }
        }
        Ok(match strong {
            Some(mut d) => {
                for &op in ops.iter().filter(|o| !matches!(o, Operand::Value(_))) {
                    d = Self::meet_literal(d, op);
                }
                d
            }
            None => ops
                .iter()
                .map(|&o| super::literal_default_dtype(o))
                .fold(DType::Bool, DType::promote),
        })
    }

    /// A value converted to a float type (integers and bools to f32).
    fn as_float(&mut self, x: Operand, what: &str) -> IrResult<ValueId> {
        let v = self.materialize(x, Some(DType::F32));
        match self.ty(v).elem {
            Elem::Scalar(d) if d.is_float() => Ok(v),
            Elem::Scalar(_) => self.cast(v, DType::F32),
            Elem::Ptr(..) => ir_bail!("{what} does not accept a pointer ({})", self.ty(v)),
        }
    }

    /// `fma(a, b, c)`: `a * b + c` with one rounding; integers compute in f32.
    pub fn fma(&mut self, a: Operand, b: Operand, c: Operand) -> IrResult<ValueId> {
        let mut dtype = self.meet_all(&[a, b, c], "fma")?;
        if !dtype.is_float() {
            dtype = DType::F32;
        }
        let shape = self.common_shape(&[a, b, c], "fma")?;
        let va = self.coerce(a, dtype, &shape)?;
        let vb = self.coerce(b, dtype, &shape)?;
        let vc = self.coerce(c, dtype, &shape)?;
        self.in_f32(&[va, vb, vc], |b, vs| {
            let d = b.ty(vs[0]).dtype().unwrap_or(dtype);
            Ok(b.emit1(OpKind::Fma, vs.to_vec(), Type::tile(d, &shape)))
        })
    }

    /// `clamp(x, lo, hi)`: `minimum(maximum(x, lo), hi)` (Metal's definition; a
    /// NaN `x` gives `lo`, as `fmax` ignores it).
    pub fn clamp(&mut self, x: Operand, lo: Operand, hi: Operand) -> IrResult<ValueId> {
        let dtype = self.meet_all(&[x, lo, hi], "clamp")?;
        let shape = self.common_shape(&[x, lo, hi], "clamp")?;
        let x = self.coerce(x, dtype, &shape)?;
        let raised = self.binary(BinaryOp::Max, x.into(), lo)?;
        self.binary(BinaryOp::Min, raised.into(), hi)
    }

    /// `sigmoid(x) = 1 / (1 + exp(-x))`, as Triton spells it.
    pub fn sigmoid(&mut self, x: Operand) -> IrResult<ValueId> {
        let v = self.as_float(x, "sigmoid")?;
        let minus = self.unary(UnaryOp::Neg, v.into())?;
        let e = self.unary(UnaryOp::Exp, minus.into())?;
        let den = self.binary(BinaryOp::Add, Operand::Int(1), e.into())?;
        self.binary(BinaryOp::Div, Operand::Int(1), den.into())
    }

    /// `softmax(x, axis)`: `exp(x - max) / sum(exp(x - max))` along `axis`.
    pub fn softmax(&mut self, x: Operand, axis: i64) -> IrResult<ValueId> {
        let v = self.as_float(x, "softmax")?;
        let m = self.reduce_keep_dims(ReduceOp::Max, v.into(), Some(axis), true)?;
        let z = self.binary(BinaryOp::Sub, v.into(), m.into())?;
        let num = self.unary(UnaryOp::Exp, z.into())?;
        let den = self.reduce_keep_dims(ReduceOp::Sum, num.into(), Some(axis), true)?;
        self.binary(BinaryOp::Div, num.into(), den.into())
    }

    /// `sum`/`max`/`min`/`xor_sum` over the whole tile (`axis: None`) or one axis.
    pub fn reduce(&mut self, op: ReduceOp, x: Operand, axis: Option<i64>) -> IrResult<ValueId> {
        let name = OpKind::Reduce { op, axis: None }.name();
        let v = self.materialize(x, None);
        let ty = self.ty(v).clone();
        let d = match ty.dtype() {
            Some(d) => d,
            None => ir_bail!("{name} does not accept pointers"),
        };
        if op == ReduceOp::Xor && !d.is_int() {
            ir_bail!("xor_sum needs an integer tile, got {ty}");
        }
        if d.is_fp8() && !ty.is_scalar() {
            return self.in_f32(&[v], |b, vs| b.reduce(op, vs[0].into(), axis));
        }
        let (v, d) = if d == DType::Bool && op == ReduceOp::Sum {
            (self.cast(v, DType::I32)?, DType::I32)
        } else {
            (v, d)
        };
        if ty.is_scalar() {
            if axis.is_some_and(|a| a != 0 && a != -1) {
                ir_bail!("{name}: axis {axis:?} is out of range for a scalar");
            }
            return Ok(v);
        }
        let rank = ty.shape.len() as i64;
        let axis = match axis {
            None => None,
            Some(a) => {
                let a2 = if a < 0 { a + rank } else { a };
                if !(0..rank).contains(&a2) {
                    ir_bail!("{name}: axis {a} is out of range for a tile of rank {rank}");
                }
                Some(a2 as usize)
            }
        };
        // Reducing the one axis of a 1-D tile is the whole-tile reduction: one
        // spelling for one op, so every stage sees a scalar result the same way.
        let axis = axis.filter(|_| rank > 1);
        let shape: Vec<usize> = match axis {
            None => vec![],
            Some(a) => ty
                .shape
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != a)
                .map(|(_, &s)| s)
                .collect(),
        };
        Ok(self.emit1(OpKind::Reduce { op, axis }, vec![v], Type::tile(d, &shape)))
    }

    /// The input of `sum`/`cumsum` (`sums`) or `max`/`min` without a `dtype=`:
    /// integers narrower than 32 bits widen first, as Triton's do (sums to i32 or
    /// u32 by signedness, max/min to i32), so a sum of int8 does not wrap at 127.
    pub fn reduction_input(&mut self, x: Operand, sums: bool) -> IrResult<Operand> {
        let v = self.materialize(x, None);
        let wide = match self.ty(v).dtype() {
            Some(d) if d.is_narrow_int() && sums && d.is_unsigned_int() => DType::U32,
            Some(d) if d.is_narrow_int() => DType::I32,
            _ => return Ok(Operand::Value(v)),
        };
        Ok(Operand::Value(self.cast(v, wide)?))
    }

    /// A reduction whose reduced axes stay as size-1 axes with `keep_dims`.
    pub fn reduce_keep_dims(
        &mut self,
        op: ReduceOp,
        x: Operand,
        axis: Option<i64>,
        keep_dims: bool,
    ) -> IrResult<ValueId> {
        let v = self.materialize(x, None);
        let rank = self.ty(v).shape.len();
        let r = self.reduce(op, v.into(), axis)?;
        if !keep_dims || rank == 0 {
            return Ok(r);
        }
        match axis {
            None => (0..rank).try_fold(r, |acc, _| self.expand_dims(acc, 0)),
            Some(a) => {
                let a = normalize_axis(a, rank, OpKind::Reduce { op, axis: None }.name())?;
                self.expand_dims(r, a as i64)
            }
        }
    }

    /// The index of each element along `axis` (or its row-major index in the
    /// whole tile), shaped to broadcast against a tile of `shape`.
    fn positions(&mut self, shape: &[usize], axis: Option<usize>) -> IrResult<ValueId> {
        let rank = shape.len();
        let along = |this: &mut Self, a: usize| -> IrResult<ValueId> {
            let mut idx = this.arange(0, shape[a] as i64)?;
            for i in 0..rank {
                if i != a {
                    idx = this.expand_dims(idx, i as i64)?;
                }
            }
            Ok(idx)
        };
        match axis {
            Some(a) => along(self, a),
            None => {
                let mut flat: Option<ValueId> = None;
                for (a, &extent) in shape.iter().enumerate() {
                    let idx = along(self, a)?;
                    flat = Some(match flat {
                        None => idx,
                        Some(f) => {
                            let scaled = self.binary(BinaryOp::Mul, f.into(), Operand::Int(extent as i64))?;
                            self.binary(BinaryOp::Add, scaled.into(), idx.into())?
                        }
                    });
                }
                match flat {
                    Some(f) => Ok(f),
                    None => ir_bail!("internal: positions of a scalar"),
                }
            }
        }
    }

    /// `argmax`/`argmin` (`op` is `Max` or `Min`): the first index along `axis`
    /// (or in the flattened tile) holding the maximum/minimum that `max`/`min`
    /// give, so NaNs are skipped unless every element is NaN (then the first
    /// NaN). Absent lanes are skipped; with none present the index is 0.
    pub fn arg_reduce(
        &mut self,
        op: ReduceOp,
        x: Operand,
        axis: Option<i64>,
        keep_dims: bool,
    ) -> IrResult<ValueId> {
        let what = if op == ReduceOp::Max { "argmax" } else { "argmin" };
        let v = self.materialize(x, None);
        let ty = self.ty(v).clone();
        let d = match ty.dtype() {
            Some(d) => d,
            None => ir_bail!("{what} does not accept pointers"),
        };
        let rank = ty.shape.len();
        if rank == 0 {
            if axis.is_some_and(|a| a != 0 && a != -1) {
                ir_bail!("{what}: axis {axis:?} is out of range for a scalar");
            }
            return Ok(self.constant(Literal::Int(0), DType::I32));
        }
        let axis_index = axis.map(|a| normalize_axis(a, rank, what)).transpose()?;
        let count = match axis_index {
            Some(a) => ty.shape[a],
            None => ty.numel(),
        };
        const NONE: i64 = i32::MAX as i64;
        if 2 * count as i64 >= NONE {
            ir_bail!("{what}: a tile of {count} elements is too large");
        }
        let extreme = self.reduce_keep_dims(op, v.into(), axis, true)?;
        let hit = self.compare(CmpOp::Eq, v.into(), extreme.into())?;
        let index = self.positions(&ty.shape, axis_index)?;
        let miss = if d.is_float() {
            // A NaN is a candidate after every index, for when all are NaN.
            let nan = self.compare(CmpOp::Ne, v.into(), v.into())?;
            let later = self.binary(BinaryOp::Add, index.into(), Operand::Int(count as i64))?;
            self.select(nan.into(), later.into(), Operand::Int(NONE))?
        } else {
            let shape = self.ty(hit).shape.clone();
            self.full(&shape, Operand::Int(NONE), DType::I32)?
        };
        let candidates = self.select(hit.into(), index.into(), miss.into())?;
        let first = self.reduce(ReduceOp::Min, candidates.into(), axis)?;
        let nothing = self.compare(CmpOp::Eq, first.into(), Operand::Int(NONE))?;
        let mut r = self.select(nothing.into(), Operand::Int(0), first.into())?;
        if d.is_float() {
            let wrapped = self.compare(CmpOp::Ge, r.into(), Operand::Int(count as i64))?;
            let back = self.binary(BinaryOp::Sub, r.into(), Operand::Int(count as i64))?;
            r = self.select(wrapped.into(), back.into(), r.into())?;
        }
        if !keep_dims {
            return Ok(r);
        }
        match axis_index {
            None => (0..rank).try_fold(r, |acc, _| self.expand_dims(acc, 0)),
            Some(a) => self.expand_dims(r, a as i64),
        }
    }

    /// `cumsum`/`cumprod` along `axis` (inclusive; from the end with `reverse`).
    /// A bool tile is counted as i32.
    pub fn scan(&mut self, op: ScanOp, x: Operand, axis: i64, reverse: bool) -> IrResult<ValueId> {
        let name = OpKind::Scan { op, axis: 0, reverse }.name();
        let v = self.materialize(x, None);
        let ty = self.ty(v).clone();
        let v = match ty.dtype() {
            Some(DType::Bool) => self.cast(v, DType::I32)?,
            Some(d) if d.is_fp8() && !ty.is_scalar() => {
                return self.in_f32(&[v], |b, vs| b.scan(op, vs[0].into(), axis, reverse));
            }
            Some(_) => v,
            None => ir_bail!("{name} does not accept pointers"),
        };
        if ty.is_scalar() {
            if axis != 0 && axis != -1 {
                ir_bail!("{name}: axis {axis} is out of range for a scalar");
            }
            return Ok(v);
        }
        let axis = normalize_axis(axis, ty.shape.len(), name)?;
        let ty = self.ty(v).clone();
        Ok(self.emit1(OpKind::Scan { op, axis, reverse }, vec![v], ty))
    }

    /// `sort(x, axis, descending)` along `axis` (the last one when `None`),
    /// whose length must be a power of two.
    pub fn sort(&mut self, x: Operand, axis: Option<i64>, descending: bool) -> IrResult<ValueId> {
        let v = self.materialize(x, None);
        let ty = self.ty(v).clone();
        let d = match ty.dtype() {
            Some(d) => d,
            None => ir_bail!("sort does not accept pointers"),
        };
        if ty.is_scalar() {
            if axis.is_some_and(|a| a != 0 && a != -1) {
                ir_bail!("sort: axis {axis:?} is out of range for a scalar");
            }
            return Ok(v);
        }
        let rank = ty.shape.len();
        let axis = normalize_axis(axis.unwrap_or(-1), rank, "sort")?;
        let len = ty.shape[axis];
        if !len.is_power_of_two() {
            ir_bail!(
                "sort needs a power-of-two length along the sorted axis, got {len} (shape {:?}); \
                 use a block of {} elements loaded with a mask: sort puts the masked-off (absent) \
                 lanes last, so a store with the same mask writes the sorted values",
                ty.shape,
                len.next_power_of_two()
            );
        }
        if d.is_fp8() {
            return self.in_f32(&[v], |b, vs| b.sort(vs[0].into(), Some(axis as i64), descending));
        }
        let kind = OpKind::Sort { axis, descending };
        if d == DType::Bool {
            let wide = self.cast(v, DType::I32)?;
            let wide_ty = self.ty(wide).clone();
            let sorted = self.emit1(kind, vec![wide], wide_ty);
            return self.cast(sorted, DType::Bool);
        }
        Ok(self.emit1(kind, vec![v], ty))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify;

    fn tile_param(b: &mut Builder, d: DType) -> ValueId {
        let p = b.add_param("X", ParamKind::Pointer(d));
        let offs = b.arange(0, 8).unwrap();
        let ptrs = b.binary(BinaryOp::Add, p.into(), offs.into()).unwrap();
        b.load(ptrs.into(), None, None).unwrap()
    }

    #[test]
    fn fma_promotes_and_converts_integers_to_f32() {
        let mut b = Builder::new("k");
        let x = tile_param(&mut b, DType::I32);
        let r = b.fma(x.into(), Operand::Int(2), Operand::Float(0.5)).unwrap();
        assert_eq!(*b.ty(r), Type::tile(DType::F32, &[8]));
        let h = tile_param(&mut b, DType::F16);
        let r = b.fma(h.into(), Operand::Float(2.0), Operand::Int(1)).unwrap();
        assert_eq!(b.ty(r).dtype(), Some(DType::F16));
        verify(&b.finish().unwrap()).unwrap();
    }

    #[test]
    fn keep_dims_leaves_size_one_axes() {
        let mut b = Builder::new("k");
        let x = tile_param(&mut b, DType::F32);
        let x2 = b.expand_dims(x, 0).unwrap();
        let x2 = b.broadcast_to(x2, &[4, 8]).unwrap();
        let r = b
            .reduce_keep_dims(ReduceOp::Sum, x2.into(), Some(-1), true)
            .unwrap();
        assert_eq!(b.ty(r).shape, vec![4, 1]);
        let all = b.reduce_keep_dims(ReduceOp::Max, x2.into(), None, true).unwrap();
        assert_eq!(b.ty(all).shape, vec![1, 1]);
        let i = b.arg_reduce(ReduceOp::Min, x2.into(), Some(0), true).unwrap();
        assert_eq!(*b.ty(i), Type::tile(DType::I32, &[1, 8]));
        verify(&b.finish().unwrap()).unwrap();
    }

    #[test]
    fn sort_refuses_ragged_lengths_and_scans_check_axes() {
        let mut b = Builder::new("k");
        let p = b.add_param("X", ParamKind::Pointer(DType::F32));
        let offs = b.arange(0, 6).unwrap();
        let ptrs = b.binary(BinaryOp::Add, p.into(), offs.into()).unwrap();
        let x = b.load(ptrs.into(), None, None).unwrap();
        let e = b.sort(x.into(), None, false).unwrap_err().to_string();
        assert!(e.contains("power-of-two") && e.contains("8 elements"), "{e}");
        let e = b.scan(ScanOp::Sum, x.into(), 1, false).unwrap_err().to_string();
        assert!(e.contains("axis 1 is out of range"), "{e}");
        let s = b.scan(ScanOp::Prod, x.into(), -1, true).unwrap();
        assert_eq!(*b.ty(s), Type::tile(DType::F32, &[6]));
    }
}
