//! Target-independent Tile IR clean-ups: constant folding of scalar arithmetic,
//! common-subexpression elimination and dead-code elimination. The verifier runs
//! after each pass, so a pass bug surfaces as an IR error, not a wrong kernel.

use metile_ir::{
    verify, BinaryOp, Block, CmpOp, DType, Function, IrError, IrResult, Literal, Op, OpKind, ValueId,
};
use std::collections::{HashMap, HashSet};

/// Runs every pass to a fixed point, verifying after each.
pub fn optimize_tile_ir(mut f: Function) -> IrResult<Function> {
    verify(&f).map_err(|e| IrError(format!("after tracing: {e}")))?;
    for _ in 0..4 {
        let mut changed = false;
        for (name, pass) in PASSES {
            changed |= pass(&mut f);
            verify(&f).map_err(|e| IrError(format!("after {name}: {e}")))?;
        }
        if !changed {
            break;
        }
    }
    Ok(f)
}

type Pass = fn(&mut Function) -> bool;
const PASSES: [(&str, Pass); 3] = [("fold", fold_constants), ("cse", cse), ("dce", dce)];

/// Rewrites operands through `map` everywhere.
fn substitute(block: &mut Block, map: &HashMap<ValueId, ValueId>) {
    for op in &mut block.ops {
        for v in &mut op.operands {
            while let Some(&n) = map.get(v) {
                *v = n;
            }
        }
        for r in &mut op.regions {
            substitute(r, map);
        }
    }
}

// ------------------------------------------------------------------ folding

fn constant_of(consts: &HashMap<ValueId, Literal>, v: ValueId) -> Option<Literal> {
    consts.get(&v).copied()
}

fn wrap_int(x: i64, d: DType) -> i64 {
    match d {
        DType::I32 => i64::from(x as i32),
        DType::U32 => i64::from(x as u32),
        _ => x,
    }
}

fn fold_binary(op: BinaryOp, a: Literal, b: Literal, d: DType) -> Option<Literal> {
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
    if !d.is_int() {
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

fn fold_block(
    block: &mut Block,
    f_values: &[metile_ir::Type],
    consts: &mut HashMap<ValueId, Literal>,
) -> bool {
    let mut changed = false;
    for op in &mut block.ops {
        for r in &mut op.regions {
            changed |= fold_block(r, f_values, consts);
        }
        if let OpKind::Constant(l) = op.kind {
            consts.insert(op.results[0], l);
            continue;
        }
        if op.results.len() != 1 || !f_values[op.results[0].index()].is_scalar() {
            continue;
        }
        let args: Option<Vec<Literal>> = op.operands.iter().map(|&v| constant_of(consts, v)).collect();
        let Some(args) = args else { continue };
        let in_dtype = op.operands.first().and_then(|&v| f_values[v.index()].dtype());
        let out_dtype = f_values[op.results[0].index()].dtype();
        let (Some(din), Some(dout)) = (in_dtype, out_dtype) else {
            continue;
        };
        let folded = match (&op.kind, args.as_slice()) {
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
            consts.insert(op.results[0], l);
            changed = true;
        }
    }
    changed
}

pub fn fold_constants(f: &mut Function) -> bool {
    let mut consts = HashMap::new();
    fold_block(&mut f.body, &f.values, &mut consts)
}

// ---------------------------------------------------------------------- CSE

/// Identity of a pure op: its kind (literals compared bit for bit), operands and result types.
fn cse_key(op: &Op, f: &Function) -> Option<String> {
    if op.kind.has_side_effects() || op.kind.reads_memory() || !op.regions.is_empty() || op.results.len() != 1
    {
        return None;
    }
    let kind = match &op.kind {
        OpKind::Constant(l) => format!("constant {:?}", l.key()),
        other => format!("{other:?}"),
    };
    Some(format!("{kind} {:?} {}", op.operands, f.ty(op.results[0])))
}

fn cse_block(
    block: &mut Block,
    f: &Function,
    scopes: &mut Vec<HashMap<String, ValueId>>,
    map: &mut HashMap<ValueId, ValueId>,
) {
    scopes.push(HashMap::new());
    let mut kept = Vec::with_capacity(block.ops.len());
    for mut op in std::mem::take(&mut block.ops) {
        for v in &mut op.operands {
            while let Some(&n) = map.get(v) {
                *v = n;
            }
        }
        for r in &mut op.regions {
            cse_block(r, f, scopes, map);
        }
        if let Some(key) = cse_key(&op, f) {
            if let Some(&existing) = scopes.iter().rev().find_map(|s| s.get(&key)) {
                map.insert(op.results[0], existing);
                continue;
            }
            if let Some(s) = scopes.last_mut() {
                s.insert(key, op.results[0]);
            }
        }
        kept.push(op);
    }
    block.ops = kept;
    scopes.pop();
}

pub fn cse(f: &mut Function) -> bool {
    let mut map = HashMap::new();
    let mut body = std::mem::take(&mut f.body);
    cse_block(&mut body, f, &mut vec![], &mut map);
    substitute(&mut body, &map);
    f.body = body;
    !map.is_empty()
}

// ---------------------------------------------------------------------- DCE

fn collect_uses(block: &Block, used: &mut HashSet<ValueId>) {
    for op in &block.ops {
        used.extend(op.operands.iter().copied());
        for r in &op.regions {
            collect_uses(r, used);
        }
    }
}

fn dce_block(block: &mut Block, used: &HashSet<ValueId>) -> bool {
    let before = block.ops.len();
    block
        .ops
        .retain(|op| op.kind.has_side_effects() || op.results.iter().any(|r| used.contains(r)));
    let mut changed = block.ops.len() != before;
    for op in &mut block.ops {
        for r in &mut op.regions {
            changed |= dce_block(r, used);
        }
    }
    changed
}

pub fn dce(f: &mut Function) -> bool {
    let mut changed = false;
    loop {
        let mut used = HashSet::new();
        collect_uses(&f.body, &mut used);
        if !dce_block(&mut f.body, &used) {
            return changed;
        }
        changed = true;
    }
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
}
