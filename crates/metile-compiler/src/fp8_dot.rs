//! fp8 `dot`s as the Tile IR spells them: the builder converts fp8 operands to
//! f16 (which holds every fp8 value, so the products stay exact) and the
//! `dot` multiplies f16 tiles. Where both operands are such conversions, a
//! target with an fp8 matrix instruction (sm_90's `wgmma` `k32`) multiplies
//! the fp8 tiles themselves: the plan (`layout_assign`) and the lowering
//! (`lower/wgmma.rs`) look through the conversions with these helpers, and
//! the register prefetch (`prefetch.rs`) carries the fp8 tiles, not their
//! f16 copies, from one iteration to the next.

use metile_ir::{DType, Elem, Function, Op, OpKind, Type, ValueId};

/// The fp8 value `op` converts, where `op` converts an fp8 tile to f16.
/// `values` are the function's value types.
pub fn cast_source(op: &Op, values: &[Type]) -> Option<ValueId> {
    if op.kind != OpKind::Cast {
        return None;
    }
    let ty = |v: &ValueId| values.get(v.index());
    let (src, dst) = (ty(op.operands.first()?)?, ty(op.results.first()?)?);
    let fp8 = matches!(src.elem, Elem::Scalar(d) if d.is_fp8());
    (fp8 && dst.elem == Elem::Scalar(DType::F16)).then_some(op.operands[0])
}

/// The fp8 tiles that both operands of `dot` are converted from, if both are.
pub fn fp8_operands(f: &Function, dot: &Op) -> Option<(ValueId, ValueId)> {
    let (a, b) = (*dot.operands.first()?, *dot.operands.get(1)?);
    let (mut source_a, mut source_b) = (None, None);
    f.walk(&mut |op| {
        if let Some(src) = cast_source(op, &f.values) {
            if op.results[0] == a {
                source_a = Some(src);
            }
            if op.results[0] == b {
                source_b = Some(src);
            }
        }
    });
    Some((source_a?, source_b?))
}
