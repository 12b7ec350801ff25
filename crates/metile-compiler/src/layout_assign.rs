//! Layout assignment: the threadgroup size, and for every Tile IR value how its
//! elements are spread over the threads.
//!
//! Each value gets a [`Class`]:
//! * `Uniform`: one value that every thread holds (scalars, and tiles that are a
//!   broadcast scalar). Scalars are computed redundantly by every thread.
//! * `Flexible`: a tile computed from indices only (`arange`, arithmetic on it,
//!   broadcasts of it). It has no home: the lowering computes it in whatever
//!   layout each use needs, which is cheaper than moving it.
//! * `Fixed(layout)`: a tile that lives in registers in one [`DistLayout`].
//!
//! Rules: memory reads (`load`, `tile_load`), `dot`, reductions, loop-carried
//! values and thread-level ops are `Fixed`. An element-wise op takes the layout
//! of one of its `Fixed` operands (preferring ones that are not themselves
//! broadcasts, then the least replicated), so at most the others are converted;
//! with only `Flexible` operands it stays `Flexible` (a load picks the default
//! blocked layout). A reduction along an axis gives the *slice* of its operand's
//! layout, so `x - max(x, axis=1)[:, None]` moves no data. A loop-carried value
//! starts from its initial value's class and is re-analysed until its class is
//! stable; once `Fixed` its layout never changes, and yields are converted to it.
//!
//! Pointer tiles are a *root* (a buffer parameter or a `shared` allocation) plus
//! integer element offsets; classes describe the offsets. A pointer's root must
//! be known at compile time, so a loop-carried or selected pointer must keep one
//! root. Offsets are `i32` unless the kernel adds an `i64` offset somewhere, then
//! `i64`: an `i32` offset computed with wrapping arithmetic equals the `i64` one
//! modulo 2^32, which is exact for every in-bounds access of a buffer with fewer
//! than 2^31 elements.
//!
//! Threadgroup size (documented in docs/lowering.md): a kernel traced with
//! thread-level ops uses exactly its `threads_per_group`; otherwise
//! `options.num_sgs` when given; otherwise `num_sgs = clamp(E / (32 * 4), 1, 8)`
//! rounded down to a power of two, where `E` is the largest tile's element count,
//! so that the biggest tile has about 4 elements per thread.

use crate::dist_layout::DistLayout;
use crate::error::{CompileError, CompileResult};
use crate::policy::Switches;
use crate::target::Target;
use metile_ir::{Block, DType, Elem, Function, Loc, Op, OpKind, ValueId};
use rustc_hash::FxHashMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LayoutId(pub u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Uniform,
    Flexible,
    Fixed(LayoutId),
}

/// Where a pointer value points.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Root {
    /// The kernel parameter at this index.
    Param(usize),
    /// The result of a `shared` op.
    Shared(ValueId),
    /// The result of an `int_to_ptr` op: an address read from memory.
    Loaded(ValueId),
}

/// Interned layouts; a `LayoutId` names one.
#[derive(Default)]
pub struct LayoutTable {
    layouts: Vec<DistLayout>,
    index: FxHashMap<DistLayout, LayoutId>,
}

impl LayoutTable {
    pub fn intern(&mut self, layout: DistLayout) -> LayoutId {
        if let Some(&id) = self.index.get(&layout) {
            return id;
        }
        let id = LayoutId(self.layouts.len() as u32);
        self.layouts.push(layout.clone());
        self.index.insert(layout, id);
        id
    }

    pub fn get(&self, id: LayoutId) -> &DistLayout {
        &self.layouts[id.0 as usize]
    }
}

pub struct Assignment {
    pub threads: u32,
    /// The GPU the kernel is lowered for.
    pub target: Target,
    /// The pass switches in force on it.
    pub switches: Switches,
    pub layouts: LayoutTable,
    classes: Vec<Class>,
    /// Values produced by a broadcast of a `Fixed` tile (cheap to re-derive).
    broadcast_derived: Vec<bool>,
    roots: Vec<Option<Root>>,
    /// Values computed per thread from thread-level ops (`thread_id`, shuffles, ...).
    thread_level: Vec<bool>,
    /// Pointer offsets are i64 (else i32).
    pub offsets_i64: bool,
    /// Elements in a thread's contiguous run of the default layout: one full
    /// vector access of the narrowest element the kernel loads or stores (4 f32,
    /// 8 bf16 on a 16-byte target), so every access is as wide as the target allows.
    pub run_lanes: usize,
    /// The `simdgroup_role` body being analysed or lowered, if any.
    pub role: Option<RoleDomain>,
    /// [`Assignment::blocked`]'s answers: kernels ask for the same few shapes
    /// over and over, and building a layout is far dearer than finding it here.
    blocked_cache: Vec<(Vec<usize>, Option<RoleDomain>, LayoutId)>,
    /// The matrix-atom plan of each `dot` given the atom's layout, by result.
    pub dot_plans: FxHashMap<ValueId, crate::dot_tiling::AtomTiling>,
}

/// The threads that run a `simdgroup_role` body: `threads` threads from `base`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoleDomain {
    pub base: usize,
    pub threads: usize,
}

/// The simdgroups with `sgid * num_roles / num_sgs == role`, as a thread range
/// (they are consecutive); `None` when no simdgroup has the role.
pub fn role_domain(threads: u32, simd_width: u32, role: u32, num_roles: u32) -> Option<RoleDomain> {
    let sgs = (threads / simd_width).max(1);
    let members: Vec<u32> = (0..sgs)
        .filter(|&s| u64::from(s) * u64::from(num_roles) / u64::from(sgs) == u64::from(role))
        .collect();
    let (&first, &last) = (members.first()?, members.last()?);
    Some(RoleDomain {
        base: (first * simd_width) as usize,
        threads: ((last - first + 1) * simd_width) as usize,
    })
}

/// Chooses the threadgroup size; see the module docs for the rule.
pub fn choose_threads(f: &Function, num_sgs: Option<u32>, target: &Target) -> CompileResult<u32> {
    let (simd_width, max_threads) = (target.simd_width, target.max_threads_per_group);
    let kernel_err = |reason: String| CompileError::new("kernel", reason, Loc::unknown());
    if let Some(t) = f.threads_per_group {
        let t = u32::try_from(t).unwrap_or(u32::MAX);
        if t == 0 || t % simd_width != 0 {
            return Err(kernel_err(format!(
                "the kernel was traced for {t} threads per threadgroup; it must be a positive multiple of {simd_width}"
            )));
        }
        if t > max_threads {
            return Err(kernel_err(format!(
                "the kernel needs {t} threads per threadgroup; at most {max_threads} are allowed"
            )));
        }
        if let Some(n) = num_sgs {
            if n.saturating_mul(simd_width) != t {
                return Err(kernel_err(format!(
                    "num_sgs={n} asks for {} threads, but the kernel uses thread-level ops traced for {t} threads",
                    n.saturating_mul(simd_width)
                )));
            }
        }
        return Ok(t);
    }
    if let Some(n) = num_sgs {
        let threads = n.saturating_mul(simd_width);
        if n == 0 || threads > max_threads {
            return Err(kernel_err(format!(
                "num_sgs={n} asks for {threads} threads per threadgroup; between {simd_width} and {max_threads} are allowed"
            )));
        }
        return Ok(threads);
    }
    let largest = f.values.iter().map(|t| t.numel()).max().unwrap_or(1);
    let per_thread = target.default_elements_per_thread.max(run_lanes(f, target));
    let wanted = largest / (simd_width as usize * per_thread);
    let sgs = wanted.clamp(1, target.max_default_simdgroups as usize);
    let sgs = 1usize << (usize::BITS - 1 - sgs.leading_zeros());
    Ok(sgs as u32 * simd_width)
}

impl Assignment {
    pub fn class(&self, v: ValueId) -> Class {
        self.classes.get(v.index()).copied().unwrap_or(Class::Uniform)
    }

    pub fn root(&self, v: ValueId) -> Option<Root> {
        self.roots.get(v.index()).copied().flatten()
    }

    pub fn layout(&self, id: LayoutId) -> &DistLayout {
        self.layouts.get(id)
    }

    pub fn offset_dtype(&self) -> DType {
        if self.offsets_i64 {
            DType::I64
        } else {
            DType::I32
        }
    }

    /// The default layout of a tile shape for the threads running the current
    /// code: the whole threadgroup, or inside a `simdgroup_role` the role's
    /// simdgroups, where the tile is spread over one simdgroup and replicated on
    /// the others (so its reductions never need a threadgroup barrier, which a
    /// role cannot execute).
    pub fn blocked(&mut self, shape: &[usize]) -> CompileResult<LayoutId> {
        let role = self.role;
        if let Some(&(_, _, id)) = self
            .blocked_cache
            .iter()
            .find(|(s, r, _)| s.as_slice() == shape && *r == role)
        {
            return Ok(id);
        }
        let err = |e: metile_layout::LayoutError| {
            CompileError::new("kernel", format!("internal layout error: {e}"), Loc::unknown())
        };
        let (simd, lanes) = (self.target.simd_width, self.run_lanes);
        let layout = match self.role {
            None => DistLayout::blocked(shape, self.threads as usize, lanes).map_err(err)?,
            Some(role) => DistLayout::blocked(shape, simd as usize, lanes)
                .and_then(|l| l.replicated(role.threads / simd as usize))
                .map_err(err)?
                .with_thread_base(role.base),
        };
        let id = self.layouts.intern(layout);
        self.blocked_cache.push((shape.to_vec(), role, id));
        Ok(id)
    }

    /// The default layout over the whole threadgroup (thread-level values).
    pub fn blocked_threadgroup(&mut self, shape: &[usize]) -> CompileResult<LayoutId> {
        let role = self.role.take();
        let l = self.blocked(shape);
        self.role = role;
        l
    }

    /// True when `l` is spread over the threads running the current code.
    pub fn in_current_domain(&self, l: LayoutId) -> bool {
        let layout = self.layout(l);
        match self.role {
            None => layout.thread_base() == 0 && layout.threads() == self.threads as usize,
            Some(r) => layout.thread_base() == r.base && layout.threads() == r.threads,
        }
    }

    pub fn is_thread_level(&self, v: ValueId) -> bool {
        self.thread_level.get(v.index()).copied().unwrap_or(false)
    }

    /// The layout a value is used in by ops without a preference (reductions,
    /// `dot`, `tile_store`): its own when it lives in the current threads (or is
    /// thread-level), else the default.
    pub fn natural_layout(&mut self, v: ValueId, shape: &[usize]) -> CompileResult<LayoutId> {
        match self.class(v) {
            Class::Fixed(l) if self.in_current_domain(l) || self.is_thread_level(v) => Ok(l),
            _ => self.blocked(shape),
        }
    }

    /// The layout an element-wise op over `operands` computes in: `None` when
    /// every operand is uniform, `Some(None)` when it can be computed anywhere
    /// (flexible), `Some(Some(l))` otherwise. A thread-level operand imposes its
    /// layout (each thread computes its own element); otherwise only layouts of
    /// the threads running the code are candidates.
    pub fn elementwise_layout(
        &mut self,
        operands: &[ValueId],
        shape: &[usize],
    ) -> CompileResult<Option<Option<LayoutId>>> {
        let mut best: Option<((bool, usize), LayoutId)> = None;
        let mut flexible = false;
        let mut foreign = false;
        for &v in operands {
            match self.class(v) {
                Class::Fixed(l) if self.is_thread_level(v) => return Ok(Some(Some(l))),
                Class::Uniform => {}
                Class::Flexible => flexible = true,
                Class::Fixed(l) if !self.in_current_domain(l) => foreign = true,
                Class::Fixed(l) => {
                    let replication: i64 = self
                        .layout(l)
                        .replication_terms()
                        .iter()
                        .map(|t| t.extent)
                        .product();
                    let score = (self.broadcast_derived[v.index()], replication as usize);
                    if best.is_none_or(|(s, _)| score < s) {
                        best = Some((score, l));
                    }
                }
            }
        }
        Ok(match best {
            Some((_, l)) => Some(Some(l)),
            None if foreign => Some(Some(self.blocked(shape)?)),
            None if flexible => Some(None),
            None => None,
        })
    }
}

/// The run length of the default layout for `f` on `target`: the widest vector
/// of the narrowest element type `f` moves through memory.
pub fn run_lanes(f: &Function, target: &Target) -> usize {
    let mut narrowest = usize::MAX;
    f.walk(&mut |op| {
        let ptr = match op.kind {
            OpKind::Load { .. }
            | OpKind::Store { .. }
            | OpKind::TileLoad { .. }
            | OpKind::TileStore { .. } => op.operands[0],
            _ => return,
        };
        if let Some(d) = f.ty(ptr).elem.pointee() {
            narrowest = narrowest.min(d.size_bytes());
        }
    });
    let lanes = if narrowest == usize::MAX {
        target.max_vector_lanes.min(target.default_elements_per_thread)
    } else {
        target.max_vector_lanes.min(target.max_vector_bytes / narrowest)
    };
    lanes.max(1)
}

impl Assignment {
    /// The assignment as text (`METILE_DEBUG=layout_assign`): the threadgroup
    /// size, then each value held in a fixed layout, and each `dot`'s atom plan.
    pub fn describe(&self) -> String {
        let mut out = format!("// threads per group: {}\n", self.threads);
        for (i, class) in self.classes.iter().enumerate() {
            if let Class::Fixed(id) = class {
                out.push_str(&format!("{} : {}\n", ValueId(i as u32), self.layouts.get(*id)));
            }
        }
        let mut dots: Vec<_> = self.dot_plans.iter().collect();
        dots.sort_by_key(|(v, _)| v.index());
        for (v, p) in dots {
            out.push_str(&format!(
                "{v} = dot on {} ({} x {} simdgroups, {} x {} atoms each)\n",
                p.atom.kind.name(),
                p.warps.0,
                p.warps.1,
                p.reps.0,
                p.reps.1
            ));
        }
        out
    }
}

/// Assigns classes, layouts and pointer roots to every value of `f`.
pub fn assign(f: &Function, threads: u32, target: &Target, switches: &Switches) -> CompileResult<Assignment> {
    let mut a = Assignment {
        threads,
        target: target.clone(),
        switches: *switches,
        layouts: LayoutTable::default(),
        classes: vec![Class::Uniform; f.values.len()],
        broadcast_derived: vec![false; f.values.len()],
        roots: vec![None; f.values.len()],
        thread_level: vec![false; f.values.len()],
        offsets_i64: false,
        run_lanes: run_lanes(f, target),
        role: None,
        blocked_cache: vec![],
        dot_plans: FxHashMap::default(),
    };
    for (i, p) in f.params.iter().enumerate() {
        if f.ty(p.value).is_ptr() {
            a.roots[p.value.index()] = Some(Root::Param(i));
        }
    }
    f.walk(&mut |op| {
        if matches!(op.kind, OpKind::AddPtr) && f.ty(op.operands[1]).dtype() == Some(DType::I64) {
            a.offsets_i64 = true;
        }
    });
    block(f, &f.body, &mut a)?;
    Ok(a)
}

fn layout_err(op: &Op, e: impl std::fmt::Display) -> CompileError {
    CompileError::new(
        op.kind.name(),
        format!("internal layout error: {e}"),
        op.loc.clone(),
    )
}

fn block(f: &Function, b: &Block, a: &mut Assignment) -> CompileResult<()> {
    for op in &b.ops {
        self::op(f, op, a)?;
    }
    Ok(())
}

fn set(f: &Function, a: &mut Assignment, v: ValueId, class: Class) {
    // Scalars are uniform whatever the rule says.
    a.classes[v.index()] = if f.ty(v).is_scalar() {
        Class::Uniform
    } else {
        class
    };
}

fn same_root(f: &Function, a: &Assignment, op: &Op, x: ValueId, y: ValueId) -> CompileResult<()> {
    if f.ty(x).is_ptr() && a.root(x) != a.root(y) {
        return Err(CompileError::new(
            op.kind.name(),
            "pointers that may point into different buffers cannot be merged; the GPU lowering needs each \
             pointer's buffer at compile time (select or carry offsets instead)",
            op.loc.clone(),
        ));
    }
    Ok(())
}

/// Join of the classes a carried or if-merged value takes on its paths. A layout
/// of other threads (a value from outside the running `simdgroup_role`) is not
/// kept: the value is carried in the running threads' default layout.
fn join(a: &mut Assignment, shape: &[usize], thread_level: bool, x: Class, y: Class) -> CompileResult<Class> {
    let local = |a: &Assignment, c: Class| match c {
        Class::Fixed(l) if !thread_level && !a.in_current_domain(l) => Class::Flexible,
        c => c,
    };
    Ok(match (local(a, x), local(a, y)) {
        (Class::Uniform, Class::Uniform) => Class::Uniform,
        (Class::Fixed(l), _) | (_, Class::Fixed(l)) => Class::Fixed(l),
        _ => Class::Fixed(a.blocked(shape)?),
    })
}

fn op(f: &Function, op: &Op, a: &mut Assignment) -> CompileResult<()> {
    let shape_of = |v: ValueId| f.ty(v).shape.clone();
    let result = op.results.first().copied();
    // Pointer roots flow from the first operand.
    if let Some(r) = result {
        if f.ty(r).is_ptr() {
            a.roots[r.index()] = match op.kind {
                OpKind::Shared { .. } => Some(Root::Shared(r)),
                OpKind::IntToPtr => Some(Root::Loaded(r)),
                _ => op.operands.first().and_then(|&x| a.root(x)),
            };
        }
    }
    let thread_level_inputs = op.operands.iter().any(|&x| a.is_thread_level(x));
    if thread_level_inputs
        && matches!(
            op.kind,
            OpKind::Broadcast
                | OpKind::ExpandDims { .. }
                | OpKind::Cast
                | OpKind::Unary(_)
                | OpKind::Binary(_)
                | OpKind::Fma
                | OpKind::Compare(_)
                | OpKind::Select
                | OpKind::AddPtr
                | OpKind::Load { .. }
                | OpKind::Atomic { .. }
                | OpKind::Assume { .. }
        )
    {
        for &r in &op.results {
            a.thread_level[r.index()] = !f.ty(r).is_scalar();
        }
    }
    match &op.kind {
        OpKind::Arange { .. } => set(f, a, op.results[0], Class::Flexible),
        OpKind::Broadcast => {
            let x = op.operands[0];
            let r = op.results[0];
            let class = match a.class(x) {
                Class::Fixed(l) if !a.in_current_domain(l) && !a.is_thread_level(x) => {
                    Class::Fixed(a.blocked(&shape_of(r))?)
                }
                Class::Fixed(l) => {
                    let src = a.layout(l).clone();
                    let dst_shape = shape_of(r);
                    let src_shape = if src.shape().len() == dst_shape.len() {
                        src.shape().to_vec()
                    } else {
                        // Leading axes added by numpy broadcasting.
                        let mut s = vec![1; dst_shape.len() - src.shape().len()];
                        s.extend_from_slice(src.shape());
                        s
                    };
                    let src = src.with_shape(&src_shape);
                    let blocked = a.blocked(&dst_shape)?;
                    let grown: Vec<usize> = (0..dst_shape.len())
                        .filter(|&i| src_shape[i] == 1 && dst_shape[i] > 1)
                        .collect();
                    let free = a
                        .layout(blocked)
                        .collapse(&grown)
                        .is_ok_and(|c| c.with_shape(&src_shape) == src);
                    a.broadcast_derived[r.index()] = true;
                    if free {
                        Class::Fixed(blocked)
                    } else {
                        let ext = src.extend_to(&dst_shape).map_err(|e| layout_err(op, e))?;
                        Class::Fixed(a.layouts.intern(ext))
                    }
                }
                other => other,
            };
            set(f, a, r, class);
        }
        OpKind::ExpandDims { .. } => {
            let (x, r) = (op.operands[0], op.results[0]);
            let class = match a.class(x) {
                Class::Fixed(l) => {
                    let reshaped = a.layout(l).with_shape(&shape_of(r));
                    a.broadcast_derived[r.index()] = a.broadcast_derived[x.index()];
                    Class::Fixed(a.layouts.intern(reshaped))
                }
                other => other,
            };
            set(f, a, r, class);
        }
        OpKind::Permute { .. } | OpKind::Reshape | OpKind::Take { .. } => {
            let (x, r) = (op.operands[0], op.results[0]);
            let class = match a.class(x) {
                Class::Fixed(l) if !shape_of(r).is_empty() => {
                    a.broadcast_derived[r.index()] = a.broadcast_derived[x.index()];
                    Class::Fixed(shape_op_layout(a, op, l, &shape_of(r))?)
                }
                other => other,
            };
            set(f, a, r, class);
        }
        OpKind::Cast
        | OpKind::Unary(_)
        | OpKind::Binary(_)
        | OpKind::Fma
        | OpKind::Compare(_)
        | OpKind::Select
        | OpKind::AddPtr
        | OpKind::Assume { .. } => {
            if matches!(op.kind, OpKind::Select) {
                same_root(f, a, op, op.operands[1], op.operands[2])?;
            }
            let class = match a.elementwise_layout(&op.operands, &shape_of(op.results[0]))? {
                None => Class::Uniform,
                Some(None) => Class::Flexible,
                Some(Some(l)) => Class::Fixed(l),
            };
            set(f, a, op.results[0], class);
        }
        OpKind::Load { .. } => {
            let r = op.results[0];
            let class = match a.elementwise_layout(&op.operands, &shape_of(r))? {
                None => Class::Uniform,
                Some(None) => Class::Fixed(a.blocked(&shape_of(r))?),
                Some(Some(l)) => Class::Fixed(l),
            };
            set(f, a, r, class);
        }
        // Each element is owned by one thread of the layout; a scalar atomic is
        // the program's one atomic, its old value broadcast (uniform).
        OpKind::Atomic { .. } => {
            let r = op.results[0];
            let class = match a.elementwise_layout(&op.operands, &shape_of(r))? {
                Some(Some(l)) => Class::Fixed(l),
                _ if f.ty(r).is_scalar() => Class::Uniform,
                _ => Class::Fixed(a.blocked(&shape_of(r))?),
            };
            set(f, a, r, class);
        }
        OpKind::TileLoad { rows, cols } => {
            let l = a.blocked(&[*rows, *cols])?;
            set(f, a, op.results[0], Class::Fixed(l));
        }
        OpKind::Dot => {
            let (acc, r) = (op.operands[2], op.results[0]);
            let layout = match dot_atom_plan(f, op, a) {
                Some(plan) => {
                    let l = a.layouts.intern(plan.c.clone());
                    a.dot_plans.insert(r, plan);
                    l
                }
                None => a.natural_layout(acc, &shape_of(r))?,
            };
            set(f, a, r, Class::Fixed(layout));
        }
        OpKind::Reduce { axis, .. } => {
            let (x, r) = (op.operands[0], op.results[0]);
            // A reduction to a scalar is uniform whatever its axis says.
            let class = match axis.filter(|_| !shape_of(r).is_empty()) {
                None => Class::Uniform,
                Some(axis) => {
                    let src = a.natural_layout(x, &shape_of(x))?;
                    let sliced = a.layout(src).slice(axis).map_err(|e| layout_err(op, e))?;
                    Class::Fixed(a.layouts.intern(sliced))
                }
            };
            set(f, a, r, class);
        }
        // Scans and sorts exchange through threadgroup memory and return the
        // result in the operand's layout.
        OpKind::Scan { .. } | OpKind::Sort { .. } => {
            let (x, r) = (op.operands[0], op.results[0]);
            let l = a.natural_layout(x, &shape_of(x))?;
            set(f, a, r, Class::Fixed(l));
        }
        OpKind::ThreadId | OpKind::SimdLaneId | OpKind::SimdShuffleXor | OpKind::SimdBroadcast => {
            let r = op.results[0];
            let l = a.blocked_threadgroup(&shape_of(r))?;
            set(f, a, r, Class::Fixed(l));
            a.thread_level[r.index()] = true;
        }
        OpKind::For { .. } => {
            if let Some(body) = op.regions.first() {
                carried_loop(f, op, a, &op.operands[3..], None, body, &body.args[1..])?;
            }
        }
        OpKind::While => {
            if let [cond, body] = op.regions.as_slice() {
                carried_loop(f, op, a, &op.operands, Some(cond), body, &body.args)?;
            }
        }
        OpKind::If => if_op(f, op, a)?,
        OpKind::SimdgroupRole { role, num_roles } => {
            let domain = enter_role(a, op, *role, *num_roles)?;
            a.role = Some(domain);
            let result = op.regions.iter().try_for_each(|r| block(f, r, a));
            a.role = None;
            result?;
        }
        // Scalars, and ops without results.
        _ => {
            for &r in &op.results {
                set(f, a, r, Class::Uniform);
            }
        }
    }
    Ok(())
}

/// The layout of a permute, reshape or take of a tile in layout `l`: the one
/// that keeps every element where it is when there is one (a transpose always,
/// a reshape when the leaves split at the new axes, a take when the axis lies
/// in registers), else the default one (the lowering then moves the data).
fn shape_op_layout(a: &mut Assignment, op: &Op, l: LayoutId, shape: &[usize]) -> CompileResult<LayoutId> {
    let src = a.layout(l).clone();
    let kept = match &op.kind {
        OpKind::Permute { dims } => src.permuted(dims),
        OpKind::Reshape => src.reshaped(shape),
        OpKind::Take { axis, .. } if src.is_separable() && src.axis_in_registers(*axis) => {
            Some(src.slice(*axis).map_err(|e| layout_err(op, e))?)
        }
        _ => None,
    };
    match kept {
        Some(k) => Ok(a.layouts.intern(k)),
        None => a.blocked(shape),
    }
}

/// The matrix-atom plan of a `dot` op, when one fits (never inside a
/// `simdgroup_role`, whose tiles live in one simdgroup's threads).
fn dot_atom_plan(f: &Function, op: &Op, a: &Assignment) -> Option<crate::dot_tiling::AtomTiling> {
    if a.role.is_some() {
        return None;
    }
    let (ta, tb) = (f.ty(op.operands[0]), f.ty(op.operands[1]));
    let shape = (ta.shape[0], tb.shape[1], ta.shape[1]);
    let plan = |operand| crate::dot_tiling::plan(&a.target, &a.switches, shape, operand, a.threads as usize);
    // f16 operands converted from fp8 tiles multiply as fp8 where the target
    // has an fp8 atom (the plan's operand dtype then says fp8: A's format,
    // B's may be the other one); as f16 elsewhere.
    let fp8 = crate::fp8_dot::fp8_operands(f, op)
        .and_then(|(x, _)| f.ty(x).dtype())
        .and_then(|d| plan(d).filter(|p| p.atom.operand.is_fp8()));
    fp8.or_else(|| plan(ta.dtype()?))
}

/// The threads of a role; refuses roles without simdgroups and nested roles.
pub fn enter_role(a: &Assignment, op: &Op, role: u32, num_roles: u32) -> CompileResult<RoleDomain> {
    let err = |reason: String| CompileError::new(op.kind.name(), reason, op.loc.clone());
    if a.role.is_some() {
        return Err(err(
            "simdgroup_role cannot be nested in another simdgroup_role".into()
        ));
    }
    role_domain(a.threads, a.target.simd_width, role, num_roles).ok_or_else(|| {
        err(format!(
            "role {role} of {num_roles} gets no simdgroup: the threadgroup has {} simdgroups; use num_roles <= num_sgs",
            (a.threads / a.target.simd_width).max(1)
        ))
    })
}

/// The classes of a loop's carried values (`inits`, the body's arguments
/// `args` and, for a `while`, its condition region's arguments), settled over
/// the body.
fn carried_loop(
    f: &Function,
    op: &Op,
    a: &mut Assignment,
    inits: &[ValueId],
    cond: Option<&Block>,
    body: &Block,
    args: &[ValueId],
) -> CompileResult<()> {
    let cond_args = cond.map_or(&[][..], |c| &c.args[..]);
    let mut classes = Vec::with_capacity(inits.len());
    for &init in inits {
        let c = join(
            a,
            &f.ty(init).shape,
            a.is_thread_level(init),
            a.class(init),
            a.class(init),
        )?;
        classes.push(c);
    }
    for (i, &init) in inits.iter().enumerate() {
        for &arg in [args.get(i), cond_args.get(i)].into_iter().flatten() {
            a.roots[arg.index()] = a.root(init);
            a.thread_level[arg.index()] = a.is_thread_level(init);
        }
    }
    // Classes only move up (Uniform -> Fixed) and a Fixed class never changes,
    // so this settles within one pass per carried value.
    for _ in 0..=inits.len() + 1 {
        for (i, &c) in classes.iter().enumerate() {
            for &arg in [args.get(i), cond_args.get(i)].into_iter().flatten() {
                set(f, a, arg, c);
            }
        }
        if let Some(cond) = cond {
            block(f, cond, a)?;
        }
        block(f, body, a)?;
        let Some(yield_op) = body.ops.last() else {
            break;
        };
        let mut changed = false;
        for (i, &y) in yield_op.operands.iter().enumerate() {
            let thread_level = a.is_thread_level(args[i]) || a.is_thread_level(y);
            let joined = join(a, &f.ty(y).shape, thread_level, classes[i], a.class(y))?;
            changed |= joined != classes[i];
            classes[i] = joined;
        }
        if !changed {
            for (i, &y) in yield_op.operands.iter().enumerate() {
                same_root(f, a, op, args[i], y)?;
            }
            break;
        }
    }
    for ((&r, &arg), &c) in op.results.iter().zip(args).zip(&classes) {
        set(f, a, r, c);
        a.roots[r.index()] = a.root(arg);
        a.thread_level[r.index()] = a.is_thread_level(arg);
    }
    Ok(())
}

fn if_op(f: &Function, op: &Op, a: &mut Assignment) -> CompileResult<()> {
    for r in &op.regions {
        block(f, r, a)?;
    }
    let (Some(then_y), Some(else_y)) = (
        op.regions.first().and_then(|r| r.ops.last()),
        op.regions.get(1).and_then(|r| r.ops.last()),
    ) else {
        return Ok(());
    };
    for (i, &r) in op.results.iter().enumerate() {
        let (x, y) = (then_y.operands[i], else_y.operands[i]);
        same_root(f, a, op, x, y)?;
        let thread_level = a.is_thread_level(x) || a.is_thread_level(y);
        let c = join(a, &f.ty(r).shape, thread_level, a.class(x), a.class(y))?;
        set(f, a, r, c);
        a.roots[r.index()] = a.root(x);
        a.thread_level[r.index()] = a.is_thread_level(x) || a.is_thread_level(y);
    }
    Ok(())
}

/// Pointer element types, for the lowering.
pub fn pointee(f: &Function, v: ValueId) -> Option<DType> {
    match f.ty(v).elem {
        Elem::Ptr(d, _) => Some(d),
        Elem::Scalar(_) => None,
    }
}
