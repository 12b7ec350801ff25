//! GPU IR passes. Lowering emits straightforwardly (every register of every tile,
//! the same mask or index computed for each access); common-subexpression
//! elimination merges identical pure computations and dead-code elimination
//! drops pure ops nobody reads, so the MSL stays small and readable. The
//! verifier runs after each pass (see `compile_gpu_ir`).

use metile_ir::gpu_ir::{GpuBlock, GpuFunction, GpuOpKind, GpuValue};
use std::collections::{HashMap, HashSet};

/// Merges pure ops with the same kind and operands (loads and register reads
/// depend on state and are left alone). Scoped: an op may reuse a value from its
/// own block or an enclosing one. Returns true when something was merged.
pub fn eliminate_common_subexpressions(f: &mut GpuFunction) -> bool {
    let mut replace: HashMap<GpuValue, GpuValue> = HashMap::new();
    let mut scopes: Vec<HashMap<String, Vec<GpuValue>>> = vec![HashMap::new()];
    let values = f.values.clone();
    let types_of = |v: GpuValue| values[v.index()];
    cse_block(&mut f.body, &mut scopes, &mut replace, &types_of);
    !replace.is_empty()
}

fn cse_block(
    b: &mut GpuBlock,
    scopes: &mut Vec<HashMap<String, Vec<GpuValue>>>,
    replace: &mut HashMap<GpuValue, GpuValue>,
    types_of: &dyn Fn(GpuValue) -> metile_ir::gpu_ir::GpuType,
) {
    let mut kept = Vec::with_capacity(b.ops.len());
    for mut op in std::mem::take(&mut b.ops) {
        for v in &mut op.operands {
            if let Some(&r) = replace.get(v) {
                *v = r;
            }
        }
        let mergeable = op.kind.is_pure()
            && !matches!(op.kind, GpuOpKind::Load { .. } | GpuOpKind::RegRead { .. })
            && op.regions.is_empty();
        if mergeable {
            // Debug text of the kind is exact (literals print their full value).
            let types: Vec<_> = op.results.iter().map(|&r| types_of(r)).collect();
            let key = format!("{:?}|{:?}|{types:?}", op.kind, op.operands);
            if let Some(prev) = scopes.iter().rev().find_map(|s| s.get(&key)) {
                for (&r, &p) in op.results.iter().zip(prev) {
                    replace.insert(r, p);
                }
                continue;
            }
            if let Some(top) = scopes.last_mut() {
                top.insert(key, op.results.clone());
            }
        }
        for region in &mut op.regions {
            scopes.push(HashMap::new());
            cse_block(region, scopes, replace, types_of);
            scopes.pop();
        }
        kept.push(op);
    }
    b.ops = kept;
}

/// Removes pure ops whose results are unused, to a fixed point. Returns true
/// when something was removed.
pub fn eliminate_dead_code(f: &mut GpuFunction) -> bool {
    let mut changed_any = false;
    loop {
        let mut used = HashSet::new();
        collect_uses(&f.body, &mut used);
        if !prune(&mut f.body, &used) {
            return changed_any;
        }
        changed_any = true;
    }
}

fn collect_uses(b: &GpuBlock, used: &mut HashSet<GpuValue>) {
    for op in &b.ops {
        used.extend(op.operands.iter().copied());
        for r in &op.regions {
            collect_uses(r, used);
        }
    }
}

fn prune(b: &mut GpuBlock, used: &HashSet<GpuValue>) -> bool {
    let before = b.ops.len();
    b.ops
        .retain(|op| !(op.kind.is_pure() && op.results.iter().all(|r| !used.contains(r))));
    let mut changed = b.ops.len() != before;
    for op in &mut b.ops {
        for r in &mut op.regions {
            changed |= prune(r, used);
        }
    }
    changed
}
