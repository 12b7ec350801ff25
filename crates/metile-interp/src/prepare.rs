//! Turns a verified Tile IR function into a `Program`: every value gets a register
//! slot (its `ValueId`), every op a dtype-specialised instruction with its kernel
//! chosen once, and every region a nested instruction list. Anything the
//! interpreter cannot execute is refused here, before the first launch.

use crate::elementwise::{binary_fn, cast_fn, compare_fn, unary_fn, BinaryFn, UnaryFn};
use crate::error::ExecError;
use crate::functions::TernaryFn;
use crate::poison::PoisonRule;
use crate::reduce::{DotShape, ReduceShape};
use crate::taint::Taint;
use metile_ir::{
    DType, Elem, Function, Loc, Op, OpKind, ParamKind, ReduceOp, ScanOp, SwizzlePattern, Type, ValueId,
};
use std::collections::HashSet;

/// Largest shared allocation accepted (bytes): bigger requests are refused rather
/// than attempted, since each worker allocates it.
const MAX_SHARED_BYTES: usize = 1 << 30;

/// How a yielded value reaches its destination slot at the end of a region.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Transfer {
    /// The value was computed inside the region and is yielded once: swap it over.
    Move,
    /// Otherwise (defined outside, a block argument, yielded twice): copy it.
    Copy,
}

pub(crate) struct Block {
    pub args: Vec<u32>,
    pub instrs: Vec<Instr>,
    pub yields: Vec<u32>,
    pub transfers: Vec<Transfer>,
}

pub(crate) struct Instr {
    pub exec: Exec,
    pub ins: Vec<u32>,
    pub outs: Vec<u32>,
    /// Elements of the first result (or of the stored tile for stores).
    pub numel: usize,
    /// Some result is a rank-0 number, which must end up held as a splat.
    pub scalar_result: bool,
    pub loc: Loc,
}

impl Instr {
    /// What the op does, looking through a `Tracked` wrapper.
    fn exec_mut(&mut self) -> &mut Exec {
        match &mut self.exec {
            Exec::Tracked(t) => &mut t.instr.exec,
            exec => exec,
        }
    }
}

/// An op that touches values that may carry poison, with its bookkeeping (see
/// `taint.rs`). Wrapping it keeps every other op's path free of poison checks.
pub(crate) struct Tracked {
    pub rule: PoisonRule,
    pub instr: Instr,
}

pub(crate) enum Exec {
    ProgramId(usize),
    NumPrograms(usize),
    Constant(u64),
    Arange {
        start: i64,
    },
    /// A strided view of the operand: result element `(c0, c1, ..)` is operand
    /// element `src_offset + sum(ci * src_strides[i])`. `src_strides` has one
    /// entry per result dimension: the operand's row-major stride there, 0
    /// where it is broadcast; a transpose permutes them, a `take` drops its
    /// axis and starts at `src_offset`. `in_order`: the view is the operand in
    /// its own flat order (a broadcast that only adds size-1 axes).
    Broadcast {
        src_numel: usize,
        src_offset: usize,
        src_strides: Vec<usize>,
        dst_shape: Vec<usize>,
        storage: DType,
        in_order: bool,
    },
    /// Same elements in the same flat order (`expand_dims`, `reshape`).
    Reshape,
    Cast(UnaryFn),
    Unary(UnaryFn),
    Binary(BinaryFn),
    Compare(BinaryFn),
    Select {
        /// The first choice dies here: a select of every lane moves it.
        steal: bool,
        storage: DType,
    },
    /// Offsets are widened to i64 (`widen`, unless already i64) and added.
    AddPtr {
        widen: Option<UnaryFn>,
        add: BinaryFn,
    },
    /// An address read from memory becomes a pointer into the buffer argument
    /// that holds it (checked when it runs).
    IntToPtr {
        pointee: DType,
    },
    /// `view`: the result may be read in place from the buffer (see `value::Repr::View`).
    Load {
        dtype: DType,
        has_mask: bool,
        has_other: bool,
        view: bool,
    },
    Store {
        dtype: DType,
        has_mask: bool,
    },
    /// Operands `(ptrs, [cmp,] values [, mask])`.
    Atomic {
        spec: crate::atomic::AtomicSpec,
        has_mask: bool,
    },
    TileLoad {
        dtype: DType,
        rows: usize,
        cols: usize,
        index_dtypes: [DType; 3],
    },
    TileStore {
        dtype: DType,
        rows: usize,
        cols: usize,
        index_dtypes: [DType; 3],
    },
    Dot {
        operand: DType,
        acc: DType,
        shape: DotShape,
    },
    Reduce {
        op: ReduceOp,
        dtype: DType,
        shape: ReduceShape,
    },
    Swizzle {
        pattern: SwizzlePattern,
        block_size: u32,
    },
    Fma(TernaryFn),
    Scan {
        op: ScanOp,
        reverse: bool,
        dtype: DType,
        shape: ReduceShape,
    },
    Sort {
        descending: bool,
        dtype: DType,
        shape: ReduceShape,
    },
    For {
        body: Block,
        bound_dtypes: [DType; 3],
    },
    If {
        then_block: Block,
        else_block: Block,
    },
    Region {
        body: Block,
    },
    While {
        cond: Block,
        body: Block,
    },
    Print {
        prefix: String,
        hex: bool,
        items: Vec<crate::debug::PrintItem>,
        /// The printed tiles' shape (empty when every value is a scalar).
        shape: Vec<usize>,
    },
    Assert {
        message: String,
        shape: Vec<usize>,
    },
    /// `metile.assume(cond)`: fails the launch where the promise is false.
    AssumeTrue,
    Assume {
        fact: metile_ir::AssumeFact,
        value: u64,
        storage: DType,
        shape: Vec<usize>,
    },
    ThreadId,
    SimdLaneId,
    SimdShuffleXor {
        storage: DType,
        lane_dtype: DType,
    },
    SimdBroadcast {
        storage: DType,
        lane_dtype: DType,
    },
    Shared {
        index: usize,
    },
    Nop,
    Tracked(Box<Tracked>),
}

pub(crate) struct SharedInfo {
    pub elements: usize,
    pub dtype: DType,
}

pub(crate) struct Program {
    pub body: Block,
    pub num_slots: usize,
    /// Per slot: element count and storage dtype (pointers store i64 offsets).
    pub slot_numel: Vec<usize>,
    pub slot_storage: Vec<DType>,
    pub slot_is_tile: Vec<bool>,
    pub shared: Vec<SharedInfo>,
    /// Names for error messages: one per parameter, then one per shared allocation.
    pub mem_names: Vec<String>,
    /// Per parameter: the element dtype of a buffer parameter.
    pub buffer_dtypes: Vec<Option<DType>>,
}

/// A tile seen as `[outer, len, inner]` lines along `axis` (scans and sorts).
fn line_shape(shape: &[usize], axis: usize) -> ReduceShape {
    ReduceShape {
        outer: shape[..axis].iter().product(),
        len: shape.get(axis).copied().unwrap_or(1),
        inner: shape.get(axis + 1..).map_or(1, |s| s.iter().product()),
        scalar_result: false,
    }
}

/// The dtype a value is stored as.
pub(crate) fn storage_dtype(ty: &Type) -> DType {
    match ty.elem {
        Elem::Scalar(d) => d,
        Elem::Ptr(..) => DType::I64,
    }
}

struct Preparer<'f> {
    f: &'f Function,
    shared: Vec<SharedInfo>,
    mem_names: Vec<String>,
    /// How many ops (yields included) use each value.
    uses: Vec<u32>,
    taint: Taint,
}

fn count_uses(ops: &[Op], uses: &mut [u32]) {
    for op in ops {
        for v in &op.operands {
            uses[v.index()] += 1;
        }
        for r in &op.regions {
            count_uses(&r.ops, uses);
        }
    }
}

fn unsupported(op: &Op, reason: impl Into<String>) -> ExecError {
    ExecError::Unsupported {
        loc: op.loc.clone(),
        op: op.kind.name().to_string(),
        reason: reason.into(),
    }
}

pub(crate) fn prepare(f: &Function) -> Result<Program, ExecError> {
    metile_ir::verify(f).map_err(|e| ExecError::InvalidIr(e.to_string()))?;
    let mut uses = vec![0; f.values.len()];
    count_uses(&f.body.ops, &mut uses);
    let mut p = Preparer {
        f,
        shared: vec![],
        mem_names: f.params.iter().map(|p| p.name.clone()).collect(),
        uses,
        taint: Taint::of(f),
    };
    for param in &f.params {
        if let ParamKind::Pointer(d) = param.kind {
            if f.ty(param.value).elem.pointee() != Some(d) {
                return Err(ExecError::InvalidIr(format!(
                    "parameter `{}` is declared as a pointer to {d} but typed {}",
                    param.name,
                    f.ty(param.value)
                )));
            }
        }
    }
    let body = p.block(&f.body.args, &f.body.ops)?;
    let num_slots = f.values.len();
    Ok(Program {
        body,
        num_slots,
        slot_numel: f.values.iter().map(Type::numel).collect(),
        slot_storage: f.values.iter().map(storage_dtype).collect(),
        slot_is_tile: f.values.iter().map(|t| !t.is_scalar()).collect(),
        shared: p.shared,
        mem_names: p.mem_names,
        buffer_dtypes: f
            .params
            .iter()
            .map(|p| match p.kind {
                ParamKind::Pointer(d) => Some(d),
                ParamKind::Scalar(_) => None,
            })
            .collect(),
    })
}

/// Every value an op reads, its nested regions included.
fn reads_within(op: &Op, out: &mut HashSet<u32>) {
    out.extend(op.operands.iter().map(|v| v.0));
    for r in &op.regions {
        for inner in &r.ops {
            reads_within(inner, out);
        }
    }
}

fn writes_memory(op: &Op) -> bool {
    matches!(
        op.kind,
        OpKind::Store { .. } | OpKind::TileStore { .. } | OpKind::Atomic { .. } | OpKind::Shared { .. }
    ) || op.regions.iter().any(|r| r.ops.iter().any(writes_memory))
}

/// Lets a load hand out a view of the buffer when every use of its result is an
/// element-wise op or a reduction of the same block (ops that read the elements and
/// never pass the value itself on), all before the block's next memory write.
fn mark_views(ops: &[Op], instrs: &mut [Instr], yields: &[u32]) {
    let ops: Vec<&Op> = ops
        .iter()
        .filter(|op| !matches!(op.kind, OpKind::Yield))
        .collect();
    for (i, op) in ops.iter().enumerate() {
        if !matches!(op.kind, OpKind::Load { .. }) {
            continue;
        }
        let result = op.results[0].0;
        let mut ok = !yields.contains(&result);
        let mut write_seen = false;
        for later in &ops[i + 1..] {
            let mut reads = HashSet::new();
            reads_within(later, &mut reads);
            if reads.contains(&result) {
                let consumes = matches!(
                    later.kind,
                    OpKind::Unary(_)
                        | OpKind::Binary(_)
                        | OpKind::Compare(_)
                        | OpKind::Cast
                        | OpKind::Reduce { .. }
                );
                if write_seen || !consumes {
                    ok = false;
                    break;
                }
            }
            write_seen |= writes_memory(later);
        }
        if let Some(Exec::Load { view, .. }) = instrs.get_mut(i).map(Instr::exec_mut) {
            *view = ok;
        }
    }
}

fn slots(ids: &[ValueId]) -> Vec<u32> {
    ids.iter().map(|v| v.0).collect()
}

/// Every value defined by the ops of a region, nested regions included.
fn defined_within(ops: &[Op], out: &mut HashSet<u32>) {
    for op in ops {
        out.extend(op.results.iter().map(|v| v.0));
        for r in &op.regions {
            out.extend(r.args.iter().map(|v| v.0));
            defined_within(&r.ops, out);
        }
    }
}

impl<'f> Preparer<'f> {
    fn ty(&self, v: ValueId) -> &'f Type {
        self.f.ty(v)
    }

    fn dtype(&self, op: &Op, v: ValueId) -> Result<DType, ExecError> {
        self.ty(v)
            .dtype()
            .ok_or_else(|| unsupported(op, format!("{v} is a pointer where a number is expected")))
    }

    fn block(&mut self, args: &[ValueId], ops: &[Op]) -> Result<Block, ExecError> {
        let mut instrs = Vec::with_capacity(ops.len());
        let mut yields = vec![];
        for op in ops {
            if matches!(op.kind, OpKind::Yield) {
                yields = slots(&op.operands);
                continue;
            }
            instrs.push(self.instr(op)?);
        }
        mark_views(ops, &mut instrs, &yields);
        self.mark_steals(ops, &mut instrs);
        let mut inside = HashSet::new();
        defined_within(ops, &mut inside);
        let transfers = yields
            .iter()
            .map(|y| {
                let once = yields.iter().filter(|&&z| z == *y).count() == 1;
                if once && inside.contains(y) {
                    Transfer::Move
                } else {
                    Transfer::Copy
                }
            })
            .collect();
        Ok(Block {
            args: slots(args),
            instrs,
            yields,
            transfers,
        })
    }

    /// A select whose first choice is used by it alone and computed in the same
    /// block may take that value's storage instead of copying it (the carried
    /// `select(mask, new, old)` of a full block is then free).
    fn mark_steals(&self, ops: &[Op], instrs: &mut [Instr]) {
        let local: HashSet<ValueId> = ops.iter().flat_map(|op| op.results.iter().copied()).collect();
        for (op, instr) in ops
            .iter()
            .filter(|op| !matches!(op.kind, OpKind::Yield))
            .zip(instrs)
        {
            if let Exec::Select { steal, .. } = instr.exec_mut() {
                let a = op.operands[1];
                *steal = self.uses[a.index()] == 1 && local.contains(&a) && op.operands[2] != a;
            }
        }
    }

    fn instr(&mut self, op: &Op) -> Result<Instr, ExecError> {
        let result_ty = op.results.first().map(|&r| self.ty(r));
        let numel = result_ty.map(Type::numel).unwrap_or(0);
        let exec = self.exec(op)?;
        let numel = match op.kind {
            OpKind::Store { .. } => self.ty(op.operands[0]).numel(),
            _ => numel,
        };
        let scalar_result = op
            .results
            .iter()
            .any(|&r| self.ty(r).is_scalar() && !self.ty(r).is_ptr());
        let instr = Instr {
            exec,
            scalar_result,
            ins: slots(&op.operands),
            outs: slots(&op.results),
            numel,
            loc: op.loc.clone(),
        };
        Ok(match self.taint.rule(op, &self.f.values) {
            None => instr,
            Some(rule) => Instr {
                ins: instr.ins.clone(),
                outs: instr.outs.clone(),
                numel,
                scalar_result,
                loc: instr.loc.clone(),
                exec: Exec::Tracked(Box::new(Tracked { rule, instr })),
            },
        })
    }

    fn exec(&mut self, op: &Op) -> Result<Exec, ExecError> {
        let out_ty = op.results.first().map(|&r| self.ty(r));
        let in_ty = |i: usize| self.ty(op.operands[i]);
        Ok(match &op.kind {
            OpKind::ProgramId { axis } | OpKind::NumPrograms { axis } => {
                let axis = usize::from(*axis);
                if axis > 2 {
                    return Err(unsupported(
                        op,
                        format!("grid axis {axis} (the grid has axes 0, 1 and 2)"),
                    ));
                }
                if matches!(op.kind, OpKind::ProgramId { .. }) {
                    Exec::ProgramId(axis)
                } else {
                    Exec::NumPrograms(axis)
                }
            }
            OpKind::Constant(lit) => {
                let d = self.dtype(op, op.results[0])?;
                Exec::Constant(crate::elem::with_elem!(d, T => literal_bits::<T>(*lit)))
            }
            OpKind::Arange { start, .. } => Exec::Arange { start: *start },
            OpKind::Broadcast | OpKind::Permute { .. } | OpKind::Take { .. } => {
                let (src, dst) = (in_ty(0), out_ty.map(|t| t.shape.clone()).unwrap_or_default());
                if dst.len() > MAX_RANK || src.shape.len() > MAX_RANK {
                    return Err(unsupported(op, format!("tiles of rank above {MAX_RANK}")));
                }
                let strides = row_major(&src.shape);
                let (src_offset, src_strides) = match &op.kind {
                    OpKind::Permute { dims } => (0, dims.iter().map(|&d| strides[d]).collect()),
                    OpKind::Take { axis, index } => {
                        let mut kept = strides.clone();
                        kept.remove(*axis);
                        (index * strides[*axis], kept)
                    }
                    _ => (0, broadcast_strides(&src.shape, &dst)),
                };
                Exec::Broadcast {
                    src_numel: src.numel(),
                    src_offset,
                    src_strides,
                    in_order: matches!(op.kind, OpKind::Broadcast)
                        && src.numel() == dst.iter().product::<usize>(),
                    dst_shape: dst,
                    storage: storage_dtype(src),
                }
            }
            OpKind::ExpandDims { .. } | OpKind::Reshape => Exec::Reshape,
            OpKind::Cast => {
                let from = self.dtype(op, op.operands[0])?;
                let to = self.dtype(op, op.results[0])?;
                Exec::Cast(cast_fn(from, to))
            }
            OpKind::Unary(u) => {
                let d = self.dtype(op, op.operands[0])?;
                Exec::Unary(unary_fn(*u, d).ok_or_else(|| unsupported(op, format!("not defined on {d}")))?)
            }
            OpKind::Binary(b) => {
                let d = self.dtype(op, op.operands[0])?;
                Exec::Binary(binary_fn(*b, d).ok_or_else(|| unsupported(op, format!("not defined on {d}")))?)
            }
            OpKind::Compare(c) => {
                let d = self.dtype(op, op.operands[0])?;
                Exec::Compare(
                    compare_fn(*c, d).ok_or_else(|| unsupported(op, format!("not defined on {d}")))?,
                )
            }
            OpKind::Select => Exec::Select {
                storage: storage_dtype(in_ty(1)),
                steal: false,
            },
            OpKind::AddPtr => {
                let offset_dtype = self.dtype(op, op.operands[1])?;
                let add = binary_fn(metile_ir::BinaryOp::Add, DType::I64)
                    .ok_or_else(|| unsupported(op, "no i64 addition"))?;
                Exec::AddPtr {
                    widen: (offset_dtype != DType::I64).then(|| cast_fn(offset_dtype, DType::I64)),
                    add,
                }
            }
            OpKind::IntToPtr => Exec::IntToPtr {
                pointee: out_ty
                    .and_then(|t| t.elem.pointee())
                    .ok_or_else(|| unsupported(op, "the result must be a pointer"))?,
            },
            OpKind::Load { has_mask, has_other } => Exec::Load {
                dtype: self.pointee(op)?,
                has_mask: *has_mask,
                has_other: *has_other,
                // Decided per block once every op of it is known (`mark_views`).
                view: false,
            },
            OpKind::Store { has_mask } => Exec::Store {
                dtype: self.pointee(op)?,
                has_mask: *has_mask,
            },
            OpKind::Atomic {
                op: aop,
                sem,
                has_mask,
                ..
            } => {
                let dtype = self.pointee(op)?;
                if !aop.accepts(dtype) {
                    return Err(unsupported(op, format!("not defined on {dtype}")));
                }
                Exec::Atomic {
                    spec: crate::atomic::AtomicSpec {
                        op: *aop,
                        sem: *sem,
                        dtype,
                    },
                    has_mask: *has_mask,
                }
            }
            OpKind::TileLoad { rows, cols } => Exec::TileLoad {
                dtype: self.pointee(op)?,
                rows: *rows,
                cols: *cols,
                index_dtypes: self.index_dtypes(op)?,
            },
            OpKind::TileStore { rows, cols } => Exec::TileStore {
                dtype: self.pointee(op)?,
                rows: *rows,
                cols: *cols,
                index_dtypes: self.index_dtypes(op)?,
            },
            OpKind::Dot => {
                let operand = self.dtype(op, op.operands[0])?;
                let acc = self.dtype(op, op.operands[2])?;
                let computable = |d: DType| d.is_float() && d != DType::F64 && !d.is_fp8();
                if !computable(operand) || !computable(acc) {
                    return Err(unsupported(
                        op,
                        format!("dot needs f16, bf16 or f32 tiles, got {operand} and {acc}"),
                    ));
                }
                let (a, b) = (&in_ty(0).shape, &in_ty(1).shape);
                Exec::Dot {
                    operand,
                    acc,
                    shape: DotShape {
                        m: a[0],
                        k: a[1],
                        n: b[1],
                    },
                }
            }
            OpKind::Reduce { op: rop, axis } => {
                let d = self.dtype(op, op.operands[0])?;
                if d == DType::Bool && *rop == ReduceOp::Sum {
                    return Err(unsupported(op, "sum of a bool tile (cast it to i32 first)"));
                }
                if !d.is_int() && *rop == ReduceOp::Xor {
                    return Err(unsupported(op, format!("xor of a {d} tile (integers only)")));
                }
                let shape = &in_ty(0).shape;
                let reduce_shape = match axis {
                    None => ReduceShape {
                        outer: 1,
                        len: shape.iter().product(),
                        inner: 1,
                        scalar_result: true,
                    },
                    Some(a) => ReduceShape {
                        outer: shape[..*a].iter().product(),
                        len: shape[*a],
                        inner: shape[*a + 1..].iter().product(),
                        scalar_result: shape.len() == 1,
                    },
                };
                Exec::Reduce {
                    op: *rop,
                    dtype: d,
                    shape: reduce_shape,
                }
            }
            OpKind::Fma => {
                let d = self.dtype(op, op.operands[0])?;
                Exec::Fma(
                    crate::functions::fma_fn(d)
                        .ok_or_else(|| unsupported(op, format!("not defined on {d}")))?,
                )
            }
            OpKind::Scan {
                op: scan,
                axis,
                reverse,
            } => Exec::Scan {
                op: *scan,
                reverse: *reverse,
                dtype: self.dtype(op, op.operands[0])?,
                shape: line_shape(&in_ty(0).shape, *axis),
            },
            OpKind::Sort { axis, descending } => Exec::Sort {
                descending: *descending,
                dtype: self.dtype(op, op.operands[0])?,
                shape: line_shape(&in_ty(0).shape, *axis),
            },
            OpKind::Swizzle { pattern, block_size } => Exec::Swizzle {
                pattern: *pattern,
                block_size: *block_size,
            },
            OpKind::For { .. } => {
                let [body] = op.regions.as_slice() else {
                    return Err(unsupported(op, "a loop needs exactly one region"));
                };
                Exec::For {
                    body: self.block(&body.args, &body.ops)?,
                    bound_dtypes: [
                        self.dtype(op, op.operands[0])?,
                        self.dtype(op, op.operands[1])?,
                        self.dtype(op, op.operands[2])?,
                    ],
                }
            }
            OpKind::If => {
                let [then_b, else_b] = op.regions.as_slice() else {
                    return Err(unsupported(op, "an if needs exactly two regions"));
                };
                Exec::If {
                    then_block: self.block(&then_b.args, &then_b.ops)?,
                    else_block: self.block(&else_b.args, &else_b.ops)?,
                }
            }
            OpKind::SimdgroupRole { .. } => {
                let [body] = op.regions.as_slice() else {
                    return Err(unsupported(op, "simdgroup_role needs exactly one region"));
                };
                Exec::Region {
                    body: self.block(&body.args, &body.ops)?,
                }
            }
            OpKind::While => {
                let [cond, body] = op.regions.as_slice() else {
                    return Err(unsupported(op, "a while needs exactly two regions"));
                };
                Exec::While {
                    cond: self.block(&cond.args, &cond.ops)?,
                    body: self.block(&body.args, &body.ops)?,
                }
            }
            OpKind::Print { prefix, hex } => Exec::Print {
                prefix: prefix.clone(),
                hex: *hex,
                items: op
                    .operands
                    .iter()
                    .map(|&v| {
                        Ok(crate::debug::PrintItem {
                            dtype: self.dtype(op, v)?,
                            tile: !self.ty(v).is_scalar(),
                        })
                    })
                    .collect::<Result<_, ExecError>>()?,
                shape: op
                    .operands
                    .iter()
                    .map(|&v| self.ty(v).shape.clone())
                    .find(|s| !s.is_empty())
                    .unwrap_or_default(),
            },
            OpKind::Assert { message } => Exec::Assert {
                message: message.clone(),
                shape: in_ty(0).shape.clone(),
            },
            OpKind::AssumeTrue => Exec::AssumeTrue,
            OpKind::Assume { fact, value } => Exec::Assume {
                fact: *fact,
                value: *value,
                storage: storage_dtype(in_ty(0)),
                shape: in_ty(0).shape.clone(),
            },
            OpKind::Yield => Exec::Nop,
            OpKind::CarryMerge => {
                return Err(unsupported(
                    op,
                    "internal: carry_merge must be resolved by the absent-lane pass before execution",
                ))
            }
            OpKind::Barrier => Exec::Nop,
            OpKind::ThreadId => Exec::ThreadId,
            OpKind::SimdLaneId => Exec::SimdLaneId,
            OpKind::SimdShuffleXor => Exec::SimdShuffleXor {
                storage: self.dtype(op, op.operands[0])?,
                lane_dtype: self.dtype(op, op.operands[1])?,
            },
            OpKind::SimdBroadcast => Exec::SimdBroadcast {
                storage: self.dtype(op, op.operands[0])?,
                lane_dtype: self.dtype(op, op.operands[1])?,
            },
            OpKind::Shared { size } => {
                let dtype = out_ty
                    .and_then(|t| t.elem.pointee())
                    .ok_or_else(|| unsupported(op, "result is not a pointer"))?;
                if size
                    .checked_mul(dtype.size_bytes())
                    .is_none_or(|b| b > MAX_SHARED_BYTES)
                {
                    return Err(unsupported(
                        op,
                        format!("{size} elements of {dtype} is more than 1 GiB"),
                    ));
                }
                let index = self.shared.len();
                self.shared.push(SharedInfo {
                    elements: *size,
                    dtype,
                });
                self.mem_names
                    .push(format!("shared memory ({}:{})", short_file(&op.loc), op.loc.line));
                Exec::Shared { index }
            }
        })
    }

    fn pointee(&self, op: &Op) -> Result<DType, ExecError> {
        self.ty(op.operands[0])
            .elem
            .pointee()
            .ok_or_else(|| unsupported(op, "the first operand must be a pointer"))
    }

    fn index_dtypes(&self, op: &Op) -> Result<[DType; 3], ExecError> {
        Ok([
            self.dtype(op, op.operands[1])?,
            self.dtype(op, op.operands[2])?,
            self.dtype(op, op.operands[3])?,
        ])
    }
}

/// Highest tile rank a dense broadcast handles (its index counter is a fixed array).
pub(crate) const MAX_RANK: usize = 16;

/// Row-major strides of `src` laid against the dimensions of `dst` (numpy alignment
/// from the right), 0 on broadcast dimensions.
/// Row-major strides of a shape, in elements.
fn row_major(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for a in (0..shape.len().saturating_sub(1)).rev() {
        strides[a] = strides[a + 1] * shape[a + 1];
    }
    strides
}

fn broadcast_strides(src: &[usize], dst: &[usize]) -> Vec<usize> {
    let lead = dst.len().saturating_sub(src.len());
    let mut strides = vec![0; dst.len()];
    let mut stride = 1;
    for (i, &d) in src.iter().enumerate().rev() {
        if d != 1 {
            strides[lead + i] = stride;
        }
        stride *= d;
    }
    strides
}

fn short_file(loc: &Loc) -> &str {
    loc.file.rsplit('/').next().unwrap_or(&loc.file)
}

/// A constant's bits in its dtype, converted the way a C cast would.
fn literal_bits<T: crate::elem::Element>(lit: metile_ir::Literal) -> u64 {
    use metile_ir::Literal;
    let v: T = match lit {
        Literal::Bool(b) => T::cast_from_int(i64::from(b)),
        Literal::Int(i) => T::cast_from_int(i),
        // Integer targets truncate toward zero and saturate (NaN to 0), as `as` does;
        // float targets round once, straight from the f64.
        Literal::Float(x) => T::cast_from_double(x),
    };
    v.to_bits()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_literals_round_once() {
        // Just above the midpoint between two f16 values (1.0 and 1 + 2^-10), by less
        // than f32 can hold: direct rounding goes up, rounding through f32 would tie to 1.0.
        let x = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        let bits = literal_bits::<half::f16>(metile_ir::Literal::Float(x));
        assert_eq!(half::f16::from_bits(bits as u16).to_f32(), 1.0 + 2f32.powi(-10));
        assert_eq!(
            literal_bits::<i32>(metile_ir::Literal::Float(1e10)),
            i32::MAX as u32 as u64
        );
        assert_eq!(
            literal_bits::<i32>(metile_ir::Literal::Float(-2.9)),
            (-2i32) as u32 as u64
        );
    }
}
