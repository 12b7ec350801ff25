//! Which pointer parameters a kernel may store to.
//!
//! The autotuner runs candidate configurations on copies of the buffers a
//! kernel writes, so that tuning never leaves partial results in the caller's
//! outputs; this analysis tells it which ones. Every pointer value is traced
//! back to the parameters it may be derived from (through `add_ptr`,
//! `broadcast`, `select`, loop-carried values and `if` results) and every store
//! marks the parameters behind its address. The answer over-approximates: a
//! parameter listed may not be written on every launch, but one left out is
//! never written.

use crate::dtype::Elem;
use crate::tile_ir::{Block, Function, OpKind, ValueId};
use std::collections::{BTreeSet, HashMap};

/// The parameters (indices into [`Function::params`]) each pointer value may point into.
struct Provenance<'f> {
    func: &'f Function,
    sources: HashMap<ValueId, BTreeSet<usize>>,
    written: BTreeSet<usize>,
    changed: bool,
}

impl Provenance<'_> {
    fn of(&self, v: ValueId) -> BTreeSet<usize> {
        self.sources.get(&v).cloned().unwrap_or_default()
    }

    fn is_pointer(&self, v: ValueId) -> bool {
        matches!(self.func.ty(v).elem, Elem::Ptr(..))
    }

    fn add(&mut self, v: ValueId, params: &BTreeSet<usize>) {
        if params.is_empty() || !self.is_pointer(v) {
            return;
        }
        let entry = self.sources.entry(v).or_default();
        let before = entry.len();
        entry.extend(params.iter().copied());
        self.changed |= entry.len() != before;
    }

    fn yielded(block: &Block) -> &[ValueId] {
        match block.ops.last() {
            Some(op) if op.kind == OpKind::Yield => &op.operands,
            _ => &[],
        }
    }

    fn visit(&mut self, block: &Block) {
        for op in &block.ops {
            match op.kind {
                OpKind::Store { .. } | OpKind::TileStore { .. } => {
                    if let Some(&ptr) = op.operands.first() {
                        let params = self.of(ptr);
                        self.written.extend(params);
                    }
                }
                OpKind::For => {
                    let body = &op.regions[0];
                    let yields = Self::yielded(body).to_vec();
                    for (k, &result) in op.results.iter().enumerate() {
                        let mut carried = op.operands.get(3 + k).map(|&v| self.of(v)).unwrap_or_default();
                        if let Some(&y) = yields.get(k) {
                            carried.extend(self.of(y));
                        }
                        if let Some(&arg) = body.args.get(1 + k) {
                            self.add(arg, &carried);
                        }
                        self.add(result, &carried);
                    }
                }
                OpKind::If => {
                    for region in &op.regions {
                        let yields = Self::yielded(region).to_vec();
                        for (&result, &y) in op.results.iter().zip(&yields) {
                            let params = self.of(y);
                            self.add(result, &params);
                        }
                    }
                }
                _ => {
                    let mut params = BTreeSet::new();
                    for &v in &op.operands {
                        if self.is_pointer(v) {
                            params.extend(self.of(v));
                        }
                    }
                    for &r in &op.results {
                        self.add(r, &params);
                    }
                }
            }
            for region in &op.regions {
                self.visit(region);
            }
        }
    }
}

impl Function {
    /// Indices into [`Function::params`] of the pointer parameters some store may
    /// write through, in ascending order.
    pub fn written_params(&self) -> Vec<usize> {
        let mut p = Provenance {
            func: self,
            sources: HashMap::new(),
            written: BTreeSet::new(),
            changed: false,
        };
        for (i, param) in self.params.iter().enumerate() {
            p.sources.insert(param.value, BTreeSet::from([i]));
        }
        // Loop-carried pointers flow back to the top of their loop: repeat until
        // nothing new is learnt (each round only grows finite sets).
        loop {
            p.changed = false;
            p.visit(&self.body);
            if !p.changed {
                break;
            }
        }
        // Stores seen before a later round widened their address are caught by
        // one last pass over the settled provenance.
        p.visit(&self.body);
        p.written.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::builder::{Builder, Operand};
    use crate::dtype::DType;
    use crate::tile_ir::{Function, ParamKind};

    fn params(b: &mut Builder, names: &[&str]) -> Vec<crate::tile_ir::ValueId> {
        names
            .iter()
            .map(|n| b.add_param(n, ParamKind::Pointer(DType::F32)))
            .collect()
    }

    fn build(body: impl FnOnce(&mut Builder)) -> Function {
        let mut b = Builder::new("k");
        body(&mut b);
        b.finish().unwrap()
    }

    #[test]
    fn a_store_marks_the_parameter_behind_its_address() {
        let f = build(|b| {
            let p = params(b, &["x", "y", "out"]);
            let offs = b.arange(0, 16).unwrap();
            let px = b.binary(crate::BinaryOp::Add, Operand::Value(p[0]), Operand::Value(offs));
            let px = px.unwrap();
            let x = b.load(Operand::Value(px), None, None).unwrap();
            let po = b.binary(crate::BinaryOp::Add, Operand::Value(p[2]), Operand::Value(offs));
            b.store(Operand::Value(po.unwrap()), Operand::Value(x), None)
                .unwrap();
        });
        assert_eq!(f.written_params(), vec![2]);
    }

    #[test]
    fn a_pointer_carried_around_a_loop_keeps_its_parameter() {
        let f = build(|b| {
            let p = params(b, &["src", "dst"]);
            let offs = b.arange(0, 8).unwrap();
            let start = b.binary(crate::BinaryOp::Add, Operand::Value(p[1]), Operand::Value(offs));
            let start = start.unwrap();
            let bounds = (Operand::Int(0), Operand::Int(4), Operand::Int(1));
            b.build_for(bounds, &[start], |b, _iv, carried| {
                let v = b.load(Operand::Value(p[0]), None, None)?;
                b.store(Operand::Value(carried[0]), Operand::Value(v), None)?;
                Ok(vec![b.binary(
                    crate::BinaryOp::Add,
                    Operand::Value(carried[0]),
                    Operand::Int(8),
                )?])
            })
            .unwrap();
        });
        assert_eq!(f.written_params(), vec![1]);
    }

    #[test]
    fn a_kernel_without_stores_writes_nothing() {
        let f = build(|b| {
            let p = params(b, &["x"]);
            b.load(Operand::Value(p[0]), None, None).unwrap();
        });
        assert!(f.written_params().is_empty());
    }
}
