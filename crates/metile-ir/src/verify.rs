//! The Tile IR verifier: SSA scoping and every op's typing rule. It runs after
//! tracing and after every pass; a failure is a compiler bug, reported with the
//! op and its source line.

use crate::dtype::{AddrSpace, DType, Elem, Type};
use crate::error::{IrError, IrResult};
use crate::tile_ir::*;

struct Verifier<'f> {
    f: &'f Function,
    /// Whether each value is in scope, indexed by value.
    defined: Vec<bool>,
    /// Values defined inside the open regions, innermost last; a region
    /// truncates it back to its mark when it closes.
    scope_values: Vec<ValueId>,
    /// Scratch for the operand and result types of the op being checked.
    ins: Vec<&'f Type>,
    outs: Vec<&'f Type>,
}

pub fn verify(f: &Function) -> IrResult<()> {
    let mut v = Verifier {
        f,
        defined: vec![false; f.values.len()],
        scope_values: vec![],
        ins: vec![],
        outs: vec![],
    };
    for p in &f.params {
        v.define(p.value)?;
        let expected = match p.kind {
            ParamKind::Pointer(_) => f.ty(p.value).is_ptr(),
            ParamKind::Scalar(d) => is_scalar_of(f.ty(p.value), d),
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

/// `t == Type::scalar(d)`, without building the type.
fn is_scalar_of(t: &Type, d: DType) -> bool {
    t.elem == Elem::Scalar(d) && t.shape.is_empty()
}

/// `t == Type::tile(d, shape)`, without building the type.
fn is_tile_of(t: &Type, d: DType, shape: &[usize]) -> bool {
    t.elem == Elem::Scalar(d) && t.shape == shape
}

/// Whether `out` is `shape` with a size-1 axis inserted at `axis`.
fn is_expanded(shape: &[usize], axis: usize, out: &[usize]) -> bool {
    out.len() == shape.len() + 1
        && out[..axis] == shape[..axis]
        && out[axis] == 1
        && out[axis + 1..] == shape[axis..]
}

/// Whether `to` is what numpy broadcasting of `from` against `to` gives.
fn broadcasts_to(from: &[usize], to: &[usize]) -> bool {
    from.len() <= to.len()
        && from
            .iter()
            .rev()
            .zip(to.iter().rev())
            .all(|(&a, &b)| a == b || a == 1)
}

/// What the types of a region's block arguments or yields must be: an optional
/// leading type, then the types of some values.
#[derive(Clone, Copy)]
struct Expected<'a> {
    first: Option<&'a Type>,
    rest: &'a [ValueId],
}

impl<'a> Expected<'a> {
    fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.len()
    }

    fn matches(&self, f: &Function, got: &[ValueId]) -> bool {
        let n = usize::from(self.first.is_some());
        got.len() == self.len()
            && self.first.is_none_or(|t| f.ty(got[0]) == t)
            && got[n..].iter().zip(self.rest).all(|(&a, &b)| f.ty(a) == f.ty(b))
    }

    fn describe(&self, f: &Function) -> Vec<Type> {
        self.first
            .cloned()
            .into_iter()
            .chain(self.rest.iter().map(|&v| f.ty(v).clone()))
            .collect()
    }
}

impl<'f> Verifier<'f> {
    fn ty(&self, v: ValueId) -> &'f Type {
        &self.f.values[v.index()]
    }

    fn define(&mut self, v: ValueId) -> IrResult<()> {
        let Some(slot) = self.defined.get_mut(v.index()) else {
            return Err(IrError(format!("{v} has no type")));
        };
        if std::mem::replace(slot, true) {
            return Err(IrError(format!("{v} is defined twice")));
        }
        self.scope_values.push(v);
        Ok(())
    }

    fn block(&mut self, b: &Block, expect_yield: Option<Expected<'_>>) -> IrResult<()> {
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
            if !types.matches(self.f, &y.operands) {
                let got: Vec<&Type> = y.operands.iter().map(|&v| self.ty(v)).collect();
                let types = types.describe(self.f);
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

    fn region(&mut self, op: &Op, r: &Block, args: Expected<'_>, yields: Expected<'_>) -> IrResult<()> {
        if !args.matches(self.f, &r.args) {
            return Err(self.err(op, "region arguments do not match"));
        }
        let mark = self.scope_values.len();
        let mut result = Ok(());
        for &a in &r.args {
            result = self.define(a);
            if result.is_err() {
                break;
            }
        }
        if result.is_ok() {
            result = self.block(r, Some(yields));
        }
        for v in self.scope_values.drain(mark..) {
            self.defined[v.index()] = false;
        }
        result
    }

    fn op(&mut self, op: &Op) -> IrResult<()> {
        for &v in &op.operands {
            if !self.defined.get(v.index()).copied().unwrap_or(false) {
                return Err(self.err(op, &format!("uses {v} outside the scope that defines it")));
            }
        }
        let mut ins = std::mem::take(&mut self.ins);
        let mut outs = std::mem::take(&mut self.outs);
        ins.clear();
        ins.extend(op.operands.iter().map(|&v| self.ty(v)));
        outs.clear();
        outs.extend(op.results.iter().map(|&v| self.ty(v)));
        let checked = self.check_types(op, &ins, &outs);
        self.ins = ins;
        self.outs = outs;
        checked?;
        let none = Expected {
            first: None,
            rest: &[],
        };
        let results = Expected {
            first: None,
            rest: &op.results,
        };
        match op.kind {
            OpKind::While => {
                let [cond, body] = op.regions.as_slice() else {
                    return Err(self.err(op, "needs two regions"));
                };
                let flag = Type::scalar(DType::Bool);
                let yields_flag = Expected {
                    first: Some(&flag),
                    rest: &[],
                };
                self.region(op, cond, results, yields_flag)?;
                self.region(op, body, results, results)?;
            }
            OpKind::For { .. } => {
                let [body] = op.regions.as_slice() else {
                    return Err(self.err(op, "needs one region"));
                };
                let iv = Type::scalar(DType::I32);
                let args = Expected {
                    first: Some(&iv),
                    rest: &op.results,
                };
                self.region(op, body, args, results)?;
            }
            OpKind::If => {
                let [then_b, else_b] = op.regions.as_slice() else {
                    return Err(self.err(op, "needs two regions"));
                };
                self.region(op, then_b, none, results)?;
                self.region(op, else_b, none, results)?;
            }
            OpKind::SimdgroupRole { .. } => {
                let [body] = op.regions.as_slice() else {
                    return Err(self.err(op, "needs one region"));
                };
                self.region(op, body, none, none)?;
            }
            _ if !op.regions.is_empty() => return Err(self.err(op, "takes no regions")),
            _ => {}
        }
        for &r in &op.results {
            self.define(r)?;
        }
        Ok(())
    }

    fn check_types(&self, op: &Op, ins: &[&Type], outs: &[&Type]) -> IrResult<()> {
        let fail = |what: &str| Err(self.err(op, what));
        let arity = |n_in: usize, n_out: usize| -> IrResult<()> {
            if ins.len() != n_in || outs.len() != n_out {
                return Err(self.err(op, &format!("expects {n_in} operands and {n_out} results")));
            }
            Ok(())
        };
        let int_scalar = |t: &Type| t.is_scalar() && t.dtype().is_some_and(|d| d.is_int());
        let same = |a: &Type, b: &Type| a == b;
        // fp8 is storage: the builder computes every other op in f32.
        let computes = matches!(
            op.kind,
            OpKind::Unary(_)
                | OpKind::Binary(_)
                | OpKind::Compare(_)
                | OpKind::Fma
                | OpKind::Reduce { .. }
                | OpKind::Scan { .. }
                | OpKind::Sort { .. }
                | OpKind::Dot
        );
        if computes && ins.iter().any(|t| t.dtype().is_some_and(DType::is_fp8)) {
            return fail("computes on fp8 values (fp8 is storage; compute in f32)");
        }
        match &op.kind {
            OpKind::ProgramId { .. } | OpKind::NumPrograms { .. } => {
                arity(0, 1)?;
                if !is_scalar_of(outs[0], DType::I32) {
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
                if !is_tile_of(outs[0], DType::I32, &[(end - start) as usize]) {
                    return fail("result must be i32[end - start]");
                }
            }
            OpKind::Broadcast => {
                arity(1, 1)?;
                if ins[0].elem != outs[0].elem || !broadcasts_to(&ins[0].shape, &outs[0].shape) {
                    return fail("result is not a broadcast of the operand");
                }
            }
            OpKind::ExpandDims { axis } => {
                arity(1, 1)?;
                if *axis > ins[0].shape.len() {
                    return fail("axis out of range");
                }
                if !is_expanded(&ins[0].shape, *axis, &outs[0].shape) || outs[0].elem != ins[0].elem {
                    return fail("wrong result shape");
                }
            }
            OpKind::Permute { dims } => {
                arity(1, 1)?;
                let mut sorted = dims.clone();
                sorted.sort_unstable();
                if sorted != (0..ins[0].shape.len()).collect::<Vec<_>>() {
                    return fail("dims must be a permutation of the operand's axes");
                }
                let permuted: Vec<usize> = dims.iter().map(|&d| ins[0].shape[d]).collect();
                if permuted != outs[0].shape || outs[0].elem != ins[0].elem {
                    return fail("wrong result shape");
                }
            }
            OpKind::Reshape => {
                arity(1, 1)?;
                if ins[0].numel() != outs[0].numel() || outs[0].elem != ins[0].elem || ins[0].is_scalar() {
                    return fail("a reshape keeps the element count and type");
                }
            }
            OpKind::Take { axis, index } => {
                arity(1, 1)?;
                let mut shape = ins[0].shape.clone();
                if *axis >= shape.len() || *index >= shape[*axis] {
                    return fail("axis or index out of range");
                }
                shape.remove(*axis);
                if shape != outs[0].shape || outs[0].elem != ins[0].elem {
                    return fail("wrong result shape");
                }
            }
            OpKind::Cast => {
                arity(1, 1)?;
                if ins[0].shape != outs[0].shape || ins[0].is_ptr() || outs[0].is_ptr() {
                    return fail("casts keep the shape and convert numbers only");
                }
            }
            OpKind::Unary(u) => {
                arity(1, 1)?;
                if !same(ins[0], outs[0]) || ins[0].is_ptr() {
                    return fail("operand and result types differ");
                }
                if u.is_float_math() && !ins[0].dtype().is_some_and(DType::is_float) {
                    return fail("needs a float operand");
                }
            }
            OpKind::Binary(b) => {
                arity(2, 1)?;
                if !same(ins[0], ins[1]) || !same(ins[0], outs[0]) || ins[0].is_ptr() {
                    return fail("operands and result must share one numeric type");
                }
                let d = ins[0].dtype();
                match b {
                    BinaryOp::Pow | BinaryOp::Atan2 if !d.is_some_and(DType::is_float) => {
                        return fail("needs float operands")
                    }
                    BinaryOp::MulHi if !d.is_some_and(DType::is_int) => {
                        return fail("needs integer operands")
                    }
                    _ => {}
                }
            }
            OpKind::Fma => {
                arity(3, 1)?;
                let all_same = ins.iter().all(|t| same(t, outs[0]));
                if !all_same || !outs[0].dtype().is_some_and(DType::is_float) {
                    return fail("operands and result must share one float type");
                }
            }
            OpKind::Scan { axis, .. } | OpKind::Sort { axis, .. } => {
                arity(1, 1)?;
                if !same(ins[0], outs[0]) || ins[0].is_ptr() || ins[0].dtype() == Some(DType::Bool) {
                    return fail("operand and result must share one numeric type (not bool)");
                }
                let Some(&len) = ins[0].shape.get(*axis) else {
                    return fail("axis out of range");
                };
                if matches!(op.kind, OpKind::Sort { .. }) && !len.is_power_of_two() {
                    return fail("the sorted axis must have a power-of-two length");
                }
            }
            OpKind::Compare(_) => {
                arity(2, 1)?;
                if !same(ins[0], ins[1]) || !is_tile_of(outs[0], DType::Bool, &ins[0].shape) {
                    return fail("operands must match and the result must be bool");
                }
            }
            OpKind::Select => {
                arity(3, 1)?;
                if !is_tile_of(ins[0], DType::Bool, &ins[1].shape)
                    || !same(ins[1], ins[2])
                    || !same(ins[1], outs[0])
                {
                    return fail("select(bool, a, a) -> a");
                }
            }
            OpKind::CarryMerge => {
                arity(2, 1)?;
                if !same(ins[0], ins[1]) || !same(ins[0], outs[0]) {
                    return fail("carry_merge(a, a) -> a");
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
            OpKind::IntToPtr => {
                arity(1, 1)?;
                let address = matches!(ins[0].dtype(), Some(DType::I64 | DType::U64));
                let global = matches!(outs[0].elem, Elem::Ptr(_, AddrSpace::Global));
                if !address || !ins[0].shape.is_empty() || !global || !outs[0].shape.is_empty() {
                    return fail("int_to_ptr(i64 scalar) -> global pointer scalar");
                }
            }
            OpKind::Load { has_mask, has_other } => {
                let n = 1 + usize::from(*has_mask) + usize::from(*has_other);
                arity(n, 1)?;
                let Elem::Ptr(d, _) = ins[0].elem else {
                    return fail("loads from a pointer");
                };
                if !is_tile_of(outs[0], d, &ins[0].shape) {
                    return fail("result must be the pointee type in the pointer's shape");
                }
                if *has_mask && !is_tile_of(ins[1], DType::Bool, &ins[0].shape) {
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
                if !is_tile_of(ins[1], d, &ins[0].shape) {
                    return fail("value must be the pointee type in the pointer's shape");
                }
                if *has_mask && !is_tile_of(ins[2], DType::Bool, &ins[0].shape) {
                    return fail("mask must be bool in the pointer's shape");
                }
            }
            OpKind::Atomic {
                op: aop, has_mask, ..
            } => {
                let values = 1 + usize::from(*aop == AtomicOp::Cas);
                arity(1 + values + usize::from(*has_mask), 1)?;
                let Elem::Ptr(d, AddrSpace::Global) = ins[0].elem else {
                    return fail("atomics go through a pointer into a kernel buffer");
                };
                if !aop.accepts(d) {
                    return fail("the pointee type is not one the atomic is defined on");
                }
                let shape = &ins[0].shape;
                if !is_tile_of(outs[0], d, shape) || !ins[1..=values].iter().all(|t| is_tile_of(t, d, shape))
                {
                    return fail("operands and result must be the pointee type in the pointer's shape");
                }
                if *has_mask && !is_tile_of(ins[values + 1], DType::Bool, shape) {
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
                let value = if store { ins[4] } else { outs[0] };
                if !is_tile_of(value, d, &[*rows, *cols]) {
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
                let (s, r) = (&ins[0].shape, &outs[0].shape);
                let shape_ok = match axis {
                    Some(a) if *a < s.len() => {
                        r.len() + 1 == s.len() && r[..*a] == s[..*a] && r[*a..] == s[*a + 1..]
                    }
                    Some(_) => return fail("axis out of range"),
                    None => r.is_empty(),
                };
                if !shape_ok || outs[0].elem != ins[0].elem {
                    return fail("wrong result type");
                }
            }
            OpKind::Swizzle { .. } => {
                arity(2, 2)?;
                let i = Type::scalar(DType::I32);
                if ins.iter().chain(outs).any(|t| **t != i) {
                    return fail("operands and results are i32 scalars");
                }
            }
            OpKind::For { .. } => {
                if ins.len() < 3 || !ins[..3].iter().all(|t| int_scalar(t)) {
                    return fail("start, end and step must be integer scalars");
                }
                if ins.len() - 3 != outs.len() || ins[3..].iter().zip(outs).any(|(a, b)| a != b) {
                    return fail("initial values must match the carried types");
                }
            }
            OpKind::If => {
                if ins.len() != 1 || !is_scalar_of(ins[0], DType::Bool) {
                    return fail("the condition must be a bool scalar");
                }
            }
            OpKind::While => {
                if ins.len() != outs.len() || ins.iter().zip(outs).any(|(a, b)| a != b) {
                    return fail("initial values must match the carried types");
                }
            }
            OpKind::Print { .. } => {
                if !outs.is_empty() {
                    return fail("has no results");
                }
            }
            OpKind::Assert { .. } => {
                arity(1, 0)?;
                if ins[0].dtype() != Some(DType::Bool) {
                    return fail("the condition must be bool");
                }
            }
            OpKind::AssumeTrue => {
                arity(1, 0)?;
                if !is_scalar_of(ins[0], DType::Bool) {
                    return fail("the condition must be a bool scalar");
                }
            }
            OpKind::Assume { value, .. } => {
                arity(1, 1)?;
                if !same(ins[0], outs[0]) || !(ins[0].is_ptr() || ins[0].dtype().is_some_and(|d| d.is_int()))
                {
                    return fail("(x) -> x on integers or pointers");
                }
                if *value == 0 {
                    return fail("the promised value must be positive");
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
