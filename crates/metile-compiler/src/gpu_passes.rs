//! GPU IR passes. Lowering emits straightforwardly (every register of every tile,
//! the same mask or index computed for each access); common-subexpression
//! elimination merges identical pure computations and dead-code elimination
//! drops pure ops nobody reads, so the MSL stays small and readable. The
//! verifier runs after each pass (see `compile_gpu_ir`).

use metile_ir::gpu_ir::{Builtin, GpuBlock, GpuFunction, GpuOp, GpuOpKind, GpuType, GpuValue};
use metile_ir::{BinaryOp, CmpOp, UnaryOp};
use rustc_hash::FxHashMap;

/// The kinds CSE merges (pure, and not reading state: loads and register reads
/// are left alone), with literals as their bits so that `0.0` and `-0.0` stay
/// apart and a NaN matches itself.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum KindKey {
    Builtin(Builtin),
    Const(u8, u64),
    Unary(UnaryOp),
    Binary(BinaryOp),
    Compare(CmpOp),
    Select,
    Fma,
    Cast,
    MakeVector,
    Extract(u8),
}

/// What makes two ops interchangeable: kind, operands and result type. Every
/// mergeable op has one result and at most four operands (the verifier's arity
/// rules); others are simply not merged.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct CseKey {
    kind: KindKey,
    operands: [GpuValue; 4],
    n_operands: u8,
    result: GpuType,
}

fn cse_key(op: &GpuOp, values: &[GpuType]) -> Option<CseKey> {
    let kind = match &op.kind {
        GpuOpKind::Builtin(b) => KindKey::Builtin(*b),
        GpuOpKind::Const(l) => {
            let (tag, bits) = l.key();
            KindKey::Const(tag, bits)
        }
        GpuOpKind::Unary(u) => KindKey::Unary(*u),
        GpuOpKind::Binary(b) => KindKey::Binary(*b),
        GpuOpKind::Compare(c) => KindKey::Compare(*c),
        GpuOpKind::Select => KindKey::Select,
        GpuOpKind::Fma => KindKey::Fma,
        GpuOpKind::Cast => KindKey::Cast,
        GpuOpKind::MakeVector => KindKey::MakeVector,
        GpuOpKind::Extract { lane } => KindKey::Extract(*lane),
        _ => return None,
    };
    let ([result], true) = (op.results.as_slice(), op.regions.is_empty()) else {
        return None;
    };
    if op.operands.len() > 4 {
        return None;
    }
    let mut operands = [GpuValue(u32::MAX); 4];
    operands[..op.operands.len()].copy_from_slice(&op.operands);
    Some(CseKey {
        kind,
        operands,
        n_operands: op.operands.len() as u8,
        result: values[result.index()],
    })
}

/// Merges pure ops with the same kind and operands (loads and register reads
/// depend on state and are left alone). Scoped: an op may reuse a value from its
/// own block or an enclosing one. Returns true when something was merged.
pub fn eliminate_common_subexpressions(f: &mut GpuFunction) -> bool {
    let mut cse = Cse {
        values: &f.values,
        replace: (0..f.values.len() as u32).map(GpuValue).collect(),
        seen: FxHashMap::default(),
        inserted: vec![],
        merged: false,
    };
    cse.block(&mut f.body);
    cse.merged
}

struct Cse<'a> {
    values: &'a [GpuType],
    /// What each value is replaced by (itself when kept).
    replace: Vec<GpuValue>,
    /// The first op of each key in the open blocks, by its result.
    seen: FxHashMap<CseKey, GpuValue>,
    /// Keys in `seen` in insertion order, so a closing region can drop its own.
    inserted: Vec<CseKey>,
    merged: bool,
}

impl Cse<'_> {
    fn block(&mut self, b: &mut GpuBlock) {
        b.ops.retain_mut(|op| self.keep(op));
    }

    /// Rewrites `op`'s operands; false when it repeats an earlier op (whose
    /// result then stands for its own).
    fn keep(&mut self, op: &mut GpuOp) -> bool {
        for v in &mut op.operands {
            *v = self.replace[v.index()];
        }
        if let Some(key) = cse_key(op, self.values) {
            if let Some(&prev) = self.seen.get(&key) {
                self.replace[op.results[0].index()] = prev;
                self.merged = true;
                return false;
            }
            self.seen.insert(key, op.results[0]);
            self.inserted.push(key);
        }
        for region in &mut op.regions {
            let mark = self.inserted.len();
            self.block(region);
            for key in self.inserted.drain(mark..) {
                self.seen.remove(&key);
            }
        }
        true
    }
}

/// Removes pure ops whose results are unused. Returns true when something was
/// removed.
///
/// One backward walk reaches the fixed point: values are block-scoped SSA and
/// every use follows its definition in program order (loop-carried state goes
/// through registers), so by the time the walk reaches an op it has seen every
/// op that could read its results.
pub fn eliminate_dead_code(f: &mut GpuFunction) -> bool {
    let mut used = vec![false; f.values.len()];
    prune(&mut f.body, &mut used)
}

fn prune(b: &mut GpuBlock, used: &mut [bool]) -> bool {
    let mut changed = false;
    let mut ops = std::mem::take(&mut b.ops);
    let mut keep = vec![true; ops.len()];
    for (op, keep) in ops.iter_mut().zip(keep.iter_mut()).rev() {
        if op.kind.is_pure() && op.results.iter().all(|r| !used[r.index()]) {
            *keep = false;
            changed = true;
            continue;
        }
        for r in op.regions.iter_mut().rev() {
            changed |= prune(r, used);
        }
        for v in &op.operands {
            used[v.index()] = true;
        }
    }
    let mut keep = keep.into_iter();
    ops.retain(|_| keep.next().unwrap_or(true));
    b.ops = ops;
    changed
}
