//! The GPU IR verifier: SSA scoping, every op's typing rule, register bounds,
//! region shapes, ops and parameters of the target's vendor only
//! (`gpu_vendor.rs`), and the uniformity rule for cooperative ops: a barrier must be
//! reached by every thread of the threadgroup, so it may only sit under control
//! flow that is uniform over the threadgroup; simdgroup shuffles and reductions
//! need control flow that is at least uniform over their simdgroup, and a
//! `simdgroup_load` an address that is too (one matrix per simdgroup).
//!
//! Uniformity is a small lattice (uniform < simdgroup-uniform < varying) computed
//! from the builtins (thread index and lane vary, the simdgroup index is uniform
//! within a simdgroup), through operands, and through register arrays (a register
//! is as varying as any value written to it or any control flow it is written
//! under; that part is a fixed point, since loops write registers read earlier).
//! Loads are as uniform as their address: the verifier cannot see races, and the
//! lowering only reads memory that is stable between barriers.

use crate::dtype::DType;
use crate::error::{IrError, IrResult};
use crate::gpu_ir::*;
use crate::tile_ir::AtomicOp;

/// How much a value or a control-flow path may differ between threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Uniformity {
    Uniform,
    Simdgroup,
    Varying,
}

/// Verifies `f` as GPU IR for a GPU of `vendor`: an op or parameter only
/// another vendor's GPUs have is refused, naming it and both vendors.
pub fn verify_gpu(f: &GpuFunction, vendor: Vendor) -> IrResult<()> {
    let mut v = GpuVerifier {
        f,
        vendor,
        defined: vec![false; f.values.len()],
        scope_values: vec![],
        value_u: vec![Uniformity::Uniform; f.values.len()],
        reg_u: vec![Uniformity::Uniform; f.regs.len()],
        reg_raised: false,
        cooperative_error: None,
        ins: vec![],
        outs: vec![],
    };
    for p in &f.params {
        v.define(p.value)?;
        if let Some(only) = p.kind.vendor().filter(|&only| only != vendor) {
            return Err(IrError(format!(
                "invalid GPU IR: parameter {} is for {only} GPUs only, and this function is for an {vendor} GPU",
                p.name
            )));
        }
        let expected = match p.kind {
            GpuParamKind::Buffer(d) => GpuType::Ptr(d, MemSpace::Device),
            GpuParamKind::Scalar(d) => GpuType::Scalar(d),
            GpuParamKind::TensorMap(spec) => GpuType::Ptr(spec.dtype, MemSpace::TensorMap),
            GpuParamKind::TensorMapReady(_) | GpuParamKind::MinusOne => GpuType::Scalar(DType::I32),
        };
        if f.ty(p.value) != expected {
            return Err(IrError(format!(
                "invalid GPU IR: parameter {} has type {}",
                p.name,
                f.ty(p.value)
            )));
        }
    }
    for (i, a) in f.threadgroup.iter().enumerate() {
        v.define(a.value)?;
        if f.ty(a.value) != GpuType::Ptr(a.dtype, MemSpace::Threadgroup) || a.len == 0 {
            return Err(IrError(format!(
                "invalid GPU IR: threadgroup allocation {} is malformed",
                a.value
            )));
        }
        if let TgPurpose::Alias(of) = a.purpose {
            let fits = f.threadgroup[..i].iter().any(|o| {
                o.value == of && !matches!(o.purpose, TgPurpose::Alias(_)) && o.bytes() >= a.bytes()
            });
            if !fits {
                return Err(IrError(format!(
                    "invalid GPU IR: threadgroup allocation {} reuses {of}, which is no earlier allocation it fits in",
                    a.value
                )));
            }
        }
    }
    for r in &f.regs {
        if r.len == 0 {
            return Err(IrError("invalid GPU IR: an empty register array".into()));
        }
    }
    if f.threads_per_group == 0 {
        return Err(IrError("invalid GPU IR: zero threads per threadgroup".into()));
    }
    // One walk checks structure, scoping and types while it propagates
    // uniformity. Register uniformity is then taken to a fixed point by cheap
    // walks that only propagate (the structure is known good by then). Registers
    // only ever become less uniform, so a walk that raised no register saw the
    // final uniformity everywhere: the cooperative-op rule it checked holds for
    // the fixed point, and its first violation (in program order) is the error.
    v.block(&f.body, Uniformity::Uniform)?;
    let mut walks = 0;
    while v.reg_raised && walks <= 2 * f.regs.len() + 1 {
        v.reg_raised = false;
        v.cooperative_error = None;
        v.propagate(&f.body, Uniformity::Uniform);
        walks += 1;
    }
    match v.cooperative_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

struct GpuVerifier<'f> {
    f: &'f GpuFunction,
    /// The vendor of the GPU the function is for.
    vendor: Vendor,
    /// Whether each value is in scope, indexed by value.
    defined: Vec<bool>,
    /// Values defined inside the open regions, innermost last; a region
    /// truncates it back to its mark when it closes.
    scope_values: Vec<GpuValue>,
    value_u: Vec<Uniformity>,
    reg_u: Vec<Uniformity>,
    /// Whether the current walk made some register less uniform.
    reg_raised: bool,
    /// The first cooperative-op violation of the current walk.
    cooperative_error: Option<IrError>,
    /// Scratch for the operand and result types of the op being checked.
    ins: Vec<GpuType>,
    outs: Vec<GpuType>,
}

impl<'f> GpuVerifier<'f> {
    fn ty(&self, v: GpuValue) -> GpuType {
        self.f.values[v.index()]
    }

    fn define(&mut self, v: GpuValue) -> IrResult<()> {
        let Some(slot) = self.defined.get_mut(v.index()) else {
            return Err(IrError(format!("invalid GPU IR: {v} has no type")));
        };
        if std::mem::replace(slot, true) {
            return Err(IrError(format!("invalid GPU IR: {v} is defined twice")));
        }
        self.scope_values.push(v);
        Ok(())
    }

    fn err(&self, op: &GpuOp, msg: &str) -> IrError {
        IrError(format!(
            "invalid GPU IR at {} ({}): {msg}",
            op.loc,
            op.kind.name()
        ))
    }

    fn block(&mut self, b: &GpuBlock, control: Uniformity) -> IrResult<()> {
        for (i, op) in b.ops.iter().enumerate() {
            if matches!(op.kind, GpuOpKind::Condition) && i + 1 != b.ops.len() {
                return Err(self.err(op, "a condition ends region 0 of a while"));
            }
            if let Some(last) = op
                .regions
                .iter()
                .skip(usize::from(matches!(op.kind, GpuOpKind::While)))
                .find_map(|r| r.ops.last())
            {
                if matches!(last.kind, GpuOpKind::Condition) {
                    return Err(self.err(last, "a condition ends region 0 of a while, and no other region"));
                }
            }
            self.op(op, control)?;
        }
        Ok(())
    }

    fn region(&mut self, r: &GpuBlock, control: Uniformity) -> IrResult<()> {
        let mark = self.scope_values.len();
        let result = self.region_body(r, control);
        for v in self.scope_values.drain(mark..) {
            self.defined[v.index()] = false;
        }
        result
    }

    fn region_body(&mut self, r: &GpuBlock, control: Uniformity) -> IrResult<()> {
        for &a in &r.args {
            self.define(a)?;
            self.value_u[a.index()] = control;
        }
        self.block(r, control)
    }

    fn uniformity_of(&self, values: &[GpuValue]) -> Uniformity {
        values
            .iter()
            .map(|v| self.value_u[v.index()])
            .max()
            .unwrap_or(Uniformity::Uniform)
    }

    /// Records a violation of the cooperative-op rule (the first of a walk wins).
    fn check_cooperative(&mut self, op: &GpuOp, control: Uniformity) {
        if self.cooperative_error.is_some() {
            return;
        }
        if matches!(op.kind, GpuOpKind::Barrier | GpuOpKind::DeviceBarrier) && control != Uniformity::Uniform
        {
            self.cooperative_error = Some(self.err(
                op,
                "a barrier under control flow that differs between threads of the threadgroup",
            ));
        } else if op.kind.is_simd_collective() && control == Uniformity::Varying {
            self.cooperative_error = Some(self.err(
                op,
                "a simdgroup operation under control flow that differs between lanes",
            ));
        } else if matches!(op.kind, GpuOpKind::SimdgroupLoad { .. })
            && self.uniformity_of(&op.operands) == Uniformity::Varying
        {
            self.cooperative_error = Some(self.err(
                op,
                "a simdgroup_load whose address or row length differs between lanes of the simdgroup",
            ));
        }
    }

    /// The uniformity of `op`'s results; raises the register it writes.
    fn result_uniformity(&mut self, op: &GpuOp, operand_u: Uniformity, control: Uniformity) -> Uniformity {
        match &op.kind {
            GpuOpKind::Builtin(Builtin::ThreadIndex | Builtin::SimdLane) => Uniformity::Varying,
            GpuOpKind::Builtin(Builtin::SimdgroupIndex) => Uniformity::Simdgroup,
            GpuOpKind::RegRead { reg, .. } => self.reg_u[reg.0 as usize],
            GpuOpKind::RegWrite { reg, .. } => {
                let slot = &mut self.reg_u[reg.0 as usize];
                let raised = (*slot).max(operand_u).max(control);
                if raised != *slot {
                    *slot = raised;
                    self.reg_raised = true;
                }
                Uniformity::Uniform
            }
            GpuOpKind::SimdBroadcast | GpuOpKind::SimdReduce(_) => operand_u.min(Uniformity::Simdgroup),
            GpuOpKind::AssumeUniform => Uniformity::Uniform,
            GpuOpKind::SimdShuffleXor if operand_u != Uniformity::Uniform => Uniformity::Varying,
            // Each lane gets its own part of the product.
            GpuOpKind::Mma(_) | GpuOpKind::LdMatrix { .. } | GpuOpKind::SimdgroupLoad { .. } => {
                Uniformity::Varying
            }
            // Each arrival sees its own count.
            GpuOpKind::AtomicAdd | GpuOpKind::Atomic { .. } => Uniformity::Varying,
            _ => operand_u,
        }
    }

    fn op(&mut self, op: &GpuOp, control: Uniformity) -> IrResult<()> {
        if let Some(only) = op.kind.vendor().filter(|&only| only != self.vendor) {
            let what = match op.kind {
                GpuOpKind::Mma(kind) => format!("the matrix atom {}", kind.name()),
                _ => "the op".to_string(),
            };
            return Err(self.err(
                op,
                &format!(
                    "{what} is {only} only, and this function is for an {} GPU",
                    self.vendor
                ),
            ));
        }
        for &v in &op.operands {
            if !self.defined.get(v.index()).copied().unwrap_or(false) {
                return Err(self.err(op, &format!("uses {v} outside the scope that defines it")));
            }
        }
        let mut ins = std::mem::take(&mut self.ins);
        let mut outs = std::mem::take(&mut self.outs);
        ins.clear();
        ins.extend(op.operands.iter().map(|&v| self.ty(v)));
        outs.clear();
        outs.extend(op.results.iter().map(|&v| self.ty(v)));
        let checked = self.check_types(op, &ins, &outs);
        self.ins = ins;
        self.outs = outs;
        checked?;
        self.check_cooperative(op, control);
        let operand_u = self.uniformity_of(&op.operands);
        match &op.kind {
            GpuOpKind::For => {
                let [body] = op.regions.as_slice() else {
                    return Err(self.err(op, "needs one region"));
                };
                if body.args.len() != 1 || self.ty(body.args[0]) != GpuType::Scalar(DType::I32) {
                    return Err(self.err(op, "the body takes one i32 induction variable"));
                }
                self.region(body, control.max(operand_u))?;
            }
            GpuOpKind::If => {
                let [then_b, else_b] = op.regions.as_slice() else {
                    return Err(self.err(op, "needs two regions"));
                };
                if !then_b.args.is_empty() || !else_b.args.is_empty() {
                    return Err(self.err(op, "if regions take no arguments"));
                }
                self.region(then_b, control.max(operand_u))?;
                self.region(else_b, control.max(operand_u))?;
            }
            GpuOpKind::While => {
                let [cond, body] = op.regions.as_slice() else {
                    return Err(self.err(op, "needs two regions"));
                };
                if !cond.args.is_empty() || !body.args.is_empty() {
                    return Err(self.err(op, "while regions take no arguments"));
                }
                let Some(test) = cond.ops.last().filter(|o| matches!(o.kind, GpuOpKind::Condition)) else {
                    return Err(self.err(op, "region 0 must end in a condition"));
                };
                // The condition's value decides whether every later iteration
                // (both regions) runs: it must be computed before region 0 closes.
                let mark = self.scope_values.len();
                let checked = self.region_body(cond, control);
                let inner = control.max(self.uniformity_of(&test.operands));
                for v in self.scope_values.drain(mark..) {
                    self.defined[v.index()] = false;
                }
                checked?;
                self.region(body, inner)?;
            }
            _ if !op.regions.is_empty() => return Err(self.err(op, "takes no regions")),
            _ => {}
        }
        let result_u = self.result_uniformity(op, operand_u, control);
        for &r in &op.results {
            self.define(r)?;
            self.value_u[r.index()] = result_u;
        }
        Ok(())
    }

    /// A walk over IR already checked by [`GpuVerifier::block`]: uniformity and
    /// the cooperative-op rule only.
    fn propagate(&mut self, b: &GpuBlock, control: Uniformity) {
        for op in &b.ops {
            self.check_cooperative(op, control);
            let operand_u = self.uniformity_of(&op.operands);
            let inner = control.max(operand_u);
            for r in &op.regions {
                for &a in &r.args {
                    self.value_u[a.index()] = inner;
                }
                self.propagate(r, inner);
            }
            let result_u = self.result_uniformity(op, operand_u, control);
            for &r in &op.results {
                self.value_u[r.index()] = result_u;
            }
        }
    }

    fn check_types(&self, op: &GpuOp, ins: &[GpuType], outs: &[GpuType]) -> IrResult<()> {
        let fail = |what: &str| Err(self.err(op, what));
        let arity = |n_in: usize, n_out: usize| -> IrResult<()> {
            if ins.len() != n_in || outs.len() != n_out {
                return Err(self.err(op, &format!("expects {n_in} operands and {n_out} results")));
            }
            Ok(())
        };
        let i32s = GpuType::Scalar(DType::I32);
        let bools = GpuType::Scalar(DType::Bool);
        let int_scalar = |t: GpuType| matches!(t, GpuType::Scalar(d) if d.is_int());
        match &op.kind {
            GpuOpKind::Builtin(_) => {
                arity(0, 1)?;
                if outs[0] != i32s {
                    return fail("builtins read as i32");
                }
            }
            GpuOpKind::Const(_) => {
                arity(0, 1)?;
                if !outs[0].is_scalar() {
                    return fail("constants are scalars");
                }
            }
            GpuOpKind::Unary(_) => {
                arity(1, 1)?;
                if !ins[0].is_scalar() || ins[0] != outs[0] {
                    return fail("(x) -> x on scalars");
                }
            }
            GpuOpKind::Binary(_) => {
                arity(2, 1)?;
                if !ins[0].is_scalar() || ins[0] != ins[1] || ins[0] != outs[0] {
                    return fail("(a, a) -> a on scalars");
                }
            }
            GpuOpKind::Compare(_) => {
                arity(2, 1)?;
                if !ins[0].is_scalar() || ins[0] != ins[1] || outs[0] != bools {
                    return fail("(a, a) -> bool on scalars");
                }
            }
            GpuOpKind::Fma => {
                arity(3, 1)?;
                let float = matches!(outs[0], GpuType::Scalar(d) if d.is_float());
                if !float || ins.iter().any(|&t| t != outs[0]) {
                    return fail("(a, a, a) -> a on float scalars");
                }
            }
            GpuOpKind::Select => {
                arity(3, 1)?;
                if ins[0] != bools || ins[1] != ins[2] || ins[1] != outs[0] || !ins[1].is_scalar() {
                    return fail("(bool, a, a) -> a on scalars");
                }
            }
            GpuOpKind::Cast => {
                arity(1, 1)?;
                if !ins[0].is_scalar() || !outs[0].is_scalar() {
                    return fail("casts convert scalars");
                }
            }
            GpuOpKind::IntToPtr => {
                arity(1, 1)?;
                let address = matches!(ins[0], GpuType::Scalar(DType::I64 | DType::U64));
                if !address || !matches!(outs[0], GpuType::Ptr(_, MemSpace::Device)) {
                    return fail("(i64 scalar) -> device pointer");
                }
            }
            GpuOpKind::MakeVector => {
                let n = ins.len();
                if !(2..=8).contains(&n) || outs.len() != 1 {
                    return fail("builds a vector of 2 to 8 scalars");
                }
                let GpuType::Scalar(d) = ins[0] else {
                    return fail("lanes must be scalars");
                };
                if ins.iter().any(|&t| t != ins[0]) || outs[0] != GpuType::Vector(d, n as u8) {
                    return fail("lanes must share the vector's element type");
                }
            }
            GpuOpKind::Extract { lane } => {
                arity(1, 1)?;
                match ins[0] {
                    GpuType::Vector(d, n) if *lane < n && outs[0] == GpuType::Scalar(d) => {}
                    _ => return fail("extracts an in-range lane of a vector"),
                }
            }
            GpuOpKind::Load {
                width,
                has_mask,
                has_other,
            } => {
                let n = 2 + usize::from(*has_mask) + usize::from(*has_other);
                arity(n, 1)?;
                let GpuType::Ptr(d, _) = ins[0] else {
                    return fail("loads through a pointer root");
                };
                self.check_width(op, d, *width)?;
                if !int_scalar(ins[1]) {
                    return fail("the index must be an integer scalar");
                }
                if outs[0] != GpuType::loaded(d, *width) {
                    return fail("the result must be the pointee in the access width");
                }
                if *has_mask && ins[2] != bools {
                    return fail("the mask must be a bool scalar");
                }
                if *has_other && ins[n - 1] != outs[0] {
                    return fail("other must have the result's type");
                }
            }
            GpuOpKind::Store { width, has_mask } => {
                arity(3 + usize::from(*has_mask), 0)?;
                let GpuType::Ptr(d, _) = ins[0] else {
                    return fail("stores through a pointer root");
                };
                self.check_width(op, d, *width)?;
                if !int_scalar(ins[1]) {
                    return fail("the index must be an integer scalar");
                }
                if ins[2] != GpuType::loaded(d, *width) {
                    return fail("the value must be the pointee in the access width");
                }
                if *has_mask && ins[3] != bools {
                    return fail("the mask must be a bool scalar");
                }
            }
            GpuOpKind::RegRead { reg, index } | GpuOpKind::RegWrite { reg, index } => {
                let Some(r) = self.f.regs.get(reg.0 as usize) else {
                    return fail("unknown register array");
                };
                if *index >= r.len {
                    return fail(&format!("index {index} is outside {reg}[{}]", r.len));
                }
                let read = matches!(op.kind, GpuOpKind::RegRead { .. });
                if read {
                    arity(0, 1)?;
                } else {
                    arity(1, 0)?;
                }
                let t = if read { outs[0] } else { ins[0] };
                if t != GpuType::Scalar(r.dtype) {
                    return fail("the value must have the register's dtype");
                }
            }
            GpuOpKind::AssumeUniform => {
                arity(1, 1)?;
                if !ins[0].is_scalar() || ins[0] != outs[0] {
                    return fail("(x) -> x on scalars");
                }
            }
            GpuOpKind::SimdShuffleXor | GpuOpKind::SimdBroadcast => {
                arity(2, 1)?;
                if !ins[0].is_scalar() || ins[0] != outs[0] || ins[1] != i32s {
                    return fail("(x, i32) -> x on scalars");
                }
            }
            GpuOpKind::SimdReduce(_) => {
                arity(1, 1)?;
                let ok = matches!(
                    ins[0],
                    GpuType::Scalar(DType::I32 | DType::U32 | DType::F16 | DType::F32)
                );
                if !ok || ins[0] != outs[0] {
                    return fail("simdgroup reductions take i32, u32, f16 or f32");
                }
            }
            GpuOpKind::Mma(
                AtomKind::NvidiaWgmmaM64K16 { .. }
                | AtomKind::NvidiaWgmmaM64K32F8 { .. }
                | AtomKind::NvidiaWgmmaM64K8Tf32 { .. },
            ) => {
                return fail("wgmma reads its operands from threadgroup memory: it is a Wgmma op");
            }
            GpuOpKind::Wgmma {
                n,
                acc,
                first,
                a: operand_a,
                b: operand_b,
                ..
            } => {
                arity(4, 0)?;
                let (GpuType::Ptr(a, MemSpace::Threadgroup), GpuType::Ptr(b, MemSpace::Threadgroup)) =
                    (ins[0], ins[2])
                else {
                    return fail("A and B are threadgroup pointers");
                };
                // 8-bit operands (any pair of fp8 formats) are read K-major only.
                let fp8 = a.is_fp8() && b.is_fp8();
                if fp8 && (operand_a.mn_major || operand_b.mn_major) {
                    return fail("fp8 wgmma operands are K-major");
                }
                if !(fp8 || a == b && matches!(a, DType::F16 | DType::BF16))
                    || !(8..=256).contains(n)
                    || n % 8 != 0
                    || !int_scalar(ins[1])
                    || !int_scalar(ins[3])
                {
                    return fail(
                        "(f16 or bf16 threadgroup ptr, int, same, int) or fp8 ones, n a multiple of 8 in 8..=256",
                    );
                }
                if !self.f32_registers(*acc, *first, u32::from(*n) / 2) {
                    return fail("the accumulators must be n/2 registers of an f32 register array");
                }
            }
            GpuOpKind::WgmmaRegA {
                n,
                b,
                acc,
                first,
                a,
                a_first,
            } => {
                arity(2, 0)?;
                let operand = match ins[0] {
                    GpuType::Ptr(d @ (DType::F32 | DType::F16 | DType::BF16), MemSpace::Threadgroup) => d,
                    _ => return fail("B is read from a threadgroup ptr of f32, f16 or bf16"),
                };
                let tf32 = operand == DType::F32;
                if !int_scalar(ins[1]) || (tf32 && b.mn_major) || !(8..=256).contains(n) || n % 8 != 0 {
                    return fail("(threadgroup ptr, int), a tf32 B K-major, n a multiple of 8 in 8..=256");
                }
                let a_values = if tf32 { 4 } else { 8 };
                let a_ok = self
                    .f
                    .regs
                    .get(a.0 as usize)
                    .is_some_and(|r| r.dtype == operand && a_first + a_values <= r.len);
                if !self.f32_registers(*acc, *first, u32::from(*n) / 2) || !a_ok {
                    return fail(
                        "the accumulators (n/2 f32) and A (4 tf32 or 8 16-bit values of B's dtype) must lie in register arrays",
                    );
                }
            }
            GpuOpKind::WgmmaWait { acc, count, held, .. } => {
                arity(0, 0)?;
                let held = held.is_none_or(|(r, first, count)| self.f32_registers(r, first, count));
                if self.f.regs.get(acc.0 as usize).is_none_or(|r| *count > r.len) || !held {
                    return fail("the accumulators and held registers must lie in register arrays");
                }
            }
            GpuOpKind::WgmmaFence | GpuOpKind::ProxyFence | GpuOpKind::WgmmaCommit => arity(0, 0)?,
            GpuOpKind::Mma(kind) => {
                let (na, nb, nc) = kind.fragment_sizes();
                arity(na + nb + nc, nc)?;
                let operand = ins[0];
                let floats = matches!(operand, GpuType::Scalar(DType::F16 | DType::BF16 | DType::F32));
                let f32s = GpuType::Scalar(DType::F32);
                if !floats
                    || ins[..na + nb].iter().any(|&t| t != operand)
                    || ins[na + nb..].iter().chain(outs.iter()).any(|&t| t != f32s)
                {
                    return fail("A and B are scalars of one float dtype, C and D f32 scalars");
                }
            }
            GpuOpKind::LdMatrix { count, .. } => {
                arity(2, usize::from(*count))?;
                let GpuType::Ptr(d, MemSpace::Threadgroup) = ins[0] else {
                    return fail("ldmatrix reads threadgroup memory");
                };
                let pair = GpuType::Vector(d, 2);
                if d.size_bytes() != 2
                    || !matches!(count, 1 | 2 | 4)
                    || !int_scalar(ins[1])
                    || outs.iter().any(|&t| t != pair)
                {
                    return fail("(threadgroup ptr of a 16-bit type, int index) -> 1, 2 or 4 pairs");
                }
            }
            GpuOpKind::SimdgroupLoad { .. } => {
                arity(3, 2)?;
                let GpuType::Ptr(d, MemSpace::Threadgroup) = ins[0] else {
                    return fail("simdgroup_load reads threadgroup memory");
                };
                let element = GpuType::Scalar(d);
                if !matches!(d, DType::F16 | DType::BF16 | DType::F32)
                    || !int_scalar(ins[1])
                    || !int_scalar(ins[2])
                    || outs.iter().any(|&t| t != element)
                {
                    return fail(
                        "(threadgroup ptr of f16, bf16 or f32, int index, int row length) -> 2 elements",
                    );
                }
            }
            GpuOpKind::AsyncCopy {
                bytes,
                has_mask,
                zero_fill,
            } => {
                arity(4 + usize::from(*has_mask) + usize::from(*zero_fill), 0)?;
                let (GpuType::Ptr(d, MemSpace::Threadgroup), GpuType::Ptr(s, MemSpace::Device)) =
                    (ins[0], ins[2])
                else {
                    return fail("copies from a device pointer to a threadgroup pointer");
                };
                let size = d.size_bytes();
                if d != s || !matches!(bytes, 4 | 8 | 16) || usize::from(*bytes) % size != 0 {
                    return fail("copies 4, 8 or 16 bytes of one element type");
                }
                if !int_scalar(ins[1]) || !int_scalar(ins[3]) {
                    return fail("the indices must be integer scalars");
                }
                if ins[4..].iter().any(|&t| t != bools) {
                    return fail("the mask and the inside flag must be bool scalars");
                }
            }
            GpuOpKind::AsyncCommit
            | GpuOpKind::AsyncWait { .. }
            | GpuOpKind::Barrier
            | GpuOpKind::DeviceBarrier => arity(0, 0)?,
            GpuOpKind::Atomic {
                op: aop, has_mask, ..
            } => {
                let values = 1 + usize::from(*aop == AtomicOp::Cas);
                arity(2 + values + usize::from(*has_mask), 1)?;
                let GpuType::Ptr(d, MemSpace::Device) = ins[0] else {
                    return fail("atomics go through a device pointer root");
                };
                let scalar = GpuType::Scalar(d);
                if !aop.accepts(d) || !int_scalar(ins[1]) || outs[0] != scalar {
                    return fail("(device ptr, int index, ...) -> the pointee, of a type the atomic takes");
                }
                if ins[2..2 + values].iter().any(|&t| t != scalar) {
                    return fail("the operands must be pointee scalars");
                }
                if *has_mask && ins[2 + values] != bools {
                    return fail("the mask must be a bool scalar");
                }
            }
            GpuOpKind::MbarrierInit { .. } | GpuOpKind::MbarrierArrive { .. } | GpuOpKind::MbarrierWait => {
                let extra = match op.kind {
                    GpuOpKind::MbarrierArrive { expect_tx } => usize::from(expect_tx),
                    GpuOpKind::MbarrierWait => 1,
                    _ => 0,
                };
                arity(2 + extra, 0)?;
                if ins[0] != GpuType::Ptr(DType::I64, MemSpace::Threadgroup)
                    || !int_scalar(ins[1])
                    || ins[2..].iter().any(|&t| t != i32s)
                {
                    return fail("(threadgroup i64 ptr, int index [, i32])");
                }
            }
            GpuOpKind::AtomicAdd => {
                arity(3, 1)?;
                if ins[0] != GpuType::Ptr(DType::I32, MemSpace::Threadgroup)
                    || !int_scalar(ins[1])
                    || ins[2] != i32s
                    || outs[0] != i32s
                {
                    return fail("(threadgroup i32 ptr, int index, i32) -> i32");
                }
            }
            GpuOpKind::TmaLoad => {
                if ins.len() == 8 {
                    arity(8, 0)?;
                    if ins[7] != i32s {
                        return fail("the depth of a stacked map's copy is an i32");
                    }
                } else {
                    arity(7, 0)?;
                }
                let (GpuType::Ptr(d, MemSpace::Threadgroup), GpuType::Ptr(s, MemSpace::TensorMap)) =
                    (ins[0], ins[2])
                else {
                    return fail("copies from a tensor map to a threadgroup pointer");
                };
                if d != s
                    || !int_scalar(ins[1])
                    || ins[3] != i32s
                    || ins[4] != i32s
                    || ins[5] != GpuType::Ptr(DType::I64, MemSpace::Threadgroup)
                    || !int_scalar(ins[6])
                {
                    return fail(
                        "(threadgroup ptr, int, tensor map of its type, i32 col, i32 row, mbarrier, int)",
                    );
                }
            }
            GpuOpKind::For => {
                arity(3, 0)?;
                if ins.iter().any(|&t| t != i32s) {
                    return fail("start, end and step are i32 scalars");
                }
            }
            GpuOpKind::If | GpuOpKind::Condition | GpuOpKind::Assert { .. } => {
                arity(1, 0)?;
                if ins[0] != bools {
                    return fail("the condition is a bool scalar");
                }
            }
            GpuOpKind::While => arity(0, 0)?,
            GpuOpKind::Print { pieces, hex_from } => {
                arity(pieces.len().saturating_sub(1), 0)?;
                if pieces.is_empty() || hex_from.is_some_and(|h| h > ins.len()) {
                    return fail("one more text piece than values");
                }
                if ins.iter().any(|t| !matches!(t, GpuType::Scalar(_))) {
                    return fail("prints scalars");
                }
            }
        }
        Ok(())
    }

    /// `count` registers of an f32 register array from `first` on.
    fn f32_registers(&self, reg: RegId, first: u32, count: u32) -> bool {
        self.f
            .regs
            .get(reg.0 as usize)
            .is_some_and(|r| r.dtype == DType::F32 && first + count <= r.len)
    }

    fn check_width(&self, op: &GpuOp, d: DType, width: u8) -> IrResult<()> {
        // At most 16 bytes; the target decides the lane count (Apple 4, NVIDIA 8).
        let ok = width == 1
            || ((2..=8).contains(&width) && usize::from(width) * d.size_bytes() <= 16 && d != DType::Bool);
        if ok {
            Ok(())
        } else {
            Err(self.err(op, &format!("no {width}-wide access of {d}")))
        }
    }
}
