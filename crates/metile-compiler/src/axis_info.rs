//! What is statically known about integer (and pointer-offset) tiles along their
//! last axis, for vector memory access: a pointer tile `base + offsets` can be read
//! with one `float4` load per run of 4 elements when the offsets are consecutive
//! there, the run's first offset is a multiple of 4, and the mask is constant
//! over the run (or checked at run time).
//!
//! Per value, along the last axis (split into aligned runs at positions that are
//! multiples of the run length):
//! * `contiguity`: runs of this length hold `x, x+1, ...`;
//! * `divisibility`: the value at the start of every contiguity run is a multiple
//!   of this power of two (for `contiguity == 1`: every element is);
//! * `constancy`: runs of this length hold one value.
//!
//! All three are powers of two; scalars are constant along everything. Unknown
//! values get `1, 1, 1`. Pointers are their element offsets from the buffer base
//! (0 for a parameter or a shared allocation).
//!
//! Beside the three, integer values get a sign fact: known non-negative in every
//! element (program and thread ids, aranges from a non-negative start,
//! non-negative constants, unsigned values, and what `+`, `*`, `//`, `%`,
//! min/max, `>>` and `&` make of those). Integer parameters are not: the launch
//! key records divisibility, not sign. Like the contiguity facts, the sign fact
//! assumes that sums and products of offsets do not overflow. It is what lets
//! `x % n` keep runs: C's `%` truncates, so a run crossing from negative values
//! to a multiple of `n` breaks (`-4..0 % 4` is `0, -3, -2, -1, 0`). The kernel
//! can also promise it: `assume(x >= c)` with a constant `c >= 0` (or `x > c`
//! with `c >= -1`, the sides swapped, or a conjunction `&` of such) makes `x`
//! non-negative at every use, before the promise as after, as Triton's
//! `tl.assume` does, where the promise runs whenever `x` exists (`assumed.rs`).
//!
//! Where no promise is made, `guarded.rs` computes the facts that hold when
//! some scalars are non-negative or some selects pick their first value, for
//! users that test those conditions at run time (the operand ring's copies).

use metile_ir::{AssumeFact, BinaryOp, Block, CmpOp, DType, Elem, Function, Literal, Op, OpKind, ValueId};

mod assumed;
mod definitions;
mod guarded;
use assumed::assumed_non_negative;
pub use guarded::{analyze_guarded, Guard, Guarded};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AxisInfo {
    pub contiguity: u64,
    pub divisibility: u64,
    pub constancy: u64,
}

/// Stands for "unbounded" in divisibility and constancy.
const BIG: u64 = 1 << 30;

const UNKNOWN: AxisInfo = AxisInfo {
    contiguity: 1,
    divisibility: 1,
    constancy: 1,
};

fn pow2_factor(c: i64) -> u64 {
    if c == 0 {
        BIG
    } else {
        (1u64 << c.trailing_zeros().min(30)).min(BIG)
    }
}

/// A comparison's constancy. Beyond the operands' own, a bounds check
/// `x < b` (or `x >= b`, or the same with the sides swapped) of a contiguous
/// `x` against a `b` constant over the run holds one value over aligned runs of
/// any length `g` that divides both `b` and the runs' first values: `x0 < b`
/// and `x0 + g - 1 < b` agree when `x0` and `b` are multiples of `g`.
fn compare(cmp: CmpOp, a: AxisInfo, b: AxisInfo) -> AxisInfo {
    let plain = a.constancy.min(b.constancy);
    let (x, bound) = match cmp {
        CmpOp::Lt | CmpOp::Ge => (a, b),
        CmpOp::Gt | CmpOp::Le => (b, a),
        _ => (UNKNOWN, UNKNOWN),
    };
    let mut run = if x.contiguity > 1 && bound.contiguity == 1 {
        x.contiguity.min(bound.constancy).min(bound.divisibility)
    } else {
        1
    };
    while run > 1 && x.divisibility_at(run) < run {
        run /= 2;
    }
    AxisInfo {
        constancy: plain.max(run),
        ..UNKNOWN
    }
}

fn largest_pow2_divisor(n: usize) -> u64 {
    if n == 0 {
        1
    } else {
        1u64 << n.trailing_zeros().min(30)
    }
}

impl AxisInfo {
    fn scalar(divisibility: u64) -> AxisInfo {
        AxisInfo {
            contiguity: 1,
            divisibility,
            constancy: BIG,
        }
    }

    /// The divisibility of the values at positions that are multiples of `run`.
    pub fn divisibility_at(self, run: u64) -> u64 {
        if self.contiguity == 1 || run % self.contiguity == 0 {
            self.divisibility
        } else {
            self.divisibility.min(run)
        }
    }
}

pub struct AxisInfos {
    infos: Vec<AxisInfo>,
    /// Integer values known to hold one constant in every element (constants
    /// and their broadcasts): a product by 1 keeps the other factor's runs.
    constants: Vec<Option<i64>>,
    /// Integer values known to be `>= 0` in every element.
    non_negative: Vec<bool>,
    /// Values an `assume_true` promises to be `>= 0`.
    assumed_non_negative: Vec<bool>,
    /// Selects taken to pick their first value everywhere (`guarded.rs`).
    select_first: Vec<bool>,
}

impl AxisInfos {
    pub fn get(&self, v: ValueId) -> AxisInfo {
        self.infos.get(v.index()).copied().unwrap_or(UNKNOWN)
    }

    pub fn is_non_negative(&self, v: ValueId) -> bool {
        let known = |facts: &[bool]| facts.get(v.index()).copied().unwrap_or(false);
        known(&self.non_negative) || known(&self.assumed_non_negative)
    }
}

pub fn analyze(f: &Function) -> AxisInfos {
    analyze_assuming(f, &[], &[])
}

/// [`analyze`], with the scalars `non_negative` taken as non-negative and the
/// results of the selects `first` taken as their first value.
fn analyze_assuming(f: &Function, non_negative: &[ValueId], first: &[ValueId]) -> AxisInfos {
    let mut assumed = assumed_non_negative(f);
    for g in non_negative {
        if let Some(slot) = assumed.get_mut(g.index()) {
            *slot = true;
        }
    }
    let mut select_first = vec![false; f.values.len()];
    for s in first {
        if let Some(slot) = select_first.get_mut(s.index()) {
            *slot = true;
        }
    }
    let mut a = AxisInfos {
        infos: vec![UNKNOWN; f.values.len()],
        constants: vec![None; f.values.len()],
        non_negative: vec![false; f.values.len()],
        assumed_non_negative: assumed,
        select_first,
    };
    for p in &f.params {
        a.non_negative[p.value.index()] = is_unsigned(f.ty(p.value).dtype());
        a.infos[p.value.index()] = match f.ty(p.value).elem {
            Elem::Ptr(..) => AxisInfo::scalar(BIG),
            Elem::Scalar(_) => AxisInfo::scalar(p.divisibility.max(1)),
        };
    }
    block(f, &f.body, &mut a);
    a
}

fn last_dim(f: &Function, v: ValueId) -> u64 {
    f.ty(v).shape.last().map_or(1, |&d| d as u64)
}

fn block(f: &Function, b: &Block, a: &mut AxisInfos) {
    for op in &b.ops {
        let ins: Vec<AxisInfo> = op.operands.iter().map(|&v| a.get(v)).collect();
        let info = match &op.kind {
            OpKind::Constant(Literal::Int(c)) => AxisInfo::scalar(pow2_factor(*c)),
            OpKind::Constant(_)
            | OpKind::ProgramId { .. }
            | OpKind::NumPrograms { .. }
            | OpKind::Swizzle { .. } => AxisInfo::scalar(1),
            OpKind::Shared { .. } => AxisInfo::scalar(BIG),
            OpKind::Arange { start, end } => AxisInfo {
                contiguity: largest_pow2_divisor((end - start) as usize),
                divisibility: pow2_factor(*start),
                constancy: 1,
            },
            OpKind::Broadcast => {
                let x = ins[0];
                let (src, dst) = (f.ty(op.operands[0]), f.ty(op.results[0]));
                if src.shape.last().copied().unwrap_or(1) == 1 && dst.shape.last().copied().unwrap_or(1) > 1 {
                    AxisInfo {
                        contiguity: 1,
                        divisibility: x.divisibility_at(1),
                        constancy: largest_pow2_divisor(dst.shape.last().copied().unwrap_or(1)),
                    }
                } else {
                    x
                }
            }
            OpKind::ExpandDims { axis } => {
                let x = ins[0];
                if *axis + 1 == f.ty(op.results[0]).shape.len() {
                    AxisInfo {
                        contiguity: 1,
                        divisibility: x.divisibility_at(1),
                        constancy: 1,
                    }
                } else {
                    x
                }
            }
            OpKind::Binary(BinaryOp::Add) | OpKind::AddPtr => add(ins[0], ins[1], true),
            OpKind::Binary(BinaryOp::Sub) => add(ins[0], ins[1], false),
            OpKind::Binary(BinaryOp::Mul) if a.constants[op.operands[1].index()] == Some(1) => ins[0],
            OpKind::Binary(BinaryOp::Mul) if a.constants[op.operands[0].index()] == Some(1) => ins[1],
            OpKind::Binary(BinaryOp::Mul) => AxisInfo {
                contiguity: 1,
                divisibility: ins[0]
                    .divisibility_at(1)
                    .saturating_mul(ins[1].divisibility_at(1))
                    .min(BIG),
                constancy: ins[0].constancy.min(ins[1].constancy),
            },
            // Widening an integer keeps its values (a run that wrapped around in the
            // narrow type addresses nothing valid either way).
            OpKind::Cast if widens(f.ty(op.operands[0]).dtype(), f.ty(op.results[0]).dtype()) => ins[0],
            // `x % 0` has no value to describe.
            OpKind::Binary(BinaryOp::Rem)
                if a.is_non_negative(op.operands[0]) && a.constants[op.operands[1].index()] != Some(0) =>
            {
                remainder(ins[0], ins[1])
            }
            OpKind::Compare(cmp) => compare(*cmp, ins[0], ins[1]),
            OpKind::Select if op.results.first().is_some_and(|r| a.select_first[r.index()]) => ins[1],
            OpKind::Unary(_) | OpKind::Binary(_) | OpKind::Fma | OpKind::Select | OpKind::Cast => AxisInfo {
                constancy: ins.iter().map(|i| i.constancy).min().unwrap_or(BIG),
                ..UNKNOWN
            },
            OpKind::Load { .. } => AxisInfo {
                constancy: ins.iter().map(|i| i.constancy).min().unwrap_or(1),
                ..UNKNOWN
            },
            OpKind::Assume { fact, value } => assume(ins[0], *fact, *value),
            OpKind::For { .. } => {
                // The induction variable is start + k * step.
                if let Some(body) = op.regions.first() {
                    if let Some(&iv) = body.args.first() {
                        let d = ins[0].divisibility_at(1).min(ins[2].divisibility_at(1));
                        a.infos[iv.index()] = AxisInfo::scalar(d);
                        a.non_negative[iv.index()] =
                            a.is_non_negative(op.operands[0]) && a.is_non_negative(op.operands[2]);
                    }
                }
                UNKNOWN
            }
            _ => UNKNOWN,
        };
        let non_negative = produces_non_negative(f, op, a);
        for r in &op.regions {
            block(f, r, a);
        }
        let constant = match &op.kind {
            OpKind::Constant(Literal::Int(c)) => Some(*c),
            OpKind::Broadcast | OpKind::ExpandDims { .. } => a.constants[op.operands[0].index()],
            _ => None,
        };
        if let (Some(c), [r]) = (constant, &op.results[..]) {
            a.constants[r.index()] = Some(c);
        }
        for &r in &op.results {
            let clipped = clip(info, last_dim(f, r), f.ty(r).dtype());
            a.infos[r.index()] = clipped;
            a.non_negative[r.index()] = non_negative || is_unsigned(f.ty(r).dtype());
        }
    }
}

fn is_unsigned(dtype: Option<DType>) -> bool {
    matches!(dtype, Some(DType::U8 | DType::U16 | DType::U32 | DType::U64))
}

/// Whether every element of the op's (integer) results is `>= 0`, from what is
/// known of its operands.
fn produces_non_negative(f: &Function, op: &Op, a: &AxisInfos) -> bool {
    let known = |i: usize| op.operands.get(i).is_some_and(|&v| a.is_non_negative(v));
    match &op.kind {
        OpKind::Constant(Literal::Int(c)) => *c >= 0,
        OpKind::ProgramId { .. }
        | OpKind::NumPrograms { .. }
        | OpKind::Swizzle { .. }
        | OpKind::ThreadId
        | OpKind::SimdLaneId => true,
        OpKind::Arange { start, .. } => *start >= 0,
        OpKind::Broadcast | OpKind::ExpandDims { .. } | OpKind::Assume { .. } => known(0),
        OpKind::Cast => match (op.operands.first(), op.results.first()) {
            (Some(&from), Some(&to)) => known(0) && widens(f.ty(from).dtype(), f.ty(to).dtype()),
            _ => false,
        },
        OpKind::Binary(BinaryOp::Add | BinaryOp::Mul | BinaryOp::FloorDiv | BinaryOp::Min) => {
            known(0) && known(1)
        }
        // The remainder takes the dividend's sign; the shift keeps the sign bit.
        OpKind::Binary(BinaryOp::Rem | BinaryOp::Shr) => known(0),
        OpKind::Binary(BinaryOp::Max | BinaryOp::And) => known(0) || known(1),
        OpKind::Select if op.results.first().is_some_and(|r| a.select_first[r.index()]) => known(1),
        OpKind::Select => known(1) && known(2),
        _ => false,
    }
}

/// `x % n` of a non-negative `x`. A run of `x` of length `c` whose first value is
/// a multiple of `c` meets no multiple of `n` after its start when `c` divides
/// `n` (and `n` is one value over the run), so the remainders stay consecutive.
/// The remainder `x - q * n` is a multiple of what divides both.
fn remainder(x: AxisInfo, n: AxisInfo) -> AxisInfo {
    let n_divisibility = n.divisibility_at(1);
    let mut run = if n.contiguity == 1 {
        x.contiguity.min(n_divisibility).min(n.constancy)
    } else {
        1
    };
    while run > 1 && x.divisibility_at(run) < run {
        run /= 2;
    }
    AxisInfo {
        contiguity: run,
        divisibility: x.divisibility_at(run).min(n_divisibility),
        constancy: x.constancy.min(n.constancy),
    }
}

fn widens(from: Option<DType>, to: Option<DType>) -> bool {
    matches!((from, to), (Some(DType::I32 | DType::U32), Some(DType::I64)))
}

/// Keeps run lengths within the last axis (pointer tiles have no dtype and keep theirs).
fn clip(info: AxisInfo, last: u64, dtype: Option<DType>) -> AxisInfo {
    let info = if dtype.is_some_and(|d| d.is_float() || d == DType::Bool) {
        AxisInfo {
            contiguity: 1,
            divisibility: 1,
            ..info
        }
    } else {
        info
    };
    let last = largest_pow2_divisor(last as usize).max(1);
    AxisInfo {
        contiguity: info.contiguity.min(last),
        divisibility: info.divisibility,
        constancy: info.constancy.min(last.max(1)),
    }
}

/// What a kernel's promise (`multiple_of`, `max_contiguous`, `max_constancy`)
/// adds to what is known of `x`. Each promise covers aligned runs whose length
/// is the largest power of two dividing `n` (the interpreter checks the same
/// runs); a divisibility promise holds at the positions that are multiples of
/// that length, which covers every contiguity run's start when the runs are
/// at least that long, and every element of runs of one value.
fn assume(x: AxisInfo, fact: AssumeFact, n: u64) -> AxisInfo {
    let run = pow2_factor(i64::try_from(n).unwrap_or(0)).min(BIG);
    match fact {
        AssumeFact::MultipleOf if x.contiguity >= run || x.constancy >= run => AxisInfo {
            divisibility: x.divisibility.max(run),
            ..x
        },
        AssumeFact::MultipleOf => x,
        AssumeFact::Contiguous => AxisInfo {
            // Longer runs start at a subset of the old runs' starts, where the
            // known divisibility holds.
            contiguity: x.contiguity.max(run),
            divisibility: x.divisibility,
            constancy: if run > 1 { 1 } else { x.constancy },
        },
        AssumeFact::Constant => AxisInfo {
            constancy: x.constancy.max(run),
            ..x
        },
    }
}

/// `a + b` (or `a - b`): contiguous plus run-constant stays contiguous.
fn add(a: AxisInfo, b: AxisInfo, commutative: bool) -> AxisInfo {
    let contiguity = if a.contiguity > 1 && b.constancy > 1 {
        a.contiguity.min(b.constancy)
    } else if commutative && b.contiguity > 1 && a.constancy > 1 {
        b.contiguity.min(a.constancy)
    } else {
        1
    };
    AxisInfo {
        contiguity,
        divisibility: a.divisibility_at(contiguity).min(b.divisibility_at(contiguity)),
        constancy: a.constancy.min(b.constancy),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metile_ir::{Builder, CmpOp, Operand, ParamKind};

    #[test]
    fn block_offsets_are_contiguous_and_aligned() {
        let mut b = Builder::new("k");
        let x = b.add_param("X", ParamKind::Pointer(DType::F32));
        let n = b.add_param("N", ParamKind::Scalar(DType::I32));
        let pid = b.program_id(0).unwrap();
        let base = b.binary(BinaryOp::Mul, pid.into(), Operand::Int(256)).unwrap();
        let ar = b.arange(0, 256).unwrap();
        let offs = b.binary(BinaryOp::Add, base.into(), ar.into()).unwrap();
        let mask = b.compare(CmpOp::Lt, offs.into(), n.into()).unwrap();
        let ptrs = b.binary(BinaryOp::Add, x.into(), offs.into()).unwrap();
        let row = b.binary(BinaryOp::Mul, pid.into(), n.into()).unwrap();
        let unaligned = b.binary(BinaryOp::Add, ptrs.into(), row.into()).unwrap();
        let f = b.finish().unwrap();
        let info = analyze(&f);
        assert_eq!(info.get(offs).contiguity, 256);
        assert!(info.get(offs).divisibility >= 256);
        assert_eq!(info.get(ptrs).contiguity, 256);
        assert!(info.get(ptrs).divisibility >= 4);
        assert_eq!(info.get(mask).constancy, 1);
        assert_eq!(info.get(unaligned).contiguity, 256);
        assert_eq!(info.get(unaligned).divisibility, 1);
    }

    #[test]
    fn bounds_checks_against_aligned_bounds_are_constant_over_aligned_runs() {
        let mut b = Builder::new("k");
        let n = b.add_param("N", ParamKind::Scalar(DType::I32));
        let odd = b.add_param("M", ParamKind::Scalar(DType::I32));
        b.set_param_divisibility(n, 8);
        let pid = b.program_id(0).unwrap();
        let base = b.binary(BinaryOp::Mul, pid.into(), Operand::Int(64)).unwrap();
        let ar = b.arange(0, 64).unwrap();
        let offs = b.binary(BinaryOp::Add, base.into(), ar.into()).unwrap();
        let lt = b.compare(CmpOp::Lt, offs.into(), n.into()).unwrap();
        let gt = b.compare(CmpOp::Gt, n.into(), offs.into()).unwrap();
        let le = b.compare(CmpOp::Le, offs.into(), n.into()).unwrap();
        let unaligned = b.compare(CmpOp::Lt, offs.into(), odd.into()).unwrap();
        let shifted = b.binary(BinaryOp::Add, offs.into(), Operand::Int(3)).unwrap();
        let off_grid = b.compare(CmpOp::Lt, shifted.into(), n.into()).unwrap();
        let f = b.finish().unwrap();
        let info = analyze(&f);
        assert_eq!(info.get(lt).constancy, 8);
        assert_eq!(info.get(gt).constancy, 8);
        // `x <= N` changes inside a run that starts at N.
        assert_eq!(info.get(le).constancy, 1);
        assert_eq!(info.get(unaligned).constancy, 1);
        assert_eq!(info.get(off_grid).constancy, 1);
    }

    #[test]
    fn a_parameter_known_to_be_a_multiple_of_16_keeps_row_offsets_aligned() {
        let mut b = Builder::new("k");
        let x = b.add_param("X", ParamKind::Pointer(DType::F32));
        let n = b.add_param("N", ParamKind::Scalar(DType::I32));
        b.set_param_divisibility(n, 16);
        let pid = b.program_id(0).unwrap();
        let row = b.binary(BinaryOp::Mul, pid.into(), n.into()).unwrap();
        let ar = b.arange(0, 256).unwrap();
        let offs = b.binary(BinaryOp::Add, row.into(), ar.into()).unwrap();
        let ptrs = b.binary(BinaryOp::Add, x.into(), offs.into()).unwrap();
        let f = b.finish().unwrap();
        let info = analyze(&f);
        assert!(info.get(row).divisibility >= 16);
        assert_eq!(info.get(ptrs).contiguity, 256);
        assert!(info.get(ptrs).divisibility >= 16);
    }

    #[test]
    fn a_product_by_the_constant_one_keeps_its_runs() {
        // `offs_k * stride` with the stride traced as 1 (the `== 1`
        // specialisation) stays consecutive; by 2 it does not.
        let mut b = Builder::new("k");
        let x = b.add_param("X", ParamKind::Pointer(DType::F16));
        let ks = b.arange(0, 64).unwrap();
        let ks = b.expand_dims(ks, 0).unwrap();
        let one = b.constant(Literal::Int(1), DType::I32);
        let by_one = b.binary(BinaryOp::Mul, ks.into(), one.into()).unwrap();
        let one_first = b.binary(BinaryOp::Mul, one.into(), ks.into()).unwrap();
        let by_two = b.binary(BinaryOp::Mul, ks.into(), Operand::Int(2)).unwrap();
        let ptrs = b.binary(BinaryOp::Add, x.into(), by_one.into()).unwrap();
        let f = b.finish().unwrap();
        let info = analyze(&f);
        assert_eq!(info.get(by_one).contiguity, 64);
        assert_eq!(info.get(one_first).contiguity, 64);
        assert_eq!(info.get(ptrs).contiguity, 64);
        assert_eq!(info.get(by_two).contiguity, 1);
        assert!(info.get(by_two).divisibility >= 2);
    }

    /// `(pid * 128 + arange(0, 128))`: non-negative, consecutive over 128.
    fn block_offsets(b: &mut Builder) -> ValueId {
        let pid = b.program_id(0).unwrap();
        let base = b.binary(BinaryOp::Mul, pid.into(), Operand::Int(128)).unwrap();
        let ar = b.arange(0, 128).unwrap();
        b.binary(BinaryOp::Add, base.into(), ar.into()).unwrap()
    }

    #[test]
    fn wrapped_non_negative_offsets_stay_consecutive_over_runs_dividing_the_modulus() {
        let mut b = Builder::new("k");
        let x = b.add_param("X", ParamKind::Pointer(DType::F16));
        let n = b.add_param("N", ParamKind::Scalar(DType::I32));
        let odd = b.add_param("M", ParamKind::Scalar(DType::I32));
        b.set_param_divisibility(n, 16);
        let offs = block_offsets(&mut b);
        let by_n = b.binary(BinaryOp::Rem, offs.into(), n.into()).unwrap();
        let by_64 = b.binary(BinaryOp::Rem, offs.into(), Operand::Int(64)).unwrap();
        let by_256 = b.binary(BinaryOp::Rem, offs.into(), Operand::Int(256)).unwrap();
        let by_odd = b.binary(BinaryOp::Rem, offs.into(), odd.into()).unwrap();
        let ptrs = b.binary(BinaryOp::Add, x.into(), by_n.into()).unwrap();
        let f = b.finish().unwrap();
        let info = analyze(&f);
        assert_eq!(info.get(by_n).contiguity, 16);
        assert_eq!(info.get(by_n).divisibility, 16);
        assert_eq!(info.get(ptrs).contiguity, 16);
        assert_eq!(info.get(by_64).contiguity, 64);
        assert_eq!(info.get(by_64).divisibility, 64);
        assert_eq!(info.get(by_256).contiguity, 128);
        assert!(info.get(by_256).divisibility >= 128);
        // Nothing is known of M: a multiple of it may fall inside any run.
        assert_eq!(info.get(by_odd).contiguity, 1);
        assert!(info.is_non_negative(by_odd));
    }

    #[test]
    fn wrapped_offsets_keep_no_runs_when_the_value_may_be_negative_or_off_the_grid() {
        let mut b = Builder::new("k");
        let n = b.add_param("N", ParamKind::Scalar(DType::I32));
        let p = b.add_param("P", ParamKind::Scalar(DType::I32));
        b.set_param_divisibility(n, 16);
        b.set_param_divisibility(p, 16);
        let offs = block_offsets(&mut b);
        // `offs - 64` is negative for program 0: `-64..64 % 16` restarts at 0
        // after -1 and jumps from 0 to -15 at -15.
        let shifted_down = b.binary(BinaryOp::Sub, offs.into(), Operand::Int(64)).unwrap();
        let below_zero = b.binary(BinaryOp::Rem, shifted_down.into(), n.into()).unwrap();
        // A parameter's sign is not part of the launch key.
        let from_param = b.binary(BinaryOp::Mul, p.into(), Operand::Int(128)).unwrap();
        let ar = b.arange(0, 128).unwrap();
        let param_offs = b.binary(BinaryOp::Add, from_param.into(), ar.into()).unwrap();
        let param_wrapped = b.binary(BinaryOp::Rem, param_offs.into(), n.into()).unwrap();
        // Runs that do not start at multiples of their length may hold a multiple of N.
        let off_grid = b.binary(BinaryOp::Add, offs.into(), Operand::Int(3)).unwrap();
        let off_grid_wrapped = b.binary(BinaryOp::Rem, off_grid.into(), n.into()).unwrap();
        let by_zero = b.binary(BinaryOp::Rem, offs.into(), Operand::Int(0)).unwrap();
        let f = b.finish().unwrap();
        let info = analyze(&f);
        assert_eq!(info.get(shifted_down).contiguity, 128);
        assert_eq!(info.get(below_zero).contiguity, 1);
        assert_eq!(info.get(param_offs).contiguity, 128);
        assert_eq!(info.get(param_wrapped).contiguity, 1);
        assert!(info.is_non_negative(off_grid_wrapped));
        assert_eq!(info.get(off_grid_wrapped).contiguity, 1);
        assert_eq!(info.get(by_zero).contiguity, 1);
    }

    #[test]
    fn non_negativity_comes_from_ids_aranges_and_constants_and_survives_closed_operations() {
        let mut b = Builder::new("k");
        b.set_threads_per_group(128);
        let p = b.add_param("P", ParamKind::Scalar(DType::I32));
        let u = b.add_param("U", ParamKind::Scalar(DType::U32));
        let pid = b.program_id(0).unwrap();
        let grid = b.num_programs(1).unwrap();
        let tid = b.thread_id().unwrap();
        let lane = b.simd_lane_id().unwrap();
        let ar = b.arange(2, 10).unwrap();
        let seven = b.constant(Literal::Int(7), DType::I32);
        let minus_one = b.constant(Literal::Int(-1), DType::I32);
        let bin = |b: &mut Builder, op, x: ValueId, y: ValueId| b.binary(op, x.into(), y.into()).unwrap();
        let sum = bin(&mut b, BinaryOp::Add, pid, seven);
        let product = bin(&mut b, BinaryOp::Mul, pid, grid);
        let quotient = bin(&mut b, BinaryOp::FloorDiv, pid, grid);
        let quotient_by_param = bin(&mut b, BinaryOp::FloorDiv, pid, p);
        let rem_by_param = bin(&mut b, BinaryOp::Rem, pid, p);
        let rem_of_param = bin(&mut b, BinaryOp::Rem, p, pid);
        let min = bin(&mut b, BinaryOp::Min, pid, seven);
        let min_with_param = bin(&mut b, BinaryOp::Min, pid, p);
        let max_with_param = bin(&mut b, BinaryOp::Max, p, pid);
        let shifted = bin(&mut b, BinaryOp::Shr, pid, p);
        let masked_param = bin(&mut b, BinaryOp::And, p, seven);
        let difference = bin(&mut b, BinaryOp::Sub, pid, seven);
        let shifted_left = bin(&mut b, BinaryOp::Shl, pid, seven);
        let widened = b.cast(pid, DType::I64).unwrap();
        let narrowed = b.cast(widened, DType::I32).unwrap();
        let big = b.constant(Literal::Bool(true), DType::Bool);
        let picked = b.select(big.into(), pid.into(), seven.into()).unwrap();
        let picked_param = b.select(big.into(), pid.into(), p.into()).unwrap();
        let wide = b.broadcast_to(pid, &[8]).unwrap();
        let zero = b.constant(Literal::Int(0), DType::I32);
        let mut iv_seen = None;
        b.build_for((zero.into(), p.into(), seven.into()), &[], |_, iv, _| {
            iv_seen = Some(iv);
            Ok(vec![])
        })
        .unwrap();
        let mut param_iv_seen = None;
        b.build_for((p.into(), p.into(), seven.into()), &[], |_, iv, _| {
            param_iv_seen = Some(iv);
            Ok(vec![])
        })
        .unwrap();
        let f = b.finish().unwrap();
        let info = analyze(&f);
        for (v, what) in [
            (pid, "program_id"),
            (grid, "num_programs"),
            (tid, "thread_id"),
            (lane, "simd_lane_id"),
            (ar, "arange"),
            (seven, "7"),
            (u, "an unsigned parameter"),
            (sum, "+"),
            (product, "*"),
            (quotient, "//"),
            (rem_by_param, "% of a non-negative dividend"),
            (min, "min"),
            (max_with_param, "max with one non-negative side"),
            (shifted, ">>"),
            (masked_param, "& with one non-negative side"),
            (widened, "a widening cast"),
            (picked, "a select of non-negatives"),
            (wide, "a broadcast"),
            (iv_seen.unwrap(), "a loop from 0 by 7"),
        ] {
            assert!(info.is_non_negative(v), "{what} should be non-negative");
        }
        for (v, what) in [
            (p, "a signed parameter"),
            (minus_one, "-1"),
            (quotient_by_param, "// by a parameter"),
            (rem_of_param, "% of a parameter"),
            (min_with_param, "min with a parameter"),
            (difference, "-"),
            (shifted_left, "<<"),
            (narrowed, "a narrowing cast"),
            (picked_param, "a select with a parameter"),
            (param_iv_seen.unwrap(), "a loop from a parameter"),
        ] {
            assert!(!info.is_non_negative(v), "{what} may be negative");
        }
    }
}
