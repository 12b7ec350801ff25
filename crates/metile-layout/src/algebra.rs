//! Coalesce, filter, composition, complement and the inverses.
//!
//! All functions treat layouts the way CuTe treats fully static layouts:
//! every value is known, so size-1 modes are always dropped when simplifying
//! and every divisibility condition is checked (and reported as an error
//! instead of producing a layout that is not the requested function).

use crate::error::LayoutError;
use crate::int_tuple::IntTuple;
use crate::layout::Layout;
use crate::tiler::Tiler;

fn overflow(operation: &'static str, operands: impl FnOnce() -> String) -> LayoutError {
    LayoutError::Overflow {
        operation,
        operands: operands(),
    }
}

fn has_negative_stride(layout: &Layout) -> bool {
    layout.stride().leaves().iter().any(|&d| d < 0)
}

/// Merges adjacent `(extent, stride)` pairs where the second continues the
/// first (`stride1 == extent0 * stride0`) and drops size-1 modes. Any greedy
/// order gives the same maximal runs, so one left-to-right pass suffices.
pub(crate) fn coalesce_modes(modes: &[(i64, i64)]) -> Result<Vec<(i64, i64)>, LayoutError> {
    let mut merged: Vec<(i64, i64)> = Vec::with_capacity(modes.len());
    for &(extent, stride) in modes {
        if extent == 1 {
            continue;
        }
        match merged.last_mut() {
            Some(last) if i128::from(last.0) * i128::from(last.1) == i128::from(stride) => {
                last.0 = last
                    .0
                    .checked_mul(extent)
                    .ok_or_else(|| overflow("coalesce", || format!("{modes:?}")))?;
            }
            _ => merged.push((extent, stride)),
        }
    }
    Ok(merged)
}

/// Simplifies a layout without changing it as a function of the linear
/// index: flattens it, drops size-1 modes and merges contiguous neighbours.
/// The result is a scalar layout when one mode remains and `1:0` when none
/// does.
///
/// ```
/// use metile_layout::{coalesce, Layout};
/// let layout: Layout = "(2,(1,6)):(1,(6,2))".parse().unwrap();
/// assert_eq!(coalesce(&layout).unwrap().to_string(), "12:1");
/// ```
///
/// Never fails for a valid layout; the `Result` keeps the algebra uniform.
pub fn coalesce(layout: &Layout) -> Result<Layout, LayoutError> {
    Layout::from_flat_modes(&coalesce_modes(&layout.flat_modes())?)
}

/// Applies `op` at the integer terminals of `profile` and keeps the modes of
/// `layout` past the profile's rank unchanged (CuTe's `transform_layout`).
fn apply_by_profile(
    layout: &Layout,
    profile: &IntTuple,
    operation: &'static str,
    op: &dyn Fn(&Layout) -> Result<Layout, LayoutError>,
) -> Result<Layout, LayoutError> {
    let IntTuple::Tuple(parts) = profile else {
        return op(layout);
    };
    if parts.len() > layout.rank() {
        return Err(LayoutError::RankMismatch {
            operation,
            lhs: layout.to_string(),
            rhs: profile.to_string(),
            detail: format!(
                "profile has rank {} but the layout only rank {}",
                parts.len(),
                layout.rank()
            ),
        });
    }
    let mut modes = parts
        .iter()
        .enumerate()
        .map(|(i, part)| apply_by_profile(&layout.mode(i)?, part, operation, op))
        .collect::<Result<Vec<_>, _>>()?;
    modes.extend(layout.modes().into_iter().skip(parts.len()));
    Layout::concat(&modes)
}

/// Coalesces each sub-layout found at an integer of `profile`, keeping the
/// tuple structure above it: with profile `(1,1)` a rank-2 layout stays rank
/// 2. An integer profile coalesces the whole layout.
///
/// ```
/// use metile_layout::{coalesce_by_mode, Layout};
/// let layout: Layout = "(2,(1,6)):(1,(6,2))".parse().unwrap();
/// let result = coalesce_by_mode(&layout, &"(1,1)".parse().unwrap()).unwrap();
/// assert_eq!(result.to_string(), "(2,6):(1,2)");
/// ```
pub fn coalesce_by_mode(layout: &Layout, profile: &IntTuple) -> Result<Layout, LayoutError> {
    apply_by_profile(layout, profile, "coalesce", &coalesce)
}

/// Coalesce after removing stride-0 modes: the result enumerates each
/// distinct offset of the layout once.
///
/// ```
/// use metile_layout::{filter, Layout};
/// let layout: Layout = "(4,(2,3)):(1,(0,4))".parse().unwrap();
/// assert_eq!(filter(&layout).unwrap().to_string(), "12:1");
/// ```
pub fn filter(layout: &Layout) -> Result<Layout, LayoutError> {
    let modes: Vec<(i64, i64)> = layout
        .flat_modes()
        .into_iter()
        .map(|(extent, stride)| if stride == 0 { (1, 0) } else { (extent, stride) })
        .collect();
    Layout::from_flat_modes(&coalesce_modes(&modes)?)
}

/// `filter` applied at the integer terminals of `profile`.
pub fn filter_by_mode(layout: &Layout, profile: &IntTuple) -> Result<Layout, LayoutError> {
    apply_by_profile(layout, profile, "filter", &filter)
}

/// Functional composition `lhs o rhs`: the layout `R` with
/// `R(c) == lhs(rhs(c))` for every coordinate `c` of `rhs`, and with a shape
/// compatible with `rhs`'s.
///
/// `rhs` is a [`Tiler`]: a layout (composition of 1-D functions), or a
/// by-mode list whose element `i` is composed with mode `i` of `lhs`. With a
/// by-mode tiler, modes of `lhs` past the tiler's rank are dropped, as in
/// CuTe.
///
/// As in CuTe, the last mode of `lhs` is treated as unbounded, so `rhs` may
/// reach past `size(lhs)`.
///
/// Errors when a stride of `rhs` does not divide into (or is not a multiple
/// of) the extents of `lhs` it steps over, when an extent of `rhs` cannot be
/// split over those extents, when modes of `rhs` overlap so that their
/// offsets carry across a mode boundary of `lhs` (then `lhs o rhs` is not a
/// layout shaped like `rhs`; CuTe silently returns a wrong layout here), or
/// when `rhs` has a negative stride.
///
/// ```
/// use metile_layout::{composition, Layout, Tiler};
/// let a: Layout = "(6,2):(8,2)".parse().unwrap();
/// let b: Layout = "(4,3):(3,1)".parse().unwrap();
/// assert_eq!(composition(&a, &b).unwrap().to_string(), "((2,2),3):((24,2),8)");
///
/// let a: Layout = "(12,(4,8)):(59,(13,1))".parse().unwrap();
/// let tiler: Tiler = "<3:4,8:2>".parse().unwrap();
/// assert_eq!(composition(&a, tiler).unwrap().to_string(), "(3,(2,4)):(236,(26,1))");
///
/// let bad: Layout = "(4,3):(1,10)".parse().unwrap();
/// assert!(composition(&bad, &"6:1".parse::<Layout>().unwrap()).is_err());
/// ```
pub fn composition(lhs: &Layout, rhs: impl Into<Tiler>) -> Result<Layout, LayoutError> {
    compose_with_tiler(lhs, &rhs.into())
}

pub(crate) fn compose_with_tiler(lhs: &Layout, tiler: &Tiler) -> Result<Layout, LayoutError> {
    match tiler {
        Tiler::Layout(rhs) => compose_layouts(lhs, rhs),
        Tiler::Modes(parts) => {
            check_tiler_rank("composition", lhs, tiler)?;
            let modes = parts
                .iter()
                .enumerate()
                .map(|(i, part)| compose_with_tiler(&lhs.mode(i)?, part))
                .collect::<Result<Vec<_>, _>>()?;
            Layout::concat(&modes)
        }
    }
}

pub(crate) fn check_tiler_rank(
    operation: &'static str,
    layout: &Layout,
    tiler: &Tiler,
) -> Result<(), LayoutError> {
    if tiler.rank() > layout.rank() {
        return Err(LayoutError::RankMismatch {
            operation,
            lhs: layout.to_string(),
            rhs: tiler.to_string(),
            detail: format!(
                "tiler has {} modes but the layout only {}",
                tiler.rank(),
                layout.rank()
            ),
        });
    }
    Ok(())
}

/// The left operand of a composition, flattened and coalesced, with its last
/// mode unbounded (CuTe's `coalesce_x`): `body` lists the bounded modes and
/// `tail_stride` is the stride of the unbounded one. Coalescing must keep the
/// function beyond `size(lhs)`, so a trailing size-1 mode keeps its stride.
struct ComposeContext<'a> {
    lhs: &'a Layout,
    rhs: &'a Layout,
    body: Vec<(i64, i64)>,
    tail_stride: i64,
}

impl<'a> ComposeContext<'a> {
    fn new(lhs: &'a Layout, rhs: &'a Layout) -> Result<Self, LayoutError> {
        let mut modes = lhs.flat_modes();
        let mut tail_stride = modes.pop().map_or(0, |(_, stride)| stride);
        let mut body_from_back: Vec<(i64, i64)> = Vec::with_capacity(modes.len());
        for &(extent, stride) in modes.iter().rev() {
            if extent == 1 {
                continue;
            }
            let continues =
                |next_stride: i64| i128::from(extent) * i128::from(stride) == i128::from(next_stride);
            match body_from_back.last_mut() {
                None if continues(tail_stride) => tail_stride = stride,
                Some(front) if continues(front.1) => {
                    front.0 = front
                        .0
                        .checked_mul(extent)
                        .ok_or_else(|| overflow("composition", || format!("{lhs} o {rhs}")))?;
                    front.1 = stride;
                }
                _ => body_from_back.push((extent, stride)),
            }
        }
        body_from_back.reverse();
        Ok(ComposeContext {
            lhs,
            rhs,
            body: body_from_back,
            tail_stride,
        })
    }

    fn mul(&self, a: i64, b: i64) -> Result<i64, LayoutError> {
        a.checked_mul(b)
            .ok_or_else(|| overflow("composition", || format!("{} o {}", self.lhs, self.rhs)))
    }

    fn stride_error(&self, detail: String) -> LayoutError {
        LayoutError::StrideDivisibility {
            lhs: self.lhs.to_string(),
            rhs: self.rhs.to_string(),
            detail,
        }
    }

    fn shape_error(&self, detail: String) -> LayoutError {
        LayoutError::ShapeDivisibility {
            lhs: self.lhs.to_string(),
            rhs: self.rhs.to_string(),
            detail,
        }
    }

    /// Each leaf of `rhs` is composed on its own, and the results are summed
    /// per coordinate. That equals `lhs` applied to the summed offset only if
    /// adding the leaves' offsets never carries across a mode boundary of
    /// `lhs` (a carry changes which stride applies). This checks every
    /// boundary `P` against the worst case: the largest residues modulo `P`
    /// of all leaves added together must stay below `P`. Injective operands
    /// whose strides satisfy the divisibility conditions always pass; it can
    /// only fail when the modes of `rhs` overlap.
    fn check_no_carry(&self, rhs: &Layout) -> Result<(), LayoutError> {
        let leaves: Vec<(i128, i128)> = rhs
            .flat_modes()
            .into_iter()
            .filter(|&(extent, step)| extent > 1 && step != 0)
            .map(|(extent, step)| (i128::from(extent), i128::from(step)))
            .collect();
        let mut boundary = 1i128;
        for &(mode_extent, _) in &self.body {
            boundary *= i128::from(mode_extent);
            let worst: i128 = leaves
                .iter()
                .map(|&(extent, step)| largest_residue(extent, step, boundary))
                .sum();
            if worst >= boundary {
                return Err(LayoutError::CompositionOverlap {
                    lhs: self.lhs.to_string(),
                    rhs: self.rhs.to_string(),
                    detail: format!(
                        "offsets of different modes of the right operand can add up past \
                         {boundary}, a mode boundary of the coalesced left operand"
                    ),
                });
            }
        }
        Ok(())
    }

    /// Composes with every leaf of `shape:stride`, keeping its hierarchy.
    fn compose_tree(&self, shape: &IntTuple, stride: &IntTuple) -> Result<Layout, LayoutError> {
        match (shape, stride) {
            (IntTuple::Int(extent), IntTuple::Int(step)) => self.compose_leaf(*extent, *step),
            (IntTuple::Tuple(extents), IntTuple::Tuple(steps)) if extents.len() == steps.len() => {
                let parts = extents
                    .iter()
                    .zip(steps)
                    .map(|(e, s)| self.compose_tree(e, s))
                    .collect::<Result<Vec<_>, _>>()?;
                Layout::concat(&parts)
            }
            _ => Err(LayoutError::NotCongruent {
                shape: shape.to_string(),
                stride: stride.to_string(),
            }),
        }
    }

    /// `lhs o extent:step` for integral `extent` and `step >= 0`.
    fn compose_leaf(&self, extent: i64, step: i64) -> Result<Layout, LayoutError> {
        if step == 0 {
            return Layout::vector(extent, 0);
        }
        if self.body.is_empty() {
            return Layout::vector(extent, self.mul(step, self.tail_stride)?);
        }

        // Skip to every `step`-th element: divide `step` out of the extents
        // from the left. Each extent must divide the remaining step or be a
        // multiple of it; otherwise the walk crosses that mode's boundary at
        // an offset no single stride can express.
        let mut remaining_step = step;
        let mut strided: Vec<(i64, i64)> = Vec::with_capacity(self.body.len());
        for (i, &(mode_extent, mode_stride)) in self.body.iter().enumerate() {
            if remaining_step == 1 {
                strided.push((mode_extent, mode_stride));
            } else if mode_extent % remaining_step == 0 {
                let scaled = self.mul(mode_stride, remaining_step)?;
                strided.push((mode_extent / remaining_step, scaled));
                remaining_step = 1;
            } else if remaining_step % mode_extent == 0 {
                remaining_step /= mode_extent;
            } else if i128::from(extent - 1) * i128::from(remaining_step) < i128::from(mode_extent) {
                // The whole walk stays inside this mode, so no boundary is crossed.
                let stride = self.mul(remaining_step, mode_stride)?;
                return Layout::from_flat_modes(&coalesce_modes(&[(extent, stride)])?);
            } else {
                return Err(self.stride_error(format!(
                    "for {extent}:{step}, the remaining stride {remaining_step} neither divides \
                     nor is a multiple of extent {mode_extent} of mode {i} of the coalesced left operand"
                )));
            }
        }
        let tail_stride = self.mul(self.tail_stride, remaining_step)?;

        // Keep the first `extent` elements: mod `extent` out of the strided
        // extents from the left. A mode larger than what is left is cut; a
        // smaller one must divide what is left.
        let mut remaining_extent = extent;
        let mut kept: Vec<(i64, i64)> = Vec::with_capacity(strided.len() + 1);
        for (mode_extent, mode_stride) in strided {
            if remaining_extent == 1 {
                break;
            }
            if mode_extent >= remaining_extent {
                kept.push((remaining_extent, mode_stride));
                remaining_extent = 1;
            } else if remaining_extent % mode_extent == 0 {
                kept.push((mode_extent, mode_stride));
                remaining_extent /= mode_extent;
            } else {
                return Err(self.shape_error(format!(
                    "for {extent}:{step}, the remaining extent {remaining_extent} is not a multiple \
                     of the next strided extent {mode_extent}"
                )));
            }
        }
        if remaining_extent > 1 {
            kept.push((remaining_extent, tail_stride));
        }
        Layout::from_flat_modes(&coalesce_modes(&kept)?)
    }
}

/// `max over k < extent of (k * step) mod boundary`, for the step/boundary
/// pairs that composition lets through (one divides the other, or the whole
/// walk stays below the boundary); anything else is answered with the
/// pessimistic `boundary - 1`.
fn largest_residue(extent: i128, step: i128, boundary: i128) -> i128 {
    if step % boundary == 0 {
        0
    } else if (extent - 1) * step < boundary {
        (extent - 1) * step
    } else if boundary % step == 0 {
        step * (extent.min(boundary / step) - 1)
    } else {
        boundary - 1
    }
}

fn compose_layouts(lhs: &Layout, rhs: &Layout) -> Result<Layout, LayoutError> {
    if has_negative_stride(rhs) {
        return Err(LayoutError::NegativeStride {
            operation: "the right operand of composition",
            layout: rhs.to_string(),
        });
    }
    let context = ComposeContext::new(lhs, rhs)?;
    let result = context.compose_tree(rhs.shape(), rhs.stride())?;
    context.check_no_carry(rhs)?;
    Ok(result)
}

/// The complement of `layout` with respect to the cotarget size `cotarget`:
/// the ordered layout `R` (positive, increasing strides) that enumerates the
/// repetitions of `layout` needed to cover `[0, cotarget)`.
///
/// Postconditions: `R(i)` for `i >= 1` is never an offset of `layout`, and
/// the concatenation `(layout, R)` maps its domain one-to-one onto
/// `[0, n)` for some `n >= cotarget`.
///
/// Errors when `layout` has negative strides, when its (filtered) modes
/// overlap or interleave, or when the gap under a mode is not a whole number
/// of repetitions of the modes below it; no ordered complement exists then.
///
/// ```
/// use metile_layout::{complement, Layout};
/// let layout: Layout = "(2,2):(1,6)".parse().unwrap();
/// assert_eq!(complement(&layout, 24).unwrap().to_string(), "(3,2):(2,12)");
/// assert!(complement(&"(2,2):(1,1)".parse().unwrap(), 8).is_err());
/// ```
pub fn complement(layout: &Layout, cotarget: i64) -> Result<Layout, LayoutError> {
    if cotarget < 1 {
        return Err(LayoutError::InvalidCotarget { cotarget });
    }
    if has_negative_stride(layout) {
        return Err(LayoutError::NegativeStride {
            operation: "complement",
            layout: layout.to_string(),
        });
    }
    let mut modes = filter(layout)?.flat_modes();
    modes.retain(|&(extent, stride)| extent > 1 && stride != 0);
    modes.sort_by_key(|&(_, stride)| stride);

    // `span` is one past the largest offset reached by the modes seen so
    // far together with the holes filled under them. It only exceeds i64
    // after the last mode, where it needs no repetitions if it already
    // covers the cotarget.
    let mut span = 1i128;
    let mut result: Vec<(i64, i64)> = Vec::with_capacity(modes.len() + 1);
    for &(extent, stride) in &modes {
        let wide_stride = i128::from(stride);
        if wide_stride < span {
            return Err(LayoutError::ComplementOverlap {
                layout: layout.to_string(),
                detail: format!(
                    "mode {extent}:{stride} starts inside the span {span} of the modes with smaller strides"
                ),
            });
        }
        if wide_stride % span != 0 {
            return Err(LayoutError::ComplementDivisibility {
                layout: layout.to_string(),
                detail: format!(
                    "stride {stride} of mode {extent}:{stride} is not a multiple of {span}, \
                     the span of the modes with smaller strides"
                ),
            });
        }
        // span <= stride here, so both fit in i64.
        result.push(((wide_stride / span) as i64, span as i64));
        span = wide_stride * i128::from(extent);
    }
    let repetitions = (i128::from(cotarget) - 1) / span + 1;
    if repetitions > 1 {
        let span = i64::try_from(span)
            .map_err(|_| overflow("complement", || format!("{layout} with cotarget {cotarget}")))?;
        // repetitions < cotarget here, so it fits.
        result.push((repetitions as i64, span));
    }
    Layout::from_flat_modes(&coalesce_modes(&result)?)
}

/// The right inverse `R` of `layout`: `layout(R(i)) == i` for every
/// `i < size(R)`.
///
/// Built from the chain of modes that enumerates `0, 1, 2, ...`
/// contiguously: start from the stride-1 mode of the coalesced layout, then
/// the mode whose stride equals the previous extent times stride, and so on.
/// `R` maps each index to the colexicographic position of that chain. Modes
/// with negative strides never join the chain. When no stride-1 mode exists
/// the result is `1:0`.
///
/// ```
/// use metile_layout::{right_inverse, Layout};
/// let layout: Layout = "(4,2):(2,1)".parse().unwrap();
/// let inverse = right_inverse(&layout).unwrap();
/// assert_eq!(inverse.to_string(), "(2,4):(4,1)");
/// for i in 0..inverse.size() {
///     assert_eq!(layout.eval(inverse.eval(i).unwrap()).unwrap(), i);
/// }
/// ```
pub fn right_inverse(layout: &Layout) -> Result<Layout, LayoutError> {
    let modes = coalesce(layout)?.flat_modes();
    let mut colex_strides = Vec::with_capacity(modes.len());
    let mut running = 1i64;
    for &(extent, _) in &modes {
        colex_strides.push(running);
        // Bounded by size(layout), which fits in i64.
        running = running.saturating_mul(extent);
    }
    let mut chain: Vec<(i64, i64)> = Vec::new();
    let mut next_stride = 1i64;
    // Each link multiplies `next_stride` by an extent >= 2, so this ends.
    while let Some(i) = modes
        .iter()
        .position(|&(extent, stride)| extent > 1 && stride == next_stride)
    {
        chain.push((modes[i].0, colex_strides[i]));
        match modes[i].0.checked_mul(next_stride) {
            Some(stride) => next_stride = stride,
            None => break,
        }
    }
    Layout::from_flat_modes(&chain)
}

/// The left inverse `R` of an injective `layout`: `R(layout(i)) == i` for
/// every `i < size(layout)`. Computed as the right inverse of
/// `(layout, complement(layout))`. For a non-injective layout that still has
/// a complement (stride-0 modes only), `R` picks one preimage per offset.
///
/// ```
/// use metile_layout::{left_inverse, Layout};
/// let layout: Layout = "(2,2):(4,1)".parse().unwrap();
/// let inverse = left_inverse(&layout).unwrap();
/// for i in 0..layout.size() {
///     assert_eq!(inverse.eval(layout.eval(i).unwrap()).unwrap(), i);
/// }
/// ```
pub fn left_inverse(layout: &Layout) -> Result<Layout, LayoutError> {
    let cotarget = filter(layout)?.cosize();
    let rest = complement(layout, cotarget)?;
    right_inverse(&Layout::concat(&[layout.clone(), rest])?)
}

/// The number `N` of leading contiguous elements that `a` and `b` map
/// identically: with `R = right_inverse(b)`, `a(R(k)) == k == b(R(k))` for
/// all `k < N`. Always at least 1. This is the widest vector a copy from one
/// layout to the other can move per access.
///
/// Computed as CuTe does, from the leading stride-1 mode of
/// `coalesce(a o R)`; when that composition violates a divisibility
/// condition, the same prefix is measured element by element instead (cost
/// proportional to the answer).
///
/// Errors when the layouts differ in size.
///
/// ```
/// use metile_layout::{max_common_vector, Layout};
/// let a: Layout = "(8,4):(1,8)".parse().unwrap();
/// let b: Layout = "(8,4):(1,16)".parse().unwrap();
/// assert_eq!(max_common_vector(&a, &b).unwrap(), 8);
/// ```
pub fn max_common_vector(a: &Layout, b: &Layout) -> Result<i64, LayoutError> {
    if a.size() != b.size() {
        return Err(LayoutError::SizeMismatch {
            operation: "max_common_vector",
            lhs: a.to_string(),
            rhs: b.to_string(),
        });
    }
    let inverse = right_inverse(b)?;
    match composition(a, &inverse) {
        Ok(common) => {
            let leading = coalesce(&common)?.flat_modes().first().copied();
            Ok(match leading {
                Some((extent, 1)) => extent,
                _ => 1,
            })
        }
        Err(
            LayoutError::StrideDivisibility { .. }
            | LayoutError::ShapeDivisibility { .. }
            | LayoutError::CompositionOverlap { .. },
        ) => {
            let mut count = 1i64;
            while count < inverse.size() && a.eval(inverse.eval(count)?)? == count {
                count += 1;
            }
            Ok(count)
        }
        Err(other) => Err(other),
    }
}
