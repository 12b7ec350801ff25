//! Which values may hold *undefined lanes*, found once when a kernel is prepared.
//!
//! An integer division or remainder by zero, or a shift by a negative count or by
//! at least the bit width, has no meaningful result. The interpreter does not fail
//! at the op itself: masked-off lanes compute such things all the time (`x // y`
//! with `y` loaded under a mask, guarded later by `where(y != 0, ...)` or by the
//! store's mask). It marks the lanes *poisoned* instead, and fails only where a
//! poisoned lane is observed (see `poison.rs`).
//!
//! Tracking poison costs work per op, so it is done only for the values that can
//! carry it: results of such ops whose divisor or count is not a safe constant,
//! what is computed from them element by element, and every value that shares a
//! register with one of those through a loop or `if` (a carried variable, its
//! initial value, its yields and the loop's results), since registers are swapped
//! there and each of them must hold an up-to-date poison. A kernel without
//! divisions or shifts by run-time values tracks nothing.

use crate::poison::{FaultKind, FaultSpec, Observed, PoisonRule, ResultRule};
use metile_ir::{AtomicOp, BinaryOp, DType, Function, Literal, Op, OpKind, Type, ValueId};

/// The fault an integer binary op may raise, by op and dtype.
pub(crate) fn fault_kind(op: BinaryOp, dtype: DType) -> Option<FaultKind> {
    if !dtype.is_int() {
        return None;
    }
    match op {
        BinaryOp::Div | BinaryOp::FloorDiv => Some(FaultKind::Division),
        BinaryOp::Rem => Some(FaultKind::Remainder),
        BinaryOp::Shl | BinaryOp::Shr => Some(FaultKind::Shift),
        _ => None,
    }
}

/// Whether `kind` faults for right-hand operand `v` (as a mathematical value) of `dtype`.
pub(crate) fn faults(kind: FaultKind, v: i64, dtype: DType) -> bool {
    match kind {
        FaultKind::Division | FaultKind::Remainder => v == 0,
        FaultKind::Shift => v < 0 || v >= 8 * dtype.size_bytes() as i64,
    }
}

/// The analysis: per value, whether it may hold poisoned lanes, and the constant
/// integer it is known to equal, if any.
pub(crate) struct Taint {
    pub tainted: Vec<bool>,
    constants: Vec<Option<i64>>,
}

impl Taint {
    pub(crate) fn of(f: &Function) -> Taint {
        let n = f.values.len();
        let mut t = Taint {
            tainted: vec![false; n],
            constants: vec![None; n],
        };
        t.find_constants(&f.body.ops, &f.values);
        // Monotone: each round only adds taint, so this ends after at most as many
        // rounds as there are values (in practice two or three).
        while t.round(&f.body.ops, &f.values) {}
        t
    }

    fn is(&self, v: ValueId) -> bool {
        self.tainted[v.index()]
    }

    /// Integer constants, followed through broadcasts, reshapes and integer casts.
    fn find_constants(&mut self, ops: &[Op], values: &[Type]) {
        for op in ops {
            for r in &op.regions {
                self.find_constants(&r.ops, values);
            }
            let Some(&result) = op.results.first() else {
                continue;
            };
            let int_dtype = values[result.index()].dtype().filter(|d| d.is_int());
            let value = match (&op.kind, op.operands.first()) {
                // As the constant is held: wrapped to its dtype (`1 << 32` is an i32 zero).
                (OpKind::Constant(Literal::Int(i)), _) => int_dtype.map(|d| wrap(*i, d)),
                (OpKind::Constant(Literal::Bool(b)), _) => Some(i64::from(*b)),
                (
                    OpKind::Broadcast
                    | OpKind::ExpandDims { .. }
                    | OpKind::Permute { .. }
                    | OpKind::Reshape
                    | OpKind::Take { .. },
                    Some(&src),
                ) => self.constants[src.index()],
                (OpKind::Cast, Some(&src)) => {
                    int_dtype.and_then(|d| self.constants[src.index()].map(|v| wrap(v, d)))
                }
                _ => None,
            };
            self.constants[result.index()] = value;
        }
    }

    fn mark(&mut self, v: ValueId) -> bool {
        let slot = &mut self.tainted[v.index()];
        let changed = !*slot;
        *slot = true;
        changed
    }

    /// Marks every value of a group that shares registers if any of them is marked.
    fn unify(&mut self, group: &[ValueId]) -> bool {
        if group.iter().any(|&v| self.is(v)) {
            group.iter().fold(false, |changed, &v| self.mark(v) | changed)
        } else {
            false
        }
    }

    /// One forward walk; returns whether anything was newly marked.
    fn round(&mut self, ops: &[Op], values: &[Type]) -> bool {
        let mut changed = false;
        for op in ops {
            for r in &op.regions {
                changed |= self.round(&r.ops, values);
            }
            let any = |t: &Taint, ids: &[ValueId]| ids.iter().any(|&v| t.is(v));
            let taints_result = match &op.kind {
                OpKind::Binary(b) => any(self, &op.operands) || self.fault_source(op, *b, values).is_some(),
                OpKind::Unary(_)
                | OpKind::Compare(_)
                | OpKind::Cast
                | OpKind::Broadcast
                | OpKind::ExpandDims { .. }
                | OpKind::Permute { .. }
                | OpKind::Reshape
                | OpKind::Take { .. }
                | OpKind::AddPtr
                | OpKind::Assume { .. }
                | OpKind::Fma
                | OpKind::Select => any(self, &op.operands),
                OpKind::Load { has_other: true, .. } => op.operands.get(2).is_some_and(|&v| self.is(v)),
                OpKind::SimdShuffleXor | OpKind::SimdBroadcast => self.is(op.operands[0]),
                OpKind::For { .. } => {
                    let body = &op.regions[0];
                    for (k, &result) in op.results.iter().enumerate() {
                        let mut group = vec![result, op.operands[3 + k]];
                        group.extend(body.args.get(k + 1));
                        group.extend(yielded(body, k));
                        changed |= self.unify(&group);
                    }
                    false
                }
                OpKind::While => {
                    let (cond, body) = (&op.regions[0], &op.regions[1]);
                    for (k, &result) in op.results.iter().enumerate() {
                        let mut group = vec![result, op.operands[k]];
                        group.extend(cond.args.get(k));
                        group.extend(body.args.get(k));
                        group.extend(yielded(body, k));
                        changed |= self.unify(&group);
                    }
                    false
                }
                OpKind::If => {
                    for (k, &result) in op.results.iter().enumerate() {
                        let mut group = vec![result];
                        for r in &op.regions {
                            group.extend(yielded(r, k));
                        }
                        changed |= self.unify(&group);
                    }
                    false
                }
                _ => false,
            };
            if taints_result {
                for &r in &op.results {
                    changed |= self.mark(r);
                }
            }
        }
        changed
    }

    /// An integer division, remainder or shift whose right operand is not a
    /// constant that is always safe.
    fn fault_source(&self, op: &Op, b: BinaryOp, values: &[Type]) -> Option<FaultSpec> {
        let dtype = values[op.operands[0].index()].dtype()?;
        let kind = fault_kind(b, dtype)?;
        let symbol = match b {
            BinaryOp::Div => "/",
            BinaryOp::FloorDiv => "//",
            BinaryOp::Rem => "%",
            BinaryOp::Shl => "<<",
            _ => ">>",
        };
        match self.constants[op.operands[1].index()] {
            Some(c) if !faults(kind, c, dtype) => None,
            _ => Some(FaultSpec { kind, dtype, symbol }),
        }
    }

    /// The poison bookkeeping `op` needs, or `None` when it touches no tainted value.
    pub(crate) fn rule(&self, op: &Op, values: &[Type]) -> Option<PoisonRule> {
        let observed = |i: usize| op.operands.get(i).is_some_and(|&v| self.is(v));
        let mut observe = vec![];
        let all = |i: usize| Observed::All {
            operand: i,
            numel: values[op.operands[i].index()].numel(),
            role: role(&op.kind, i),
        };
        let masked = |i: usize, mask: Option<usize>| Observed::Masked {
            operand: i,
            mask,
            role: role(&op.kind, i),
        };
        match &op.kind {
            // Element-wise ops and data movement pass poison on instead of observing it.
            OpKind::Unary(_)
            | OpKind::Binary(_)
            | OpKind::Compare(_)
            | OpKind::Cast
            | OpKind::Broadcast
            | OpKind::ExpandDims { .. }
            | OpKind::Permute { .. }
            | OpKind::Reshape
            | OpKind::Take { .. }
            | OpKind::AddPtr
            | OpKind::Select
            | OpKind::Assume { .. }
            | OpKind::Fma
            | OpKind::Yield
            | OpKind::CarryMerge
            | OpKind::SimdgroupRole { .. } => {}
            // The mask first: which other lanes are observed depends on it.
            OpKind::Load { has_mask, .. } => {
                let mask = has_mask.then_some(1);
                if mask.is_some() && observed(1) {
                    observe.push(all(1));
                }
                if observed(0) {
                    observe.push(masked(0, mask));
                }
            }
            OpKind::Store { has_mask } => {
                let mask = has_mask.then_some(2);
                if mask.is_some() && observed(2) {
                    observe.push(all(2));
                }
                observe.extend(
                    [0, 1]
                        .into_iter()
                        .filter(|&i| observed(i))
                        .map(|i| masked(i, mask)),
                );
            }
            OpKind::Atomic { has_mask, .. } => {
                let n = op.operands.len();
                let mask = has_mask.then_some(n - 1);
                if let Some(m) = mask.filter(|&m| observed(m)) {
                    observe.push(all(m));
                }
                let data = n - usize::from(*has_mask);
                observe.extend((0..data).filter(|&i| observed(i)).map(|i| masked(i, mask)));
            }
            // Loop bounds and conditions are observed; carried values travel with
            // their registers.
            OpKind::For { .. } => observe.extend((0..3).filter(|&i| observed(i)).map(all)),
            OpKind::If => observe.extend((0..1).filter(|&i| observed(i)).map(all)),
            // A `while`'s initial values are carried, not observed (its
            // condition is computed inside; see docs/semantics.md).
            OpKind::While => {}
            OpKind::SimdShuffleXor | OpKind::SimdBroadcast => {
                if observed(1) {
                    observe.push(all(1));
                }
            }
            _ => observe.extend((0..op.operands.len()).filter(|&i| observed(i)).map(all)),
        }
        let result_tainted = op.results.iter().any(|&r| self.is(r));
        let result = if !result_tainted {
            ResultRule::Untracked
        } else {
            match &op.kind {
                OpKind::Binary(b) => ResultRule::Union {
                    operands: vec![0, 1],
                    fault: self.fault_source(op, *b, values),
                },
                OpKind::Unary(_)
                | OpKind::Cast
                | OpKind::ExpandDims { .. }
                | OpKind::Reshape
                | OpKind::Assume { .. } => ResultRule::Union {
                    operands: vec![0],
                    fault: None,
                },
                OpKind::Compare(_) | OpKind::AddPtr => ResultRule::Union {
                    operands: vec![0, 1],
                    fault: None,
                },
                OpKind::Fma => ResultRule::Union {
                    operands: vec![0, 1, 2],
                    fault: None,
                },
                OpKind::Broadcast | OpKind::Permute { .. } | OpKind::Take { .. } => ResultRule::Broadcast,
                OpKind::Select => ResultRule::Select,
                OpKind::Load { has_other: true, .. } => ResultRule::LoadOther,
                OpKind::SimdShuffleXor => ResultRule::Exchange { xor: true },
                OpKind::SimdBroadcast => ResultRule::Exchange { xor: false },
                // Their results are their regions' yields, moved in with their poison.
                OpKind::For { .. } | OpKind::While | OpKind::If => ResultRule::Transferred,
                _ => ResultRule::Clear,
            }
        };
        if observe.is_empty() && matches!(result, ResultRule::Untracked | ResultRule::Transferred) {
            return None;
        }
        Some(PoisonRule {
            observe,
            result,
            op_name: op.kind.name(),
        })
    }
}

/// What operand `i` of an op is, for error messages ("the value of `store`").
fn role(kind: &OpKind, i: usize) -> &'static str {
    match (kind, i) {
        (
            OpKind::Load { .. } | OpKind::Store { .. } | OpKind::TileLoad { .. } | OpKind::TileStore { .. },
            0,
        ) => "the address",
        (OpKind::Atomic { .. }, 0) => "the address",
        (
            OpKind::Atomic {
                op: AtomicOp::Cas, ..
            },
            1,
        ) => "the comparand",
        (
            OpKind::Atomic {
                op: AtomicOp::Cas, ..
            },
            2,
        )
        | (OpKind::Atomic { .. }, 1) => "the value",
        (OpKind::Atomic { .. }, _) => "the mask",
        (OpKind::Load { .. }, 1) | (OpKind::Store { .. }, 2) => "the mask",
        (OpKind::Store { .. }, 1) | (OpKind::TileStore { .. }, 4) => "the value",
        (OpKind::TileLoad { .. } | OpKind::TileStore { .. }, 1) => "the row",
        (OpKind::TileLoad { .. } | OpKind::TileStore { .. }, 2) => "the column",
        (OpKind::TileLoad { .. } | OpKind::TileStore { .. }, 3) => "the stride",
        (OpKind::For { .. }, 0) => "the start",
        (OpKind::For { .. }, 1) => "the end",
        (OpKind::For { .. }, 2) => "the step",
        (OpKind::If, _) => "the condition",
        (OpKind::SimdShuffleXor, _) => "the lane mask",
        (OpKind::SimdBroadcast, _) => "the lane",
        (OpKind::Dot, 0) => "the left operand",
        (OpKind::Dot, 1) => "the right operand",
        (OpKind::Dot, _) => "the accumulator",
        (OpKind::Swizzle { .. }, 0) => "the row program id",
        (OpKind::Swizzle { .. }, _) => "the column program id",
        _ => "the operand",
    }
}

/// The `k`-th value a region yields.
fn yielded(block: &metile_ir::Block, k: usize) -> Option<ValueId> {
    block
        .ops
        .iter()
        .rev()
        .find(|op| matches!(op.kind, OpKind::Yield))
        .and_then(|y| y.operands.get(k).copied())
}

/// `v` wrapped to the integer dtype `d`.
fn wrap(v: i64, d: DType) -> i64 {
    crate::elem::int_value(v as u64, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use metile_ir::{Builder, Operand, ParamKind};

    /// `Out[offs] = x // divisor` over an i32 tile, and the analysis of it.
    fn divide_by(divisor: impl FnOnce(&mut Builder, ValueId) -> Operand) -> (Function, Taint, ValueId) {
        let mut b = Builder::new("t");
        let out = b.add_param("Out", ParamKind::Pointer(DType::I32));
        let n = b.add_param("n", ParamKind::Scalar(DType::I32));
        let offs = b.arange(0, 8).unwrap();
        let d = divisor(&mut b, n);
        let q = b.binary(BinaryOp::FloorDiv, offs.into(), d).unwrap();
        let p = b.binary(BinaryOp::Add, out.into(), q.into()).unwrap();
        b.store(p.into(), offs.into(), None).unwrap();
        let f = b.finish().unwrap();
        let t = Taint::of(&f);
        (f, t, q)
    }

    fn rules(f: &Function, t: &Taint) -> usize {
        f.body
            .ops
            .iter()
            .filter(|op| t.rule(op, &f.values).is_some())
            .count()
    }

    #[test]
    fn safe_constant_divisors_track_nothing() {
        for c in [4, -1, 1] {
            let (f, t, q) = divide_by(|_, _| Operand::Int(c));
            assert!(!t.tainted[q.index()]);
            assert_eq!(rules(&f, &t), 0, "{c}");
        }
    }

    #[test]
    fn run_time_and_zero_divisors_are_tracked_to_where_they_are_used() {
        // 1 << 32 is an i32 zero.
        for divisor in [Some(0), Some(1 << 32), None] {
            let (f, t, q) = divide_by(|_, n| divisor.map_or(n.into(), Operand::Int));
            assert!(t.tainted[q.index()]);
            // The division, the pointer arithmetic (both propagate) and the store
            // (which observes the address).
            assert_eq!(rules(&f, &t), 3, "{divisor:?}");
        }
    }

    #[test]
    fn registers_shared_through_a_loop_are_all_tracked() {
        let mut b = Builder::new("loop");
        let out = b.add_param("Out", ParamKind::Pointer(DType::I32));
        let n = b.add_param("n", ParamKind::Scalar(DType::I32));
        let init = b.full(&[], Operand::Int(1), DType::I32).unwrap();
        let mut inner = vec![];
        let res = b
            .build_for(
                (Operand::Int(0), Operand::Int(3), Operand::Int(1)),
                &[init],
                |b, _, c| {
                    let q = b.binary(BinaryOp::FloorDiv, c[0].into(), n.into())?;
                    inner.extend([c[0], q]);
                    Ok(vec![q])
                },
            )
            .unwrap();
        b.store(out.into(), res[0].into(), None).unwrap();
        let f = b.finish().unwrap();
        let t = Taint::of(&f);
        // The initial value, the carried argument, the yield and the result.
        for v in [init, inner[0], inner[1], res[0]] {
            assert!(t.tainted[v.index()], "{v}");
        }
        assert!(!t.tainted[n.index()]);
    }
}
