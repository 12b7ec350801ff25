//! Staged stores (the `stage_stores` pass): a tile whose layout leaves each
//! thread only narrow runs of a row goes through threadgroup memory into the
//! blocked layout before it is stored, so that global memory sees 16-byte
//! runs instead of 4- or 8-byte ones.
//!
//! A matrix accumulator is the case that matters: in `mma.sync`'s and
//! `wgmma`'s C layouts a thread holds two consecutive columns of a row, so a
//! warp's store writes eight rows of 16 bytes (half sectors) and a GEMM's
//! epilogue takes about as long as a sixth of its main loop (measured on the
//! H100 at 4096x4096 outputs, `docs/gemm.md`). The exchange costs two barriers
//! and one threadgroup write and read per run.
//!
//! Rows are padded so that neither the writes (in the tile's layout) nor the
//! reads (in the blocked layout) have bank conflicts: the pitch is the row
//! length plus the multiple of 16 bytes whose conflicts, counted from the two
//! layouts (`dot_tiling::bank_conflicts`), are fewest.
//!
//! The memory is that of an operand ring whose loop has finished (a GEMM's
//! epilogue then costs no threadgroup memory), else the shared scratch, in
//! chunks of rows where the tile does not fit. The exchange starts with a barrier (the ring's last reads, or the
//! scratch's previous user) and, in a ring's memory, ends with one (and a
//! proxy fence where tensor copies fill the ring), since the ring is filled
//! again if its loop runs again (a loop around it).

use super::Lowering;
use crate::dist_layout::DistLayout;
use crate::dot_tiling::{bank_conflicts, Staged};
use crate::error::CompileResult;
use crate::layout_assign::{Class, LayoutId};
use metile_ir::gpu_ir::*;
use metile_ir::{BinaryOp, CmpOp, DType, ValueId};

/// Candidate paddings: this many multiples of 16 bytes at most.
const MAX_PAD_UNITS: usize = 8;

/// Where an exchange goes: the memory, the rows it holds at once, and
/// whether it ends with a barrier (and a proxy fence).
struct StagingMemory {
    root: GpuValue,
    rows: usize,
    ring: Option<bool>,
}

/// The row pitch (elements) with the fewest bank conflicts for writing in
/// `from` (runs of `wf`) and reading in `to` (runs of `wt`).
fn staging_pitch(from: &DistLayout, to: &DistLayout, wf: usize, wt: usize, elem: usize) -> usize {
    let cols = from.shape()[1];
    let unit = (16 / elem).max(1);
    let runs = |l: &DistLayout, w: usize| (0..l.values()).step_by(w).map(|v| (v, w)).collect::<Vec<_>>();
    let (writes, reads) = (runs(from, wf), runs(to, wt));
    (0..=MAX_PAD_UNITS)
        .map(|k| cols + k * unit)
        .filter(|p| p % wf == 0 && p % wt == 0)
        .min_by_key(|&p| {
            let at = Staged::rows(0, p);
            (
                bank_conflicts(from, at, &writes, elem) + bank_conflicts(to, at, &reads, elem),
                p,
            )
        })
        .unwrap_or(cols)
}

/// A layout whose warps store fewer rows at once is left as it is where the
/// rows' alignment is unknown.
const MIN_ROWS_PER_STORE: usize = 4;

/// The rows the first warp's first store of a tile in layout `l` writes to.
fn rows_per_store(l: &DistLayout) -> usize {
    let cols = l.shape()[1] as i64;
    let mut rows: Vec<i64> = (0..32.min(l.threads()))
        .map(|lane| l.element(lane, 0) / cols)
        .collect();
    rows.sort_unstable();
    rows.dedup();
    rows.len()
}

/// The 32-byte segments of global memory the first warp's stores of a tile
/// in layout `l` (runs of `run` elements of `elem` bytes) write, summed over
/// its store instructions; rows are taken to lie far apart.
fn store_segments(l: &DistLayout, run: usize, elem: usize) -> usize {
    let cols = l.shape()[1] as i64;
    let (run, elem) = (run.max(1) as i64, elem as i64);
    (0..l.values())
        .step_by(run as usize)
        .map(|v| {
            let mut segments: Vec<(i64, i64)> = (0..32.min(l.threads()))
                .flat_map(|lane| {
                    let e = l.element(lane, v);
                    let (row, col) = (e / cols, e % cols);
                    (col * elem / 32..=((col + run) * elem - 1) / 32).map(move |s| (row, s))
                })
                .collect();
            segments.sort_unstable();
            segments.dedup();
            segments.len()
        })
        .sum()
}

impl<'f> Lowering<'f> {
    /// `value` (in layout `l`, stored with runs of `width(l)`) moved into the
    /// blocked layout when the pass is on and that widens the runs to 16
    /// bytes: the new layout and the registers, or `None` to store as is.
    pub(super) fn staged_store(
        &mut self,
        value: ValueId,
        l: LayoutId,
        width: impl Fn(&Self, LayoutId) -> usize,
    ) -> CompileResult<Option<(LayoutId, Vec<GpuValue>)>> {
        let shape = self.f.ty(value).shape.clone();
        let dtype = self.elem_dtype(value);
        // A value computed from indices has no home to leave: it is computed
        // in the store's layout directly.
        let held = self.a.class(value) == Class::Fixed(l);
        if !self.a.switches.stage_stores
            || shape.len() != 2
            || dtype == DType::Bool
            || self.in_role_body()
            || !held
        {
            return Ok(None);
        }
        let elem = dtype.size_bytes();
        let threads = self.a.threads as usize;
        // Blocked, one 16-byte run per thread and row (the default blocked
        // layout's runs follow the kernel's narrowest element, which may make
        // them longer, and reads of them conflict).
        let run = (self.a.target.max_vector_bytes / elem).max(1);
        let Ok(wide) = DistLayout::blocked(&shape, threads, run) else {
            return Ok(None);
        };
        let wide = self.a.layouts.intern(wide);
        let (wf, wt) = (width(self, l), width(self, wide));
        let numel = shape[0] * shape[1];
        let to = if wt * elem >= 16 {
            // Worth two barriers where every thread gets a 16-byte run.
            if wt < 2 * wf {
                return Ok(None);
            }
            wide
        } else {
            // Rows the pointer does not align (an odd row pitch) take no wide
            // runs; the exchange still pays where a warp's store spreads over
            // several rows (a matrix accumulator: 8) and then stores
            // consecutive runs of one row: fewer 32-byte segments for the
            // memory system to write. A layout already along the rows (the
            // blocked one) keeps its stores.
            let Ok(narrow) = DistLayout::blocked(&shape, threads, wt) else {
                return Ok(None);
            };
            let segments_after = store_segments(&narrow, wt, elem);
            let from = self.layout(l);
            if rows_per_store(from) < MIN_ROWS_PER_STORE
                || 2 * segments_after > store_segments(from, wf, elem)
            {
                return Ok(None);
            }
            self.a.layouts.intern(narrow)
        };
        if to == l || numel * elem < 16 * threads {
            return Ok(None);
        }
        let (from_layout, to_layout) = (self.layout(l).clone(), self.layout(to).clone());
        // Runs are stored aligned, so their width must divide the pitch.
        let (wf_layout, wt_layout) = (
            self.layout_vector_width(l, dtype),
            self.layout_vector_width(to, dtype),
        );
        let pitch = staging_pitch(&from_layout, &to_layout, wf_layout, wt_layout, elem);
        let Some(memory) = self.staging_memory(dtype, shape[0], pitch)? else {
            return Ok(None);
        };
        let elems = self.elems(value, l)?;
        let out = self.exchange_rows(&elems, (l, wf_layout), (to, wt_layout), pitch, &memory)?;
        Ok(Some((to, out)))
    }

    /// Threadgroup memory for `rows` rows of `pitch` elements of `dtype`.
    fn staging_memory(
        &mut self,
        dtype: DType,
        rows: usize,
        pitch: usize,
    ) -> CompileResult<Option<StagingMemory>> {
        let row_bytes = pitch * dtype.size_bytes();
        if let Some((ring_root, ring_bytes, tensor_copies)) = self.finished_ring_memory() {
            let rows_at_once = (ring_bytes / row_bytes).min(rows);
            if rows_at_once > 0 {
                let len = rows_at_once * pitch;
                let root = match self
                    .ring_aliases
                    .iter()
                    .find(|&&(r, d, _)| r == ring_root && d == dtype)
                {
                    Some(&(_, _, alias)) => {
                        self.b.grow_threadgroup(alias, len);
                        alias
                    }
                    None => {
                        let alias = self.b.add_threadgroup(dtype, len, TgPurpose::Alias(ring_root));
                        self.ring_aliases.push((ring_root, dtype, alias));
                        alias
                    }
                };
                return Ok(Some(StagingMemory {
                    root,
                    rows: rows_at_once,
                    ring: Some(tensor_copies),
                }));
            }
        }
        // As for layout conversions: at most half the threadgroup memory.
        let half = self.a.target.max_threadgroup_bytes / 2 / dtype.size_bytes();
        let rows_at_once = (self.scratch_capacity(dtype).min(half) / pitch).min(rows);
        if rows_at_once == 0 {
            return Ok(None);
        }
        let root = self.scratch(dtype, rows_at_once * pitch)?;
        Ok(Some(StagingMemory {
            root,
            rows: rows_at_once,
            ring: None,
        }))
    }

    /// This thread's first element's index in padded rows (`row * pitch +
    /// col`, the row counted from `first_row`), and each register's row.
    fn padded_index(&mut self, l: LayoutId, pitch: usize) -> (GpuValue, GpuValue) {
        let row = self.thread_coord(l, 0);
        let col = self.thread_coord(l, 1);
        let p = self.const_i32(pitch as i32);
        let scaled = self.binary(BinaryOp::Mul, row, p);
        (self.binary(BinaryOp::Add, scaled, col), row)
    }

    /// Index and in-chunk predicate of register `v` of `l` for the chunk of
    /// rows starting at `lo` (no predicate when the memory holds every row).
    fn run_slot(
        &mut self,
        l: LayoutId,
        v: usize,
        (base, row): (GpuValue, GpuValue),
        (lo, rows, pitch): (usize, usize, usize),
        chunked: bool,
    ) -> (GpuValue, Option<GpuValue>) {
        let coords = self.layout(l).value_coords(v);
        let (dr, dc) = (coords[0] - lo as i64, coords[1]);
        let off = dr * pitch as i64 + dc;
        let index = if off == 0 {
            base
        } else {
            let c = self.const_i32(off as i32);
            self.binary(BinaryOp::Add, base, c)
        };
        if !chunked {
            return (index, None);
        }
        let d = self.const_i32(dr as i32);
        let r = self.binary(BinaryOp::Add, row, d);
        let zero = self.const_i32(0);
        let n = self.const_i32(rows as i32);
        let above = self.compare(CmpOp::Ge, r, zero);
        let below = self.compare(CmpOp::Lt, r, n);
        (index, Some(self.binary(BinaryOp::And, above, below)))
    }

    /// Moves `elems` from layout `from` (runs of `wf`) to `to` (runs of `wt`)
    /// through `memory`, `memory.rows` rows at a time.
    fn exchange_rows(
        &mut self,
        elems: &[GpuValue],
        (from, wf): (LayoutId, usize),
        (to, wt): (LayoutId, usize),
        pitch: usize,
        memory: &StagingMemory,
    ) -> CompileResult<Vec<GpuValue>> {
        let rows = self.layout(from).shape()[0];
        let dtype = self.dtype_of(elems[0]);
        let chunked = memory.rows < rows;
        // Only the owner of each element writes it, and of a layout over
        // some of the threads (a `simdgroup_role`'s) only those threads.
        let owner = self.owner(from);
        let from_layout = self.layout(from).clone();
        let range = self.partial_range(&from_layout);
        let owner = self.and_opt(owner, range);
        let src = self.padded_index(from, pitch);
        let dst = self.padded_index(to, pitch);
        let mut out: Vec<Option<GpuValue>> = vec![None; self.values_of(to)];
        for lo in (0..rows).step_by(memory.rows) {
            let chunk = (lo, memory.rows, pitch);
            self.barrier()?;
            for start in (0..elems.len()).step_by(wf) {
                let (index, inside) = self.run_slot(from, start, src, chunk, chunked);
                let mask = self.and_opt(inside, owner);
                let x = if wf == 1 {
                    elems[start]
                } else {
                    self.make_vector(&elems[start..start + wf])
                };
                self.mem_store(memory.root, index, x, wf as u8, mask);
            }
            self.barrier()?;
            for start in (0..out.len()).step_by(wt) {
                let (index, inside) = self.run_slot(to, start, dst, chunk, chunked);
                let previous: Option<Vec<GpuValue>> = inside.map(|_| {
                    (start..start + wt)
                        .map(|v| out[v].unwrap_or_else(|| self.zero_of(dtype)))
                        .collect()
                });
                let other = previous.map(|p| if wt == 1 { p[0] } else { self.make_vector(&p) });
                let loaded = self.mem_load(memory.root, index, wt as u8, inside, other);
                for lane in 0..wt {
                    out[start + lane] = Some(if wt == 1 {
                        loaded
                    } else {
                        self.emit1(
                            GpuOpKind::Extract { lane: lane as u8 },
                            [loaded],
                            GpuType::Scalar(dtype),
                        )
                    });
                }
            }
        }
        if let Some(tensor_copies) = memory.ring {
            if tensor_copies {
                self.emit(GpuOpKind::ProxyFence, ValueList::new(), vec![]);
            }
            self.barrier()?;
        }
        out.into_iter()
            .map(|x| x.ok_or_else(|| self.internal("a staged store left a register unset")))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dot_tiling::plan;
    use crate::target::Target;

    /// The accumulator layout of a `dot` of `m x n` over `threads` on sm_90.
    fn accumulator(m: usize, n: usize, dtype: DType, wgmma: bool, threads: usize) -> DistLayout {
        let target = Target::nvidia(9, 0);
        let mut switches = crate::policy::Switches::defaults(&target);
        switches.wgmma = wgmma;
        plan(&target, &switches, (m, n, 64), dtype, threads)
            .expect("an atom fits")
            .c
    }

    fn conflicts(l: &DistLayout, w: usize, pitch: usize, elem: usize) -> usize {
        let runs: Vec<_> = (0..l.values()).step_by(w).map(|v| (v, w)).collect();
        bank_conflicts(l, Staged::rows(0, pitch), &runs, elem)
    }

    #[test]
    fn accumulators_go_to_rows_padded_against_bank_conflicts() {
        for (m, n, wgmma, threads) in [
            (128, 256, true, 256),
            (128, 128, false, 256),
            (64, 64, false, 128),
        ] {
            for (dtype, elem) in [(DType::F32, 4), (DType::F16, 2)] {
                let c = accumulator(m, n, DType::F16, wgmma, threads);
                let to = DistLayout::blocked(&[m, n], threads, 16 / elem).unwrap();
                let wt = 16 / elem;
                let pitch = staging_pitch(&c, &to, 2, wt, elem);
                assert!(pitch > n && pitch % wt == 0, "{m}x{n} {dtype:?}: pitch {pitch}");
                assert_eq!(
                    conflicts(&c, 2, pitch, elem),
                    1,
                    "{m}x{n} {dtype:?} writes, pitch {pitch}"
                );
                assert_eq!(
                    conflicts(&to, wt, pitch, elem),
                    1,
                    "{m}x{n} {dtype:?} reads, pitch {pitch}"
                );
                // Unpadded rows would put a warp's rows on the same banks.
                assert!(conflicts(&c, 2, n, elem) >= 4);
            }
        }
    }

    #[test]
    fn rows_of_unknown_alignment_are_stored_by_whole_warps_along_a_row() {
        // f16 accumulators stored one element at a time (an odd row pitch):
        // a warp writes 8 rows of 4 lanes per store in the accumulator's
        // layout, one row of 32 consecutive lanes after the exchange.
        for (m, n, wgmma, threads) in [(128, 128, true, 256), (64, 64, false, 128)] {
            let c = accumulator(m, n, DType::F16, wgmma, threads);
            let narrow = DistLayout::blocked(&[m, n], threads, 1).unwrap();
            let stores = (c.values(), narrow.values());
            assert_eq!(stores.0, stores.1);
            assert_eq!(store_segments(&c, 1, 2), 8 * stores.0, "{m}x{n}");
            assert_eq!((rows_per_store(&c), rows_per_store(&narrow)), (8, 1));
            assert_eq!(store_segments(&narrow, 1, 2), 2 * stores.1, "{m}x{n}");
            // Rows of 4-byte alignment: pairs, still 8 rows a store against 4 segments.
            let pairs = DistLayout::blocked(&[m, n], threads, 2).unwrap();
            assert_eq!(store_segments(&pairs, 2, 2), 4 * pairs.values() / 2);
        }
    }
}
