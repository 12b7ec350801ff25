//! Divide and product: tiling a layout by another, or repeating one over
//! another. All are built from concatenation, composition and complement.

use crate::algebra::{check_tiler_rank, coalesce, complement, compose_with_tiler};
use crate::error::LayoutError;
use crate::layout::Layout;
use crate::tiler::Tiler;

/// `A ⊘ B = A o (B, complement(B, size(A)))`: mode 0 of the result walks the
/// elements of `A` that the tile `B` selects, mode 1 walks the tiles.
///
/// With a by-mode tiler each mode of `A` is divided by its own tiler element
/// (modes past the tiler's rank are kept), so the result keeps `A`'s modes:
/// `((TileM,RestM), (TileN,RestN), L, ...)`.
///
/// When `B` does not tile `size(A)` exactly, the rest mode reaches past
/// `size(A)` (CuTe's behaviour); callers that need exact tiling should check
/// `size(result) == size(A)`.
///
/// ```
/// use metile_layout::{logical_divide, Layout};
/// let a: Layout = "(4,2,3):(2,1,8)".parse().unwrap();
/// let b: Layout = "4:2".parse().unwrap();
/// assert_eq!(logical_divide(&a, &b).unwrap().to_string(), "((2,2),(2,3)):((4,1),(2,8))");
/// ```
pub fn logical_divide(layout: &Layout, tiler: impl Into<Tiler>) -> Result<Layout, LayoutError> {
    divide_with_tiler(layout, &tiler.into())
}

fn divide_with_tiler(layout: &Layout, tiler: &Tiler) -> Result<Layout, LayoutError> {
    match tiler {
        Tiler::Layout(tile) => {
            let rest = complement(tile, layout.size())?;
            compose_with_tiler(layout, &Tiler::Layout(Layout::concat(&[tile.clone(), rest])?))
        }
        Tiler::Modes(parts) => by_mode(layout, tiler, parts, "logical_divide", divide_with_tiler),
    }
}

/// Applies `op` to mode `i` of `layout` with tiler element `i`, keeping the
/// modes of `layout` past the tiler's rank.
fn by_mode(
    layout: &Layout,
    tiler: &Tiler,
    parts: &[Tiler],
    operation: &'static str,
    op: fn(&Layout, &Tiler) -> Result<Layout, LayoutError>,
) -> Result<Layout, LayoutError> {
    check_tiler_rank(operation, layout, tiler)?;
    let mut modes = parts
        .iter()
        .enumerate()
        .map(|(i, part)| op(&layout.mode(i)?, part))
        .collect::<Result<Vec<_>, _>>()?;
    modes.extend(layout.modes().into_iter().skip(parts.len()));
    Layout::concat(&modes)
}

/// Splits a divide/product result that follows `tiler`'s profile into the
/// tile modes and the rest modes (CuTe's `zip2_by`): at a layout tiler the
/// result is already `(tile, rest)`; at a by-mode tiler the pairs of its
/// modes are gathered, and untiled trailing modes join the rest.
fn unzip_by_tiler(layout: &Layout, tiler: &Tiler) -> Result<(Layout, Layout), LayoutError> {
    match tiler {
        Tiler::Layout(_) => Ok((layout.mode(0)?, layout.mode(1)?)),
        Tiler::Modes(parts) => {
            let mut tiles = Vec::with_capacity(parts.len());
            let mut rests = Vec::with_capacity(layout.rank());
            for (i, part) in parts.iter().enumerate() {
                let (tile, rest) = unzip_by_tiler(&layout.mode(i)?, part)?;
                tiles.push(tile);
                rests.push(rest);
            }
            rests.extend(layout.modes().into_iter().skip(parts.len()));
            Ok((Layout::concat(&tiles)?, Layout::concat(&rests)?))
        }
    }
}

/// `logical_divide` regrouped as `((TileM,TileN,...), (RestM,RestN,...,L,...))`:
/// mode 0 is one tile, mode 1 enumerates the tiles. Mode 0 always equals
/// `composition(layout, tiler)`.
///
/// ```
/// use metile_layout::{zipped_divide, Layout, Tiler};
/// let a: Layout = "(9,(4,8)):(59,(13,1))".parse().unwrap();
/// let tiler: Tiler = "<3:3,(2,4):(1,8)>".parse().unwrap();
/// assert_eq!(
///     zipped_divide(&a, tiler).unwrap().to_string(),
///     "((3,(2,4)),(3,(2,2))):((177,(13,2)),(59,(26,1)))"
/// );
/// ```
pub fn zipped_divide(layout: &Layout, tiler: impl Into<Tiler>) -> Result<Layout, LayoutError> {
    let tiler = tiler.into();
    let divided = divide_with_tiler(layout, &tiler)?;
    let (tile, rest) = unzip_by_tiler(&divided, &tiler)?;
    Layout::concat(&[tile, rest])
}

/// Top-level modes of a layout for unpacking; a rank-1 layout (scalar or a
/// one-element tuple) stays whole, as CuTe's slice with a single `_` does.
fn unpacked(layout: Layout) -> Vec<Layout> {
    if layout.rank() == 1 {
        vec![layout]
    } else {
        layout.modes()
    }
}

/// `zipped_divide` with the rest mode unpacked:
/// `((TileM,TileN,...), RestM, RestN, ..., L, ...)`.
pub fn tiled_divide(layout: &Layout, tiler: impl Into<Tiler>) -> Result<Layout, LayoutError> {
    let zipped = zipped_divide(layout, tiler)?;
    let mut modes = vec![zipped.mode(0)?];
    modes.extend(unpacked(zipped.mode(1)?));
    Layout::concat(&modes)
}

/// `zipped_divide` with both modes unpacked:
/// `(TileM, TileN, ..., RestM, RestN, ..., L, ...)`.
pub fn flat_divide(layout: &Layout, tiler: impl Into<Tiler>) -> Result<Layout, LayoutError> {
    let zipped = zipped_divide(layout, tiler)?;
    let mut modes = unpacked(zipped.mode(0)?);
    modes.extend(unpacked(zipped.mode(1)?));
    Layout::concat(&modes)
}

/// `A ⊗ B = (A, complement(A, size(A)*cosize(B)) o B)`: mode 0 is `A`,
/// mode 1 places one copy of `A` at each element of `B`, each copy in
/// offsets no other copy uses. With a by-mode tiler each mode of `A` is
/// multiplied by its own tiler element.
///
/// ```
/// use metile_layout::{logical_product, Layout};
/// let a: Layout = "(2,2):(4,1)".parse().unwrap();
/// let b: Layout = "6:1".parse().unwrap();
/// assert_eq!(logical_product(&a, &b).unwrap().to_string(), "((2,2),(2,3)):((4,1),(2,8))");
/// ```
pub fn logical_product(block: &Layout, tiler: impl Into<Tiler>) -> Result<Layout, LayoutError> {
    product_with_tiler(block, &tiler.into())
}

fn product_with_tiler(block: &Layout, tiler: &Tiler) -> Result<Layout, LayoutError> {
    match tiler {
        Tiler::Layout(arrangement) => {
            let cotarget =
                block
                    .size()
                    .checked_mul(arrangement.cosize())
                    .ok_or_else(|| LayoutError::Overflow {
                        operation: "logical_product",
                        operands: format!("{block}, {arrangement}"),
                    })?;
            let repetitions = complement(block, cotarget)?;
            let placed = compose_with_tiler(&repetitions, tiler)?;
            Layout::concat(&[block.clone(), placed])
        }
        Tiler::Modes(parts) => by_mode(block, tiler, parts, "logical_product", product_with_tiler),
    }
}

/// Which half of a rank-matched product comes first inside each mode.
#[derive(Clone, Copy)]
enum Interleave {
    BlockFirst,
    ArrangementFirst,
}

/// The top-level modes of `layout` padded with `1:0` modes to `rank`
/// (CuTe's `append<R>`).
fn padded_modes(layout: &Layout, rank: usize) -> Result<Vec<Layout>, LayoutError> {
    let mut modes = layout.modes();
    while modes.len() < rank {
        modes.push(Layout::vector(1, 0)?);
    }
    Ok(modes)
}

fn rank_matched_product(
    block: &Layout,
    arrangement: &Layout,
    interleave: Interleave,
) -> Result<Layout, LayoutError> {
    let rank = block.rank().max(arrangement.rank());
    let block_modes = padded_modes(block, rank)?;
    let padded_block = Layout::concat(&block_modes)?;
    let padded_arrangement = Layout::concat(&padded_modes(arrangement, rank)?)?;
    let product = product_with_tiler(&padded_block, &Tiler::Layout(padded_arrangement))?;
    let repeats = product.mode(1)?;
    let modes = block_modes
        .into_iter()
        .enumerate()
        .map(|(i, block_mode)| {
            let repeat_mode = repeats.mode(i)?;
            let pair = match interleave {
                Interleave::BlockFirst => [block_mode, repeat_mode],
                Interleave::ArrangementFirst => [repeat_mode, block_mode],
            };
            coalesce(&Layout::concat(&pair)?)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Layout::concat(&modes)
}

/// Repeats `block` as contiguous blocks arranged by `arrangement`, matching
/// modes by rank: mode `i` of the result is `(block_i, repeat_i)`,
/// coalesced. Both layouts are padded with `1:0` modes to the larger rank.
///
/// ```
/// use metile_layout::{blocked_product, Layout};
/// let block: Layout = "(2,5):(5,1)".parse().unwrap();
/// let arrangement: Layout = "(3,4):(1,3)".parse().unwrap();
/// assert_eq!(
///     blocked_product(&block, &arrangement).unwrap().to_string(),
///     "(6,(5,4)):(5,(1,30))"
/// );
/// ```
pub fn blocked_product(block: &Layout, arrangement: &Layout) -> Result<Layout, LayoutError> {
    rank_matched_product(block, arrangement, Interleave::BlockFirst)
}

/// Like `blocked_product`, but the arrangement varies fastest within each
/// mode, so copies of `block` are interleaved ("raked", a cyclic
/// distribution): mode `i` of the result is `(repeat_i, block_i)`, coalesced.
///
/// ```
/// use metile_layout::{raked_product, Layout};
/// let block: Layout = "(2,5):(5,1)".parse().unwrap();
/// let arrangement: Layout = "(3,4):(1,3)".parse().unwrap();
/// assert_eq!(
///     raked_product(&block, &arrangement).unwrap().to_string(),
///     "((3,2),(4,5)):((10,5),(30,1))"
/// );
/// ```
pub fn raked_product(block: &Layout, arrangement: &Layout) -> Result<Layout, LayoutError> {
    rank_matched_product(block, arrangement, Interleave::ArrangementFirst)
}
