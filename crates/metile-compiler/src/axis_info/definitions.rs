//! Where each value of a kernel is defined, for the analyses that look back
//! from a use to what computed it (`assumed.rs`, `guarded.rs`).

use metile_ir::{Block, Function, Literal, Op, OpKind, ValueId};

/// The block number of the kernel's top-level block (blocks are numbered in
/// walk order; parameters belong to it).
pub(super) const TOP_LEVEL: usize = 0;

/// Each value's defining op (none for parameters and block arguments) and
/// block, and the conditions of the `assume_true`s with the block each sits in.
pub(super) struct Definitions<'f> {
    defs: Vec<Option<(Option<&'f Op>, usize)>>,
    pub(super) conditions: Vec<(ValueId, usize)>,
    blocks: usize,
}

impl<'f> Definitions<'f> {
    pub(super) fn of(f: &'f Function) -> Definitions<'f> {
        let mut found = Definitions {
            defs: vec![None; f.values.len()],
            conditions: Vec::new(),
            blocks: 1,
        };
        for p in &f.params {
            found.define(p.value, None, TOP_LEVEL);
        }
        found.collect(&f.body, TOP_LEVEL);
        found
    }

    /// The op that defines `v`, if an op does.
    pub(super) fn op(&self, v: ValueId) -> Option<&'f Op> {
        self.defs.get(v.index()).copied().flatten().and_then(|(op, _)| op)
    }

    /// The block that defines `v`.
    pub(super) fn block(&self, v: ValueId) -> Option<usize> {
        self.defs
            .get(v.index())
            .copied()
            .flatten()
            .map(|(_, block)| block)
    }

    /// The integer constant `v` is, seen through broadcasts.
    pub(super) fn constant(&self, mut v: ValueId) -> Option<i64> {
        loop {
            match self.op(v).map(|op| (&op.kind, op.operands.first())) {
                Some((OpKind::Constant(Literal::Int(c)), _)) => return Some(*c),
                Some((OpKind::Broadcast | OpKind::ExpandDims { .. }, Some(&x))) => v = x,
                _ => return None,
            }
        }
    }

    fn define(&mut self, v: ValueId, op: Option<&'f Op>, block: usize) {
        if let Some(slot) = self.defs.get_mut(v.index()) {
            *slot = Some((op, block));
        }
    }

    fn collect(&mut self, b: &'f Block, block: usize) {
        for &arg in &b.args {
            self.define(arg, None, block);
        }
        for op in &b.ops {
            if matches!(op.kind, OpKind::AssumeTrue) {
                self.conditions.extend(op.operands.first().map(|&c| (c, block)));
            }
            for &r in &op.results {
                self.define(r, Some(op), block);
            }
            for region in &op.regions {
                let inner = self.blocks;
                self.blocks += 1;
                self.collect(region, inner);
            }
        }
    }
}
