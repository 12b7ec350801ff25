//! Target-independent Tile IR passes: constant folding of scalar arithmetic,
//! counters in lockstep with a loop's induction variable read as it
//! (`lockstep.rs`), common-subexpression elimination and dead-code
//! elimination, around the pass that makes absent lanes explicit
//! (`absent_lanes`). The verifier runs
//! after each pass, so a pass bug surfaces as an IR error, not a wrong kernel.

use metile_ir::{
    verify, BinaryOp, Block, CmpOp, DType, Function, IrError, IrResult, Literal, Op, OpKind, Type, ValueId,
};
use rustc_hash::FxHashMap;
use std::collections::hash_map::Entry;
use std::hash::{Hash, Hasher};

/// Runs every pass, verifying after tracing and after each pass that changed the
/// function (an unchanged function is the one already verified).
///
/// The clean-ups run first so that equal masks are one value (the absent-lane
/// pass then sees that a store's mask is its value's presence and adds nothing),
/// then absent lanes are made explicit, then the clean-ups fold and share what
/// that added.
pub fn optimize_tile_ir(mut f: Function) -> IrResult<Function> {
    verify(&f).map_err(|e| IrError(format!("after tracing: {e}")))?;
    clean_up(&mut f)?;
    if crate::absent_lanes::resolve_absent_lanes(&mut f) {
        verify(&f).map_err(|e| IrError(format!("after resolving absent lanes: {e}")))?;
        clean_up(&mut f)?;
    }
    Ok(f)
}

/// Folding, CSE and DCE to a fixed point; true if anything changed.
pub fn clean_up(f: &mut Function) -> IrResult<bool> {
    let mut any = false;
    for _ in 0..4 {
        let mut changed = false;
        for (name, pass) in PASSES {
            if pass(f) {
                changed = true;
                any = true;
                verify(f).map_err(|e| IrError(format!("after {name}: {e}")))?;
            }
        }
        if !changed {
            break;
        }
    }
    Ok(any)
}

type Pass = fn(&mut Function) -> bool;
const PASSES: [(&str, Pass); 4] = [
    ("fold", fold_constants),
    ("lockstep", crate::lockstep::lockstep_counters),
    ("cse", cse),
    ("dce", dce),
];

// ------------------------------------------------------------------ folding

/// `x` reduced to the integer dtype `d` (sign- or zero-extended from its width;
/// a u64 keeps its bits).
fn wrap_int(x: i64, d: DType) -> i64 {
    let shift = 64 - d.bits();
    if d.is_signed_int() {
        (x << shift) >> shift
    } else {
        (((x as u64) << shift) >> shift) as i64
    }
}

fn fold_binary(op: BinaryOp, a: Literal, b: Literal, d: DType) -> Option<Literal> {
    // A u64 beyond i64::MAX is held by its bits: only the ops that do not
    // care about the sign fold.
    if d == DType::U64 && !matches!(op, BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul) {
        return None;
    }
    if d.is_int() {
        let (x, y) = (a.as_i64(), b.as_i64());
        let r = match op {
            BinaryOp::Add => x.wrapping_add(y),
            BinaryOp::Sub => x.wrapping_sub(y),
            BinaryOp::Mul => x.wrapping_mul(y),
            BinaryOp::FloorDiv if y != 0 => x.wrapping_div(y),
            BinaryOp::Rem if y != 0 => x.wrapping_rem(y),
            BinaryOp::Max => x.max(y),
            BinaryOp::Min => x.min(y),
            _ => return None,
        };
        Some(Literal::Int(wrap_int(r, d)))
    } else if d == DType::F32 {
        // Only f32 folds exactly (f64 arithmetic then rounding is correctly rounded
        // for + - * /); narrower floats are left to the backends' rounding.
        let (x, y) = (a.as_f64() as f32, b.as_f64() as f32);
        let r = match op {
            BinaryOp::Add => x + y,
            BinaryOp::Sub => x - y,
            BinaryOp::Mul => x * y,
            BinaryOp::Div => x / y,
            _ => return None,
        };
        Some(Literal::Float(f64::from(r)))
    } else {
        None
    }
}

fn fold_compare(op: CmpOp, a: Literal, b: Literal, d: DType) -> Option<Literal> {
    if !d.is_int() || (d == DType::U64 && !matches!(op, CmpOp::Eq | CmpOp::Ne)) {
        return None;
    }
    let (x, y) = (a.as_i64(), b.as_i64());
    Some(Literal::Bool(match op {
        CmpOp::Lt => x < y,
        CmpOp::Le => x <= y,
        CmpOp::Gt => x > y,
        CmpOp::Ge => x >= y,
        CmpOp::Eq => x == y,
        CmpOp::Ne => x != y,
    }))
}

/// `consts` holds the literal of every value known to be constant, by value.
fn fold_block(block: &mut Block, f_values: &[Type], consts: &mut [Option<Literal>]) -> bool {
    let mut changed = false;
    for op in &mut block.ops {
        for r in &mut op.regions {
            changed |= fold_block(r, f_values, consts);
        }
        if let OpKind::Constant(l) = op.kind {
            consts[op.results[0].index()] = Some(l);
            continue;
        }
        if op.results.len() != 1 || !f_values[op.results[0].index()].is_scalar() {
            continue;
        }
        // Every foldable op has one or two operands.
        let mut args = [Literal::Bool(false); 2];
        if op.operands.is_empty() || op.operands.len() > args.len() {
            continue;
        }
        let mut all_constant = true;
        for (slot, &v) in args.iter_mut().zip(&op.operands) {
            match consts[v.index()] {
                Some(l) => *slot = l,
                None => all_constant = false,
            }
        }
        if !all_constant {
            continue;
        }
        let args = &args[..op.operands.len()];
        let in_dtype = op.operands.first().and_then(|&v| f_values[v.index()].dtype());
        let out_dtype = f_values[op.results[0].index()].dtype();
        let (Some(din), Some(dout)) = (in_dtype, out_dtype) else {
            continue;
        };
        let folded = match (&op.kind, args) {
            (OpKind::Binary(b), [x, y]) => fold_binary(*b, *x, *y, din),
            (OpKind::Compare(c), [x, y]) => fold_compare(*c, *x, *y, din),
            (OpKind::Cast, [x]) if din.is_int() && dout.is_int() => {
                Some(Literal::Int(wrap_int(x.as_i64(), dout)))
            }
            _ => None,
        };
        if let Some(l) = folded {
            op.kind = OpKind::Constant(l);
            op.operands.clear();
            consts[op.results[0].index()] = Some(l);
            changed = true;
        }
    }
    changed
}

pub fn fold_constants(f: &mut Function) -> bool {
    let mut consts = vec![None; f.values.len()];
    fold_block(&mut f.body, &f.values, &mut consts)
}

// ---------------------------------------------------------------------- CSE

/// An op's kind as a hash key: literals compare bit for bit (so `0.0` and
/// `-0.0` stay apart); every other kind holds no float and compares as itself.
#[derive(Clone)]
struct KindKey(OpKind);

impl PartialEq for KindKey {
    fn eq(&self, other: &KindKey) -> bool {
        match (&self.0, &other.0) {
            (OpKind::Constant(a), OpKind::Constant(b)) => a.key() == b.key(),
            (a, b) => a == b,
        }
    }
}

impl Eq for KindKey {}

impl Hash for KindKey {
    fn hash<H: Hasher>(&self, h: &mut H) {
        std::mem::discriminant(&self.0).hash(h);
        // The payloads of the kinds CSE meets most; the rest only by kind (equal
        // keys still hash alike, which is all a hash key needs).
        match &self.0 {
            OpKind::Constant(l) => l.key().hash(h),
            OpKind::Binary(b) => b.hash(h),
            OpKind::Unary(u) => u.hash(h),
            OpKind::Compare(c) => c.hash(h),
            OpKind::Arange { start, end } => (start, end).hash(h),
            OpKind::ExpandDims { axis } => axis.hash(h),
            OpKind::Permute { dims } => dims.hash(h),
            OpKind::Take { axis, index } => (axis, index).hash(h),
            OpKind::ProgramId { axis } | OpKind::NumPrograms { axis } => axis.hash(h),
            OpKind::Reduce { op, axis } => (op, axis).hash(h),
            _ => {}
        }
    }
}

/// Identity of a pure op: its kind, operands and result type. Mergeable ops have
/// one result and at most three operands; others are not merged.
#[derive(Clone, PartialEq, Eq, Hash)]
struct CseKey<'f> {
    kind: KindKey,
    operands: [ValueId; 3],
    n_operands: u8,
    result: &'f Type,
}

fn cse_key<'f>(op: &Op, values: &'f [Type]) -> Option<CseKey<'f>> {
    if op.kind.has_side_effects() || op.kind.reads_memory() || !op.regions.is_empty() || op.results.len() != 1
    {
        return None;
    }
    let mut operands = [ValueId(u32::MAX); 3];
    operands
        .get_mut(..op.operands.len())?
        .copy_from_slice(&op.operands);
    Some(CseKey {
        kind: KindKey(op.kind.clone()),
        operands,
        n_operands: op.operands.len() as u8,
        result: &values[op.results[0].index()],
    })
}

struct Cse<'f> {
    values: &'f [Type],
    /// What each value is replaced by (itself when kept).
    replace: Vec<ValueId>,
    /// The first op of each key in the open blocks, by its result.
    seen: FxHashMap<CseKey<'f>, ValueId>,
    /// Keys in `seen` in insertion order, so a closing region can drop its own.
    inserted: Vec<CseKey<'f>>,
    merged: bool,
}

impl Cse<'_> {
    fn block(&mut self, block: &mut Block) {
        // Compacted in place: moving every op into a fresh Vec costs more than
        // the hashing for the small blocks tracing produces.
        block.ops.retain_mut(|op| {
            for v in &mut op.operands {
                *v = self.replace[v.index()];
            }
            for r in &mut op.regions {
                let mark = self.inserted.len();
                self.block(r);
                for key in self.inserted.drain(mark..) {
                    self.seen.remove(&key);
                }
            }
            let Some(key) = cse_key(op, self.values) else {
                return true;
            };
            match self.seen.entry(key) {
                Entry::Occupied(existing) => {
                    self.replace[op.results[0].index()] = *existing.get();
                    self.merged = true;
                    false
                }
                Entry::Vacant(slot) => {
                    self.inserted.push(slot.key().clone());
                    slot.insert(op.results[0]);
                    true
                }
            }
        });
    }
}

pub fn cse(f: &mut Function) -> bool {
    let mut body = std::mem::take(&mut f.body);
    let mut pass = Cse {
        values: &f.values,
        replace: (0..f.values.len() as u32).map(ValueId).collect(),
        seen: FxHashMap::with_capacity_and_hasher(f.values.len(), Default::default()),
        inserted: Vec::with_capacity(f.values.len()),
        merged: false,
    };
    // Operands are rewritten as the walk meets them: in SSA every use comes
    // after its definition, so no use of a merged value is left behind.
    pass.block(&mut body);
    let merged = pass.merged;
    f.body = body;
    merged
}

// ---------------------------------------------------------------------- DCE

/// Removes ops without side effects whose results are unused.
///
/// One backward walk reaches the fixed point: every use follows its definition
/// in program order (values flow around loops only through block arguments and
/// yields, and loops are never removed), so by the time the walk reaches an op
/// it has seen every op that could read its results.
pub fn dce(f: &mut Function) -> bool {
    let mut used = vec![false; f.values.len()];
    dce_block(&mut f.body, &mut used)
}

fn dce_block(block: &mut Block, used: &mut [bool]) -> bool {
    let mut changed = false;
    let mut keep = vec![true; block.ops.len()];
    for (op, keep) in block.ops.iter_mut().zip(keep.iter_mut()).rev() {
        if !op.kind.has_side_effects() && !op.results.iter().any(|r| used[r.index()]) {
            *keep = false;
            changed = true;
            continue;
        }
        for r in op.regions.iter_mut().rev() {
            changed |= dce_block(r, used);
        }
        for v in &op.operands {
            used[v.index()] = true;
        }
    }
    let mut keep = keep.into_iter();
    block.ops.retain(|_| keep.next().unwrap_or(true));
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use metile_ir::{Builder, Operand, ParamKind};

    fn add_kernel() -> Function {
        let mut b = Builder::new("k");
        let x = b.add_param("X", ParamKind::Pointer(DType::F32));
        let n = b.add_param("N", ParamKind::Scalar(DType::I32));
        let pid = b.program_id(0).unwrap();
        let two = b.binary(BinaryOp::Mul, Operand::Int(2), Operand::Int(3)).unwrap();
        let base = b.binary(BinaryOp::Mul, pid.into(), two.into()).unwrap();
        let r = b.arange(0, 4).unwrap();
        let offs = b.binary(BinaryOp::Add, base.into(), r.into()).unwrap();
        let offs2 = b.binary(BinaryOp::Add, base.into(), r.into()).unwrap();
        let _dead = b.binary(BinaryOp::Sub, base.into(), r.into()).unwrap();
        let mask = b.compare(CmpOp::Lt, offs.into(), n.into()).unwrap();
        let p = b.binary(BinaryOp::Add, x.into(), offs2.into()).unwrap();
        let v = b.load(p.into(), Some(mask.into()), None).unwrap();
        b.store(p.into(), v.into(), Some(mask.into())).unwrap();
        b.finish().unwrap()
    }

    #[test]
    fn passes_fold_merge_and_drop() {
        let f = optimize_tile_ir(add_kernel()).unwrap();
        let text = metile_ir::print_function(&f);
        assert!(text.contains("constant 6"), "{text}");
        assert_eq!(text.matches(" add ").count(), 1, "{text}");
        assert!(!text.contains(" sub "), "{text}");
        assert!(text.contains("store"), "{text}");
    }

    /// Stores `a op b` of two i32 constants for each case, and prints the result
    /// of the passes.
    fn folded(cases: &[(BinaryOp, i64, i64)]) -> String {
        let mut b = Builder::new("k");
        let out = b.add_param("Out", ParamKind::Pointer(DType::I32));
        for (k, &(op, x, y)) in cases.iter().enumerate() {
            let x = b.constant(Literal::Int(x), DType::I32);
            let y = b.constant(Literal::Int(y), DType::I32);
            let r = b.binary(op, x.into(), y.into()).unwrap();
            let p = b
                .binary(BinaryOp::Add, out.into(), Operand::Int(k as i64))
                .unwrap();
            b.store(p.into(), r.into(), None).unwrap();
        }
        metile_ir::print_function(&optimize_tile_ir(b.finish().unwrap()).unwrap())
    }

    #[test]
    fn undefined_integer_ops_are_left_to_run_time() {
        // The cpu backend fails where their results are used; folding must not
        // turn them into a quiet constant.
        let text = folded(&[
            (BinaryOp::FloorDiv, 7, 0),
            (BinaryOp::Rem, 7, 0),
            (BinaryOp::Shl, 1, 40),
            (BinaryOp::Shr, 1, -1),
        ]);
        for op in [" floordiv ", " rem ", " shl ", " shr "] {
            assert!(text.contains(op), "{op} was folded:\n{text}");
        }
        let text = folded(&[(BinaryOp::FloorDiv, -7, 2), (BinaryOp::Rem, -7, 2)]);
        assert!(!text.contains(" floordiv ") && !text.contains(" rem "), "{text}");
        assert!(
            text.contains("constant -3") && text.contains("constant -1"),
            "{text}"
        );
    }
}
