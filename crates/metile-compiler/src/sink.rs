//! Sinking: every op that only computes a value moves down its block to just
//! before the op that first reads it, so that a value is computed where it is
//! needed rather than where the Tile IR op that made it stood.
//!
//! Lowering emits a Tile IR op for every register of its tile before the next
//! Tile IR op starts: a layer norm's output `d * rstd * w + b` becomes all the
//! loads of `w` and their conversions to f32, then all those of `b`, then the
//! arithmetic, so every f32 of `w`, `b` and `d` is live at once (206 registers
//! a thread on sm_90 at 8 warps, where ptxas does not reorder enough). Sunk,
//! each lane's loads, conversions and arithmetic come together and the live
//! set is little more than `d` (111 registers).
//!
//! What moves, and how far (never into or out of a region, never changing a
//! result):
//! - pure computations (arithmetic, casts, vector lanes, builtins, literals)
//!   move to their first reader, across anything;
//! - loads move only across ops that touch neither memory nor threadgroup
//!   synchronisation nor matrix work: not across stores, atomics, barriers,
//!   asynchronous copies and their waits, regions (which may hold any of
//!   those), or matrix instructions, so a `dot` operand loaded ahead of the
//!   multiplications stays ahead and keeps hiding its latency;
//! - register reads move as loads do, and also not across register writes.
//!
//! The ops moved before one reader come in the order that reader reads them,
//! each with what it needs just before it, as an expression is evaluated left
//! to right; the two conversions to a 16-bit float that fill neighbouring lanes
//! of one vector come together (see `narrowing_partners`). Ops nobody in the
//! block reads stay where they are.

use metile_ir::gpu_ir::{GpuBlock, GpuFunction, GpuOp, GpuOpKind, GpuType, GpuValue};
use metile_ir::DType;

/// Moves pure ops, loads and register reads of every block down to just
/// before their first reader (see the module's doc). Returns true when an op
/// moved.
pub fn sink_to_first_use(f: &mut GpuFunction) -> bool {
    let mut defined_by = vec![NONE; f.values.len()];
    sink_block(&mut f.body, &f.values, &mut defined_by)
}

/// How far an op may move.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Motion {
    /// Stays where it is.
    Fixed,
    /// Computes from its operands only: moves across anything.
    Free,
    /// Reads memory: stops at the next op that may write memory or synchronise.
    Load,
    /// Reads a register array: stops as a load does, and at register writes.
    RegisterRead,
}

fn motion(kind: &GpuOpKind) -> Motion {
    match kind {
        GpuOpKind::Builtin(_)
        | GpuOpKind::Const(_)
        | GpuOpKind::Unary(_)
        | GpuOpKind::Binary(_)
        | GpuOpKind::Compare(_)
        | GpuOpKind::Fma
        | GpuOpKind::Select
        | GpuOpKind::Cast
        | GpuOpKind::IntToPtr
        | GpuOpKind::MakeVector
        | GpuOpKind::Extract { .. }
        | GpuOpKind::AssumeUniform => Motion::Free,
        GpuOpKind::Load { .. } => Motion::Load,
        GpuOpKind::RegRead { .. } => Motion::RegisterRead,
        _ => Motion::Fixed,
    }
}

/// Whether a load may move past `kind`: ops on values and registers only.
/// Shuffles and reductions exchange registers within the simdgroup, which
/// a load's place does not change.
fn load_crosses(kind: &GpuOpKind) -> bool {
    motion(kind) != Motion::Fixed
        || matches!(
            kind,
            GpuOpKind::RegWrite { .. }
                | GpuOpKind::SimdShuffleXor
                | GpuOpKind::SimdBroadcast
                | GpuOpKind::SimdReduce(_)
        )
}

fn register_read_crosses(kind: &GpuOpKind) -> bool {
    load_crosses(kind) && !matches!(kind, GpuOpKind::RegWrite { .. })
}

/// `defined_by` is scratch, `NONE` for every value on entry and on return
/// (one allocation for all the blocks of a function).
fn sink_block(b: &mut GpuBlock, values: &[GpuType], defined_by: &mut [usize]) -> bool {
    let mut changed = false;
    for op in &mut b.ops {
        for region in &mut op.regions {
            changed |= sink_block(region, values, defined_by);
        }
    }
    // A block issuing `wgmma`s keeps its order: sunk, the attention forward's
    // loop (two chained products) ran 1-5% slower on an H100.
    if b.ops
        .iter()
        .any(|op| matches!(op.kind, GpuOpKind::Wgmma { .. } | GpuOpKind::WgmmaRegA { .. }))
    {
        return changed;
    }
    // The top-level op of this block that defines each value.
    for (i, op) in b.ops.iter().enumerate() {
        for r in &op.results {
            if let Some(slot) = defined_by.get_mut(r.index()) {
                *slot = i;
            }
        }
    }
    let order = sunk_order(&b.ops, values, defined_by);
    for op in &b.ops {
        for r in &op.results {
            if let Some(slot) = defined_by.get_mut(r.index()) {
                *slot = NONE;
            }
        }
    }
    if order.iter().enumerate().any(|(at, &i)| at != i) {
        let mut slots: Vec<Option<GpuOp>> = std::mem::take(&mut b.ops).into_iter().map(Some).collect();
        b.ops = order.into_iter().filter_map(|i| slots[i].take()).collect();
        changed = true;
    }
    changed
}

/// No op: a root of the placement forest, or the end of a scan.
const NONE: usize = usize::MAX;

/// Where a moved op stands among the others moved before the same op: the
/// position of its result among that op's operands (those of its regions'
/// ops counted in program order), as an expression is evaluated left to
/// right; ops moved to a stop rather than to a reader come last.
type Slot = u32;
const AT_STOP: Slot = Slot::MAX;

/// The placement forest: each moved op is placed just before the op it was
/// moved to (its parent); fixed and unmoved ops are roots, in program order.
/// The new order is the forest in post-order, children by slot.
struct Forest {
    parent: Vec<usize>,
    slot: Vec<Slot>,
    children: Vec<Vec<usize>>,
    /// Edges from the op up to its root (an op joins as a leaf and never moves).
    depth: Vec<u32>,
}

impl Forest {
    fn root(&self, mut i: usize) -> usize {
        while self.parent[i] != NONE {
            i = self.parent[i];
        }
        i
    }

    /// Places `i` (a root so far) just before `to`, at `slot` among `to`'s children.
    fn place(&mut self, i: usize, to: usize, slot: Slot) {
        self.parent[i] = to;
        self.slot[i] = slot;
        self.depth[i] = self.depth[to] + 1;
        self.children[to].push(i);
    }

    /// Whether `a` comes before `b` in the post-order.
    fn precedes(&self, a: usize, b: usize) -> bool {
        // Up to one depth, remembering whether `a` (`b`) had to climb.
        let (mut x, mut y) = (a, b);
        let (mut x_climbed, mut y_climbed) = (false, false);
        while self.depth[x] > self.depth[y] {
            x = self.parent[x];
            x_climbed = true;
        }
        while self.depth[y] > self.depth[x] {
            y = self.parent[y];
            y_climbed = true;
        }
        if x == y {
            // One is the other's ancestor (or `a == b`): a descendant comes first.
            return x_climbed && !y_climbed;
        }
        // Up to the children of one op (or two roots, whose slot is 0).
        while self.parent[x] != self.parent[y] {
            x = self.parent[x];
            y = self.parent[y];
        }
        (self.slot[x], x) < (self.slot[y], y)
    }

    /// The reader of `readers` that comes first in the post-order, with its slot.
    fn first(&self, readers: &[(usize, Slot)]) -> Option<(usize, Slot)> {
        let mut best: Option<(usize, Slot)> = None;
        for &(r, slot) in readers {
            if best.is_none_or(|(b, _)| self.precedes(r, b)) {
                best = Some((r, slot));
            }
        }
        best
    }

    /// The ops in post-order, roots in program order, children by slot.
    fn post_order(mut self) -> Vec<usize> {
        let n = self.parent.len();
        for c in self.children.iter_mut() {
            c.sort_by_key(|&i| (self.slot[i], i));
        }
        let mut order = Vec::with_capacity(n);
        // (op, how many of its children are placed)
        let mut stack: Vec<(usize, usize)> = vec![];
        for r in (0..n).filter(|&i| self.parent[i] == NONE) {
            stack.push((r, 0));
            while let Some(top) = stack.last_mut() {
                let (op, next) = *top;
                if let Some(&child) = self.children[op].get(next) {
                    top.1 += 1;
                    stack.push((child, 0));
                } else {
                    order.push(op);
                    stack.pop();
                }
            }
        }
        order
    }
}

/// The new order of `ops` (indices into it); `defined_by` gives the index in
/// `ops` of the op that defines each value of this block, `NONE` for others.
///
/// Walking backwards, the ops after `i` are placed before `i` is, and placing
/// `i` (a new leaf) leaves their order as it was, so `i`'s first reader is the
/// first of its readers in the post-order of the forest so far.
fn sunk_order(ops: &[GpuOp], values: &[GpuType], defined_by: &[usize]) -> Vec<usize> {
    let n = ops.len();
    // The readers of each op's results (ops of this block that read them
    // themselves or inside their regions), each with its first slot.
    let mut readers: Vec<Vec<(usize, Slot)>> = vec![vec![]; n];
    for (j, op) in ops.iter().enumerate() {
        let mut slot: Slot = 0;
        visit_operands(op, &mut |v| {
            if let Some(&i) = defined_by.get(v.index()) {
                if i != NONE && i != j && readers[i].last().is_none_or(|&(r, _)| r != j) {
                    readers[i].push((j, slot));
                }
            }
            slot = slot.saturating_add(1).min(AT_STOP - 1);
        });
    }
    // The next op after each index that a load, or a register read, may not cross.
    let mut next_load_stop = vec![NONE; n + 1];
    let mut next_register_stop = vec![NONE; n + 1];
    for i in (0..n).rev() {
        let kind = &ops[i].kind;
        next_load_stop[i] = if load_crosses(kind) {
            next_load_stop[i + 1]
        } else {
            i
        };
        next_register_stop[i] = if register_read_crosses(kind) {
            next_register_stop[i + 1]
        } else {
            i
        };
    }
    let partner = narrowing_partners(ops, defined_by, values);
    let mut forest = Forest {
        parent: vec![NONE; n],
        slot: vec![0; n],
        children: vec![vec![]; n],
        depth: vec![0; n],
    };
    for i in (0..n).rev() {
        let stop = match motion(&ops[i].kind) {
            Motion::Fixed => continue,
            Motion::Free => NONE,
            Motion::Load => next_load_stop[i + 1],
            Motion::RegisterRead => next_register_stop[i + 1],
        };
        let Some((first, slot)) = forest.first(&readers[i]) else {
            continue;
        };
        // The partner, placed already and before this op's first reader: this
        // op goes just before it, after what the partner reads.
        let q = partner[i];
        if q != NONE && q > i && (q == first || forest.precedes(q, first)) {
            forest.place(i, q, AT_STOP);
            continue;
        }
        // A stop is a fixed op, hence a root: the first reader comes before it
        // exactly when that reader is in a tree whose root is not after it.
        let (to, slot) = if stop != NONE && forest.root(first) > stop {
            (stop, AT_STOP)
        } else {
            (first, slot)
        };
        forest.place(i, to, slot);
    }
    forest.post_order()
}

/// For each op of `ops` that narrows an f32 to a 16-bit float for one lane of a
/// lane pair (`2k`, `2k + 1`) of a vector whose other lane is narrowed by
/// another op of `ops`, that other op.
///
/// Such pairs are placed next to each other, after both f32 values: ptxas
/// then converts the two with one instruction into one register
/// (`F2FP.PACK_AB`), and does not when other work stands between them (a bf16
/// softmax row of 16384 at 8 warps on sm_90: 127 registers against 85).
fn narrowing_partners(ops: &[GpuOp], defined_by: &[usize], values: &[GpuType]) -> Vec<usize> {
    let narrowing = |v: GpuValue| -> Option<usize> {
        let i = *defined_by.get(v.index())?;
        let op = ops.get(i)?;
        let narrows = matches!(op.kind, GpuOpKind::Cast)
            && values.get(op.operands.first()?.index()) == Some(&GpuType::Scalar(DType::F32))
            && matches!(
                values.get(v.index()),
                Some(GpuType::Scalar(DType::F16 | DType::BF16))
            );
        narrows.then_some(i)
    };
    let mut partner = vec![NONE; ops.len()];
    let mut pair = |op: &GpuOp| {
        if matches!(op.kind, GpuOpKind::MakeVector) {
            for lanes in op.operands.chunks_exact(2) {
                if let (Some(a), Some(b)) = (narrowing(lanes[0]), narrowing(lanes[1])) {
                    if a != b && partner[a] == NONE && partner[b] == NONE {
                        partner[a] = b;
                        partner[b] = a;
                    }
                }
            }
        }
    };
    for op in ops {
        visit_ops(op, &mut pair);
    }
    partner
}

/// Calls `visit` with `op` and every op in its regions, in program order.
fn visit_ops(op: &GpuOp, visit: &mut impl FnMut(&GpuOp)) {
    visit(op);
    for region in &op.regions {
        for inner in &region.ops {
            visit_ops(inner, visit);
        }
    }
}

/// Calls `read` with every operand of `op` and of the ops in its regions, in
/// program order.
fn visit_operands(op: &GpuOp, read: &mut impl FnMut(GpuValue)) {
    for &v in &op.operands {
        read(v);
    }
    for region in &op.regions {
        for inner in &region.ops {
            visit_operands(inner, read);
        }
    }
}
