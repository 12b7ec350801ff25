//! Integer index tiles as affine forms of their lane indices: `pid * 128 +
//! arange(128)[:, None] * stride + k * 64 + arange(64)[None, :]` is
//! `stride·i + j + 128·pid + 64·k`, a sum of terms, each a constant times a
//! product of uniform scalars and at most one lane index (`i` along axis 0,
//! `j` along axis 1 of the tile).
//!
//! The form is read from the Tile IR through broadcasts, `expand_dims`,
//! integer casts, `Assume` hints and sums, differences and products, so the
//! order a kernel writes its offsets in does not matter. Three ways kernels
//! keep an index tile inside a matrix are read as the identity under a
//! uniform test, recorded as a [`RunTest`]: `x % m` (Triton's wrapped tile
//! origins; the identity where every lane is in `0..m`), `where(x < b, x, _)`
//! (clamped origins; where every lane is below `b`) and `min(x, b)` /
//! `max(x, b)`. The tests hold or fail for a whole tile, so a caller that
//! relies on the form branches once between its path and the general one.
//!
//! The arithmetic is exact in `i64`; the kernel's wraps modulo 2^32, so a
//! caller that computes a value of the form in `i32` gets the kernel's value.
//! Comparisons read through forms (a mask's `offs < K - k * BLOCK_K`) assume,
//! as the axis analysis does, that the kernel's index arithmetic does not
//! overflow.

use super::Lowering;
use metile_ir::{BinaryOp, CmpOp, DType, Elem, Literal, OpKind, UnaryOp, ValueId};
use std::cell::Cell;

/// Terms in a form, past which the analysis gives up (index arithmetic of
/// real kernels has a handful).
const MAX_TERMS: usize = 16;
/// Operations followed from a value, past which the analysis gives up (a
/// budget for the whole walk, so that values read many times over, as in
/// `x = x + x` repeated, cost no more than a long chain).
const MAX_STEPS: usize = 256;

/// A constant times a product of uniform scalars and at most one lane index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Term {
    /// The axis whose lane index the term scales.
    pub(super) lane: Option<usize>,
    /// Uniform scalar Tile IR values, sorted.
    pub(super) factors: Vec<ValueId>,
    pub(super) coeff: i64,
}

impl Term {
    fn key(&self) -> (Option<usize>, &[ValueId]) {
        (self.lane, &self.factors)
    }
}

/// A sum of [`Term`]s with distinct lanes and factors and nonzero
/// coefficients, in a canonical order (equal forms compare equal).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Affine {
    terms: Vec<Term>,
}

impl Affine {
    pub(super) fn constant(c: i64) -> Self {
        Self::from_terms(vec![Term {
            lane: None,
            factors: vec![],
            coeff: c,
        }])
        .unwrap_or_default()
    }

    pub(super) fn scalar(v: ValueId) -> Self {
        Self {
            terms: vec![Term {
                lane: None,
                factors: vec![v],
                coeff: 1,
            }],
        }
    }

    pub(super) fn from_term(t: Term) -> Self {
        Self::from_terms(vec![t]).unwrap_or_default()
    }

    fn lane(axis: usize) -> Self {
        Self {
            terms: vec![Term {
                lane: Some(axis),
                factors: vec![],
                coeff: 1,
            }],
        }
    }

    /// Sorts `terms`, merging equal ones and dropping zeros.
    fn from_terms(mut terms: Vec<Term>) -> Option<Self> {
        terms.sort_by(|a, b| a.key().cmp(&b.key()));
        let mut merged: Vec<Term> = Vec::with_capacity(terms.len());
        for t in terms {
            match merged.last_mut() {
                Some(last) if last.key() == t.key() => last.coeff = last.coeff.checked_add(t.coeff)?,
                _ => merged.push(t),
            }
        }
        merged.retain(|t| t.coeff != 0);
        (merged.len() <= MAX_TERMS).then_some(Self { terms: merged })
    }

    pub(super) fn terms(&self) -> &[Term] {
        &self.terms
    }

    pub(super) fn add(&self, other: &Self) -> Option<Self> {
        Self::from_terms(self.terms.iter().chain(&other.terms).cloned().collect())
    }

    pub(super) fn sub(&self, other: &Self) -> Option<Self> {
        self.add(&other.scale(-1)?)
    }

    pub(super) fn scale(&self, c: i64) -> Option<Self> {
        let terms = self.terms.iter().map(|t| {
            Some(Term {
                coeff: t.coeff.checked_mul(c)?,
                ..t.clone()
            })
        });
        Self::from_terms(terms.collect::<Option<_>>()?)
    }

    /// The product, where no term gets two lane indices.
    pub(super) fn mul(&self, other: &Self) -> Option<Self> {
        let mut terms = vec![];
        for a in &self.terms {
            for b in &other.terms {
                let lane = match (a.lane, b.lane) {
                    (Some(_), Some(_)) => return None,
                    (l, None) | (None, l) => l,
                };
                let mut factors = [a.factors.as_slice(), &b.factors].concat();
                factors.sort();
                terms.push(Term {
                    lane,
                    factors,
                    coeff: a.coeff.checked_mul(b.coeff)?,
                });
                if terms.len() > MAX_TERMS * MAX_TERMS {
                    return None;
                }
            }
        }
        Self::from_terms(terms)
    }

    /// The terms without a lane index (the value at lane 0 of every axis).
    pub(super) fn origin(&self) -> Self {
        Self {
            terms: self.terms.iter().filter(|t| t.lane.is_none()).cloned().collect(),
        }
    }

    /// The terms that scale a lane index.
    pub(super) fn lane_terms(&self) -> impl Iterator<Item = &Term> {
        self.terms.iter().filter(|t| t.lane.is_some())
    }

    /// Whether the form is a constant of at least zero.
    pub(super) fn is_non_negative_constant(&self) -> bool {
        self.terms
            .iter()
            .all(|t| t.lane.is_none() && t.factors.is_empty())
            && self.constant_term() >= 0
    }

    pub(super) fn constant_term(&self) -> i64 {
        self.terms
            .iter()
            .find(|t| t.lane.is_none() && t.factors.is_empty())
            .map_or(0, |t| t.coeff)
    }

    /// Lane axes renumbered by `map`; a lane that maps to `None` is constant
    /// zero (an axis of one element) and its terms vanish.
    fn map_lanes(&self, map: impl Fn(usize) -> Option<usize>) -> Self {
        let terms = self.terms.iter().filter_map(|t| match t.lane {
            None => Some(t.clone()),
            Some(a) => map(a).map(|lane| Term {
                lane: Some(lane),
                ..t.clone()
            }),
        });
        Self {
            terms: terms.collect(),
        }
    }

    /// The form of the same value broadcast from `from` to a shape of `rank`
    /// axes (aligned on the last axis, as broadcasting is).
    fn broadcast(&self, from: &[usize], rank: usize) -> Self {
        let shift = rank - from.len().min(rank);
        self.map_lanes(|a| (from.get(a) != Some(&1)).then_some(a + shift))
    }
}

/// A uniform test a form relies on: every lane of `value` compares `cmp`
/// (`Lt`, `Le` or `Ge`) to the uniform `bound` (to zero where it is `None`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct RunTest {
    pub(super) value: ValueId,
    /// `value`'s own form (at its own rank), as the walk that made the test found it.
    pub(super) form: Affine,
    pub(super) cmp: CmpOp,
    pub(super) bound: Option<ValueId>,
}

impl<'f> Lowering<'f> {
    /// The affine form of an integer tile or scalar (module header), with
    /// the tests it relies on appended to `tests`; `None` where it has none.
    pub(super) fn affine(&self, v: ValueId, tests: &mut Vec<RunTest>) -> Option<Affine> {
        self.affine_within(v, tests, &Cell::new(MAX_STEPS))
    }

    /// [`Lowering::affine`] of `v` as broadcast to a shape of `rank` axes.
    pub(super) fn affine_at_rank(&self, v: ValueId, rank: usize, tests: &mut Vec<RunTest>) -> Option<Affine> {
        let shape = self.f.ty(v).shape.clone();
        (shape.len() <= rank).then_some(())?;
        Some(self.affine(v, tests)?.broadcast(&shape, rank))
    }

    fn affine_within(&self, v: ValueId, tests: &mut Vec<RunTest>, steps: &Cell<usize>) -> Option<Affine> {
        let ty = self.f.ty(v);
        let Elem::Scalar(dtype) = ty.elem else {
            return None;
        };
        if !dtype.is_int() {
            return None;
        }
        let scalar = ty.shape.is_empty();
        let leaf = || (scalar && dtype == DType::I32 && self.is_uniform(v)).then(|| Affine::scalar(v));
        let Some(op) = self.def_op[v.index()] else {
            return leaf();
        };
        if steps.get() == 0 {
            return leaf();
        }
        steps.set(steps.get() - 1);
        let d = steps;
        let operand = |i: usize, tests: &mut Vec<RunTest>| self.affine_within(op.operands[i], tests, d);
        match &op.kind {
            OpKind::Constant(Literal::Int(c)) => Some(Affine::constant(*c)),
            OpKind::Arange { start, .. } => Affine::lane(0).add(&Affine::constant(*start)),
            OpKind::Broadcast => {
                let from = self.f.ty(op.operands[0]).shape.clone();
                Some(operand(0, tests)?.broadcast(&from, ty.shape.len()))
            }
            OpKind::ExpandDims { axis } => {
                Some(operand(0, tests)?.map_lanes(|a| Some(a + usize::from(a >= *axis))))
            }
            OpKind::Assume { .. } => operand(0, tests),
            OpKind::Cast => match self.f.ty(op.operands[0]).elem {
                Elem::Scalar(from) if from.is_int() => operand(0, tests).or_else(leaf),
                _ => leaf(),
            },
            OpKind::Binary(b @ (BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul)) => {
                let mut inner = tests.clone();
                let x = operand(0, &mut inner);
                let y = operand(1, &mut inner);
                let form = match (x, y) {
                    (Some(x), Some(y)) => match b {
                        BinaryOp::Add => x.add(&y),
                        BinaryOp::Sub => x.sub(&y),
                        _ => x.mul(&y),
                    },
                    _ => None,
                };
                match form {
                    Some(form) => {
                        *tests = inner;
                        Some(form)
                    }
                    None => leaf(),
                }
            }
            OpKind::Unary(UnaryOp::Neg) => operand(0, tests).and_then(|x| x.scale(-1)).or_else(leaf),
            OpKind::Binary(BinaryOp::Rem) if !scalar => {
                let m = self.uniform_bound(op.operands[1])?;
                let x = self.run_test(op.operands[0], CmpOp::Ge, None, tests, d)?;
                tests.push(RunTest {
                    value: op.operands[0],
                    form: x.clone(),
                    cmp: CmpOp::Lt,
                    bound: Some(m),
                });
                Some(x)
            }
            OpKind::Binary(b @ (BinaryOp::Min | BinaryOp::Max)) if !scalar => {
                let cmp = if *b == BinaryOp::Min { CmpOp::Le } else { CmpOp::Ge };
                let (x, bound) = match self.uniform_bound(op.operands[1]) {
                    Some(bound) => (op.operands[0], bound),
                    None => (op.operands[1], self.uniform_bound(op.operands[0])?),
                };
                self.run_test(x, cmp, Some(bound), tests, d)
            }
            OpKind::Select if !scalar => {
                let cond = self.def_op[self.unbroadcast(op.operands[0]).index()]?;
                let OpKind::Compare(cmp @ (CmpOp::Lt | CmpOp::Le)) = cond.kind else {
                    return None;
                };
                (self.unbroadcast(cond.operands[0]) == self.unbroadcast(op.operands[1])).then_some(())?;
                let bound = self.uniform_bound(cond.operands[1])?;
                self.run_test(op.operands[1], cmp, Some(bound), tests, d)
            }
            _ => leaf(),
        }
    }

    /// The form of a tile that some op keeps as it is where every lane of it
    /// compares `cmp` to `bound` (to zero where `bound` is `None`).
    fn run_test(
        &self,
        x: ValueId,
        cmp: CmpOp,
        bound: Option<ValueId>,
        tests: &mut Vec<RunTest>,
        steps: &Cell<usize>,
    ) -> Option<Affine> {
        let form = self.affine_within(x, tests, steps)?;
        form.lane_terms().next()?;
        tests.push(RunTest {
            value: x,
            form: form.clone(),
            cmp,
            bound,
        });
        Some(form)
    }

    /// A uniform scalar bound of a run test: a constant or a uniform `i32`,
    /// through broadcasts.
    fn uniform_bound(&self, v: ValueId) -> Option<ValueId> {
        let v = self.unbroadcast(v);
        let ty = self.f.ty(v);
        let int32 = ty.shape.is_empty() && ty.elem == Elem::Scalar(DType::I32);
        (int32 && (self.is_uniform(v) || self.constant(v).is_some())).then_some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(i: u32) -> Affine {
        Affine::scalar(ValueId(i))
    }

    #[test]
    fn equal_sums_in_any_order_are_one_form() {
        // 64·k + j + 128·pid, and j + pid·128 + k·64.
        let j = Affine::lane(1);
        let a = v(1)
            .scale(64)
            .unwrap()
            .add(&j)
            .unwrap()
            .add(&v(2).scale(128).unwrap())
            .unwrap();
        let b = j
            .add(&v(2).mul(&Affine::constant(128)).unwrap())
            .unwrap()
            .add(&v(1).scale(64).unwrap())
            .unwrap();
        assert_eq!(a, b);
        // Terms that cancel vanish: the form of `x - x` is zero.
        assert_eq!(a.sub(&a).unwrap(), Affine::default());
        assert_eq!(Affine::constant(0), Affine::default());
    }

    #[test]
    fn products_multiply_out_and_keep_one_lane_a_term() {
        // (t + 3) · (64 · stride) = 64·stride·t + 192·stride, its factors sorted.
        let t3 = v(7).add(&Affine::constant(3)).unwrap();
        let step = v(9).scale(64).unwrap();
        let p = t3.mul(&step).unwrap();
        let terms: Vec<_> = p.terms().iter().map(|t| (t.factors.clone(), t.coeff)).collect();
        assert_eq!(terms.len(), 2);
        assert!(terms.contains(&(vec![ValueId(9)], 192)));
        assert!(terms.contains(&(vec![ValueId(7), ValueId(9)], 64)));
        // i · j is no affine form.
        assert!(Affine::lane(0).mul(&Affine::lane(1)).is_none());
        // Overflowing coefficients give up rather than wrap.
        assert!(v(1).scale(i64::MAX).unwrap().scale(2).is_none());
    }

    #[test]
    fn origins_constants_and_lanes_are_read_off() {
        let f = Affine::lane(0)
            .mul(&v(4))
            .unwrap()
            .add(&v(5).scale(128).unwrap())
            .unwrap()
            .add(&Affine::constant(-8))
            .unwrap();
        assert_eq!(
            f.origin(),
            v(5).scale(128).unwrap().add(&Affine::constant(-8)).unwrap()
        );
        assert_eq!(f.constant_term(), -8);
        let lanes: Vec<_> = f.lane_terms().collect();
        assert_eq!(
            (lanes.len(), lanes[0].lane, lanes[0].factors.clone()),
            (1, Some(0), vec![ValueId(4)])
        );
        assert!(
            Affine::constant(0).is_non_negative_constant() && Affine::constant(64).is_non_negative_constant()
        );
        assert!(!Affine::constant(-1).is_non_negative_constant() && !v(1).is_non_negative_constant());
    }

    #[test]
    fn broadcasting_moves_lanes_to_the_last_axes_and_drops_unit_ones() {
        // An arange of 64 broadcast to [128, 64] runs along axis 1.
        assert_eq!(Affine::lane(0).broadcast(&[64], 2), Affine::lane(1));
        // A [1, 64] tile's lane along its unit axis 0 is constant 0.
        let both = Affine::lane(0).add(&Affine::lane(1)).unwrap();
        assert_eq!(both.broadcast(&[1, 64], 2), Affine::lane(1));
        assert_eq!(both.broadcast(&[128, 64], 2), both);
    }
}
