//! Lowering Tile IR to GPU IR: one generic walk over the Tile IR, op by op.
//!
//! Every Tile IR value gets a *home* when its op is lowered:
//! * `Uniform(x)`: one GPU value every thread holds (scalars, splat tiles);
//! * `Regs { layout, elems }`: one GPU SSA value per register of the layout;
//! * `Flexible`: nothing yet; computed on demand in the layout a use asks for.
//!
//! A use asks for a value's elements in a layout ([`Lowering::elems`]). When the
//! home is in another layout, the value is converted: a register copy when every
//! thread already holds what it needs, otherwise a round trip through
//! threadgroup memory (see `convert.rs`). Conversions and flexible values are
//! emitted where the value is *defined* (the builder can append to an enclosing
//! block, before the loop or `if` being built), so they run once, outside loops
//! that merely use them, and are cached per (value, layout) while that block is open.
//! Everything that depends only on the thread index (per-layout thread offsets,
//! owner predicates) is emitted at the top level and cached for the whole kernel.
//!
//! Element-wise work is fully unrolled over a thread's registers: each Tile IR op
//! becomes one scalar GPU op per register, which the MSL emitter prints as one
//! statement each. Real loops come only from the kernel's `for` (and `dot`'s K
//! loop); values that live across loop iterations or leave an `if` go through
//! register arrays.

mod affine_index;
mod async_ring;
mod atomic;
mod b_ring;
mod block_access;
mod control;
mod convert;
mod debug;
mod dot;
mod dot_atoms;
mod elementwise;
mod index;
mod memory;
mod reduce;
mod ring_barriers;
mod scan_sort;
mod shape;
mod store_staging;
mod thread_ops;
mod tma;
mod uniform_masks;
mod unobserved_lanes;
mod wgmma;

use crate::axis_info::{self, AxisInfos};
use crate::dist_layout::DistLayout;
use crate::error::{CompileError, CompileResult};
use crate::layout_assign::{Assignment, LayoutId, Root};
use crate::policy::Switches;
use crate::prefetch::writes_nothing;
use crate::target::Target;
use metile_ir::gpu_ir::*;
use metile_ir::{Block, DType, Elem, Function, Literal, Loc, Op, OpKind, ParamKind, ValueId};
use rustc_hash::FxHashMap;

/// Most registers one tile may take per thread; beyond this the unrolled code
/// and register pressure are unreasonable, so the kernel is refused with advice.
pub const MAX_VALUES_PER_THREAD: usize = 1024;

#[derive(Clone, Debug)]
enum Home {
    Uniform(GpuValue),
    Regs {
        layout: LayoutId,
        elems: Vec<GpuValue>,
    },
    Flexible,
    /// A `dot` operand tile in threadgroup ring `ring`, its tile `tile` of
    /// the stage at offset `base` (a uniform i32; see `async_ring.rs`).
    Staged {
        ring: usize,
        tile: usize,
        base: GpuValue,
    },
}

/// Things cached per block while it is open.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum CacheKey {
    Elems(ValueId, LayoutId),
    Builtin(Builtin),
    ThreadOffset(LayoutId),
    ThreadCoord(LayoutId, usize),
    /// The simdgroup's part of a thread coordinate (`index.rs`).
    SimdgroupCoord(LayoutId, usize),
    ElementIndex(LayoutId, usize),
    LocalTid(usize),
    InRange(usize, usize),
    Owner(LayoutId, Vec<(i64, i64)>),
    ConstI32(i32),
    /// The threadgroup memory where a loop-invariant `wgmma` operand was staged
    /// once before its loop (`wgmma.rs`).
    StagedOperand(ValueId),
}

#[derive(Clone, Debug)]
enum Cached {
    One(GpuValue),
    Many(Vec<GpuValue>),
}

pub struct Lowering<'f> {
    f: &'f Function,
    a: Assignment,
    info: AxisInfos,
    /// The axis facts that hold when the kernel's guards do (scalars
    /// non-negative, selects taking their first value; tested where the
    /// facts are used), if it has guards.
    guarded: Option<axis_info::Guarded>,
    b: GpuBuilder,
    homes: Vec<Option<Home>>,
    /// Block index (0 = kernel body) where each Tile IR value is defined.
    def_depth: Vec<usize>,
    /// The op that defines each value (none for parameters and block arguments).
    def_op: Vec<Option<&'f Op>>,
    /// How many op operands name each value, to know when one is used only once.
    uses: Vec<u32>,
    caches: Vec<FxHashMap<CacheKey, Cached>>,
    /// Block index that new ops go to.
    at: usize,
    /// Scratch threadgroup memory, one allocation per dtype.
    scratch: Vec<(DType, GpuValue)>,
    /// Integer and bool constants emitted so far, for algebraic shortcuts.
    consts: FxHashMap<GpuValue, i64>,
    /// The threadgroup memory of each `shared` op.
    shared_roots: FxHashMap<ValueId, GpuValue>,
    /// The device pointer each `int_to_ptr` made (the root of the pointers derived from it).
    loaded_roots: FxHashMap<ValueId, GpuValue>,
    /// What each register read read: register, index and that register's write
    /// count at the time (see [`Lowering::reg_write`]).
    reg_reads: FxHashMap<GpuValue, (RegId, u32, u32)>,
    /// Writes emitted so far to each register array.
    reg_writes: FxHashMap<RegId, u32>,
    /// Block indices of the open `simdgroup_role` bodies.
    role_depths: Vec<usize>,
    /// Ops held back to run after the staging of the next `dot` (see
    /// [`Lowering::block`]).
    deferred: Vec<&'f Op>,
    /// The asynchronous operand rings, the Tile IR values living in them, and
    /// the loads filling them (with their stage offset) once their `if` is open.
    rings: Vec<async_ring::Ring>,
    /// Accumulators (register array, length) of `wgmma`s a loop body left
    /// running and the registers they read, waited for after the loop.
    pending_wgmma: Vec<(RegId, usize, Option<wgmma::Held>)>,
    ring_values: FxHashMap<ValueId, async_ring::RingValue>,
    ring_loads: FxHashMap<ValueId, (async_ring::RingValue, GpuValue)>,
    /// Allocations reusing a finished ring's memory: ring root, dtype, alias.
    ring_aliases: Vec<(GpuValue, DType, GpuValue)>,
    /// Tensor maps declared as parameters: spec, map and ready flag.
    tensor_maps: Vec<(TensorMapSpec, GpuValue, GpuValue)>,
    /// The `GpuParamKind::MinusOne` parameter, once declared.
    minus_one: Option<GpuValue>,
    /// The Tile IR op being lowered, for errors.
    loc: Loc,
    op_name: String,
}

/// Lowers a verified Tile IR function to GPU IR for `threads` threads per
/// threadgroup on `target`, with `switches` in force.
pub fn lower(f: &Function, threads: u32, target: &Target, switches: &Switches) -> CompileResult<GpuFunction> {
    lower_assigned(f, crate::layout_assign::assign(f, threads, target, switches)?)
}

/// Lowers a verified Tile IR function to GPU IR with the layouts `a` assigned.
pub fn lower_assigned(f: &Function, a: crate::layout_assign::Assignment) -> CompileResult<GpuFunction> {
    lower_keeping(f, a, false).map(|(gpu, _)| gpu)
}

/// A tile value's registers: which thread holds which element (for pictures of
/// a kernel's layouts, `METILE_DEBUG=layouts`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TileLayout {
    pub value: ValueId,
    pub layout: DistLayout,
}

/// [`lower_assigned`], also returning the layout of every tile value held in
/// registers when `keep_layouts` asks (in definition order).
pub fn lower_keeping(
    f: &Function,
    a: crate::layout_assign::Assignment,
    keep_layouts: bool,
) -> CompileResult<(GpuFunction, Vec<TileLayout>)> {
    let threads = a.threads;
    let info = axis_info::analyze(f);
    let guarded = axis_info::analyze_guarded(f, &info);
    let mut l = Lowering {
        f,
        a,
        info,
        guarded,
        b: GpuBuilder::new(&f.name, threads),
        homes: vec![None; f.values.len()],
        def_depth: vec![0; f.values.len()],
        def_op: vec![None; f.values.len()],
        uses: vec![0; f.values.len()],
        caches: vec![FxHashMap::default()],
        at: 0,
        scratch: vec![],
        consts: FxHashMap::default(),
        shared_roots: FxHashMap::default(),
        loaded_roots: FxHashMap::default(),
        reg_reads: FxHashMap::default(),
        reg_writes: FxHashMap::default(),
        role_depths: vec![],
        deferred: vec![],
        rings: vec![],
        pending_wgmma: vec![],
        ring_values: FxHashMap::default(),
        ring_loads: FxHashMap::default(),
        ring_aliases: vec![],
        tensor_maps: vec![],
        minus_one: None,
        loc: Loc::unknown(),
        op_name: "kernel".into(),
    };
    fn record<'f>(block: &'f Block, defs: &mut [Option<&'f Op>], uses: &mut [u32]) {
        for op in &block.ops {
            for &r in &op.results {
                defs[r.index()] = Some(op);
            }
            for &x in &op.operands {
                uses[x.index()] += 1;
            }
            for region in &op.regions {
                record(region, defs, uses);
            }
        }
    }
    record(&f.body, &mut l.def_op, &mut l.uses);
    let offset_dtype = l.a.offset_dtype();
    for (i, p) in f.params.iter().enumerate() {
        let (kind, home_is_ptr) = match p.kind {
            ParamKind::Pointer(d) => (GpuParamKind::Buffer(d), true),
            ParamKind::Scalar(d) => (GpuParamKind::Scalar(d), false),
        };
        let v = l.b.add_param(&p.name, kind, i);
        let home = if home_is_ptr {
            // A pointer's home is its offset from the root: zero for the parameter.
            let zero = l.konst(Literal::Int(0), offset_dtype);
            Home::Uniform(zero)
        } else {
            Home::Uniform(v)
        };
        l.homes[p.value.index()] = Some(home);
    }
    l.find_rings(&f.body)?;
    l.block(&f.body)?;
    let bytes = l.b.func().threadgroup_bytes();
    let max_bytes = l.a.target.max_threadgroup_bytes;
    if bytes > max_bytes {
        return Err(CompileError::new(
            "kernel",
            format!("needs {bytes} bytes of threadgroup memory; at most {max_bytes} are allowed"),
            Loc::unknown(),
        ));
    }
    let layouts = if keep_layouts {
        let mut kept = vec![];
        for (i, home) in l.homes.iter().enumerate() {
            if let Some(Home::Regs { layout, .. }) = home {
                kept.push(TileLayout {
                    value: ValueId(i as u32),
                    layout: l.a.layout(*layout).clone(),
                });
            }
        }
        kept
    } else {
        vec![]
    };
    Ok((l.b.finish(), layouts))
}

/// True when an op inside `op`'s regions reads one of `values`.
fn mentions(op: &Op, values: &[ValueId]) -> bool {
    op.regions.iter().any(|r| {
        r.ops
            .iter()
            .any(|o| o.operands.iter().any(|x| values.contains(x)) || mentions(o, values))
    })
}

impl<'f> Lowering<'f> {
    // ------------------------------------------------------------- errors

    fn err(&self, reason: impl Into<String>) -> CompileError {
        CompileError::new(self.op_name.clone(), reason, self.loc.clone())
    }

    fn internal(&self, what: impl std::fmt::Display) -> CompileError {
        self.err(format!("{}: {what}", crate::error::INTERNAL))
    }

    // ---------------------------------------------------------- emission

    fn innermost(&self) -> usize {
        self.b.depth() - 1
    }

    fn emit(
        &mut self,
        kind: GpuOpKind,
        operands: impl Into<ValueList>,
        types: Vec<GpuType>,
    ) -> Vec<GpuValue> {
        self.b.emit_at(self.at, kind, operands, types)
    }

    fn emit1(&mut self, kind: GpuOpKind, operands: impl Into<ValueList>, ty: GpuType) -> GpuValue {
        self.b.emit1_at(self.at, kind, operands, ty)
    }

    /// Runs `body` with new ops going to block `depth` (an enclosing block).
    fn at_depth<T>(&mut self, depth: usize, body: impl FnOnce(&mut Self) -> T) -> T {
        let saved = self.at;
        self.at = depth.min(self.innermost());
        let r = body(self);
        self.at = saved;
        r
    }

    fn cached(&self, key: &CacheKey, max_depth: usize) -> Option<Cached> {
        self.caches
            .iter()
            .take(max_depth + 1)
            .rev()
            .find_map(|c| c.get(key).cloned())
    }

    fn cache(&mut self, key: CacheKey, value: Cached) {
        let at = self.at.min(self.caches.len() - 1);
        self.caches[at].insert(key, value);
    }

    fn push_block(&mut self, arg_types: &[GpuType]) -> Vec<GpuValue> {
        let args = self.b.push_block(arg_types);
        self.caches.push(FxHashMap::default());
        self.at = self.innermost();
        args
    }

    fn pop_block(&mut self) -> GpuBlock {
        self.caches.pop();
        let block = self.b.pop_block();
        self.at = self.innermost();
        block
    }

    fn ty_of(&self, v: GpuValue) -> GpuType {
        self.b.ty(v)
    }

    fn dtype_of(&self, v: GpuValue) -> DType {
        self.b.ty(v).dtype()
    }

    fn konst(&mut self, lit: Literal, dtype: DType) -> GpuValue {
        let v = self.emit1(GpuOpKind::Const(lit), ValueList::new(), GpuType::Scalar(dtype));
        if !dtype.is_float() {
            let value = match lit {
                Literal::Bool(b) => Some(i64::from(b)),
                Literal::Int(i) => Some(i),
                Literal::Float(_) => None,
            };
            if let Some(value) = value {
                self.consts.insert(v, value);
            }
        }
        v
    }

    fn bool_const(&mut self, b: bool) -> GpuValue {
        self.konst(Literal::Bool(b), DType::Bool)
    }

    /// A binary op on integers or bools, with the identities `x + 0`, `x - 0`,
    /// `x | 0`, `x ^ 0`, `x * 1` and `x && true` folded (exact for these types).
    fn binary(&mut self, op: metile_ir::BinaryOp, x: GpuValue, y: GpuValue) -> GpuValue {
        use metile_ir::BinaryOp::*;
        let ty = self.ty_of(x);
        if !ty.dtype().is_float() {
            let (cx, cy) = (self.consts.get(&x).copied(), self.consts.get(&y).copied());
            let bool_and = ty.dtype() == DType::Bool && op == And;
            match (op, cx, cy) {
                (Add | Sub | Or | Xor, _, Some(0)) | (Mul, _, Some(1)) => return x,
                (Add | Or | Xor, Some(0), _) | (Mul, Some(1), _) => return y,
                (_, _, Some(1)) if bool_and => return x,
                (_, Some(1), _) if bool_and => return y,
                _ => {}
            }
        }
        self.emit1(GpuOpKind::Binary(op), [x, y], ty)
    }

    /// `acc op x`, or `x` where nothing has been accumulated yet: a sum,
    /// product or conjunction built term by term.
    fn accumulate(&mut self, op: metile_ir::BinaryOp, acc: Option<GpuValue>, x: GpuValue) -> GpuValue {
        match acc {
            None => x,
            Some(a) => self.binary(op, a, x),
        }
    }

    fn compare(&mut self, op: metile_ir::CmpOp, x: GpuValue, y: GpuValue) -> GpuValue {
        self.emit1(GpuOpKind::Compare(op), [x, y], GpuType::Scalar(DType::Bool))
    }

    fn select(&mut self, c: GpuValue, x: GpuValue, y: GpuValue) -> GpuValue {
        let ty = self.ty_of(x);
        self.emit1(GpuOpKind::Select, [c, x, y], ty)
    }

    fn cast(&mut self, v: GpuValue, dtype: DType) -> GpuValue {
        if self.dtype_of(v) == dtype {
            return v;
        }
        self.emit1(GpuOpKind::Cast, [v], GpuType::Scalar(dtype))
    }

    /// The axis facts proven, or those that hold when the guards do.
    fn facts(&self, guarded: bool) -> &AxisInfos {
        match (&self.guarded, guarded) {
            (Some(g), true) => &g.infos,
            _ => &self.info,
        }
    }

    /// Emits `if cond { then } else { otherwise }`, each branch built by its closure.
    fn if_else(
        &mut self,
        cond: GpuValue,
        then: impl FnOnce(&mut Self) -> CompileResult<()>,
        otherwise: impl FnOnce(&mut Self) -> CompileResult<()>,
    ) -> CompileResult<()> {
        self.push_block(&[]);
        then(self)?;
        let then_b = self.pop_block();
        self.push_block(&[]);
        otherwise(self)?;
        let else_b = self.pop_block();
        self.b.emit_region_op(GpuOpKind::If, [cond], vec![then_b, else_b]);
        Ok(())
    }

    /// True while lowering the body of a `simdgroup_role`, where only some
    /// simdgroups run and no threadgroup barrier may be emitted.
    fn in_role_body(&self) -> bool {
        self.role_depths.last().is_some_and(|&d| self.at >= d)
    }

    fn barrier(&mut self) -> CompileResult<()> {
        if self.in_role_body() {
            return Err(self.err(
                "this needs a threadgroup barrier (threads exchanging data through threadgroup memory), \
                 which cannot run inside simdgroup_role: only some simdgroups execute its body",
            ));
        }
        self.emit(GpuOpKind::Barrier, ValueList::new(), vec![]);
        Ok(())
    }

    fn reg_read(&mut self, reg: RegId, index: u32, dtype: DType) -> GpuValue {
        let v = self.emit1(
            GpuOpKind::RegRead { reg, index },
            ValueList::new(),
            GpuType::Scalar(dtype),
        );
        let writes = self.reg_writes.get(&reg).copied().unwrap_or(0);
        self.reg_reads.insert(v, (reg, index, writes));
        v
    }

    /// True when `v` was read from `reg[index]` and no write to `reg` has been
    /// emitted since, so the register still holds `v`: the read dominates every
    /// use of `v`, and any write that could run between the read and a use would
    /// have been emitted after the read (ops are only ever appended to open blocks).
    fn holds(&self, reg: RegId, index: u32, v: GpuValue) -> bool {
        let writes = self.reg_writes.get(&reg).copied().unwrap_or(0);
        self.reg_reads.get(&v) == Some(&(reg, index, writes))
    }

    /// Writes `reg[index]`, unless it already holds `value` (a carried value
    /// accumulated in place by `dot` and yielded unchanged would otherwise be
    /// copied onto itself).
    fn reg_write(&mut self, reg: RegId, index: u32, value: GpuValue) {
        if self.holds(reg, index, value) {
            return;
        }
        *self.reg_writes.entry(reg).or_insert(0) += 1;
        self.emit(GpuOpKind::RegWrite { reg, index }, [value], vec![]);
    }

    /// Notes that an op other than `RegWrite` changed `reg` (an in-place
    /// `wgmma`): values read from it before no longer match it.
    fn clobber_reg(&mut self, reg: RegId) {
        *self.reg_writes.entry(reg).or_insert(0) += 1;
    }

    // ------------------------------------------------------ Tile IR values

    fn layout(&self, id: LayoutId) -> &crate::dist_layout::DistLayout {
        self.a.layout(id)
    }

    fn values_of(&self, id: LayoutId) -> usize {
        self.layout(id).values()
    }

    /// The GPU element type a Tile IR value's elements have (pointer offsets for pointers).
    fn elem_dtype(&self, v: ValueId) -> DType {
        match self.f.ty(v).elem {
            Elem::Scalar(d) => d,
            Elem::Ptr(..) => self.a.offset_dtype(),
        }
    }

    fn set_home(&mut self, v: ValueId, home: Home) -> CompileResult<()> {
        if let Home::Regs { layout, .. } = &home {
            let n = self.values_of(*layout);
            if n > MAX_VALUES_PER_THREAD {
                return Err(self.err(format!(
                    "a tile of shape {:?} would need {n} registers per thread (at most {MAX_VALUES_PER_THREAD}); \
                     use smaller blocks or more simdgroups (num_sgs)",
                    self.f.ty(v).shape
                )));
            }
        }
        self.homes[v.index()] = Some(home);
        self.def_depth[v.index()] = self.innermost();
        Ok(())
    }

    fn home(&self, v: ValueId) -> CompileResult<&Home> {
        self.homes[v.index()]
            .as_ref()
            .ok_or_else(|| self.internal(format!("{v} is used before it is lowered")))
    }

    /// The single value of a uniform Tile IR value (a scalar or a splat tile).
    fn uniform(&mut self, v: ValueId) -> CompileResult<GpuValue> {
        match self.home(v)?.clone() {
            Home::Uniform(x) => Ok(x),
            _ => Err(self.internal(format!("{v} is not uniform"))),
        }
    }

    /// An address read from memory becomes the root of the pointers derived
    /// from it; the pointer itself is offset 0 from that root.
    fn int_to_ptr(&mut self, op: &'f Op) -> CompileResult<()> {
        let (address, r) = (op.operands[0], op.results[0]);
        let dtype = crate::layout_assign::pointee(self.f, r)
            .ok_or_else(|| self.internal("int_to_ptr without a pointee"))?;
        if !self.is_uniform(address) {
            return Err(
                self.err("an address cast to a pointer must be the same in every thread (one scalar)")
            );
        }
        let address = self.uniform(address)?;
        let root = self.emit1(
            GpuOpKind::IntToPtr,
            [address],
            GpuType::Ptr(dtype, MemSpace::Device),
        );
        self.loaded_roots.insert(r, root);
        let zero_offset = self.konst(Literal::Int(0), self.a.offset_dtype());
        self.set_home(r, Home::Uniform(zero_offset))
    }

    fn is_uniform(&self, v: ValueId) -> bool {
        matches!(self.homes[v.index()], Some(Home::Uniform(_)))
    }

    /// The elements of `v` in `layout`, one per register of this thread.
    fn elems(&mut self, v: ValueId, layout: LayoutId) -> CompileResult<Vec<GpuValue>> {
        let count = self.values_of(layout);
        let home = self.home(v)?.clone();
        match home {
            Home::Uniform(x) => Ok(vec![x; count]),
            Home::Regs { layout: l, elems } if l == layout => Ok(elems),
            Home::Staged { .. } => Err(self.internal(format!("{v} lives in threadgroup memory"))),
            Home::Regs { .. } | Home::Flexible => {
                let key = CacheKey::Elems(v, layout);
                let depth = self.def_depth[v.index()];
                if let Some(Cached::Many(e)) = self.cached(&key, self.at) {
                    return Ok(e);
                }
                // Ops computing a value carry the value's source line, wherever the use is.
                let use_loc = self.b.loc().clone();
                if let Some(op) = self.def_op[v.index()] {
                    self.b.set_loc(op.loc.clone());
                }
                let elems = self.at_depth(depth, |this| this.materialize(v, layout, &home));
                self.b.set_loc(use_loc);
                let elems = elems?;
                self.at_depth(depth, |this| this.cache(key, Cached::Many(elems.clone())));
                Ok(elems)
            }
        }
    }

    /// Computes or converts `v` into `layout` (at `v`'s definition depth).
    fn materialize(&mut self, v: ValueId, layout: LayoutId, home: &Home) -> CompileResult<Vec<GpuValue>> {
        let op = self.def_op[v.index()];
        // Broadcasts and reshapes re-derive from their source in the matching layout.
        if let Some(op) = op {
            if matches!(op.kind, OpKind::Broadcast | OpKind::ExpandDims { .. }) {
                return self.elementwise_in(op, layout);
            }
        }
        match home {
            Home::Flexible => {
                let op = op.ok_or_else(|| self.internal("a flexible value without a defining op"))?;
                self.elementwise_in(op, layout)
            }
            Home::Regs { layout: from, elems } => {
                let dtype = self.elem_dtype(v);
                self.convert(elems.clone(), *from, layout, dtype)
            }
            Home::Uniform(x) => Ok(vec![*x; self.values_of(layout)]),
            Home::Staged { .. } => Err(self.internal(format!("{v} lives in threadgroup memory"))),
        }
    }

    /// The layout a non-uniform value must be materialised in when an op has no
    /// preference: its own for `Fixed`, the default for the rest.
    fn natural_layout(&mut self, v: ValueId) -> CompileResult<LayoutId> {
        let shape = self.f.ty(v).shape.clone();
        self.a.natural_layout(v, &shape)
    }

    fn root_value(&mut self, v: ValueId) -> CompileResult<GpuValue> {
        match self.a.root(v) {
            Some(Root::Param(i)) => Ok(self.b.func().params[i].value),
            Some(Root::Shared(s)) => self
                .shared_roots
                .get(&s)
                .copied()
                .ok_or_else(|| self.internal("a shared pointer used before its allocation")),
            Some(Root::Loaded(p)) => self
                .loaded_roots
                .get(&p)
                .copied()
                .ok_or_else(|| self.internal("a pointer from memory used before its cast")),
            None => Err(self.internal(format!("{v} has no pointer root"))),
        }
    }

    // ------------------------------------------------------------- walking

    /// Lowers a block's ops in order, except that an `if` whose results only
    /// feed the next loop iteration (the prefetch pass's loads of the next
    /// tiles), followed by a `dot` with no memory writes or barriers between,
    /// is lowered right after that `dot` has staged its operands: the
    /// registers of the tiles being loaded and of the tiles being staged are
    /// then never live together, and the loads still overlap the matrix work.
    fn block(&mut self, block: &'f Block) -> CompileResult<()> {
        let outer = std::mem::take(&mut self.deferred);
        for (i, op) in block.ops.iter().enumerate() {
            if matches!(op.kind, OpKind::Yield) {
                continue;
            }
            if self.feeds_next_iteration_only(block, i) {
                self.deferred.push(op);
                continue;
            }
            self.lower_op(op)?;
        }
        self.flush_deferred()?;
        self.deferred = outer;
        Ok(())
    }

    fn lower_op(&mut self, op: &'f Op) -> CompileResult<()> {
        self.loc = op.loc.clone();
        self.op_name = op.kind.name().to_string();
        self.b.set_loc(op.loc.clone());
        self.op(op)
    }

    /// Lowers the ops held back by [`Lowering::block`].
    fn flush_deferred(&mut self) -> CompileResult<()> {
        for op in std::mem::take(&mut self.deferred) {
            self.lower_op(op)?;
        }
        Ok(())
    }

    /// Op `i` of `block` is an `if` without effects whose results only the
    /// block's `yield` reads, and a `dot` follows it with nothing between that
    /// writes memory or synchronises.
    fn feeds_next_iteration_only(&self, block: &Block, i: usize) -> bool {
        let op = &block.ops[i];
        if !matches!(op.kind, OpKind::If) || op.results.is_empty() {
            return false;
        }
        if !op.regions.iter().all(|r| r.ops.iter().all(writes_nothing)) {
            return false;
        }
        let rest = &block.ops[i + 1..];
        let only_yielded = rest.iter().all(|o| {
            matches!(o.kind, OpKind::Yield)
                || !(o.operands.iter().any(|x| op.results.contains(x)) || mentions(o, &op.results))
        });
        let next_dot = rest
            .iter()
            .find(|o| matches!(o.kind, OpKind::Dot) || !writes_nothing(o))
            .is_some_and(|o| matches!(o.kind, OpKind::Dot));
        only_yielded && next_dot
    }

    fn op(&mut self, op: &'f Op) -> CompileResult<()> {
        match &op.kind {
            OpKind::Constant(lit) => {
                let d = self.elem_dtype(op.results[0]);
                let c = self.konst(*lit, d);
                self.set_home(op.results[0], Home::Uniform(c))
            }
            OpKind::ProgramId { axis } => {
                let v = self.builtin(Builtin::ThreadgroupPosition(*axis));
                self.set_home(op.results[0], Home::Uniform(v))
            }
            OpKind::NumPrograms { axis } => {
                let v = self.builtin(Builtin::ThreadgroupsPerGrid(*axis));
                self.set_home(op.results[0], Home::Uniform(v))
            }
            OpKind::Permute { .. } if self.ring_transpose(op)? => Ok(()),
            OpKind::Cast if self.ring_cast(op)? => Ok(()),
            OpKind::Arange { .. }
            | OpKind::Broadcast
            | OpKind::ExpandDims { .. }
            | OpKind::Cast
            | OpKind::Unary(_)
            | OpKind::Binary(_)
            | OpKind::Compare(_)
            | OpKind::Select
            | OpKind::AddPtr
            | OpKind::Fma
            | OpKind::Assume { .. }
            | OpKind::Permute { .. }
            | OpKind::Reshape
            | OpKind::Take { .. } => self.elementwise(op),
            OpKind::IntToPtr => self.int_to_ptr(op),
            OpKind::Load { .. } => self.load(op),
            OpKind::Store { .. } => self.store(op),
            OpKind::Atomic { .. } => self.atomic(op),
            OpKind::TileLoad { .. } => self.tile_load(op),
            OpKind::TileStore { .. } => self.tile_store(op),
            OpKind::Dot => self.dot(op),
            OpKind::Reduce { op: red, axis } => self.reduce(op, *red, *axis),
            OpKind::Scan {
                op: scan,
                axis,
                reverse,
            } => self.scan(op, *scan, *axis, *reverse),
            OpKind::Sort { axis, descending } => self.sort(op, *axis, *descending),
            OpKind::Swizzle { pattern, block_size } => self.swizzle(op, *pattern, *block_size),
            OpKind::For { .. } => self.for_op(op),
            OpKind::If => self.if_op(op),
            OpKind::While => self.while_op(op),
            OpKind::Print { prefix, hex } => self.device_print(op, prefix, *hex),
            OpKind::Assert { message } => self.device_assert(op, message),
            // A promise for the analyses; GPU code checks nothing (the cpu backend does).
            OpKind::AssumeTrue => Ok(()),
            OpKind::SimdgroupRole { role, num_roles } => self.simdgroup_role(op, *role, *num_roles),
            OpKind::ThreadId | OpKind::SimdLaneId => self.thread_index_op(op),
            OpKind::SimdShuffleXor | OpKind::SimdBroadcast => self.simd_exchange(op),
            OpKind::Shared { size } => self.shared(op, *size),
            OpKind::Barrier => self.barrier(),
            OpKind::Yield => Ok(()),
            OpKind::CarryMerge => Err(self.internal("carry_merge must be resolved by the absent-lane pass")),
        }
    }
}
