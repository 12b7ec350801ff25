//! The L2-friendly program order (the `l2_order` pass, a Tile IR pass).
//!
//! GPUs start threadgroups in the order of their linear index, `x` fastest
//! (`t = pid1 * GX + pid0`), so the blocks running at the same time are a run
//! of consecutive `t`. In a GEMM whose grid is `(M tiles, N tiles)` that run
//! walks down one column of output tiles: it reads up to a whole column of A's
//! row panels while sharing one panel of B, and when the grid is taller than
//! the run, no two concurrent blocks share an A panel. The pass renumbers the
//! programs in groups of [`GROUP_SIZE`] rows: consecutive hardware blocks cover
//! a `GROUP_SIZE`-tall band of the grid column by column, so a wave of `W`
//! blocks reads `GROUP_SIZE` panels of A and about `W / GROUP_SIZE` of B,
//! which stay in L2 while the wave reuses them (the order of Triton's
//! matmul tutorial, applied without the kernel asking for it).
//!
//! With `t` the hardware index and `w = GROUP_SIZE * GY`:
//!
//! ```text
//! group = t / w;  first = group * GROUP_SIZE;  rows = min(GX - first, GROUP_SIZE)
//! pid0' = first + (t mod w) mod rows;          pid1' = (t mod w) / rows
//! ```
//!
//! Each group maps its `rows * GY` indices one to one onto its band, and the
//! last, shorter band takes exactly the indices left, so every `(pid0, pid1)`
//! pair is computed once for every grid size; grids at most `GROUP_SIZE` tall
//! keep their order. The arithmetic is i64 (`t` reaches `GX * GY`, more than
//! 2^31 on CUDA's largest grids) and runs once per program.
//!
//! The pass applies to kernels with a `dot` that read both `program_id(0)` and
//! `program_id(1)` and do not order their programs themselves
//! (`tile_swizzle`). It renames those two ids only, so on a 3-D grid each
//! axis-2 slice is renumbered on its own (still a bijection); since programs
//! are independent, the kernel's results cannot change.

use crate::ir_emit::{rename_uses, walk, Emit};
use metile_ir::{BinaryOp, DType, Function, Loc, OpKind};
use rustc_hash::FxHashMap;

/// Rows of the grid per group. Eight A panels cover the wave of an H100 (132
/// SMs, one or two blocks each) with 16–33 B panels, close to the square
/// footprint that minimises the panels a wave reads, and it is the group
/// Triton's tutorial uses; Apple GPUs run fewer blocks at once, for which a
/// band of eight rows is already square or taller.
pub const GROUP_SIZE: i64 = 8;

/// Whether the pass would renumber `f`'s programs.
pub fn applies(f: &Function) -> bool {
    let (mut dot, mut pid0, mut pid1, mut swizzle) = (false, false, false, false);
    walk(&f.body.ops, &mut |op| match op.kind {
        OpKind::Dot => dot = true,
        OpKind::ProgramId { axis: 0 } => pid0 = true,
        OpKind::ProgramId { axis: 1 } => pid1 = true,
        OpKind::Swizzle { .. } => swizzle = true,
        _ => {}
    });
    dot && pid0 && pid1 && !swizzle
}

/// Renumbers the programs of `f` in grouped order; true if it applied.
pub fn order_programs(f: &mut Function) -> bool {
    if !applies(f) {
        return false;
    }
    let mut old = [Vec::new(), Vec::new()];
    let mut loc = None;
    walk(&f.body.ops, &mut |op| {
        if let OpKind::ProgramId { axis } = op.kind {
            if let Some(ids) = old.get_mut(usize::from(axis)) {
                ids.push(op.results[0]);
                loc.get_or_insert_with(|| op.loc.clone());
            }
        }
    });
    let mut e = Emit::new(&mut f.values, loc.unwrap_or_else(Loc::unknown));
    let i64s = |e: &mut Emit<'_>, v| e.cast(v, DType::I64);
    let (x, y) = (e.program_id(0), e.program_id(1));
    let (gx, gy) = (e.num_programs(0), e.num_programs(1));
    let (x, y, gx, gy) = (
        i64s(&mut e, x),
        i64s(&mut e, y),
        i64s(&mut e, gx),
        i64s(&mut e, gy),
    );
    let t = e.bin(BinaryOp::Mul, y, gx);
    let t = e.bin(BinaryOp::Add, t, x);
    let group_size = e.int(GROUP_SIZE, DType::I64);
    let width = e.bin(BinaryOp::Mul, group_size, gy);
    let group = e.bin(BinaryOp::FloorDiv, t, width);
    let first = e.bin(BinaryOp::Mul, group, group_size);
    let left = e.bin(BinaryOp::Sub, gx, first);
    let rows = e.bin(BinaryOp::Min, left, group_size);
    let r = e.bin(BinaryOp::Rem, t, width);
    let within = e.bin(BinaryOp::Rem, r, rows);
    let pid0 = e.bin(BinaryOp::Add, first, within);
    let pid1 = e.bin(BinaryOp::FloorDiv, r, rows);
    let (pid0, pid1) = (e.cast(pid0, DType::I32), e.cast(pid1, DType::I32));
    let header = std::mem::take(&mut e.ops);
    let mut renamed = FxHashMap::default();
    for (ids, new) in old.iter().zip([pid0, pid1]) {
        renamed.extend(ids.iter().map(|&v| (v, new)));
    }
    rename_uses(&mut f.body, &renamed);
    f.body.ops.splice(0..0, header);
    true
}

/// The pass's numbering on the host: the `(pid0, pid1)` the program at
/// hardware position `(x, y)` of a `gx x gy` grid computes (tests, docs).
pub fn grouped(x: i64, y: i64, gx: i64, gy: i64) -> (i64, i64) {
    let t = y * gx + x;
    let width = GROUP_SIZE * gy;
    let first = t / width * GROUP_SIZE;
    let rows = (gx - first).min(GROUP_SIZE);
    (first + t % width % rows, t % width / rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pair_is_computed_once_on_any_grid() {
        for gx in 1..=27 {
            for gy in 1..=19 {
                let mut seen = vec![false; (gx * gy) as usize];
                for y in 0..gy {
                    for x in 0..gx {
                        let (p0, p1) = grouped(x, y, gx, gy);
                        assert!((0..gx).contains(&p0) && (0..gy).contains(&p1), "{gx}x{gy}");
                        let slot = &mut seen[(p0 * gy + p1) as usize];
                        assert!(!*slot, "{gx}x{gy}: ({p0}, {p1}) twice");
                        *slot = true;
                    }
                }
            }
        }
    }

    #[test]
    fn short_grids_keep_their_order_and_tall_ones_go_by_bands() {
        for (x, y) in [(0, 0), (3, 5), (7, 9)] {
            assert_eq!(grouped(x, y, 8, 10), (x, y));
        }
        // 16 rows: the first 8 * 4 hardware blocks cover rows 0..8 of every column.
        let band: Vec<(i64, i64)> = (0..32).map(|t| grouped(t % 16, t / 16, 16, 4)).collect();
        assert!(band.iter().all(|&(p0, _)| p0 < 8));
        assert_eq!(&band[..3], &[(0, 0), (1, 0), (2, 0)]);
        assert_eq!(band[8], (0, 1));
    }
}
