//! Facts that hold when some uniform conditions turn out true at run time.
//!
//! Two spellings users write break the runs that vector and asynchronous
//! copies need, though every program of a launch that matches its sizes keeps
//! them:
//!
//! * `x % n` keeps runs only for a non-negative `x` (see the parent module),
//!   and the most common dividend is an index tile `s * BLOCK + arange(0,
//!   BLOCK)` whose scalar `s` the compiler cannot prove non-negative: in
//!   Triton's grouped ordering, `pid_n = (pid % num_pid_in_group) //
//!   group_size_m` divides by a difference of launch sizes;
//! * `where(offs < N, offs, 0)` (Triton's persistent matmul clamps its row and
//!   column offsets so) is `offs` itself wherever the bounds check holds on
//!   every lane, which a uniform test of a few scalars decides
//!   (`lower/uniform_masks.rs`).
//!
//! The code worth emitting assumes the condition, behind a uniform test of it
//! that falls back to the code that assumes nothing. [`analyze_guarded`] picks
//! those conditions (*guards*): top-level integer scalars of unknown sign that
//! a remainder's dividend reaches only through sums with known non-negative
//! values, products by non-negative constants, broadcasts and widening casts;
//! and integer selects whose first value is known better than the select. It
//! then runs the analysis again with the guards assumed and records, for every
//! value, which guards its facts may rest on: none where its facts are the
//! proven ones, else those its operands rest on. A user of a guarded fact about
//! `v` tests the guards of `v` first. Each guard is `v` itself or among its
//! transitive operands, so it is defined, and in scope, wherever `v` is used.

use super::definitions::{Definitions, TOP_LEVEL};
use super::{analyze_assuming, AxisInfos};
use metile_ir::{BinaryOp, Block, Elem, Function, Op, OpKind, ValueId};

/// A condition the guarded facts assume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guard {
    /// This integer scalar is `>= 0`.
    NonNegative(ValueId),
    /// This select's condition holds on every lane, so it is its first value.
    SelectsFirst { select: ValueId, condition: ValueId },
}

impl Guard {
    fn value(self) -> ValueId {
        match self {
            Guard::NonNegative(v) | Guard::SelectsFirst { select: v, .. } => v,
        }
    }
}

/// The axis facts with the guards assumed, and what each value rests on.
pub struct Guarded {
    pub infos: AxisInfos,
    /// Bit `i` of a value's `relies` stands for `guards[i]`.
    guards: Vec<Guard>,
    relies: Vec<u64>,
}

impl Guarded {
    /// The guards the facts of `values` may rest on.
    pub fn guards_of(&self, values: &[ValueId]) -> Vec<Guard> {
        let bits = values.iter().fold(0u64, |acc, v| {
            acc | self.relies.get(v.index()).copied().unwrap_or(0)
        });
        (0..self.guards.len())
            .filter(|i| bits & (1 << i) != 0)
            .map(|i| self.guards[i])
            .collect()
    }
}

/// At most this many guards (one bit each in a `u64`); a kernel with more keeps
/// the first ones.
const MOST_GUARDS: usize = 64;

/// The facts that hold when the kernel's guards do, or `None` when it has no
/// guards.
pub fn analyze_guarded(f: &Function, proven: &AxisInfos) -> Option<Guarded> {
    let defs = Definitions::of(f);
    let search = SignSearch {
        f,
        proven,
        defs: &defs,
    };
    let mut guards: Vec<Guard> = Vec::new();
    let add = |g: Guard, guards: &mut Vec<Guard>| {
        if !guards.contains(&g) && guards.len() < MOST_GUARDS {
            guards.push(g);
        }
    };
    visit(
        &f.body,
        &mut |op| match (&op.kind, &op.operands[..], &op.results[..]) {
            (OpKind::Binary(BinaryOp::Rem), &[dividend, _], _) if !proven.is_non_negative(dividend) => {
                let mut found = Vec::new();
                if search.leaves(dividend, &mut found) {
                    for g in found {
                        add(Guard::NonNegative(g), &mut guards);
                    }
                }
            }
            (OpKind::Select, &[condition, first, _], &[select]) => {
                let integer = matches!(f.ty(select).elem, Elem::Scalar(d) if d.is_int());
                let better = proven.get(first) != proven.get(select)
                    || (proven.is_non_negative(first) && !proven.is_non_negative(select));
                if integer && better {
                    add(Guard::SelectsFirst { select, condition }, &mut guards);
                }
            }
            _ => {}
        },
    );
    if guards.is_empty() {
        return None;
    }
    let (non_negative, first): (Vec<Guard>, Vec<Guard>) =
        guards.iter().partition(|g| matches!(g, Guard::NonNegative(_)));
    let values = |gs: Vec<Guard>| gs.into_iter().map(Guard::value).collect::<Vec<_>>();
    let infos = analyze_assuming(f, &values(non_negative), &values(first));
    let mut relies = vec![0u64; f.values.len()];
    for (i, g) in guards.iter().enumerate() {
        relies[g.value().index()] = 1 << i;
    }
    let same =
        |v: ValueId| proven.get(v) == infos.get(v) && proven.is_non_negative(v) == infos.is_non_negative(v);
    propagate(&f.body, &same, &mut relies);
    Some(Guarded {
        infos,
        guards,
        relies,
    })
}

/// The guard search's walk back from a remainder's dividend.
struct SignSearch<'a, 'f> {
    f: &'f Function,
    proven: &'a AxisInfos,
    defs: &'a Definitions<'f>,
}

impl SignSearch<'_, '_> {
    /// Whether `v` is non-negative once the scalars pushed to `found` are:
    /// `v` reaches them only through sums with non-negative values, products
    /// by non-negative constants, broadcasts and widening casts.
    fn leaves(&self, v: ValueId, found: &mut Vec<ValueId>) -> bool {
        if self.proven.is_non_negative(v) {
            return true;
        }
        match self.defs.op(v).map(|op| (&op.kind, &op.operands[..])) {
            Some((OpKind::Broadcast | OpKind::ExpandDims { .. }, &[x])) => self.leaves(x, found),
            Some((OpKind::Cast, &[x])) if super::widens(self.f.ty(x).dtype(), self.f.ty(v).dtype()) => {
                self.leaves(x, found)
            }
            Some((OpKind::Binary(BinaryOp::Add), &[x, y])) => self.leaves(x, found) && self.leaves(y, found),
            Some((OpKind::Binary(BinaryOp::Mul), &[x, y])) => {
                match (self.defs.constant(y), self.defs.constant(x)) {
                    (Some(c), _) if c >= 0 => self.leaves(x, found),
                    (_, Some(c)) if c >= 0 => self.leaves(y, found),
                    _ => self.leaf(v, found),
                }
            }
            _ => self.leaf(v, found),
        }
    }

    /// A top-level integer scalar becomes a guard.
    fn leaf(&self, v: ValueId, found: &mut Vec<ValueId>) -> bool {
        let ty = self.f.ty(v);
        let ok = matches!(ty.elem, Elem::Scalar(d) if d.is_int())
            && ty.shape.is_empty()
            && self.defs.block(v) == Some(TOP_LEVEL);
        if ok {
            found.push(v);
        }
        ok
    }
}

fn visit<'f>(b: &'f Block, each: &mut impl FnMut(&'f Op)) {
    for op in &b.ops {
        each(op);
        for region in &op.regions {
            visit(region, each);
        }
    }
}

/// A value whose facts are the proven ones rests on no guard; any other rests
/// on whatever its operands rest on (a region's arguments on whatever the op's
/// operands do: a loop's counter on its bounds), as its facts come from theirs.
fn propagate(b: &Block, same: &impl Fn(ValueId) -> bool, relies: &mut [u64]) {
    for op in &b.ops {
        let from = op.operands.iter().fold(0u64, |acc, v| acc | relies[v.index()]);
        for region in &op.regions {
            for &a in &region.args {
                if !same(a) {
                    relies[a.index()] |= from;
                }
            }
            propagate(region, same, relies);
        }
        for &r in &op.results {
            if !same(r) {
                relies[r.index()] |= from;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metile_ir::{Builder, CmpOp, DType, Operand, ParamKind};

    #[test]
    fn a_wrapped_tile_offset_from_a_scalar_of_unknown_sign_keeps_its_runs_under_a_guard() {
        let mut b = Builder::new("k");
        let x = b.add_param("X", ParamKind::Pointer(DType::F16));
        let n = b.add_param("N", ParamKind::Scalar(DType::I32));
        let g = b.add_param("G", ParamKind::Scalar(DType::I32));
        b.set_param_divisibility(n, 16);
        // Triton's grouped `pid_n`: a non-negative value divided by a size of unknown sign.
        let pid = b.program_id(0).unwrap();
        let pid_n = b.binary(BinaryOp::FloorDiv, pid.into(), g.into()).unwrap();
        let start = b.binary(BinaryOp::Mul, pid_n.into(), Operand::Int(128)).unwrap();
        let ar = b.arange(0, 128).unwrap();
        let offs = b.binary(BinaryOp::Add, start.into(), ar.into()).unwrap();
        let wrapped = b.binary(BinaryOp::Rem, offs.into(), n.into()).unwrap();
        let ptrs = b.binary(BinaryOp::Add, x.into(), wrapped.into()).unwrap();
        // The same quotient read where its sign changes nothing.
        let unrelated = b.binary(BinaryOp::Sub, pid_n.into(), Operand::Int(1)).unwrap();
        // A tile (not a scalar) of unknown sign cannot be tested once.
        let shifted = b.binary(BinaryOp::Sub, ar.into(), Operand::Int(64)).unwrap();
        let below_zero = b.binary(BinaryOp::Rem, shifted.into(), n.into()).unwrap();
        let f = b.finish().unwrap();
        let proven = super::super::analyze(&f);
        assert_eq!(proven.get(ptrs).contiguity, 1);
        let guarded = analyze_guarded(&f, &proven).expect("pid_n is a guard");
        assert_eq!(guarded.infos.get(wrapped).contiguity, 16);
        assert_eq!(guarded.infos.get(ptrs).contiguity, 16);
        assert_eq!(guarded.guards_of(&[ptrs]), vec![Guard::NonNegative(pid_n)]);
        assert_eq!(guarded.guards_of(&[unrelated]), vec![]);
        assert_eq!(guarded.infos.get(below_zero).contiguity, 1);
        assert_eq!(guarded.guards_of(&[below_zero]), vec![]);
    }

    #[test]
    fn a_clamped_offset_keeps_its_runs_where_its_bounds_check_holds_on_every_lane() {
        let mut b = Builder::new("k");
        let x = b.add_param("X", ParamKind::Pointer(DType::F16));
        let n = b.add_param("N", ParamKind::Scalar(DType::I32));
        let pid = b.program_id(0).unwrap();
        let start = b.binary(BinaryOp::Mul, pid.into(), Operand::Int(64)).unwrap();
        let ar = b.arange(0, 64).unwrap();
        let offs = b.binary(BinaryOp::Add, start.into(), ar.into()).unwrap();
        let inside = b.compare(CmpOp::Lt, offs.into(), n.into()).unwrap();
        let clamped = b.select(inside.into(), offs.into(), Operand::Int(0)).unwrap();
        let ptrs = b.binary(BinaryOp::Add, x.into(), clamped.into()).unwrap();
        let f = b.finish().unwrap();
        let proven = super::super::analyze(&f);
        assert_eq!(proven.get(ptrs).contiguity, 1);
        let guarded = analyze_guarded(&f, &proven).expect("the select is a guard");
        assert_eq!(guarded.infos.get(ptrs).contiguity, 64);
        assert_eq!(
            guarded.guards_of(&[ptrs]),
            vec![Guard::SelectsFirst {
                select: clamped,
                condition: inside
            }]
        );
    }

    #[test]
    fn kernels_whose_remainders_have_known_signs_have_no_guards() {
        let mut b = Builder::new("k");
        let n = b.add_param("N", ParamKind::Scalar(DType::I32));
        let pid = b.program_id(0).unwrap();
        let start = b.binary(BinaryOp::Mul, pid.into(), Operand::Int(64)).unwrap();
        let ar = b.arange(0, 64).unwrap();
        let offs = b.binary(BinaryOp::Add, start.into(), ar.into()).unwrap();
        b.binary(BinaryOp::Rem, offs.into(), n.into()).unwrap();
        let f = b.finish().unwrap();
        assert!(analyze_guarded(&f, &super::super::analyze(&f)).is_none());
    }
}
