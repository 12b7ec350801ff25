//! Small helpers for Tile IR passes that build ops after tracing (split-K, the
//! L2 program order): appending typed ops to a list, renaming uses, and copying
//! a region with fresh values so that the copy and the original can coexist in
//! SSA form.

use metile_ir::{BinaryOp, Block, CmpOp, DType, Literal, Loc, Op, OpKind, Type, ValueId};
use rustc_hash::FxHashMap;

/// Appends ops to `ops`, registering the type of every new value in `values`
/// (a function's value table); every op takes `loc`.
pub(crate) struct Emit<'a> {
    pub values: &'a mut Vec<Type>,
    pub loc: Loc,
    pub ops: Vec<Op>,
}

impl<'a> Emit<'a> {
    pub fn new(values: &'a mut Vec<Type>, loc: Loc) -> Emit<'a> {
        Emit {
            values,
            loc,
            ops: Vec::new(),
        }
    }

    pub fn value(&mut self, ty: Type) -> ValueId {
        self.values.push(ty);
        ValueId(self.values.len() as u32 - 1)
    }

    pub fn ty(&self, v: ValueId) -> &Type {
        &self.values[v.index()]
    }

    /// Appends `kind(operands)` with one result of type `ty` (or none).
    pub fn op(&mut self, kind: OpKind, operands: Vec<ValueId>, ty: Option<Type>) -> ValueId {
        let results: Vec<ValueId> = ty.into_iter().map(|t| self.value(t)).collect();
        let first = results.first().copied().unwrap_or(ValueId(u32::MAX));
        self.ops.push(Op {
            kind,
            operands,
            results,
            regions: vec![],
            loc: self.loc.clone(),
        });
        first
    }

    pub fn int(&mut self, x: i64, d: DType) -> ValueId {
        self.op(OpKind::Constant(Literal::Int(x)), vec![], Some(Type::scalar(d)))
    }

    pub fn program_id(&mut self, axis: u8) -> ValueId {
        self.op(OpKind::ProgramId { axis }, vec![], Some(Type::scalar(DType::I32)))
    }

    pub fn num_programs(&mut self, axis: u8) -> ValueId {
        self.op(
            OpKind::NumPrograms { axis },
            vec![],
            Some(Type::scalar(DType::I32)),
        )
    }

    /// `a op b`, both of `a`'s type.
    pub fn bin(&mut self, op: BinaryOp, a: ValueId, b: ValueId) -> ValueId {
        let ty = self.ty(a).clone();
        self.op(OpKind::Binary(op), vec![a, b], Some(ty))
    }

    pub fn cmp(&mut self, op: CmpOp, a: ValueId, b: ValueId) -> ValueId {
        let ty = self.ty(a).with_dtype(DType::Bool);
        self.op(OpKind::Compare(op), vec![a, b], Some(ty))
    }

    /// `cond ? a : b` for scalars (or a scalar condition of tiles, broadcast first).
    pub fn select(&mut self, cond: ValueId, a: ValueId, b: ValueId) -> ValueId {
        let ty = self.ty(a).clone();
        let cond = if ty.shape.is_empty() {
            cond
        } else {
            self.broadcast(cond, &ty.shape)
        };
        self.op(OpKind::Select, vec![cond, a, b], Some(ty))
    }

    /// `v` converted to `d` (no op when it already is).
    pub fn cast(&mut self, v: ValueId, d: DType) -> ValueId {
        if self.ty(v).dtype() == Some(d) {
            return v;
        }
        let ty = self.ty(v).with_dtype(d);
        self.op(OpKind::Cast, vec![v], Some(ty))
    }

    pub fn broadcast(&mut self, v: ValueId, shape: &[usize]) -> ValueId {
        let ty = self.ty(v).with_shape(shape);
        self.op(OpKind::Broadcast, vec![v], Some(ty))
    }

    /// A tile of `d` zeros.
    pub fn zeros(&mut self, d: DType, shape: &[usize]) -> ValueId {
        let zero = if d.is_float() {
            Literal::Float(0.0)
        } else {
            Literal::Int(0)
        };
        let z = self.op(OpKind::Constant(zero), vec![], Some(Type::scalar(d)));
        self.broadcast(z, shape)
    }
}

/// Replaces every use of a key of `renamed` in `b` (nested regions included).
pub(crate) fn rename_uses(b: &mut Block, renamed: &FxHashMap<ValueId, ValueId>) {
    if renamed.is_empty() {
        return;
    }
    for op in &mut b.ops {
        for o in &mut op.operands {
            if let Some(&n) = renamed.get(o) {
                *o = n;
            }
        }
        for r in &mut op.regions {
            rename_uses(r, renamed);
        }
    }
}

/// A copy of `op` in which every value it defines (its results, and the
/// block arguments and results inside its regions) is a new value of the
/// same type; uses of values defined outside `op` are kept.
pub(crate) fn clone_fresh(op: &Op, values: &mut Vec<Type>) -> Op {
    fn fresh(v: ValueId, values: &mut Vec<Type>, map: &mut FxHashMap<ValueId, ValueId>) -> ValueId {
        let ty = values[v.index()].clone();
        values.push(ty);
        let n = ValueId(values.len() as u32 - 1);
        map.insert(v, n);
        n
    }
    fn copy(op: &Op, values: &mut Vec<Type>, map: &mut FxHashMap<ValueId, ValueId>) -> Op {
        let operands = op.operands.iter().map(|o| *map.get(o).unwrap_or(o)).collect();
        let regions = op
            .regions
            .iter()
            .map(|r| {
                let args = r.args.iter().map(|&a| fresh(a, values, map)).collect();
                let ops = r.ops.iter().map(|o| copy(o, values, map)).collect();
                Block { args, ops }
            })
            .collect();
        let results = op.results.iter().map(|&r| fresh(r, values, map)).collect();
        Op {
            kind: op.kind.clone(),
            operands,
            results,
            regions,
            loc: op.loc.clone(),
        }
    }
    copy(op, values, &mut FxHashMap::default())
}

/// Every op of `ops` and their nested regions, depth first, in program order.
pub(crate) fn walk<'b>(ops: &'b [Op], f: &mut impl FnMut(&'b Op)) {
    for op in ops {
        f(op);
        for r in &op.regions {
            walk(&r.ops, f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_clone_defines_only_new_values() {
        let mut values = vec![Type::scalar(DType::I32); 3];
        let op = Op {
            kind: OpKind::For { num_stages: None },
            operands: vec![ValueId(0), ValueId(0), ValueId(0)],
            results: vec![],
            regions: vec![Block {
                args: vec![ValueId(1)],
                ops: vec![Op {
                    kind: OpKind::Binary(BinaryOp::Add),
                    operands: vec![ValueId(1), ValueId(0)],
                    results: vec![ValueId(2)],
                    regions: vec![],
                    loc: Loc::unknown(),
                }],
            }],
            loc: Loc::unknown(),
        };
        let c = clone_fresh(&op, &mut values);
        assert_eq!(c.operands, op.operands, "uses of outer values are kept");
        let (arg, add) = (c.regions[0].args[0], &c.regions[0].ops[0]);
        assert!(arg.0 >= 3 && add.results[0].0 >= 3);
        assert_eq!(add.operands, vec![arg, ValueId(0)]);
        assert_eq!(values.len(), 5);
    }
}
