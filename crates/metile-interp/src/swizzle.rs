//! `tile_swizzle`: program-order remappings of a 2-D grid that are bijections for
//! every grid size. These are the reference definitions; GPU lowerings implement
//! the same formulas.
//!
//! Let `GM = grid[0]`, `GN = grid[1]` and `t = pid_m * GN + pid_n`, the program's
//! linear rank in launch order.
//!
//! * **morton**: the `t`-th in-grid cell of the Z-order walk over the grid. Take the
//!   smallest power-of-two square `S >= max(GM, GN)` anchored at `(0, 0)`. At each
//!   level split the current square into quadrants visited in Z order: (m low, n low),
//!   (m low, n high), (m high, n low), (m high, n high). Each quadrant holds
//!   `count` in-grid cells (the area of its intersection with the grid); if
//!   `t < count` descend into it, else subtract `count` and try the next. Stop when
//!   the square's side is `<= block_size`, then take the remaining `t` row-major
//!   inside the square clipped to the grid.
//! * **diagonal**: `m' = pid_m`, `n' = (pid_n + pid_m * block_size) mod GN`.
//!
//! Inputs outside the grid (`t` not in `0..GM*GN`, or a negative id) are returned
//! unchanged by morton; diagonal applies its formula (with a non-negative modulus).

use metile_ir::SwizzlePattern;

/// Cells of `[m0, m0 + side) x [n0, n0 + side)` that lie inside the `gm x gn` grid.
fn cells_inside(m0: i64, n0: i64, side: i64, gm: i64, gn: i64) -> i64 {
    let rows = (m0 + side).min(gm) - m0;
    let cols = (n0 + side).min(gn) - n0;
    rows.max(0) * cols.max(0)
}

pub(crate) fn morton(pid_m: i64, pid_n: i64, gm: i64, gn: i64, block_size: i64) -> (i64, i64) {
    if gm <= 0 || gn <= 0 || pid_m < 0 || pid_n < 0 || pid_n >= gn || pid_m >= gm {
        return (pid_m, pid_n);
    }
    let mut t = pid_m * gn + pid_n;
    let mut side = 1i64;
    while side < gm.max(gn) {
        side *= 2;
    }
    let (mut m0, mut n0) = (0i64, 0i64);
    while side > block_size.max(1) {
        let half = side / 2;
        let mut descended = false;
        for (dm, dn) in [(0, 0), (0, half), (half, 0), (half, half)] {
            let count = cells_inside(m0 + dm, n0 + dn, half, gm, gn);
            if t < count {
                m0 += dm;
                n0 += dn;
                descended = true;
                break;
            }
            t -= count;
        }
        if !descended {
            // Unreachable for t inside the grid: the quadrants partition the square.
            return (pid_m, pid_n);
        }
        side = half;
    }
    let width = (n0 + side).min(gn) - n0;
    if width <= 0 {
        return (pid_m, pid_n);
    }
    (m0 + t / width, n0 + t % width)
}

pub(crate) fn diagonal(pid_m: i64, pid_n: i64, gn: i64, block_size: i64) -> (i64, i64) {
    if gn <= 0 {
        return (pid_m, pid_n);
    }
    let n = (i128::from(pid_n) + i128::from(pid_m) * i128::from(block_size)).rem_euclid(i128::from(gn));
    (pid_m, n as i64)
}

pub(crate) fn swizzle(
    pattern: SwizzlePattern,
    pid_m: i64,
    pid_n: i64,
    grid_m: i64,
    grid_n: i64,
    block_size: i64,
) -> (i64, i64) {
    match pattern {
        SwizzlePattern::Morton => morton(pid_m, pid_n, grid_m, grid_n, block_size),
        SwizzlePattern::Diagonal => diagonal(pid_m, pid_n, grid_n, block_size),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    fn is_bijection(pattern: SwizzlePattern, gm: i64, gn: i64, block: i64) -> bool {
        let mut seen = HashSet::new();
        for m in 0..gm {
            for n in 0..gn {
                let (a, b) = swizzle(pattern, m, n, gm, gn, block);
                if !(0..gm).contains(&a) || !(0..gn).contains(&b) || !seen.insert((a, b)) {
                    return false;
                }
            }
        }
        seen.len() as i64 == gm * gn
    }

    #[test]
    fn morton_walks_z_order_on_a_square() {
        // 4x4 grid, block 1: the classic Z curve.
        let order: Vec<(i64, i64)> = (0..16).map(|t| morton(t / 4, t % 4, 4, 4, 1)).collect();
        assert_eq!(
            &order[..8],
            &[(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (0, 3), (1, 2), (1, 3)]
        );
        assert_eq!(order[8], (2, 0));
        // block 2: 2x2 leaves walked row-major.
        let order: Vec<(i64, i64)> = (0..4).map(|t| morton(t / 4, t % 4, 4, 4, 2)).collect();
        assert_eq!(order, vec![(0, 0), (0, 1), (1, 0), (1, 1)]);
    }

    #[test]
    fn morton_clips_to_non_square_grids() {
        // 3x5 grid, block 1: S = 8. The first quadrant (0..4, 0..4) holds 3x4 = 12 cells.
        let order: Vec<(i64, i64)> = (0..15).map(|t| morton(t / 5, t % 5, 3, 5, 1)).collect();
        assert_eq!(&order[..4], &[(0, 0), (0, 1), (1, 0), (1, 1)]);
        assert_eq!(&order[12..], &[(0, 4), (1, 4), (2, 4)]);
    }

    #[test]
    fn diagonal_shifts_rows() {
        assert_eq!(diagonal(1, 3, 4, 1), (1, 0));
        assert_eq!(diagonal(2, 0, 4, 3), (2, 2));
    }

    #[test]
    fn both_patterns_are_bijections_on_small_grids() {
        for gm in 1..12 {
            for gn in 1..12 {
                for block in [1, 2, 3, 4, 5, 8, 16] {
                    assert!(
                        is_bijection(SwizzlePattern::Morton, gm, gn, block),
                        "morton {gm}x{gn}/{block}"
                    );
                    assert!(
                        is_bijection(SwizzlePattern::Diagonal, gm, gn, block),
                        "diag {gm}x{gn}/{block}"
                    );
                }
            }
        }
    }

    proptest! {
        #[test]
        fn swizzles_are_bijections(gm in 1i64..70, gn in 1i64..70, block in 1i64..80) {
            prop_assert!(is_bijection(SwizzlePattern::Morton, gm, gn, block));
            prop_assert!(is_bijection(SwizzlePattern::Diagonal, gm, gn, block));
        }
    }
}
