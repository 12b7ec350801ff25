//! The kernel's `assume_true` promises the axis analysis reads: `x >= c` with
//! a constant `c >= 0` (`x > c` with `c >= -1`, the sides swapped, and `&` of
//! such) as "`x` is non-negative".

use super::definitions::{Definitions, TOP_LEVEL};
use metile_ir::{BinaryOp, CmpOp, Function, OpKind};

/// The values that some `assume_true(x >= c)` of the kernel promises to be
/// non-negative (see the module comment). A promise is a promise about the
/// SSA value, so it holds at every use, wherever the `assume_true` sits, as
/// long as it runs whenever `x` exists: it sits in the kernel's top-level
/// block or in the block that defines `x` (a promise inside an `if` or a loop
/// about a value from outside may never run, and then says nothing).
pub(super) fn assumed_non_negative(f: &Function) -> Vec<bool> {
    let mut defs = Definitions::of(f);
    let mut conditions = std::mem::take(&mut defs.conditions);
    let mut assumed = vec![false; f.values.len()];
    while let Some((c, at)) = conditions.pop() {
        let Some(op) = defs.op(c) else {
            continue;
        };
        let (x, bound, strict) = match (&op.kind, &op.operands[..]) {
            (OpKind::Binary(BinaryOp::And), [p, q]) => {
                conditions.extend([(*p, at), (*q, at)]);
                continue;
            }
            (OpKind::Compare(CmpOp::Ge), &[x, b]) | (OpKind::Compare(CmpOp::Le), &[b, x]) => (x, b, false),
            (OpKind::Compare(CmpOp::Gt), &[x, b]) | (OpKind::Compare(CmpOp::Lt), &[b, x]) => (x, b, true),
            _ => continue,
        };
        let runs_whenever_x_exists = at == TOP_LEVEL || defs.block(x) == Some(at);
        let lowest = if strict { -1 } else { 0 };
        if runs_whenever_x_exists && defs.constant(bound).is_some_and(|c| c >= lowest) {
            if let Some(slot) = assumed.get_mut(x.index()) {
                *slot = true;
            }
        }
    }
    assumed
}

#[cfg(test)]
mod tests {
    use super::super::analyze;
    use metile_ir::{BinaryOp, Builder, CmpOp, DType, Operand, ParamKind, ValueId};

    #[test]
    fn an_assumed_lower_bound_makes_a_value_non_negative_at_every_use() {
        let mut b = Builder::new("k");
        let params: Vec<ValueId> = ["A", "B", "C", "D", "E", "F", "G", "H", "I"]
            .iter()
            .map(|n| b.add_param(n, ParamKind::Scalar(DType::I32)))
            .collect();
        let &[ge_zero, gt_minus_one, mirrored, bound_two, both_a, both_b, gt_minus_two, ge_param, ne_zero] =
            &params[..]
        else {
            unreachable!()
        };
        // A use before the promise: the promise is about the SSA value.
        let early = b.binary(BinaryOp::Rem, ge_zero.into(), Operand::Int(4)).unwrap();
        let promise = |b: &mut Builder, cmp: CmpOp, lhs: Operand, rhs: Operand| {
            let c = b.compare(cmp, lhs, rhs).unwrap();
            b.assume_true(c.into()).unwrap();
        };
        promise(&mut b, CmpOp::Ge, ge_zero.into(), Operand::Int(0));
        promise(&mut b, CmpOp::Gt, gt_minus_one.into(), Operand::Int(-1));
        promise(&mut b, CmpOp::Lt, Operand::Int(0), mirrored.into());
        promise(&mut b, CmpOp::Ge, bound_two.into(), Operand::Int(2));
        promise(&mut b, CmpOp::Gt, gt_minus_two.into(), Operand::Int(-2));
        promise(&mut b, CmpOp::Ge, ge_param.into(), ne_zero.into());
        promise(&mut b, CmpOp::Ne, ne_zero.into(), Operand::Int(0));
        let a_ok = b.compare(CmpOp::Ge, both_a.into(), Operand::Int(0)).unwrap();
        let b_ok = b.compare(CmpOp::Gt, both_b.into(), Operand::Int(0)).unwrap();
        let both = b.binary(BinaryOp::And, a_ok.into(), b_ok.into()).unwrap();
        b.assume_true(both.into()).unwrap();
        let sum = b
            .binary(BinaryOp::Add, mirrored.into(), bound_two.into())
            .unwrap();
        let f = b.finish().unwrap();
        let info = analyze(&f);
        for (v, what) in [
            (ge_zero, "x >= 0"),
            (early, "x % 4 before assume(x >= 0)"),
            (gt_minus_one, "x > -1"),
            (mirrored, "0 < x"),
            (bound_two, "x >= 2"),
            (both_a, "the left side of a conjunction"),
            (both_b, "the right side of a conjunction"),
            (sum, "a sum of assumed values"),
        ] {
            assert!(info.is_non_negative(v), "{what} should be non-negative");
        }
        for (v, what) in [
            (gt_minus_two, "x > -2"),
            (ge_param, "x >= a parameter"),
            (ne_zero, "x != 0"),
        ] {
            assert!(!info.is_non_negative(v), "{what} may be negative");
        }
    }

    #[test]
    fn a_promise_that_may_not_run_says_nothing_of_values_from_outside_its_block() {
        let mut b = Builder::new("k");
        let x = b.add_param("X", ParamKind::Scalar(DType::I32));
        let flag = b.add_param("F", ParamKind::Scalar(DType::I32));
        let outer_sum = b.binary(BinaryOp::Add, x.into(), Operand::Int(1)).unwrap();
        let taken = b.compare(CmpOp::Gt, flag.into(), Operand::Int(0)).unwrap();
        b.push_block(&[]);
        let inner = b.binary(BinaryOp::Sub, x.into(), flag.into()).unwrap();
        for v in [x, inner] {
            let c = b.compare(CmpOp::Ge, v.into(), Operand::Int(0)).unwrap();
            b.assume_true(c.into()).unwrap();
        }
        b.yield_values(&[]);
        let then_block = b.pop_block().unwrap();
        b.push_block(&[]);
        b.yield_values(&[]);
        let else_block = b.pop_block().unwrap();
        b.finish_if(taken, then_block, else_block, vec![]);
        let f = b.finish().unwrap();
        let info = analyze(&f);
        assert!(!info.is_non_negative(x), "a parameter promised inside an `if`");
        assert!(!info.is_non_negative(outer_sum));
        assert!(info.is_non_negative(inner), "a value promised in its own block");
    }

    #[test]
    fn an_assumed_non_negative_quotient_keeps_the_runs_of_its_wrapped_offsets() {
        // The grouped program order's column id: a quotient by a difference.
        let build = |promise: bool| {
            let mut b = Builder::new("k");
            let n = b.add_param("N", ParamKind::Scalar(DType::I32));
            let d = b.add_param("D", ParamKind::Scalar(DType::I32));
            b.set_param_divisibility(n, 16);
            let pid = b.program_id(0).unwrap();
            let pid_n = b.binary(BinaryOp::FloorDiv, pid.into(), d.into()).unwrap();
            if promise {
                let c = b.compare(CmpOp::Ge, pid_n.into(), Operand::Int(0)).unwrap();
                b.assume_true(c.into()).unwrap();
            }
            let base = b.binary(BinaryOp::Mul, pid_n.into(), Operand::Int(128)).unwrap();
            let ar = b.arange(0, 128).unwrap();
            let offs = b.binary(BinaryOp::Add, base.into(), ar.into()).unwrap();
            let wrapped = b.binary(BinaryOp::Rem, offs.into(), n.into()).unwrap();
            let f = b.finish().unwrap();
            analyze(&f).get(wrapped).contiguity
        };
        assert_eq!(build(false), 1);
        assert_eq!(build(true), 16);
    }
}
