//! `dot` on a matrix atom (`dot_tiling.rs` plans it): the operands are staged
//! in threadgroup scratch, then every simdgroup walks `k` one atom step at a
//! time, reads its A and B fragments from scratch through the plan's fragment
//! layouts and issues one `mma` per atom tile it owns, accumulating in
//! registers in the atom's C layout.
//!
//! Scratch holds `a` as `M x kc` rows of `lda = kc + pad_a` elements and `b`
//! as `kc x N` rows of `ldb = N + pad_b`; the paddings are the ones whose
//! fragment reads have the fewest bank conflicts (`dot_tiling::choose_pads`,
//! when the `pad_dot_scratch` pass is on). `kc` is `K` when both operands fit
//! the free threadgroup memory, else the largest multiple of the atom's `k`
//! that divides `K` and fits; a uniform loop walks the chunks. Each thread
//! stores the elements it holds (its canonical ones, when the layout
//! replicates), as vectors where its layout has contiguous runs.

use super::Lowering;
use crate::atoms::AtomKind;
use crate::dot_tiling::{
    b_fragments_are_simdgroup_matrices, choose_pads, fragment_offsets, k_major_b_layout, staged_k, staging,
    vector_runs, AtomTiling, BPlacement, Staged,
};
use crate::error::CompileResult;
use crate::layout_assign::LayoutId;
use metile_ir::gpu_ir::*;
use metile_ir::{BinaryOp, DType, Op, ValueId};

const I32: GpuType = GpuType::Scalar(DType::I32);

impl<'f> Lowering<'f> {
    /// Lowers `op` on the plan's atom; `false` (nothing emitted) when not even
    /// one atom step of both operands fits the free threadgroup memory, so the
    /// generic path, which stages one `k` at a time, takes the op instead.
    pub(super) fn atom_dot(&mut self, op: &'f Op, plan: &AtomTiling, reg: RegId) -> CompileResult<bool> {
        if let Some(ring) = self.b_ring_of(op) {
            self.b_ring_dot(op, plan, ring, reg)?;
            return Ok(true);
        }
        if let Some(ring) = self.ring_operands(op) {
            self.ring_dot(plan, ring, reg)?;
            return Ok(true);
        }
        if plan.atom.reads_shared_memory() {
            return self.wgmma_dot(op, plan, reg);
        }
        let (a, b) = (op.operands[0], op.operands[1]);
        let (m, n, k) = plan.shape;
        let dtype = self.elem_dtype(a);
        // `b = x.T` (attention's `dot(q, k.T)`) staged as `x` is, K-major.
        let k_major = self.k_major_b_source(b, plan);
        let placement = self.b_placement(b, plan, dtype)?;
        let capacity = self.dot_scratch_capacity(dtype);
        let pads = choose_pads(plan, &self.a.target, &self.a.switches, dtype, capacity, placement);
        let Some(kc) = staged_k(plan, dtype, pads, capacity, placement) else {
            return Ok(false);
        };
        let (sa, sb, len) = staging(m, n, kc, dtype, pads, placement);
        let root = self.dot_scratch(dtype, len)?;

        let la = self.natural_layout(a)?;
        let b_staged = k_major.unwrap_or(b);
        let lb = self.natural_layout(b_staged)?;
        let av = self.elems(a, la)?;
        let bv = self.elems(b_staged, lb)?;
        let frag_a = self.a.layouts.intern(plan.a.clone());
        let frag_b = self.b_fragment_layout(plan, placement)?;
        // The axis of the staged `b` (or `x`) along which `k` runs.
        let b_k_axis = match placement {
            BPlacement::NMajor => 0,
            BPlacement::KMajor { .. } => 1,
        };

        let chunk = |this: &mut Self, k0: Option<GpuValue>| -> CompileResult<()> {
            this.barrier()?;
            this.stage(root, sa, la, &av, k0.map(|k0| (1, k0, kc)), None)?;
            this.stage(root, sb, lb, &bv, k0.map(|k0| (b_k_axis, k0, kc)), None)?;
            this.barrier()?;
            if k0.is_none() {
                this.flush_deferred()?;
            }
            this.atom_steps_with(
                (root, root),
                plan,
                (sa, sb),
                (None, None),
                (frag_a, frag_b),
                kc,
                reg,
                placement,
            )
        };
        self.over_k_chunks(k, kc, chunk)?;
        Ok(true)
    }

    /// The layout `b`'s fragments are read through: the plan's, or over
    /// `[N, ak]` for a K-major `b`.
    fn b_fragment_layout(&mut self, plan: &AtomTiling, placement: BPlacement) -> CompileResult<LayoutId> {
        let l = match placement {
            BPlacement::NMajor => plan.b.clone(),
            BPlacement::KMajor { .. } => {
                k_major_b_layout(plan).ok_or_else(|| self.internal("b's fragments do not transpose"))?
            }
        };
        Ok(self.a.layouts.intern(l))
    }

    /// How `b` of `plan`'s `dot` is staged: K-major where it is `x.T` and
    /// the `k_major_b` switch is on for an Apple atom, its padding then a
    /// multiple of the width of `x`'s vector stores.
    fn b_placement(&mut self, b: ValueId, plan: &AtomTiling, dtype: DType) -> CompileResult<BPlacement> {
        Ok(match self.k_major_b_source(b, plan) {
            Some(x) => {
                let lx = self.natural_layout(x)?;
                BPlacement::KMajor {
                    align: self.layout_vector_width(lx, dtype),
                }
            }
            None => BPlacement::NMajor,
        })
    }

    /// `x` where `b = x.T` and `plan` is an Apple atom's whose `dot` stages
    /// `b` K-major (the `k_major_b` switch): `x`'s rows are `b`'s columns.
    fn k_major_b_source(&self, b: ValueId, plan: &AtomTiling) -> Option<ValueId> {
        if !(is_apple(plan) && self.a.switches.k_major_b) {
            return None;
        }
        self.transposed_source(b)
    }
}

/// Whether `plan` is on one of Apple's atoms (whose fragments the threads read).
fn is_apple(plan: &AtomTiling) -> bool {
    matches!(
        plan.atom.kind,
        AtomKind::AppleSimdgroup8x8 | AtomKind::AppleMatmul2d16x32x16
    )
}

impl<'f> Lowering<'f> {
    /// Writes the elements a thread holds of a tile in layout `l` to scratch at
    /// `base + row * ld + col` (plus `offset`, a multiple of the widest vector,
    /// when given). With `chunk = (axis, k0, kc)` only the elements
    /// whose coordinate along `axis` lies in `k0 .. k0 + kc` are written, at
    /// that coordinate minus `k0`.
    pub(super) fn stage(
        &mut self,
        root: GpuValue,
        at: Staged,
        l: LayoutId,
        xs: &[GpuValue],
        chunk: Option<(usize, GpuValue, usize)>,
        offset: Option<GpuValue>,
    ) -> CompileResult<()> {
        let dtype = self.dtype_of(root);
        let owner = self.owner(l);
        let mut w = self.layout_vector_width(l, dtype);
        let runs_stay_whole = chunk.is_none_or(|(axis, _, kc)| axis == 0 || kc % w == 0);
        if w > 1 && (at.ld % w != 0 || at.base % w != 0 || !runs_stay_whole) {
            w = 1;
        }
        let offset_base = offset;
        for start in (0..xs.len()).step_by(w) {
            let mut row = self.coord(l, 0, start);
            let mut col = self.coord(l, 1, start);
            let mut mask = owner;
            if let Some((axis, k0, kc)) = chunk {
                let c = if axis == 0 { &mut row } else { &mut col };
                *c = self.binary(BinaryOp::Sub, *c, k0);
                let inside = self.in_range(*c, kc as i64);
                mask = self.and_opt(Some(inside), mask);
            }
            let index = self.staged_index(at, row, col, dtype);
            let index = match offset_base {
                Some(o) => self.binary(BinaryOp::Add, index, o),
                None => index,
            };
            let value = if w == 1 {
                xs[start]
            } else {
                self.make_vector(&xs[start..start + w])
            };
            self.mem_store(root, index, value, w as u8, mask);
        }
        Ok(())
    }

    /// One pass over the staged `kc` columns of a and rows of b, `k` atom
    /// steps at a time: fragment reads, then one `mma` per owned atom tile.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn atom_steps(
        &mut self,
        roots: (GpuValue, GpuValue),
        plan: &AtomTiling,
        places: (Staged, Staged),
        offsets: (Option<GpuValue>, Option<GpuValue>),
        frags: (LayoutId, LayoutId),
        kc: usize,
        reg: RegId,
    ) -> CompileResult<()> {
        self.atom_steps_with(roots, plan, places, offsets, frags, kc, reg, BPlacement::NMajor)
    }

    /// [`Lowering::atom_steps`] with `b` placed as `placement` says; a
    /// K-major `b`'s fragment layout `frag_b` is over `[N, ak]`
    /// (`dot_tiling::k_major_b_layout`).
    #[allow(clippy::too_many_arguments)]
    fn atom_steps_with(
        &mut self,
        (root_a, root_b): (GpuValue, GpuValue),
        plan: &AtomTiling,
        (sa, sb): (Staged, Staged),
        (offset_a, offset_b): (Option<GpuValue>, Option<GpuValue>),
        (frag_a, frag_b): (LayoutId, LayoutId),
        kc: usize,
        reg: RegId,
        placement: BPlacement,
    ) -> CompileResult<()> {
        let (na, nb, nc) = plan.atom.values_per_thread();
        let (reps_m, reps_n) = plan.reps;
        let ak = plan.atom.shape.2;
        let ldm = plan.ldmatrix.as_ref().map(|p| {
            (
                self.a.layouts.intern(p.a.clone()),
                self.a.layouts.intern(p.b.clone()),
                p.b_count,
            )
        });
        let (addr_a, addr_b) = match ldm {
            Some((la, lb, _)) => (la, lb),
            None => (frag_a, frag_b),
        };
        let k_major = matches!(placement, BPlacement::KMajor { .. });
        let b_matrices = k_major && b_fragments_are_simdgroup_matrices(plan);
        let mut a_thread = self.fragment_thread_index(addr_a, sa);
        let mut b_thread = match b_matrices {
            true => self.simdgroup_fragment_index(addr_b, sb)?,
            false => self.fragment_thread_index(addr_b, sb),
        };
        if let Some(o) = offset_a {
            a_thread = self.binary(BinaryOp::Add, a_thread, o);
        }
        if let Some(o) = offset_b {
            b_thread = self.binary(BinaryOp::Add, b_thread, o);
        }

        let (zero, end, step) = (
            self.const_i32(0),
            self.const_i32(kc as i32),
            self.const_i32(ak as i32),
        );
        let kk = self.push_block(&[I32])[0];
        // a[row][kk + col], and b[kk + row][col] (N-major) or b[col][kk + row] (K-major).
        let b_step = match k_major {
            true => kk,
            false => {
                let ldb = self.const_i32(sb.ld as i32);
                self.binary(BinaryOp::Mul, kk, ldb)
            }
        };
        let a_base = self.binary(BinaryOp::Add, a_thread, kk);
        let b_base = self.binary(BinaryOp::Add, b_thread, b_step);
        let b_k_step = if k_major { (ak, 1) } else { (ak, sb.ld) };
        let (a_frags, b_frags) = match ldm {
            Some((la, lb, b_count)) => (
                self.ldmatrix_reads(root_a, la, sa, a_base, 4, false),
                self.ldmatrix_reads(root_b, lb, sb, b_base, b_count, true),
            ),
            None => (
                self.fragment_reads(root_a, frag_a, sa, a_base, (ak, 1))?,
                match b_matrices {
                    true => self.simdgroup_matrix_reads(root_b, frag_b, sb, b_base, nb),
                    false => self.fragment_reads(root_b, frag_b, sb, b_base, b_k_step)?,
                },
            ),
        };
        let kind = plan.atom.kind;
        let serpentine = self.a.switches.serpentine;
        for mi in 0..reps_m {
            let backwards = serpentine && mi % 2 == 1;
            for ni in (0..reps_n).map(|i| if backwards { reps_n - 1 - i } else { i }) {
                let first = nc * (ni + reps_n * mi);
                let mut operands: Vec<GpuValue> = a_frags[na * mi..na * (mi + 1)].to_vec();
                operands.extend_from_slice(&b_frags[nb * ni..nb * (ni + 1)]);
                for j in 0..nc {
                    operands.push(self.reg_read(reg, (first + j) as u32, DType::F32));
                }
                let d = self.emit(
                    GpuOpKind::Mma(kind),
                    operands,
                    vec![GpuType::Scalar(DType::F32); nc],
                );
                for (j, x) in d.into_iter().enumerate() {
                    self.reg_write(reg, (first + j) as u32, x);
                }
            }
        }
        let body = self.pop_block();
        self.b
            .emit_region_op(GpuOpKind::For, [zero, end, step], vec![body]);
        Ok(())
    }

    /// `base + row_t * ld + col_t` of a fragment layout: the thread's part of
    /// every fragment index, computed once at the top level.
    fn fragment_thread_index(&mut self, l: LayoutId, at: Staged) -> GpuValue {
        self.at_depth(0, |this| {
            let row = this.thread_coord(l, 0);
            let col = this.thread_coord(l, 1);
            let ld = this.const_i32(at.ld as i32);
            let base = this.const_i32(at.base as i32);
            let offset = this.binary(BinaryOp::Mul, row, ld);
            let offset = this.binary(BinaryOp::Add, offset, col);
            this.binary(BinaryOp::Add, base, offset)
        })
    }

    /// `base + row_w * ld + col_w` of a fragment layout: the part of its
    /// fragment index that is the same on every lane of a simdgroup (from
    /// the simdgroup index), the origin of the simdgroup's matrices.
    fn simdgroup_fragment_index(&mut self, l: LayoutId, at: Staged) -> CompileResult<GpuValue> {
        let (row, col) = match (self.simdgroup_coord(l, 0), self.simdgroup_coord(l, 1)) {
            (Some(row), Some(col)) => (row, col),
            _ => return Err(self.internal("a fragment layout whose lanes straddle simdgroups")),
        };
        Ok(self.at_depth(0, |this| {
            let ld = this.const_i32(at.ld as i32);
            let base = this.const_i32(at.base as i32);
            let offset = this.binary(BinaryOp::Mul, row, ld);
            let offset = this.binary(BinaryOp::Add, offset, col);
            this.binary(BinaryOp::Add, base, offset)
        }))
    }

    /// The fragments of K-major `b` layout `l` (over `[N, ak]`), `per_tile`
    /// values per 8x8 matrix, each matrix read with one transposed
    /// `simdgroup_load` at `origin` plus its first value's offset
    /// (`dot_tiling::b_fragments_are_simdgroup_matrices` holds).
    fn simdgroup_matrix_reads(
        &mut self,
        root: GpuValue,
        l: LayoutId,
        at: Staged,
        origin: GpuValue,
        per_tile: usize,
    ) -> Vec<GpuValue> {
        let dtype = self.dtype_of(root);
        let layout = self.layout(l).clone();
        let ld = self.const_i32(at.ld as i32);
        let mut out = Vec::with_capacity(layout.values());
        for first in (0..layout.values()).step_by(per_tile.max(1)) {
            let c = layout.value_coords(first);
            let off = self.const_i32((c[0] * at.ld as i64 + c[1]) as i32);
            let index = self.binary(BinaryOp::Add, origin, off);
            let pair = self.emit(
                GpuOpKind::SimdgroupLoad { transpose: true },
                [root, index, ld],
                vec![GpuType::Scalar(dtype); per_tile],
            );
            out.extend(pair);
        }
        out
    }

    /// One `ldmatrix` of `count` matrices per register of the address layout
    /// `l`, each lane reading from `thread_index + row_v * ld + col_v`; the
    /// loaded pairs split into scalars, in fragment order.
    fn ldmatrix_reads(
        &mut self,
        root: GpuValue,
        l: LayoutId,
        at: Staged,
        thread_index: GpuValue,
        count: u8,
        trans: bool,
    ) -> Vec<GpuValue> {
        let dtype = self.dtype_of(root);
        let layout = self.layout(l).clone();
        let mut out = vec![];
        for v in 0..layout.values() {
            let c = layout.value_coords(v);
            let off = self.const_i32((c[0] * at.ld as i64 + c[1]) as i32);
            let index = self.binary(BinaryOp::Add, thread_index, off);
            let pairs = self.emit(
                GpuOpKind::LdMatrix { count, trans },
                [root, index],
                vec![GpuType::Vector(dtype, 2); usize::from(count)],
            );
            for p in pairs {
                for lane in 0..2 {
                    out.push(self.emit1(GpuOpKind::Extract { lane }, [p], GpuType::Scalar(dtype)));
                }
            }
        }
        out
    }

    /// Reads every fragment value of layout `l` from scratch at `thread_index +
    /// row_v * ld + col_v`, as vectors where consecutive values are consecutive
    /// and aligned elements. `step` is `(atom k, scratch distance of one k)`,
    /// what the loop adds to `thread_index` per step (it keeps alignment when
    /// a multiple of the width).
    fn fragment_reads(
        &mut self,
        root: GpuValue,
        l: LayoutId,
        at: Staged,
        thread_index: GpuValue,
        step: (usize, usize),
    ) -> CompileResult<Vec<GpuValue>> {
        let dtype = self.dtype_of(root);
        let (offsets, strides) = fragment_offsets(self.layout(l), at, step.0 * step.1);
        let t = &self.a.target;
        let max_w = t
            .max_vector_lanes
            .min(t.max_vector_bytes / dtype.size_bytes())
            .max(1);
        let mut out = Vec::with_capacity(offsets.len());
        for (v, w) in vector_runs(&offsets, &strides, max_w) {
            let off = self.const_i32(offsets[v] as i32);
            let index = self.binary(BinaryOp::Add, thread_index, off);
            let x = self.mem_load(root, index, w as u8, None, None);
            if w == 1 {
                out.push(x);
            } else {
                for lane in 0..w {
                    out.push(self.emit1(
                        GpuOpKind::Extract { lane: lane as u8 },
                        [x],
                        GpuType::Scalar(dtype),
                    ));
                }
            }
        }
        Ok(out)
    }
}
