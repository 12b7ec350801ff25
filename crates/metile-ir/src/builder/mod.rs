//! Builds canonical Tile IR and owns the language's typing rules: Python literals
//! are weakly typed, binary operands are promoted (`DType::promote`) and broadcast
//! (numpy rules), `/` on integers is float division, pointers accept integer
//! offsets. Every rule lives here once so every frontend and backend agrees.
//!
//! The fp8 types are storage: an op whose operands meet at an fp8 type computes
//! in f32 (the operands converted exactly) and its result is rounded to the fp8
//! type once (`Builder::in_f32`), so no backend ever computes on fp8 values;
//! loads, stores, selects, shape ops and casts move them as they are.

use crate::dtype::{broadcast_shapes, AddrSpace, DType, Elem, Type};
use crate::error::IrResult;
use crate::ir_bail;
use crate::tile_ir::*;

mod atomic;
mod debug;
mod math;
mod random;
mod regions;
mod shape;

pub use atomic::AtomicFlags;
pub use random::{MAX_PHILOX_ROUNDS, PHILOX_ROUNDS};

/// An operand as the frontend sees it: an IR value or a Python literal whose
/// dtype is decided by the value it meets.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Operand {
    Value(ValueId),
    Bool(bool),
    Int(i64),
    Float(f64),
}

impl From<ValueId> for Operand {
    fn from(v: ValueId) -> Operand {
        Operand::Value(v)
    }
}

pub struct Builder {
    name: String,
    params: Vec<Param>,
    constexprs: Vec<(String, String)>,
    threads_per_group: Option<usize>,
    values: Vec<Type>,
    /// Open blocks; ops are appended to the last one.
    blocks: Vec<Block>,
    loc: Loc,
}

fn literal_default_dtype(op: Operand) -> DType {
    match op {
        Operand::Bool(_) => DType::Bool,
        Operand::Int(_) => DType::I32,
        Operand::Float(_) => DType::F32,
        Operand::Value(_) => unreachable!("only literals have a default dtype"),
    }
}

fn literal_of(op: Operand) -> Literal {
    match op {
        Operand::Bool(b) => Literal::Bool(b),
        Operand::Int(i) => Literal::Int(i),
        Operand::Float(x) => Literal::Float(x),
        Operand::Value(_) => unreachable!("values are not literals"),
    }
}

/// A literal converted to `dtype` the way a C cast would.
fn convert_literal(lit: Literal, dtype: DType) -> Literal {
    match dtype {
        DType::Bool => Literal::Bool(lit.as_f64() != 0.0),
        d if d.is_int() => Literal::Int(match lit {
            Literal::Float(x) => x.trunc() as i64,
            other => other.as_i64(),
        }),
        _ => Literal::Float(lit.as_f64()),
    }
}

impl Builder {
    pub fn new(name: &str) -> Builder {
        Builder {
            name: name.to_string(),
            params: vec![],
            constexprs: vec![],
            threads_per_group: None,
            values: vec![],
            blocks: vec![Block::default()],
            loc: Loc::unknown(),
        }
    }

    pub fn set_loc(&mut self, loc: Loc) {
        self.loc = loc;
    }

    pub fn loc(&self) -> &Loc {
        &self.loc
    }

    pub fn set_threads_per_group(&mut self, threads: usize) {
        self.threads_per_group = Some(threads);
    }

    pub fn add_constexpr(&mut self, name: &str, value: &str) {
        self.constexprs.push((name.to_string(), value.to_string()));
    }

    pub fn ty(&self, v: ValueId) -> &Type {
        &self.values[v.index()]
    }

    fn new_value(&mut self, ty: Type) -> ValueId {
        let id = ValueId(self.values.len() as u32);
        self.values.push(ty);
        id
    }

    fn current(&mut self) -> &mut Block {
        self.blocks.last_mut().expect("the function body is always open")
    }

    /// Appends an op with fresh results of the given types.
    fn emit(&mut self, kind: OpKind, operands: Vec<ValueId>, result_types: Vec<Type>) -> Vec<ValueId> {
        let results: Vec<ValueId> = result_types.into_iter().map(|t| self.new_value(t)).collect();
        let op = Op {
            kind,
            operands,
            results: results.clone(),
            regions: vec![],
            loc: self.loc.clone(),
        };
        self.current().ops.push(op);
        results
    }

    fn emit1(&mut self, kind: OpKind, operands: Vec<ValueId>, ty: Type) -> ValueId {
        self.emit(kind, operands, vec![ty])[0]
    }

    pub fn add_param(&mut self, name: &str, kind: ParamKind) -> ValueId {
        let ty = match kind {
            ParamKind::Pointer(d) => Type {
                elem: Elem::Ptr(d, AddrSpace::Global),
                shape: vec![],
            },
            ParamKind::Scalar(d) => Type::scalar(d),
        };
        let value = self.new_value(ty);
        self.params.push(Param {
            name: name.to_string(),
            kind,
            value,
            divisibility: 1,
        });
        value
    }

    /// Records that the scalar parameter `value` is a multiple of `divisibility`
    /// at every launch (see [`Param::divisibility`]).
    pub fn set_param_divisibility(&mut self, value: ValueId, divisibility: u64) {
        if let Some(p) = self.params.iter_mut().find(|p| p.value == value) {
            p.divisibility = divisibility.max(1);
        }
    }

    pub fn finish(mut self) -> IrResult<Function> {
        if self.blocks.len() != 1 {
            ir_bail!(
                "internal: {} regions left open at the end of the kernel",
                self.blocks.len() - 1
            );
        }
        let body = self.blocks.pop().unwrap_or_default();
        Ok(Function {
            name: self.name,
            params: self.params,
            constexprs: self.constexprs,
            threads_per_group: self.threads_per_group,
            body,
            values: self.values,
        })
    }

    // ---------------------------------------------------------------- values

    pub fn constant(&mut self, lit: Literal, dtype: DType) -> ValueId {
        self.emit1(
            OpKind::Constant(convert_literal(lit, dtype)),
            vec![],
            Type::scalar(dtype),
        )
    }

    /// Materialises an operand; literals take `dtype` (or their Python default).
    pub fn materialize(&mut self, op: Operand, dtype: Option<DType>) -> ValueId {
        match op {
            Operand::Value(v) => v,
            lit => {
                let d = dtype.unwrap_or_else(|| literal_default_dtype(lit));
                self.constant(literal_of(lit), d)
            }
        }
    }

    fn check_axis(axis: i64) -> IrResult<u8> {
        if !(0..3).contains(&axis) {
            ir_bail!("program axis must be 0, 1 or 2, got {axis}");
        }
        Ok(axis as u8)
    }

    pub fn program_id(&mut self, axis: i64) -> IrResult<ValueId> {
        let axis = Self::check_axis(axis)?;
        Ok(self.emit1(OpKind::ProgramId { axis }, vec![], Type::scalar(DType::I32)))
    }

    pub fn num_programs(&mut self, axis: i64) -> IrResult<ValueId> {
        let axis = Self::check_axis(axis)?;
        Ok(self.emit1(OpKind::NumPrograms { axis }, vec![], Type::scalar(DType::I32)))
    }

    pub fn arange(&mut self, start: i64, end: i64) -> IrResult<ValueId> {
        if end <= start {
            ir_bail!("arange({start}, {end}) is empty: end must be greater than start");
        }
        if start < i64::from(i32::MIN) || end > i64::from(i32::MAX) {
            ir_bail!("arange({start}, {end}) does not fit in i32");
        }
        let n = (end - start) as usize;
        Ok(self.emit1(
            OpKind::Arange { start, end },
            vec![],
            Type::tile(DType::I32, &[n]),
        ))
    }

    pub fn full(&mut self, shape: &[usize], value: Operand, dtype: DType) -> IrResult<ValueId> {
        if shape.contains(&0) {
            ir_bail!("tile shape {shape:?} has a zero dimension");
        }
        let scalar = match value {
            Operand::Value(v) => {
                if !self.ty(v).is_scalar() {
                    ir_bail!("the fill value must be a scalar, got {}", self.ty(v));
                }
                self.cast(v, dtype)?
            }
            lit => self.constant(literal_of(lit), dtype),
        };
        self.broadcast_to(scalar, shape)
    }

    /// Broadcasts `v` to `shape` (numpy rules); a no-op when it already has it.
    pub fn broadcast_to(&mut self, v: ValueId, shape: &[usize]) -> IrResult<ValueId> {
        let ty = self.ty(v).clone();
        if ty.shape == shape {
            return Ok(v);
        }
        match broadcast_shapes(&ty.shape, shape) {
            Some(s) if s == shape => Ok(self.emit1(OpKind::Broadcast, vec![v], ty.with_shape(shape))),
            _ => ir_bail!(
                "cannot broadcast a tile of shape {:?} to shape {:?}",
                ty.shape,
                shape
            ),
        }
    }

    pub fn expand_dims(&mut self, v: ValueId, axis: i64) -> IrResult<ValueId> {
        let ty = self.ty(v).clone();
        let rank = ty.shape.len() as i64;
        let axis = if axis < 0 { axis + rank + 1 } else { axis };
        if !(0..=rank).contains(&axis) {
            ir_bail!("cannot insert an axis at position {axis} into a tile of rank {rank}");
        }
        let mut shape = ty.shape.clone();
        shape.insert(axis as usize, 1);
        Ok(self.emit1(
            OpKind::ExpandDims { axis: axis as usize },
            vec![v],
            ty.with_shape(&shape),
        ))
    }

    pub fn cast(&mut self, v: ValueId, dtype: DType) -> IrResult<ValueId> {
        let ty = self.ty(v).clone();
        match ty.elem {
            Elem::Scalar(d) if d == dtype => Ok(v),
            Elem::Scalar(_) => Ok(self.emit1(OpKind::Cast, vec![v], ty.with_dtype(dtype))),
            Elem::Ptr(..) => ir_bail!("cannot convert a pointer ({ty}) to {dtype}"),
        }
    }

    /// Converts an operand to `dtype` and `shape`.
    pub fn coerce(&mut self, op: Operand, dtype: DType, shape: &[usize]) -> IrResult<ValueId> {
        let v = self.materialize(op, Some(dtype));
        let v = self.cast(v, dtype)?;
        self.broadcast_to(v, shape)
    }

    fn shape_of(&self, op: Operand) -> Vec<usize> {
        match op {
            Operand::Value(v) => self.ty(v).shape.clone(),
            _ => vec![],
        }
    }

    fn elem_of(&self, op: Operand) -> Option<Elem> {
        match op {
            Operand::Value(v) => Some(self.ty(v).elem),
            _ => None,
        }
    }

    /// The dtype two operands meet at: strong types promote; a literal adopts the
    /// other side's kind (an int literal keeps an f16 tile f16, a float literal
    /// turns an int tile into f32).
    fn meet(&self, a: Operand, b: Operand, what: &str) -> IrResult<DType> {
        let scalar = |e: Option<Elem>| -> IrResult<Option<DType>> {
            match e {
                Some(Elem::Scalar(d)) => Ok(Some(d)),
                Some(Elem::Ptr(..)) => ir_bail!("{what} does not accept a pointer operand"),
                None => Ok(None),
            }
        };
        Ok(match (scalar(self.elem_of(a))?, scalar(self.elem_of(b))?) {
            (Some(x), Some(y)) => DType::promote(x, y),
            (Some(d), None) => Self::meet_literal(d, b),
            (None, Some(d)) => Self::meet_literal(d, a),
            (None, None) => DType::promote(literal_default_dtype(a), literal_default_dtype(b)),
        })
    }

    fn meet_literal(d: DType, lit: Operand) -> DType {
        match lit {
            Operand::Float(_) if !d.is_float() => DType::F32,
            Operand::Int(_) if d == DType::Bool => DType::I32,
            _ => d,
        }
    }

    fn common_shape(&self, ops: &[Operand], what: &str) -> IrResult<Vec<usize>> {
        let mut shape: Vec<usize> = vec![];
        for &op in ops {
            let s = self.shape_of(op);
            shape = match broadcast_shapes(&shape, &s) {
                Some(x) => x,
                None => {
                    let shapes: Vec<String> =
                        ops.iter().map(|&o| format!("{:?}", self.shape_of(o))).collect();
                    ir_bail!(
                        "{what}: tiles of shapes {} cannot be broadcast together",
                        shapes.join(" and ")
                    )
                }
            };
        }
        Ok(shape)
    }

    // ------------------------------------------------------------ arithmetic

    pub fn unary(&mut self, op: UnaryOp, x: Operand) -> IrResult<ValueId> {
        let name = OpKind::Unary(op).name();
        let v = self.materialize(x, None);
        let ty = self.ty(v).clone();
        let d = match ty.elem {
            Elem::Scalar(d) => d,
            Elem::Ptr(..) => ir_bail!("{name} does not accept a pointer ({ty})"),
        };
        let target = match op {
            u if u.is_float_math() && !d.is_float() => DType::F32,
            UnaryOp::Neg | UnaryOp::Abs if d == DType::Bool => DType::I32,
            UnaryOp::Not if d.is_float() => ir_bail!("~ needs an integer or bool operand, got {d}"),
            _ => d,
        };
        let v = self.cast(v, target)?;
        self.in_f32(&[v], |b, vs| {
            let ty = b.ty(vs[0]).clone();
            Ok(b.emit1(OpKind::Unary(op), vs.to_vec(), ty))
        })
    }

    pub fn binary(&mut self, op: BinaryOp, a: Operand, b: Operand) -> IrResult<ValueId> {
        let name = OpKind::Binary(op).name();
        let a_ptr = matches!(self.elem_of(a), Some(Elem::Ptr(..)));
        let b_ptr = matches!(self.elem_of(b), Some(Elem::Ptr(..)));
        if a_ptr || b_ptr {
            return match (op, a_ptr, b_ptr) {
                (BinaryOp::Add, true, false) => self.add_ptr(a, b, false),
                (BinaryOp::Add, false, true) => self.add_ptr(b, a, false),
                (BinaryOp::Sub, true, false) => self.add_ptr(a, b, true),
                _ => ir_bail!(
                    "{name} is not defined on pointers; only pointer + integer and pointer - integer are"
                ),
            };
        }
        let mut dtype = self.meet(a, b, name)?;
        match op {
            BinaryOp::Div | BinaryOp::FastDiv | BinaryOp::Pow | BinaryOp::Atan2 if !dtype.is_float() => {
                dtype = DType::F32
            }
            BinaryOp::MulHi if !dtype.is_int() => ir_bail!("{name} needs integer operands, got {dtype}"),
            BinaryOp::Shl | BinaryOp::Shr if !dtype.is_int() => {
                ir_bail!("{name} needs integer operands, got {dtype}")
            }
            BinaryOp::And | BinaryOp::Or | BinaryOp::Xor if dtype.is_float() => {
                ir_bail!("bitwise {name} needs integer or bool operands, got {dtype}")
            }
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::FloorDiv | BinaryOp::Rem
                if dtype == DType::Bool =>
            {
                dtype = DType::I32
            }
            _ => {}
        }
        let shape = self.common_shape(&[a, b], name)?;
        let va = self.coerce(a, dtype, &shape)?;
        let vb = self.coerce(b, dtype, &shape)?;
        self.in_f32(&[va, vb], |b, vs| {
            let d = b.ty(vs[0]).dtype().unwrap_or(dtype);
            Ok(b.emit1(OpKind::Binary(op), vs.to_vec(), Type::tile(d, &shape)))
        })
    }

    /// `address.to(pointer_type(pointee))`: an integer read from memory used as
    /// the address of a `pointee` buffer. One address at a time: a tile of
    /// addresses would give each lane its own buffer, which the compiled
    /// kernels' pointer model (one buffer per pointer tile) cannot express.
    pub fn int_to_ptr(&mut self, v: ValueId, pointee: DType) -> IrResult<ValueId> {
        let ty = self.ty(v).clone();
        match ty.elem {
            Elem::Scalar(DType::I64 | DType::U64) => {}
            Elem::Scalar(d) => ir_bail!(
                "only 64-bit integers (int64, uint64) can become pointers, got {d}; load the addresses from an int64 array"
            ),
            Elem::Ptr(..) => ir_bail!("{ty} is already a pointer; pointer casts between element types are not supported"),
        }
        if !ty.shape.is_empty() {
            ir_bail!(
                "only one address at a time can become a pointer, got a tile of shape {:?}; load each address as a \
                 scalar (metile.load(ptrs + i)) and cast it",
                ty.shape
            );
        }
        let result = Type {
            elem: Elem::Ptr(pointee, AddrSpace::Global),
            shape: vec![],
        };
        Ok(self.emit1(OpKind::IntToPtr, vec![v], result))
    }

    fn add_ptr(&mut self, ptr: Operand, offset: Operand, negate: bool) -> IrResult<ValueId> {
        let offset_dtype = match self.elem_of(offset) {
            Some(Elem::Scalar(d)) if d.is_int() => d,
            Some(Elem::Scalar(d)) => ir_bail!("a pointer offset must be an integer, got {d}"),
            Some(Elem::Ptr(..)) => ir_bail!("cannot add two pointers"),
            None => match offset {
                Operand::Int(_) => DType::I32,
                _ => ir_bail!("a pointer offset must be an integer, got {offset:?}"),
            },
        };
        let shape = self.common_shape(&[ptr, offset], "pointer arithmetic")?;
        let p = self.materialize(ptr, None);
        let p = self.broadcast_to(p, &shape)?;
        let mut off = self.coerce(offset, offset_dtype, &shape)?;
        if negate {
            off = self.unary(UnaryOp::Neg, Operand::Value(off))?;
        }
        let ty = self.ty(p).clone();
        Ok(self.emit1(OpKind::AddPtr, vec![p, off], ty))
    }

    pub fn compare(&mut self, op: CmpOp, a: Operand, b: Operand) -> IrResult<ValueId> {
        let name = OpKind::Compare(op).name();
        let dtype = self.meet(a, b, name)?;
        let shape = self.common_shape(&[a, b], name)?;
        let va = self.coerce(a, dtype, &shape)?;
        let vb = self.coerce(b, dtype, &shape)?;
        let (va, vb) = if dtype.is_fp8() {
            (self.cast(va, DType::F32)?, self.cast(vb, DType::F32)?)
        } else {
            (va, vb)
        };
        Ok(self.emit1(OpKind::Compare(op), vec![va, vb], Type::tile(DType::Bool, &shape)))
    }

    /// `where(cond, a, b)`; a non-bool condition means `cond != 0`.
    pub fn select(&mut self, cond: Operand, a: Operand, b: Operand) -> IrResult<ValueId> {
        let dtype = self.meet(a, b, "where")?;
        let shape = self.common_shape(&[cond, a, b], "where")?;
        let c = self.materialize(cond, Some(DType::Bool));
        let c = match self.ty(c).dtype() {
            Some(DType::Bool) => c,
            Some(_) => self.compare(CmpOp::Ne, Operand::Value(c), Operand::Int(0))?,
            None => ir_bail!("the condition of where must be a bool tile, got a pointer"),
        };
        let c = self.broadcast_to(c, &shape)?;
        let va = self.coerce(a, dtype, &shape)?;
        let vb = self.coerce(b, dtype, &shape)?;
        Ok(self.emit1(OpKind::Select, vec![c, va, vb], Type::tile(dtype, &shape)))
    }

    /// The value a carried variable takes after a traced iteration or at an
    /// `if` join: `new` where it is present, `old` where `new` is absent. The
    /// absent-lane pass resolves it (see `OpKind::CarryMerge`).
    pub fn carry_merge(&mut self, new: ValueId, old: ValueId) -> IrResult<ValueId> {
        let ty = self.ty(new).clone();
        if *self.ty(old) != ty {
            ir_bail!(
                "internal: carry_merge of a {ty} with a {}; both sides must have one type",
                self.ty(old)
            );
        }
        Ok(self.emit1(OpKind::CarryMerge, vec![new, old], ty))
    }

    // ---------------------------------------------------------------- memory

    fn pointee(&self, ptr: Operand, what: &str) -> IrResult<DType> {
        match self.elem_of(ptr) {
            Some(Elem::Ptr(d, _)) => Ok(d),
            Some(e) => ir_bail!("{what} needs a pointer (a buffer argument plus offsets), got {e}"),
            None => {
                ir_bail!("{what} needs a pointer (a buffer argument plus offsets), got the number {ptr:?}")
            }
        }
    }

    fn mask_value(&mut self, mask: Operand, shape: &[usize], what: &str) -> IrResult<ValueId> {
        let m = self.materialize(mask, Some(DType::Bool));
        if self.ty(m).dtype() != Some(DType::Bool) {
            ir_bail!(
                "the mask of {what} must be a bool tile (a comparison), got {}",
                self.ty(m)
            );
        }
        self.broadcast_to(m, shape)
    }

    pub fn load(&mut self, ptr: Operand, mask: Option<Operand>, other: Option<Operand>) -> IrResult<ValueId> {
        let dtype = self.pointee(ptr, "load")?;
        let mut ops = vec![ptr];
        ops.extend(mask);
        ops.extend(other);
        let shape = self.common_shape(&ops, "load")?;
        let p = self.materialize(ptr, None);
        let mut operands = vec![self.broadcast_to(p, &shape)?];
        if let Some(m) = mask {
            operands.push(self.mask_value(m, &shape, "load")?);
        }
        if let Some(o) = other {
            if mask.is_none() {
                ir_bail!("load: other= is only meaningful together with mask=");
            }
            operands.push(self.coerce(o, dtype, &shape)?);
        }
        let kind = OpKind::Load {
            has_mask: mask.is_some(),
            has_other: other.is_some(),
        };
        Ok(self.emit1(kind, operands, Type::tile(dtype, &shape)))
    }

    pub fn store(&mut self, ptr: Operand, value: Operand, mask: Option<Operand>) -> IrResult<()> {
        let dtype = self.pointee(ptr, "store")?;
        let mut ops = vec![ptr, value];
        ops.extend(mask);
        let shape = self.common_shape(&ops, "store")?;
        let p = self.materialize(ptr, None);
        let mut operands = vec![self.broadcast_to(p, &shape)?, self.coerce(value, dtype, &shape)?];
        if let Some(m) = mask {
            operands.push(self.mask_value(m, &shape, "store")?);
        }
        self.emit(
            OpKind::Store {
                has_mask: mask.is_some(),
            },
            operands,
            vec![],
        );
        Ok(())
    }

    fn index_scalar(&mut self, op: Operand, what: &str) -> IrResult<ValueId> {
        let v = self.materialize(op, Some(DType::I32));
        let ty = self.ty(v).clone();
        match ty.elem {
            Elem::Scalar(d) if d.is_int() && ty.is_scalar() => self.cast(v, DType::I32),
            _ => ir_bail!("{what} must be an integer scalar, got {ty}"),
        }
    }

    fn tile_shape(shape: (i64, i64), what: &str) -> IrResult<(usize, usize)> {
        if shape.0 <= 0 || shape.1 <= 0 {
            ir_bail!("{what}: shape {shape:?} must be two positive integers");
        }
        Ok((shape.0 as usize, shape.1 as usize))
    }

    fn tile_addressing(
        &mut self,
        ptr: Operand,
        row: Operand,
        col: Operand,
        stride: Operand,
        what: &str,
    ) -> IrResult<(DType, Vec<ValueId>)> {
        let dtype = self.pointee(ptr, what)?;
        let p = self.materialize(ptr, None);
        if !self.ty(p).is_scalar() {
            ir_bail!(
                "{what} needs a single base pointer, got a tile of pointers {}",
                self.ty(p)
            );
        }
        let r = self.index_scalar(row, &format!("{what}'s row offset"))?;
        let c = self.index_scalar(col, &format!("{what}'s column offset"))?;
        let s = self.index_scalar(stride, &format!("{what}'s stride"))?;
        Ok((dtype, vec![p, r, c, s]))
    }

    pub fn tile_load(
        &mut self,
        ptr: Operand,
        row: Operand,
        col: Operand,
        stride: Operand,
        shape: (i64, i64),
    ) -> IrResult<ValueId> {
        let (rows, cols) = Self::tile_shape(shape, "tile_load")?;
        let (dtype, operands) = self.tile_addressing(ptr, row, col, stride, "tile_load")?;
        Ok(self.emit1(
            OpKind::TileLoad { rows, cols },
            operands,
            Type::tile(dtype, &[rows, cols]),
        ))
    }

    pub fn tile_store(
        &mut self,
        ptr: Operand,
        row: Operand,
        col: Operand,
        stride: Operand,
        value: Operand,
        shape: (i64, i64),
    ) -> IrResult<()> {
        let (rows, cols) = Self::tile_shape(shape, "tile_store")?;
        let (dtype, mut operands) = self.tile_addressing(ptr, row, col, stride, "tile_store")?;
        let vshape = self.shape_of(value);
        if !vshape.is_empty() && vshape != [rows, cols] {
            ir_bail!(
                "tile_store: the value has shape {vshape:?} but shape={:?} was given",
                (rows, cols)
            );
        }
        operands.push(self.coerce(value, dtype, &[rows, cols])?);
        self.emit(OpKind::TileStore { rows, cols }, operands, vec![]);
        Ok(())
    }

    /// The element pointers and the in-bounds mask of a bounded block access:
    /// element `(r, c)` is at `ptr + (row + r) * stride + col + c` and inside the
    /// bounds when `row + r < bounds.0` and `col + c < bounds.1`.
    fn bounded_block(
        &mut self,
        ptr: Operand,
        (row, col, stride): (Operand, Operand, Operand),
        (rows, cols): (usize, usize),
        bounds: (Operand, Operand),
        what: &str,
    ) -> IrResult<(ValueId, ValueId)> {
        let (_, addressing) = self.tile_addressing(ptr, row, col, stride, what)?;
        let &[p, r, c, s] = addressing.as_slice() else {
            ir_bail!("internal: {what} addressing has four parts");
        };
        let row_bound = self.index_scalar(bounds.0, &format!("{what}'s row bound"))?;
        let col_bound = self.index_scalar(bounds.1, &format!("{what}'s column bound"))?;
        let row_range = self.arange(0, rows as i64)?;
        let row_index = self.binary(BinaryOp::Add, Operand::Value(r), Operand::Value(row_range))?;
        let row_index = self.expand_dims(row_index, 1)?;
        let col_range = self.arange(0, cols as i64)?;
        let col_index = self.binary(BinaryOp::Add, Operand::Value(c), Operand::Value(col_range))?;
        let col_index = self.expand_dims(col_index, 0)?;
        let row_offset = self.binary(BinaryOp::Mul, Operand::Value(row_index), Operand::Value(s))?;
        let offset = self.binary(
            BinaryOp::Add,
            Operand::Value(row_offset),
            Operand::Value(col_index),
        )?;
        let ptrs = self.binary(BinaryOp::Add, Operand::Value(p), Operand::Value(offset))?;
        let row_in = self.compare(CmpOp::Lt, Operand::Value(row_index), Operand::Value(row_bound))?;
        let col_in = self.compare(CmpOp::Lt, Operand::Value(col_index), Operand::Value(col_bound))?;
        let inside = self.binary(BinaryOp::And, Operand::Value(row_in), Operand::Value(col_in))?;
        Ok((ptrs, inside))
    }

    /// `tile_load(..., bounds=(rows, cols))`: elements outside the bounds read 0
    /// and touch no memory. A masked load, so it takes the same lowering (and the
    /// same fast paths) as the Triton-style 2-D masked load it equals.
    pub fn tile_load_bounded(
        &mut self,
        ptr: Operand,
        (row, col, stride): (Operand, Operand, Operand),
        shape: (i64, i64),
        bounds: (Operand, Operand),
    ) -> IrResult<ValueId> {
        let shape = Self::tile_shape(shape, "tile_load")?;
        let (ptrs, inside) = self.bounded_block(ptr, (row, col, stride), shape, bounds, "tile_load")?;
        self.load(
            Operand::Value(ptrs),
            Some(Operand::Value(inside)),
            Some(Operand::Int(0)),
        )
    }

    /// `tile_store(..., bounds=(rows, cols))`: elements outside the bounds are not written.
    pub fn tile_store_bounded(
        &mut self,
        ptr: Operand,
        (row, col, stride): (Operand, Operand, Operand),
        value: Operand,
        shape: (i64, i64),
        bounds: (Operand, Operand),
    ) -> IrResult<()> {
        let (rows, cols) = Self::tile_shape(shape, "tile_store")?;
        let vshape = self.shape_of(value);
        if !vshape.is_empty() && vshape != [rows, cols] {
            ir_bail!(
                "tile_store: the value has shape {vshape:?} but shape={:?} was given",
                (rows, cols)
            );
        }
        let (ptrs, inside) =
            self.bounded_block(ptr, (row, col, stride), (rows, cols), bounds, "tile_store")?;
        self.store(Operand::Value(ptrs), value, Some(Operand::Value(inside)))
    }

    // ------------------------------------------------------------- compute

    pub fn dot(&mut self, a: Operand, b: Operand, acc: Option<Operand>) -> IrResult<ValueId> {
        let va = self.materialize(a, None);
        let vb = self.materialize(b, None);
        let (ta, tb) = (self.ty(va).clone(), self.ty(vb).clone());
        if ta.shape.len() != 2 || tb.shape.len() != 2 {
            ir_bail!(
                "dot needs two 2-D tiles, got shapes {:?} and {:?}",
                ta.shape,
                tb.shape
            );
        }
        let (m, k, k2, n) = (ta.shape[0], ta.shape[1], tb.shape[0], tb.shape[1]);
        if k != k2 {
            ir_bail!("dot: inner dimensions differ: a is {m}x{k}, b is {k2}x{n}");
        }
        let (da, db) = match (ta.dtype(), tb.dtype()) {
            (Some(x), Some(y)) if x.is_float() && y.is_float() => (x, y),
            _ => ir_bail!("dot needs floating-point tiles, got {} and {}", ta, tb),
        };
        // fp8 operands multiply as f16, which holds every fp8 value exactly.
        let operand_dtype = match DType::promote(da, db) {
            d if d.is_fp8() => DType::F16,
            DType::F64 => ir_bail!(
                "dot of float64 tiles is not supported; convert them to float32 (x.to(metile.float32))"
            ),
            d => d,
        };
        let va = self.cast(va, operand_dtype)?;
        let vb = self.cast(vb, operand_dtype)?;
        let acc = match acc {
            None => self.full(&[m, n], Operand::Float(0.0), DType::F32)?,
            Some(op) => {
                let v = self.materialize(op, Some(DType::F32));
                let t = self.ty(v).clone();
                match t.dtype() {
                    Some(d) if d.is_float() && !d.is_fp8() && d != DType::F64 => {}
                    _ => ir_bail!("dot's accumulator must be an f16, bf16 or f32 tile, got {t}"),
                }
                if !t.is_scalar() && t.shape != [m, n] {
                    ir_bail!(
                        "dot: the accumulator has shape {:?} but a @ b is {m}x{n}",
                        t.shape
                    );
                }
                self.broadcast_to(v, &[m, n])?
            }
        };
        let ty = self.ty(acc).clone();
        Ok(self.emit1(OpKind::Dot, vec![va, vb, acc], ty))
    }

    pub fn swizzle(
        &mut self,
        pid_m: Operand,
        pid_n: Operand,
        pattern: SwizzlePattern,
        block_size: i64,
    ) -> IrResult<(ValueId, ValueId)> {
        if !(1..=1 << 16).contains(&block_size) {
            ir_bail!("tile_swizzle: block_size must be a positive integer, got {block_size}");
        }
        let m = self.index_scalar(pid_m, "tile_swizzle's pid_m")?;
        let n = self.index_scalar(pid_n, "tile_swizzle's pid_n")?;
        let i32s = Type::scalar(DType::I32);
        let r = self.emit(
            OpKind::Swizzle {
                pattern,
                block_size: block_size as u32,
            },
            vec![m, n],
            vec![i32s.clone(), i32s],
        );
        Ok((r[0], r[1]))
    }
}
