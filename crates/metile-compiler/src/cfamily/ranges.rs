//! Integer value ranges, so the emitter can print `a + b` instead of the
//! wrapping form `as_type<int>(as_type<uint>(a) + as_type<uint>(b))`.
//!
//! GPU IR integer arithmetic wraps (the Tile IR's semantics), but signed
//! overflow is undefined behaviour in C++ (MSL and CUDA C++ alike), which their
//! compilers may exploit. Arithmetic is therefore printed in a wrapping form unless this
//! analysis proves the result fits: constants, the builtin indices and what is
//! computed from them (thread offsets, coordinates, loop counters with known
//! bounds) do; kernel scalars, program ids and loaded values are unknown.

use metile_ir::gpu_ir::*;
use metile_ir::{BinaryOp, DType, Literal};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub lo: i128,
    pub hi: i128,
}

impl Range {
    fn exact(c: i128) -> Range {
        Range { lo: c, hi: c }
    }

    fn fits(self, d: DType) -> bool {
        let (lo, hi) = match d {
            DType::I32 => (i128::from(i32::MIN), i128::from(i32::MAX)),
            DType::U32 => (0, i128::from(u32::MAX)),
            DType::I64 => (i128::from(i64::MIN), i128::from(i64::MAX)),
            DType::Bool => (0, 1),
            _ => return false,
        };
        self.lo >= lo && self.hi <= hi
    }
}

pub struct Ranges {
    /// The range of each value, by value; `None` when unknown.
    ranges: Vec<Option<Range>>,
}

impl Ranges {
    pub fn get(&self, v: GpuValue) -> Option<Range> {
        self.ranges.get(v.index()).copied().flatten()
    }

    fn set(&mut self, v: GpuValue, r: Range) {
        if let Some(slot) = self.ranges.get_mut(v.index()) {
            *slot = Some(r);
        }
    }

    /// The exact value of a constant integer.
    pub fn constant(&self, v: GpuValue) -> Option<i128> {
        self.get(v).filter(|r| r.lo == r.hi).map(|r| r.lo)
    }

    /// True when `op(a, b)` on `d` cannot overflow.
    pub fn no_overflow(&self, op: BinaryOp, a: GpuValue, b: GpuValue, d: DType) -> bool {
        match (self.get(a), self.get(b)) {
            (Some(x), Some(y)) => arith(op, x, y).is_some_and(|r| r.fits(d)),
            _ => false,
        }
    }
}

fn arith(op: BinaryOp, a: Range, b: Range) -> Option<Range> {
    let corners = |f: fn(i128, i128) -> i128| {
        let c = [f(a.lo, b.lo), f(a.lo, b.hi), f(a.hi, b.lo), f(a.hi, b.hi)];
        Range {
            lo: c.iter().copied().min().unwrap_or(0),
            hi: c.iter().copied().max().unwrap_or(0),
        }
    };
    // Bounds beyond 2^64 are as good as unknown; keeping them small avoids i128 overflow.
    let bounded = |r: Range| (r.lo.abs() < 1 << 64 && r.hi.abs() < 1 << 64).then_some(r);
    let a = bounded(a)?;
    let b = bounded(b)?;
    Some(match op {
        BinaryOp::Add => Range {
            lo: a.lo + b.lo,
            hi: a.hi + b.hi,
        },
        BinaryOp::Sub => Range {
            lo: a.lo - b.hi,
            hi: a.hi - b.lo,
        },
        BinaryOp::Mul => corners(|x, y| x * y),
        BinaryOp::Max => Range {
            lo: a.lo.max(b.lo),
            hi: a.hi.max(b.hi),
        },
        BinaryOp::Min => Range {
            lo: a.lo.min(b.lo),
            hi: a.hi.min(b.hi),
        },
        BinaryOp::FloorDiv if b.lo > 0 => corners(|x, y| x / y),
        BinaryOp::Rem if b.lo > 0 && a.lo >= 0 => Range {
            lo: 0,
            hi: (b.hi - 1).min(a.hi),
        },
        BinaryOp::Rem if b.lo > 0 => Range {
            lo: -(b.hi - 1),
            hi: b.hi - 1,
        },
        BinaryOp::And if a.lo >= 0 || b.lo >= 0 => Range {
            lo: 0,
            hi: if a.lo >= 0 && b.lo >= 0 {
                a.hi.min(b.hi)
            } else if a.lo >= 0 {
                a.hi
            } else {
                b.hi
            },
        },
        BinaryOp::Shr if b.lo == b.hi && (0..63).contains(&b.lo) => Range {
            lo: a.lo >> b.lo,
            hi: a.hi >> b.lo,
        },
        _ => return None,
    })
}

pub fn analyze(f: &GpuFunction) -> Ranges {
    let mut r = Ranges {
        ranges: vec![None; f.values.len()],
    };
    let threads = i128::from(f.threads_per_group);
    block(&f.body, threads, &mut r, f);
    r
}

fn block(b: &GpuBlock, threads: i128, r: &mut Ranges, f: &GpuFunction) {
    for op in &b.ops {
        let ins = |i: usize| op.operands.get(i).and_then(|&v| r.get(v));
        let result = match &op.kind {
            GpuOpKind::Const(Literal::Int(c)) => Some(Range::exact(i128::from(*c))),
            GpuOpKind::Const(Literal::Bool(b)) => Some(Range::exact(i128::from(*b))),
            GpuOpKind::Builtin(b) => Some(match b {
                Builtin::ThreadIndex => Range {
                    lo: 0,
                    hi: threads - 1,
                },
                Builtin::SimdLane => Range { lo: 0, hi: 31 },
                Builtin::SimdgroupIndex => Range {
                    lo: 0,
                    hi: (threads - 1) / 32,
                },
                Builtin::ThreadgroupPosition(_) => Range {
                    lo: 0,
                    hi: i128::from(i32::MAX) - 1,
                },
                Builtin::ThreadgroupsPerGrid(_) => Range {
                    lo: 1,
                    hi: i128::from(i32::MAX),
                },
            }),
            GpuOpKind::Binary(op_kind) => match (ins(0), ins(1)) {
                (Some(a), Some(b)) => {
                    let d = f.ty(op.results[0]).dtype();
                    arith(*op_kind, a, b).filter(|x| x.fits(d))
                }
                _ => None,
            },
            GpuOpKind::Cast => {
                let (from, to) = (f.ty(op.operands[0]).dtype(), f.ty(op.results[0]).dtype());
                ins(0).filter(|x| from.is_int() && to.is_int() && x.fits(to))
            }
            GpuOpKind::AssumeUniform => ins(0),
            GpuOpKind::Select => match (ins(1), ins(2)) {
                (Some(a), Some(b)) => Some(Range {
                    lo: a.lo.min(b.lo),
                    hi: a.hi.max(b.hi),
                }),
                _ => None,
            },
            GpuOpKind::For => {
                // iv runs from start towards end; with a positive step it stays in [start, end).
                if let (Some(s), Some(e), Some(st)) = (ins(0), ins(1), ins(2)) {
                    if st.lo > 0 {
                        if let Some(&iv) = op.regions.first().and_then(|body| body.args.first()) {
                            r.set(
                                iv,
                                Range {
                                    lo: s.lo,
                                    hi: s.hi.max(e.hi - 1),
                                },
                            );
                        }
                    }
                }
                None
            }
            _ => None,
        };
        if let (Some(x), Some(&res)) = (result, op.results.first()) {
            r.set(res, x);
        }
        for region in &op.regions {
            block(region, threads, r, f);
        }
    }
}
