//! Property tests of the algebra's laws on small random layouts.

use std::collections::BTreeSet;

use metile_layout::*;
use proptest::prelude::*;

/// Builds a layout from flat modes, nesting consecutive runs according to
/// `groups` (each entry is a run length; runs of length > 1 become a nested
/// mode, and `wrap_single` wraps lone modes in a rank-1 tuple too).
fn nested(modes: &[(i64, i64)], groups: &[usize], wrap_single: bool) -> Layout {
    let mut parts = Vec::new();
    let mut rest = modes;
    let mut group_lengths = groups.iter().cycle();
    while !rest.is_empty() {
        let take = (*group_lengths.next().unwrap_or(&1)).clamp(1, rest.len());
        let (head, tail) = rest.split_at(take);
        let shape = IntTuple::tuple(head.iter().map(|m| IntTuple::Int(m.0)));
        let stride = IntTuple::tuple(head.iter().map(|m| IntTuple::Int(m.1)));
        let part = if take == 1 && !wrap_single {
            Layout::vector(head[0].0, head[0].1).unwrap()
        } else {
            Layout::new(shape, stride).unwrap()
        };
        parts.push(part);
        rest = tail;
    }
    if parts.len() == 1 {
        parts.pop().unwrap()
    } else {
        Layout::concat(&parts).unwrap()
    }
}

/// Random layouts: rank 1..=4, extents 1..=6, strides 0..=24, random nesting.
fn any_layout() -> impl Strategy<Value = Layout> {
    (
        prop::collection::vec((1i64..=6, 0i64..=24), 1..=4),
        prop::collection::vec(1usize..=3, 1..=4),
        any::<bool>(),
    )
        .prop_map(|(modes, groups, wrap)| nested(&modes, &groups, wrap))
}

/// Power-of-two layouts, for which every divisibility condition holds.
fn pow2_layout(max_rank: usize) -> impl Strategy<Value = Layout> {
    (
        prop::collection::vec((0u32..=3, prop::option::weighted(0.9, 0u32..=6)), 1..=max_rank),
        prop::collection::vec(1usize..=3, 1..=4),
    )
        .prop_map(|(modes, groups)| {
            let modes: Vec<(i64, i64)> = modes
                .into_iter()
                .map(|(e, s)| (1i64 << e, s.map_or(0, |s| 1i64 << s)))
                .collect();
            nested(&modes, &groups, false)
        })
}

/// Injective layouts that have a complement: the modes of a compact chain
/// with holes (each mode's stride is a multiple of the span below it),
/// presented in a random order.
fn complementable_layout() -> impl Strategy<Value = Layout> {
    (
        prop::collection::vec((2i64..=4, 1i64..=3), 1..=3),
        prop::collection::vec(1usize..=2, 1..=3),
        any::<u64>(),
    )
        .prop_map(|(chain, groups, seed)| {
            let mut span = 1i64;
            let mut modes: Vec<(i64, i64)> = chain
                .into_iter()
                .map(|(extent, hole)| {
                    let stride = span * hole;
                    span = stride * extent;
                    (extent, stride)
                })
                .collect();
            // Deterministic shuffle from the seed.
            let mut state = seed | 1;
            for i in (1..modes.len()).rev() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                modes.swap(i, (state % (i as u64 + 1)) as usize);
            }
            nested(&modes, &groups, false)
        })
}

/// Two layouts over the same flat shape: random strides, or compact strides
/// taken in a random mode order (so right inverses are non-trivial).
fn same_size_pair() -> impl Strategy<Value = (Layout, Layout)> {
    (
        prop::collection::vec((1i64..=6, 0i64..=24, 0i64..=24, any::<u8>()), 1..=4),
        prop::collection::vec(1usize..=3, 1..=3),
        any::<bool>(),
    )
        .prop_map(|(modes, groups, compact)| {
            let mut order: Vec<usize> = (0..modes.len()).collect();
            order.sort_by_key(|&i| modes[i].3);
            let mut compact_strides = vec![0i64; modes.len()];
            let mut span = 1;
            for &i in &order {
                compact_strides[i] = span;
                span *= modes[i].0;
            }
            let a: Vec<(i64, i64)> = modes
                .iter()
                .enumerate()
                .map(|(i, m)| (m.0, if compact { compact_strides[i] } else { m.1 }))
                .collect();
            let b: Vec<(i64, i64)> = modes
                .iter()
                .enumerate()
                .map(|(i, m)| (m.0, if m.3 % 2 == 0 { compact_strides[i] } else { m.2 }))
                .collect();
            (nested(&a, &groups, false), nested(&b, &[1], false))
        })
}

fn values(layout: &Layout) -> Vec<i64> {
    (0..layout.size()).map(|i| layout.eval(i).unwrap()).collect()
}

/// CuTe's evaluation past `size`: the last leaf absorbs the quotient.
fn eval_extended(layout: &Layout, index: i64) -> i64 {
    let extents = layout.shape().leaves();
    let strides = layout.stride().leaves();
    let mut rest = index;
    let mut offset = 0;
    for (i, (extent, stride)) in extents.iter().zip(&strides).enumerate() {
        let coord = if i + 1 == extents.len() {
            rest
        } else {
            rest % extent
        };
        rest /= extent;
        offset += coord * stride;
    }
    offset
}

fn is_injective(layout: &Layout) -> bool {
    let image: BTreeSet<i64> = values(layout).into_iter().collect();
    image.len() as i64 == layout.size()
}

fn image(layout: &Layout) -> BTreeSet<i64> {
    values(layout).into_iter().collect()
}

fn is_composition_error(error: &LayoutError) -> bool {
    matches!(
        error,
        LayoutError::StrideDivisibility { .. }
            | LayoutError::ShapeDivisibility { .. }
            | LayoutError::CompositionOverlap { .. }
    )
}

proptest! {
    #![proptest_config(ProptestConfig {
        max_global_rejects: 1_000_000,
        ..ProptestConfig::with_cases(256)
    })]

    #[test]
    fn text_round_trips(layout in any_layout()) {
        let text = layout.to_string();
        prop_assert_eq!(text.parse::<Layout>().unwrap(), layout);
    }

    #[test]
    fn parsing_garbage_never_panics(text in "[()_:,0-9 -]{0,16}") {
        let _ = text.parse::<Layout>();
        let _ = text.parse::<Tiler>();
    }

    #[test]
    fn coalesce_preserves_the_function(layout in any_layout()) {
        let result = coalesce(&layout).unwrap();
        prop_assert!(result.depth() <= 1);
        prop_assert_eq!(values(&result), values(&layout));
    }

    #[test]
    fn coalesce_by_mode_preserves_function_and_rank(layout in any_layout()) {
        let profile = IntTuple::tuple((0..layout.rank()).map(|_| IntTuple::Int(1)));
        let result = coalesce_by_mode(&layout, &profile).unwrap();
        prop_assert_eq!(result.rank(), layout.rank());
        prop_assert_eq!(values(&result), values(&layout));
    }

    #[test]
    fn filter_preserves_the_function_without_broadcast_modes(layout in any_layout()) {
        // Dropping the stride-0 modes (setting their extent to 1) is the
        // function filter keeps; its image is the layout's image.
        let shape = layout.shape().leaves();
        let stride = layout.stride().leaves();
        let kept: Vec<(i64, i64)> = shape
            .iter()
            .zip(&stride)
            .map(|(&e, &d)| if d == 0 { (1, 0) } else { (e, d) })
            .collect();
        let without_broadcast = nested(&kept, &[kept.len()], false);
        let result = filter(&layout).unwrap();
        prop_assert_eq!(values(&result), values(&without_broadcast));
        prop_assert_eq!(image(&result), image(&layout));
        if stride.iter().all(|&d| d != 0) {
            prop_assert_eq!(result, coalesce(&layout).unwrap());
        }
    }

    #[test]
    fn composition_evaluates_as_function_composition(a in any_layout(), b in any_layout()) {
        match composition(&a, &b) {
            Ok(r) => {
                prop_assert!(b.shape().is_compatible_with(r.shape()), "{} vs {}", b, r);
                for i in 0..b.size() {
                    prop_assert_eq!(r.eval(i).unwrap(), eval_extended(&a, b.eval(i).unwrap()));
                }
            }
            Err(error) => prop_assert!(is_composition_error(&error), "{}", error),
        }
    }

    #[test]
    fn composition_of_powers_of_two_always_exists(a in pow2_layout(4), b in pow2_layout(3)) {
        // Broadcast (stride-0) modes are fine; overlapping ones are not.
        prop_assume!(is_injective(&filter(&b).unwrap()));
        let r = composition(&a, &b).unwrap();
        prop_assert!(b.shape().is_compatible_with(r.shape()));
        for i in 0..b.size() {
            prop_assert_eq!(r.eval(i).unwrap(), eval_extended(&a, b.eval(i).unwrap()));
        }
    }

    #[test]
    fn by_mode_composition_composes_each_mode(a in pow2_layout(4), b0 in pow2_layout(2), b1 in pow2_layout(2)) {
        prop_assume!(a.rank() >= 2);
        prop_assume!(is_injective(&filter(&b0).unwrap()) && is_injective(&filter(&b1).unwrap()));
        let tiler = Tiler::Modes(vec![Tiler::Layout(b0.clone()), Tiler::Layout(b1.clone())]);
        let r = composition(&a, tiler).unwrap();
        prop_assert_eq!(r.rank(), 2);
        prop_assert_eq!(r.mode(0).unwrap(), composition(&a.mode(0).unwrap(), &b0).unwrap());
        prop_assert_eq!(r.mode(1).unwrap(), composition(&a.mode(1).unwrap(), &b1).unwrap());
    }

    #[test]
    fn complement_is_disjoint_and_covers(a in complementable_layout(), cotarget in 1i64..=200) {
        let r = complement(&a, cotarget).unwrap();
        let a_image = image(&a);
        let r_values = values(&r);
        prop_assert!(r_values.windows(2).all(|w| w[0] < w[1]), "{} not ordered", r);
        prop_assert!(r_values.iter().skip(1).all(|v| !a_image.contains(v)));
        let joined = Layout::concat(&[a.clone(), r]).unwrap();
        let joined_values = values(&joined);
        prop_assert!(is_injective(&joined));
        // Together they fill [0, n) exactly, for some n >= cotarget.
        let n = joined.size();
        prop_assert!(n >= cotarget);
        prop_assert_eq!(image(&joined), (0..n).collect::<BTreeSet<_>>());
        prop_assert_eq!(joined_values.len() as i64, n);
    }

    #[test]
    fn complement_refuses_non_injective_layouts(a in any_layout(), cotarget in 1i64..=64) {
        let broadcast_free = filter(&a).unwrap();
        match complement(&a, cotarget) {
            Ok(r) => {
                prop_assert!(is_injective(&broadcast_free));
                let a_image = image(&a);
                prop_assert!(values(&r).iter().skip(1).all(|v| !a_image.contains(v)));
            }
            Err(error) => prop_assert!(matches!(
                error,
                LayoutError::ComplementOverlap { .. } | LayoutError::ComplementDivisibility { .. }
            ), "{}", error),
        }
        if !is_injective(&broadcast_free) {
            prop_assert!(complement(&a, cotarget).is_err());
        }
    }

    #[test]
    fn right_inverse_is_identity_on_its_domain(a in any_layout()) {
        let r = right_inverse(&a).unwrap();
        for i in 0..r.size() {
            prop_assert_eq!(a.eval(r.eval(i).unwrap()).unwrap(), i);
        }
    }

    #[test]
    fn right_inverse_of_a_bijection_is_total(a in complementable_layout()) {
        // A complementable layout together with its complement is a bijection.
        let bijection = Layout::concat(&[a.clone(), complement(&a, a.cosize()).unwrap()]).unwrap();
        let r = right_inverse(&bijection).unwrap();
        prop_assert_eq!(r.size(), bijection.size());
    }

    #[test]
    fn left_inverse_undoes_injective_layouts(a in complementable_layout()) {
        let inverse = left_inverse(&a).unwrap();
        for i in 0..a.size() {
            prop_assert_eq!(inverse.eval(a.eval(i).unwrap()).unwrap(), i);
        }
    }

    #[test]
    fn logical_divide_sizes_multiply_out(a in pow2_layout(4), tile in complementable_layout()) {
        if let Ok(divided) = logical_divide(&a, &tile) {
            let rest = complement(&tile, a.size()).unwrap();
            prop_assert_eq!(divided.rank(), 2);
            prop_assert_eq!(divided.mode(0).unwrap().size(), tile.size());
            prop_assert_eq!(divided.mode(1).unwrap().size(), rest.size());
            prop_assert_eq!(divided.size(), tile.size() * rest.size());
            prop_assert_eq!(divided.mode(0).unwrap(), composition(&a, &tile).unwrap());
            prop_assert_eq!(zipped_divide(&a, &tile).unwrap(), divided);
        }
    }

    #[test]
    fn exact_divide_permutes_the_layout(a in pow2_layout(4), tile_exp in 0u32..=4) {
        // A compact tile whose size divides size(a) tiles it exactly.
        let tile = Layout::vector(1i64 << tile_exp, 1).unwrap();
        prop_assume!(a.size() % tile.size() == 0);
        let divided = logical_divide(&a, &tile).unwrap();
        prop_assert_eq!(divided.size(), a.size());
        let mut got = values(&divided);
        let mut want = values(&a);
        got.sort_unstable();
        want.sort_unstable();
        prop_assert_eq!(got, want);
    }

    #[test]
    fn divide_regroupings_agree(a in pow2_layout(4), t0 in 0u32..=2, t1 in 0u32..=2) {
        prop_assume!(a.rank() >= 2);
        let tiler = Tiler::Modes(vec![
            Tiler::Layout(Layout::vector(1 << t0, 1).unwrap()),
            Tiler::Layout(Layout::vector(1 << t1, 1).unwrap()),
        ]);
        if let Ok(logical) = logical_divide(&a, tiler.clone()) {
            let zipped = zipped_divide(&a, tiler.clone()).unwrap();
            let tiled = tiled_divide(&a, tiler.clone()).unwrap();
            let flat = flat_divide(&a, tiler.clone()).unwrap();
            let size = logical.size();
            prop_assert_eq!(zipped.size(), size);
            prop_assert_eq!(tiled.size(), size);
            prop_assert_eq!(flat.size(), size);
            prop_assert_eq!(zipped.mode(0).unwrap(), composition(&a, tiler).unwrap());
            prop_assert_eq!(image(&zipped), image(&logical));
            prop_assert_eq!(values(&tiled), values(&zipped));
            prop_assert_eq!(flat.rank(), 2 + 2 + (a.rank() - 2));
        }
    }

    #[test]
    fn products_exist_for_compact_blocks(shape in prop::collection::vec(1i64..=4, 1..=3), arrangement in complementable_layout(), row_major in any::<bool>()) {
        // A block without holes leaves a single rest mode, which every
        // arrangement composes with.
        let shape = IntTuple::tuple(shape.into_iter().map(IntTuple::Int));
        let block = if row_major { Layout::row_major(shape) } else { Layout::column_major(shape) }.unwrap();
        let product = logical_product(&block, &arrangement).unwrap();
        prop_assert_eq!(product.size(), block.size() * arrangement.size());
        prop_assert!(blocked_product(&block, &arrangement).is_ok());
        prop_assert!(raked_product(&block, &arrangement).is_ok());
    }

    #[test]
    fn products_sizes_multiply_out(block in complementable_layout(), arrangement in complementable_layout()) {
        // An arrangement whose strides cut through the holes of the block has
        // no product (a divisibility error); otherwise the sizes multiply.
        let product = match logical_product(&block, &arrangement) {
            Ok(product) => product,
            Err(error) => {
                prop_assert!(is_composition_error(&error), "{}", error);
                return Ok(());
            }
        };
        prop_assert_eq!(product.mode(0).unwrap(), block.clone());
        prop_assert_eq!(product.size(), block.size() * arrangement.size());
        prop_assert!(is_injective(&product));

        let (Ok(blocked), Ok(raked)) = (
            blocked_product(&block, &arrangement),
            raked_product(&block, &arrangement),
        ) else {
            return Ok(());
        };
        let rank = block.rank().max(arrangement.rank());
        for result in [&blocked, &raked] {
            prop_assert_eq!(result.size(), block.size() * arrangement.size());
            prop_assert_eq!(result.rank(), rank);
            prop_assert!(is_injective(result));
        }
        prop_assert_eq!(image(&blocked), image(&raked));
    }

    #[test]
    fn max_common_vector_is_the_identity_prefix((a, b) in same_size_pair()) {
        let n = max_common_vector(&a, &b).unwrap();
        let inverse = right_inverse(&b).unwrap();
        prop_assert!(n >= 1 && n <= inverse.size());
        for k in 0..n {
            let x = inverse.eval(k).unwrap();
            prop_assert_eq!(a.eval(x).unwrap(), k);
            prop_assert_eq!(b.eval(x).unwrap(), k);
        }
        if n < inverse.size() {
            prop_assert_ne!(a.eval(inverse.eval(n).unwrap()).unwrap(), n);
        }
        prop_assert_eq!(max_common_vector(&b, &b).unwrap(), inverse.size());
    }

    #[test]
    fn swizzle_is_a_bijection(bits in 0i64..=3, base in 0i64..=3, extra in 0i64..=2, negative in any::<bool>()) {
        let shift = if negative { -(bits + extra) } else { bits + extra };
        prop_assume!(shift != 0 || bits == 0);
        let swizzle = Swizzle::new(bits, base, shift).unwrap();
        let domain = 1i64 << (bits + base + shift.abs());
        let mut seen = vec![false; domain as usize];
        for x in 0..domain {
            let y = swizzle.apply(x);
            prop_assert!((0..domain).contains(&y));
            prop_assert!(!seen[y as usize]);
            seen[y as usize] = true;
            prop_assert_eq!(swizzle.apply(y), x);
            prop_assert_eq!(y & ((1 << base) - 1), x & ((1 << base) - 1));
        }
    }

    #[test]
    fn swizzled_layout_applies_the_swizzle_after_the_layout(layout in pow2_layout(3), offset in 0i64..=64) {
        let swizzle = Swizzle::new(2, 1, 3).unwrap();
        let swizzled = SwizzledLayout::new(swizzle, offset, layout.clone());
        for i in 0..layout.size() {
            prop_assert_eq!(swizzled.eval(i).unwrap(), swizzle.apply(offset + layout.eval(i).unwrap()));
        }
        let text = swizzled.to_string();
        prop_assert_eq!(text.parse::<SwizzledLayout>().unwrap(), swizzled);
    }
}
