//! The Tile IR verifier: SSA scoping and every op's typing rule. It runs after
//! tracing and after every pass; a failure is a compiler bug, reported with the
//! op and its source line.

use crate::dtype::{broadcast_shapes, DType, Elem, Type};
use crate::error::{IrError, IrResult};
use crate::tile_ir::*;
use std::collections::HashSet;

struct Verifier<'f> {
    f: &'f Function,
    defined: HashSet<ValueId>,
    scope: Vec<Vec<ValueId>>,
}

pub fn verify(f: &Function) -> IrResult<()> {
    let mut v = Verifier {
        f,
        defined: HashSet::new(),
        scope: vec![vec![]],
    };
    for p in &f.params {
        v.define(p.value)?;
        let expected = match p.kind {
            ParamKind::Pointer(_) => f.ty(p.value).is_ptr(),
            ParamKind::Scalar(d) => *f.ty(p.value) == Type::scalar(d),
        };
        if !expected {
            return Err(IrError(format!(
                "parameter {} has type {}",
                p.name,
                f.ty(p.value)
            )));
        }
    }
    v.block(&f.body, None)
}

impl<'f> Verifier<'f> {
    fn ty(&self, v: ValueId) -> &'f Type {
        &self.f.values[v.index()]
    }

    fn define(&mut self, v: ValueId) -> IrResult<()> {
        if v.index() >= self.f.values.len() {
            return Err(IrError(format!("{v} has no type")));
        }
        if !self.defined.insert(v) {
            return Err(IrError(format!("{v} is defined twice")));
        }
        if let Some(s) = self.scope.last_mut() {
            s.push(v);
        }
        Ok(())
    }

    fn block(&mut self, b: &Block, expect_yield: Option<&[Type]>) -> IrResult<()> {
        for (i, op) in b.ops.iter().enumerate() {
            let last = i + 1 == b.ops.len();
            if matches!(op.kind, OpKind::Yield) != (last && expect_yield.is_some()) {
                return Err(self.err(op, "yield must end a region, and only a region"));
            }
            self.op(op)?;
        }
        if let Some(types) = expect_yield {
            let Some(y) = b.ops.last() else {
                return Err(IrError("a region has no yield".into()));
            };
            let got: Vec<&Type> = y.operands.iter().map(|&v| self.ty(v)).collect();
            if got.len() != types.len() || got.iter().zip(types).any(|(a, b)| *a != b) {
                return Err(self.err(y, &format!("yields {got:?} where {types:?} is expected")));
            }
        }
        Ok(())
    }

    fn err(&self, op: &Op, msg: &str) -> IrError {
        IrError(format!(
            "invalid Tile IR at {} ({}): {msg}",
            op.loc,
            op.kind.name()
        ))
    }

    fn region(&mut self, op: &Op, r: &Block, args: &[Type], yields: &[Type]) -> IrResult<()> {
        if r.args.len() != args.len() || r.args.iter().zip(args).any(|(&a, t)| self.ty(a) != t) {
            return Err(self.err(op, "region arguments do not match"));
        }
        self.scope.push(vec![]);
        for &a in &r.args {
            self.define(a)?;
        }
        let result = self.block(r, Some(yields));
        for v in self.scope.pop().unwrap_or_default() {
            self.defined.remove(&v);
        }
        result
    }

    fn op(&mut self, op: &Op) -> IrResult<()> {
        for &v in &op.operands {
            if !self.defined.contains(&v) {
                return Err(self.err(op, &format!("uses {v} outside the scope that defines it")));
            }
        }
        self.check_types(op)?;
        let result_types: Vec<Type> = op.results.iter().map(|&r| self.ty(r).clone()).collect();
        match op.kind {
            OpKind::For => {
                let [body] = op.regions.as_slice() else {
                    return Err(self.err(op, "needs one region"));
                };
                let mut args = vec![Type::scalar(DType::I32)];
                args.extend(result_types.iter().cloned());
                self.region(op, body, &args, &result_types)?;
            }
            OpKind::If => {
                let [then_b, else_b] = op.regions.as_slice() else {
                    return Err(self.err(op, "needs two regions"));
                };
                self.region(op, then_b, &[], &result_types)?;
                self.region(op, else_b, &[], &result_types)?;
            }
            OpKind::SimdgroupRole { .. } => {
                let [body] = op.regions.as_slice() else {
                    return Err(self.err(op, "needs one region"));
                };
                self.region(op, body, &[], &[])?;
            }
            _ if !op.regions.is_empty() => return Err(self.err(op, "takes no regions")),
            _ => {}
        }
        for &r in &op.results {
            self.define(r)?;
        }
        Ok(())
    }

    fn check_types(&self, op: &Op) -> IrResult<()> {
        let ins: Vec<&Type> = op.operands.iter().map(|&v| self.ty(v)).collect();
        let outs: Vec<&Type> = op.results.iter().map(|&v| self.ty(v)).collect();
        let fail = |what: &str| Err(self.err(op, what));
        let arity = |n_in: usize, n_out: usize| -> IrResult<()> {
            if ins.len() != n_in || outs.len() != n_out {
                return Err(self.err(op, &format!("expects {n_in} operands and {n_out} results")));
            }
            Ok(())
        };
        let int_scalar = |t: &Type| t.is_scalar() && t.dtype().is_some_and(|d| d.is_int());
        let same = |a: &Type, b: &Type| a == b;
        match &op.kind {
            OpKind::ProgramId { .. } | OpKind::NumPrograms { .. } => {
                arity(0, 1)?;
                if *outs[0] != Type::scalar(DType::I32) {
                    return fail("result must be i32");
                }
            }
            OpKind::Constant(_) => {
                arity(0, 1)?;
                if !outs[0].is_scalar() || outs[0].is_ptr() {
                    return fail("result must be a scalar number");
                }
            }
            OpKind::Arange { start, end } => {
                arity(0, 1)?;
                if *outs[0] != Type::tile(DType::I32, &[(end - start) as usize]) {
                    return fail("result must be i32[end - start]");
                }
            }
            OpKind::Broadcast => {
                arity(1, 1)?;
                if ins[0].elem != outs[0].elem
                    || broadcast_shapes(&ins[0].shape, &outs[0].shape).as_deref() != Some(&outs[0].shape)
                {
                    return fail("result is not a broadcast of the operand");
                }
            }
            OpKind::ExpandDims { axis } => {
                arity(1, 1)?;
                let mut s = ins[0].shape.clone();
                if *axis > s.len() {
                    return fail("axis out of range");
                }
                s.insert(*axis, 1);
                if outs[0].shape != s || outs[0].elem != ins[0].elem {
                    return fail("wrong result shape");
                }
            }
            OpKind::Cast => {
                arity(1, 1)?;
                if ins[0].shape != outs[0].shape || ins[0].is_ptr() || outs[0].is_ptr() {
                    return fail("casts keep the shape and convert numbers only");
                }
            }
            OpKind::Unary(_) => {
                arity(1, 1)?;
                if !same(ins[0], outs[0]) || ins[0].is_ptr() {
                    return fail("operand and result types differ");
                }
            }
            OpKind::Binary(_) => {
                arity(2, 1)?;
                if !same(ins[0], ins[1]) || !same(ins[0], outs[0]) || ins[0].is_ptr() {
                    return fail("operands and result must share one numeric type");
                }
            }
            OpKind::Compare(_) => {
                arity(2, 1)?;
                if !same(ins[0], ins[1]) || *outs[0] != ins[0].with_dtype(DType::Bool) {
                    return fail("operands must match and the result must be bool");
                }
            }
            OpKind::Select => {
                arity(3, 1)?;
                if *ins[0] != ins[1].with_dtype(DType::Bool)
                    || !same(ins[1], ins[2])
                    || !same(ins[1], outs[0])
                {
                    return fail("select(bool, a, a) -> a");
                }
            }
            OpKind::AddPtr => {
                arity(2, 1)?;
                if !ins[0].is_ptr() || !same(ins[0], outs[0]) || ins[1].shape != ins[0].shape {
                    return fail("add_ptr(ptr, int) -> ptr of one shape");
                }
                if !ins[1].dtype().is_some_and(|d| d.is_int()) {
                    return fail("pointer offsets must be integers");
                }
            }
            OpKind::Load { has_mask, has_other } => {
                let n = 1 + usize::from(*has_mask) + usize::from(*has_other);
                arity(n, 1)?;
                let Elem::Ptr(d, _) = ins[0].elem else {
                    return fail("loads from a pointer");
                };
                if *outs[0] != Type::tile(d, &ins[0].shape) {
                    return fail("result must be the pointee type in the pointer's shape");
                }
                if *has_mask && *ins[1] != Type::tile(DType::Bool, &ins[0].shape) {
                    return fail("mask must be bool in the pointer's shape");
                }
                if *has_other && *ins[n - 1] != *outs[0] {
                    return fail("other must have the result's type");
                }
            }
            OpKind::Store { has_mask } => {
                arity(2 + usize::from(*has_mask), 0)?;
                let Elem::Ptr(d, _) = ins[0].elem else {
                    return fail("stores through a pointer");
                };
                if *ins[1] != Type::tile(d, &ins[0].shape) {
                    return fail("value must be the pointee type in the pointer's shape");
                }
                if *has_mask && *ins[2] != Type::tile(DType::Bool, &ins[0].shape) {
                    return fail("mask must be bool in the pointer's shape");
                }
            }
            OpKind::TileLoad { rows, cols } | OpKind::TileStore { rows, cols } => {
                let store = matches!(op.kind, OpKind::TileStore { .. });
                arity(4 + usize::from(store), usize::from(!store))?;
                let Elem::Ptr(d, _) = ins[0].elem else {
                    return fail("needs a base pointer");
                };
                if !ins[0].is_scalar() || !ins[1..4].iter().all(|t| int_scalar(t)) {
                    return fail("base, row, col and stride must be scalars");
                }
                let tile = Type::tile(d, &[*rows, *cols]);
                let value = if store { ins[4] } else { outs[0] };
                if *value != tile {
                    return fail("the tile must be the pointee type in [rows, cols]");
                }
            }
            OpKind::Dot => {
                arity(3, 1)?;
                let (a, b, c) = (ins[0], ins[1], ins[2]);
                let ok = a.shape.len() == 2
                    && b.shape.len() == 2
                    && a.shape[1] == b.shape[0]
                    && c.shape == [a.shape[0], b.shape[1]]
                    && a.elem == b.elem
                    && same(c, outs[0]);
                if !ok {
                    return fail("dot(a[M,K], b[K,N], acc[M,N]) -> acc");
                }
            }
            OpKind::Reduce { axis, .. } => {
                arity(1, 1)?;
                let mut s = ins[0].shape.clone();
                match axis {
                    Some(a) if *a < s.len() => {
                        s.remove(*a);
                    }
                    Some(_) => return fail("axis out of range"),
                    None => s.clear(),
                }
                if *outs[0] != ins[0].with_shape(&s) {
                    return fail("wrong result type");
                }
            }
            OpKind::Swizzle { .. } => {
                arity(2, 2)?;
                let i = Type::scalar(DType::I32);
                if ins.iter().chain(&outs).any(|t| **t != i) {
                    return fail("operands and results are i32 scalars");
                }
            }
            OpKind::For => {
                if ins.len() < 3 || !ins[..3].iter().all(|t| int_scalar(t)) {
                    return fail("start, end and step must be integer scalars");
                }
                if ins.len() - 3 != outs.len() || ins[3..].iter().zip(&outs).any(|(a, b)| a != b) {
                    return fail("initial values must match the carried types");
                }
            }
            OpKind::If => {
                if ins.len() != 1 || *ins[0] != Type::scalar(DType::Bool) {
                    return fail("the condition must be a bool scalar");
                }
            }
            OpKind::Yield | OpKind::Barrier | OpKind::SimdgroupRole { .. } => {
                if !outs.is_empty() {
                    return fail("has no results");
                }
            }
            OpKind::ThreadId | OpKind::SimdLaneId => {
                arity(0, 1)?;
                if Some(outs[0].shape.as_slice())
                    != self.f.threads_per_group.as_ref().map(std::slice::from_ref)
                {
                    return fail("a thread-level value has one element per thread");
                }
            }
            OpKind::SimdShuffleXor | OpKind::SimdBroadcast => {
                arity(2, 1)?;
                if !same(ins[0], outs[0]) || !int_scalar(ins[1]) {
                    return fail("(x, i32) -> x");
                }
            }
            OpKind::Shared { .. } => {
                arity(0, 1)?;
                if !outs[0].is_ptr() || !outs[0].is_scalar() {
                    return fail("result is a shared pointer");
                }
            }
        }
        Ok(())
    }
}
