//! Which pointer parameters a kernel may write through: the launch refuses a
//! read-only array (numpy's `writeable=False`, a read-only DLPack or
//! `__array_interface__` producer) for those, and only for those.
//!
//! Every pointer value is traced back to the parameters it may point into
//! (through pointer arithmetic, broadcasts, selects, loop-carried values and
//! `if` results); a store or an atomic marks all of them. Shared memory has no
//! parameter.

use metile_ir::{Block, Function, OpKind, ValueId};

/// One flag per parameter, true where the kernel stores through it.
pub fn written_params(f: &Function) -> Vec<bool> {
    let mut a = Analysis {
        roots: vec![Vec::new(); f.values.len()],
        written: vec![false; f.params.len()],
        changed: false,
        buffer_params: f.params.iter().map(|p| f.ty(p.value).is_ptr()).collect(),
    };
    for (i, p) in f.params.iter().enumerate() {
        if f.ty(p.value).is_ptr() {
            a.roots[p.value.index()].push(i);
        }
    }
    // Loop-carried pointers need the walk repeated until nothing grows; each
    // pass can only add parameters, so it ends within one pass per parameter.
    for _ in 0..=f.params.len() {
        a.changed = false;
        a.block(&f.body);
        if !a.changed {
            break;
        }
    }
    a.written
}

struct Analysis {
    /// The parameters each value may point into, sorted.
    roots: Vec<Vec<usize>>,
    written: Vec<bool>,
    changed: bool,
    /// Per parameter: whether it is a buffer.
    buffer_params: Vec<bool>,
}

impl Analysis {
    fn flow(&mut self, from: ValueId, to: ValueId) {
        if from == to || self.roots[from.index()].is_empty() {
            return;
        }
        let from = self.roots[from.index()].clone();
        let to = &mut self.roots[to.index()];
        for p in from {
            if let Err(at) = to.binary_search(&p) {
                to.insert(at, p);
                self.changed = true;
            }
        }
    }

    fn block(&mut self, block: &Block) {
        for op in &block.ops {
            match op.kind {
                OpKind::AddPtr
                | OpKind::Broadcast
                | OpKind::ExpandDims { .. }
                | OpKind::Permute { .. }
                | OpKind::Reshape
                | OpKind::Take { .. }
                | OpKind::Assume { .. } => {
                    self.flow(op.operands[0], op.results[0]);
                }
                OpKind::IntToPtr => {
                    let every_buffer: Vec<usize> = (0..self.written.len())
                        .filter(|&p| self.buffer_params[p])
                        .collect();
                    let roots = &mut self.roots[op.results[0].index()];
                    if *roots != every_buffer {
                        *roots = every_buffer;
                        self.changed = true;
                    }
                }
                OpKind::Select => {
                    self.flow(op.operands[1], op.results[0]);
                    self.flow(op.operands[2], op.results[0]);
                }
                OpKind::Store { .. } | OpKind::TileStore { .. } | OpKind::Atomic { .. } => {
                    for &p in &self.roots[op.operands[0].index()] {
                        self.written[p] = true;
                    }
                }
                OpKind::For { .. } => {
                    let body = &op.regions[0];
                    for (i, &init) in op.operands.iter().skip(3).enumerate() {
                        if let Some(&arg) = body.args.get(i + 1) {
                            self.flow(init, arg);
                        }
                    }
                    self.block(body);
                    let yields = body.ops.last().map(|y| y.operands.clone()).unwrap_or_default();
                    for (i, &r) in op.results.iter().enumerate() {
                        if let (Some(&y), Some(&arg)) = (yields.get(i), body.args.get(i + 1)) {
                            self.flow(y, arg);
                            self.flow(arg, r);
                        }
                    }
                }
                OpKind::While => {
                    // Carried pointers reach both regions' arguments and the results.
                    let (cond, body) = (&op.regions[0], &op.regions[1]);
                    for (i, &init) in op.operands.iter().enumerate() {
                        for args in [&cond.args, &body.args] {
                            if let Some(&arg) = args.get(i) {
                                self.flow(init, arg);
                            }
                        }
                    }
                    self.block(cond);
                    self.block(body);
                    let yields = body.ops.last().map(|y| y.operands.clone()).unwrap_or_default();
                    for (i, &r) in op.results.iter().enumerate() {
                        if let (Some(&y), Some(&arg), Some(&cond_arg)) =
                            (yields.get(i), body.args.get(i), cond.args.get(i))
                        {
                            self.flow(y, arg);
                            self.flow(y, cond_arg);
                            self.flow(arg, r);
                            self.flow(cond_arg, r);
                        }
                    }
                }
                OpKind::If => {
                    for region in &op.regions {
                        self.block(region);
                        let yields = region.ops.last().map(|y| y.operands.clone()).unwrap_or_default();
                        for (&y, &r) in yields.iter().zip(&op.results) {
                            self.flow(y, r);
                        }
                    }
                }
                _ => {
                    for region in &op.regions {
                        self.block(region);
                    }
                }
            }
        }
    }
}
