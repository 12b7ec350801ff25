//! Every precondition failure is an error naming the condition and the
//! operands; hostile input never panics.

use metile_layout::*;

fn l(text: &str) -> Layout {
    text.parse().unwrap()
}

fn message(result: Result<impl std::fmt::Debug, LayoutError>) -> String {
    result.unwrap_err().to_string()
}

#[test]
fn parse_errors() {
    for text in [
        "(4,8):(1",
        "()",
        "(4,)",
        "4:",
        ":1",
        "(4,8):(1,2,3)",
        "99999999999999999999",
        "(4,8) junk",
        "(0,4)",
        "",
    ] {
        let error = text.parse::<Layout>().unwrap_err();
        assert!(matches!(error, LayoutError::Parse { .. }), "{text}: {error}");
        assert!(error.to_string().starts_with("parse error at offset"), "{error}");
    }
    let deep = format!("{}8{}", "(".repeat(100_000), ")".repeat(100_000));
    assert!(deep.parse::<Layout>().is_err());
    let deep_tiler = format!("{}8{}", "<".repeat(100_000), ">".repeat(100_000));
    assert!(deep_tiler.parse::<Tiler>().is_err());
    assert!("Sw<3,4>".parse::<Swizzle>().is_err());
}

#[test]
fn construction_errors() {
    let err = Layout::new(IntTuple::from([4, 8]), IntTuple::from([1])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "shape (4,8) and stride (1) are not congruent (different nesting)"
    );
    assert!(matches!(
        Layout::new(IntTuple::from([0, 8]), IntTuple::from([1, 1])),
        Err(LayoutError::NonPositiveShape { .. })
    ));
    assert!(matches!(
        Layout::column_major(IntTuple::from([1 << 40, 1 << 40])),
        Err(LayoutError::Overflow { .. })
    ));
    assert!(matches!(
        Layout::vector(4, i64::MAX / 2),
        Err(LayoutError::Overflow { .. })
    ));
    assert!(matches!(
        Layout::new(IntTuple::Tuple(vec![]), IntTuple::Tuple(vec![])),
        Err(LayoutError::EmptyTuple { .. })
    ));
    assert!(Layout::concat(&[]).is_err());
}

#[test]
fn evaluation_errors() {
    let layout = l("(3,(2,3)):(3,(12,1))");
    assert_eq!(message(layout.eval(18)), "index 18 is outside [0, 18)");
    assert!(layout.eval(-1).is_err());
    assert_eq!(
        message(layout.eval_coord(&IntTuple::from([1, 6]))),
        "coordinate (1,6) does not fit shape (3,(2,3))"
    );
    assert!(layout.eval_coord(&IntTuple::from([1, 2, 3])).is_err());
    assert!(layout.eval_coord(&"((1),(1,1))".parse().unwrap()).is_err());
    assert_eq!(
        message(layout.mode(2)),
        "mode 2 does not exist in rank-2 layout (3,(2,3)):(3,(12,1))"
    );
    assert!(layout.sub_layout(&[1, 5]).is_err());
    assert!(layout.group(1, 1).is_err());
}

#[test]
fn composition_errors_name_the_condition_and_operands() {
    let stride = message(composition(&l("(4,3):(1,10)"), l("3:3")));
    assert_eq!(
        stride,
        "composition (4,3):(1,10) o 3:3: stride divisibility condition failed: for 3:3, the \
         remaining stride 3 neither divides nor is a multiple of extent 4 of mode 0 of the \
         coalesced left operand"
    );
    // A walk that never leaves the mode it starts in needs no divisibility.
    assert_eq!(composition(&l("(4,3):(1,10)"), l("2:3")).unwrap(), l("2:3"));
    let shape = message(composition(&l("(4,3):(1,10)"), l("6:1")));
    assert!(
        shape.starts_with("composition (4,3):(1,10) o 6:1: shape divisibility condition failed"),
        "{shape}"
    );
    let overlap = message(composition(&l("(4,2):(1,10)"), l("(2,2):(2,2)")));
    assert!(
        overlap.contains("the modes of the right operand overlap"),
        "{overlap}"
    );
    assert!(matches!(
        composition(&l("8:1"), l("4:-1")),
        Err(LayoutError::NegativeStride { .. })
    ));
    let rank = message(composition(&l("8:1"), "<2,2>".parse::<Tiler>().unwrap()));
    assert!(rank.contains("rank mismatch"), "{rank}");
    // Overlapping modes are fine when the left operand is linear.
    assert_eq!(
        composition(&l("16:3"), l("(2,2):(2,2)")).unwrap(),
        l("(2,2):(6,6)")
    );
}

#[test]
fn complement_errors() {
    let overlap = message(complement(&l("(2,2):(1,1)"), 8));
    assert!(
        overlap.starts_with("complement of (2,2):(1,1): layout is not injective"),
        "{overlap}"
    );
    // Injective, but the modes interleave: no ordered complement exists.
    assert!(matches!(
        complement(&l("(2,2):(2,3)"), 8),
        Err(LayoutError::ComplementOverlap { .. })
    ));
    let divisibility = message(complement(&l("(2,3):(1,3)"), 24));
    assert!(
        divisibility.contains("stride 3 of mode 3:3 is not a multiple of 2"),
        "{divisibility}"
    );
    assert_eq!(
        message(complement(&l("4:1"), 0)),
        "complement cotarget must be at least 1, got 0"
    );
    assert!(matches!(
        complement(&l("4:-1"), 8),
        Err(LayoutError::NegativeStride { .. })
    ));
    assert!(left_inverse(&l("(2,2):(1,1)")).is_err());
}

#[test]
fn other_precondition_errors() {
    assert!(matches!(
        coalesce_by_mode(&l("8:1"), &IntTuple::from([1, 1])),
        Err(LayoutError::RankMismatch { .. })
    ));
    assert!(logical_divide(&l("8:1"), "<2,2>".parse::<Tiler>().unwrap()).is_err());
    assert_eq!(
        message(max_common_vector(&l("8:1"), &l("4:1"))),
        "max_common_vector(8:1, 4:1): operands must have equal size"
    );
    assert!(Swizzle::new(3, 4, 2).is_err());
    assert!(Swizzle::new(-1, 4, 2).is_err());
    assert!(Swizzle::new(30, 30, 30).is_err());
    assert!(Swizzle::new(1, 1, i64::MIN).is_err());
}

#[test]
fn arithmetic_overflow_is_an_error() {
    let huge = Layout::vector(2, 1 << 62).unwrap();
    assert!(matches!(
        composition(&huge, &huge),
        Err(LayoutError::Overflow { .. })
    ));
    assert!(logical_product(&huge, &huge).is_err());
    assert_eq!(
        complement(&huge, i64::MAX).unwrap(),
        Layout::vector(1 << 62, 1).unwrap()
    );
    let swizzled = Swizzle::new(1, 0, 1).unwrap();
    let layout = SwizzledLayout::new(swizzled, i64::MAX, l("4:1"));
    assert!(matches!(layout.eval(1), Err(LayoutError::Overflow { .. })));
}
