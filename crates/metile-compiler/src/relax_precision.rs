//! Relaxed precision where only 16-bit results depend on a value (the
//! `relax_precision` pass, a Tile IR pass, the `relaxed_math` switch).
//!
//! meTile's f32 `exp` and `/` are the accurate ones: `/` correctly rounded,
//! `exp` within 2 ulp (docs/language.md, "Accuracy"). On NVIDIA GPUs both cost
//! several instructions an element (`/` a reciprocal refined by four fused
//! multiply-adds, a range check and a branch to a slow path), which is what a
//! bandwidth kernel over bf16 data spends its time on: a single-pass bf16
//! softmax ran at 0.79x Triton's on an H100 with 1.7x the instructions, all of
//! it in the division and the exponential (Triton computes both approximately
//! everywhere). When every result that depends on a value is rounded to f16,
//! bf16 or fp8 (11 or fewer significant bits), the extra bits are rounded away:
//! an approximation whose relative error stays far below that rounding moves a
//! 16-bit result by at most one unit in its last place, which is the bound
//! docs/language.md gives for 16-bit results.
//!
//! The pass finds those values with a backward *demand* analysis over the
//! function: a value's demand is `Full` unless each of its uses needs only a
//! few significant bits of it:
//!
//! - a cast from f32 to a 16-bit or 8-bit float needs few bits of its operand;
//! - `*`, `/`, `max`, `min`, `neg`, `abs`, `sqrt`, `rsqrt`, a `select`'s
//!   values, shape ops and max/min reductions pass their result's demand to
//!   their operands (relative errors add, or are halved);
//! - `+` (and `fma`, and sum reductions) pass it only when every term is known
//!   to be non-negative, since cancellation between terms of both signs turns a
//!   small relative error of a term into a large one of the sum; a forward
//!   sign analysis (`exp`, squares, absolute values, sums and products of such)
//!   proves terms non-negative;
//! - every other use (stores, comparisons, integer casts, `exp`'s argument,
//!   whose absolute error becomes the result's relative error, loop-carried
//!   values, `dot`s) needs every bit.
//!
//! Then, for f32 values with low demand, `exp` becomes `fast_exp` (`x * log2 e`
//! through the GPU's base-2 exponential: a relative error of at most
//! `|x| * 2^-24` plus 2 ulp, 2^-17 at the largest `|x|` with a normal result),
//! `exp2` becomes `fast_exp2` (2 ulp) and `/` becomes `fast_div` (2 ulp over
//! the whole range), and `a * b + c` becomes one `fma` (which is never less
//! accurate than the two roundings). Values that reach an f32 store keep every
//! bit, so f32 kernels compile exactly as before. The cpu backend interprets
//! the traced function, which never goes through this pass.

use metile_ir::{BinaryOp, Block, DType, Function, Literal, Op, OpKind, ReduceOp, ScanOp, UnaryOp, ValueId};

/// How many significant bits of a value its uses need.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Demand {
    /// No use (dead, or only the definition so far in the backward walk).
    Unused,
    /// Only results rounded to 11 or fewer significant bits depend on it.
    Low,
    Full,
}

struct Analysis<'f> {
    f: &'f Function,
    nonneg: Vec<bool>,
    demand: Vec<Demand>,
}

/// Relaxes `f` as the module header says; true if it changed anything.
pub fn relax_precision(f: &mut Function) -> bool {
    let mut a = Analysis {
        f,
        nonneg: vec![false; f.values.len()],
        demand: vec![Demand::Unused; f.values.len()],
    };
    a.signs(&f.body);
    a.demands(&f.body);
    let low: Vec<bool> = (0..f.values.len())
        .map(|v| a.demand[v] == Demand::Low && f.values[v].elem.dtype() == Some(DType::F32))
        .collect();
    let products = single_use_products(f);
    rewrite(&mut f.body, &low, &products)
}

impl Analysis<'_> {
    fn nn(&self, v: ValueId) -> bool {
        self.nonneg[v.index()]
    }

    /// Marks the values known to be non-negative (or NaN), in program order.
    fn signs(&mut self, block: &Block) {
        for op in &block.ops {
            for r in &op.regions {
                self.signs(r);
            }
            let Some(&r) = op.results.first() else { continue };
            let x = |i: usize| op.operands.get(i).copied();
            let nn = |v: Option<ValueId>| v.is_some_and(|v| self.nn(v));
            let square = x(0).is_some() && x(0) == x(1);
            let known = match &op.kind {
                OpKind::Constant(Literal::Float(c)) => *c >= 0.0,
                OpKind::Constant(Literal::Int(c)) => *c >= 0,
                OpKind::Unary(
                    UnaryOp::Exp
                    | UnaryOp::Exp2
                    | UnaryOp::FastExp
                    | UnaryOp::FastExp2
                    | UnaryOp::Abs
                    | UnaryOp::Sqrt
                    | UnaryOp::Rsqrt
                    | UnaryOp::Cosh,
                ) => true,
                OpKind::Binary(BinaryOp::Mul) => square || (nn(x(0)) && nn(x(1))),
                OpKind::Binary(BinaryOp::Add | BinaryOp::Div | BinaryOp::FastDiv | BinaryOp::Min) => {
                    nn(x(0)) && nn(x(1))
                }
                OpKind::Binary(BinaryOp::Max) => nn(x(0)) || nn(x(1)),
                OpKind::Fma => (square || (nn(x(0)) && nn(x(1)))) && nn(x(2)),
                OpKind::Select => nn(x(1)) && nn(x(2)),
                OpKind::Broadcast
                | OpKind::ExpandDims { .. }
                | OpKind::Permute { .. }
                | OpKind::Reshape
                | OpKind::Take { .. }
                | OpKind::Cast
                | OpKind::Reduce { .. }
                | OpKind::Scan {
                    op: ScanOp::Sum | ScanOp::Prod,
                    ..
                } => nn(x(0)),
                _ => false,
            };
            self.nonneg[r.index()] = known;
        }
    }

    fn need(&mut self, v: ValueId, d: Demand) {
        let slot = &mut self.demand[v.index()];
        *slot = (*slot).max(d);
    }

    /// Fills `demand` walking each block backwards: every use of a value is
    /// seen before its definition (a region's ops before the op that holds it),
    /// so one walk suffices; loop-carried values go through `yield`, which
    /// needs every bit.
    fn demands(&mut self, block: &Block) {
        for op in block.ops.iter().rev() {
            let result = op
                .results
                .first()
                .map_or(Demand::Unused, |r| self.demand[r.index()]);
            self.place(op, result);
            for r in op.regions.iter().rev() {
                self.demands(r);
            }
        }
    }

    /// Records what `op`, whose result has demand `result`, needs of its operands.
    fn place(&mut self, op: &Op, result: Demand) {
        let each = match &op.kind {
            OpKind::Cast if self.rounds_f32_to_narrow_float(op) => result.min(Demand::Low),
            OpKind::Binary(
                BinaryOp::Mul | BinaryOp::Div | BinaryOp::FastDiv | BinaryOp::Max | BinaryOp::Min,
            )
            | OpKind::Unary(UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Sqrt | UnaryOp::Rsqrt)
            | OpKind::Broadcast
            | OpKind::ExpandDims { .. }
            | OpKind::Permute { .. }
            | OpKind::Reshape
            | OpKind::Take { .. }
            | OpKind::Reduce {
                op: ReduceOp::Max | ReduceOp::Min,
                ..
            } => result,
            // The terms of a sum need the result's demand only when no term
            // can cancel another.
            OpKind::Binary(BinaryOp::Add)
            | OpKind::Fma
            | OpKind::Reduce {
                op: ReduceOp::Sum, ..
            } if op.operands.iter().all(|&v| self.nn(v)) => result,
            OpKind::Select => {
                self.need(op.operands[0], Demand::Full);
                for &v in &op.operands[1..] {
                    self.need(v, result);
                }
                return;
            }
            _ => Demand::Full,
        };
        for &v in &op.operands {
            self.need(v, each);
        }
    }

    /// Whether the cast `op` rounds an f32 to a 16-bit or 8-bit float.
    fn rounds_f32_to_narrow_float(&self, op: &Op) -> bool {
        let dtype = |v: ValueId| self.f.ty(v).elem.dtype();
        dtype(op.operands[0]) == Some(DType::F32)
            && op
                .results
                .first()
                .and_then(|&r| dtype(r))
                .is_some_and(|d| matches!(d, DType::F16 | DType::BF16) || d.is_fp8())
    }
}

/// The f32 products used exactly once (by an op outside any other use), by
/// result: their operands.
fn single_use_products(f: &Function) -> Vec<Option<(ValueId, ValueId)>> {
    let mut uses = vec![0u32; f.values.len()];
    f.walk(&mut |op| {
        for &v in &op.operands {
            uses[v.index()] += 1;
        }
    });
    let mut products = vec![None; f.values.len()];
    f.walk(&mut |op| {
        if op.kind == OpKind::Binary(BinaryOp::Mul) {
            let r = op.results[0];
            if uses[r.index()] == 1 && f.ty(r).elem.dtype() == Some(DType::F32) {
                products[r.index()] = Some((op.operands[0], op.operands[1]));
            }
        }
    });
    products
}

fn rewrite(block: &mut Block, low: &[bool], products: &[Option<(ValueId, ValueId)>]) -> bool {
    let mut changed = false;
    for op in &mut block.ops {
        for r in &mut op.regions {
            changed |= rewrite(r, low, products);
        }
        let Some(&r) = op.results.first() else { continue };
        if !low[r.index()] {
            continue;
        }
        let kind = match op.kind {
            OpKind::Unary(UnaryOp::Exp) => OpKind::Unary(UnaryOp::FastExp),
            OpKind::Unary(UnaryOp::Exp2) => OpKind::Unary(UnaryOp::FastExp2),
            OpKind::Binary(BinaryOp::Div) => OpKind::Binary(BinaryOp::FastDiv),
            OpKind::Binary(BinaryOp::Add) => {
                let (x, y) = (op.operands[0], op.operands[1]);
                let fused = match (products[x.index()], products[y.index()]) {
                    (Some((a, b)), _) => Some(vec![a, b, y]),
                    (None, Some((a, b))) => Some(vec![a, b, x]),
                    (None, None) => None,
                };
                match fused {
                    Some(operands) => {
                        op.operands = operands;
                        OpKind::Fma
                    }
                    None => continue,
                }
            }
            _ => continue,
        };
        op.kind = kind;
        changed = true;
    }
    changed
}
