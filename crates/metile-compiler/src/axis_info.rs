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

use metile_ir::{AssumeFact, BinaryOp, Block, CmpOp, DType, Elem, Function, Literal, OpKind, ValueId};

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
}

impl AxisInfos {
    pub fn get(&self, v: ValueId) -> AxisInfo {
        self.infos.get(v.index()).copied().unwrap_or(UNKNOWN)
    }
}

pub fn analyze(f: &Function) -> AxisInfos {
    let mut a = AxisInfos {
        infos: vec![UNKNOWN; f.values.len()],
        constants: vec![None; f.values.len()],
    };
    for p in &f.params {
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
            OpKind::Compare(cmp) => compare(*cmp, ins[0], ins[1]),
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
                    }
                }
                UNKNOWN
            }
            _ => UNKNOWN,
        };
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
        }
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
}
