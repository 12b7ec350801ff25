//! The worked examples of CuTe's `01_layout.md` and `02_layout_algebra.md`,
//! reproduced exactly. Each test names the section of the document it comes
//! from. Where CuTe prints static integers (`_2`) the value is the same here
//! (this crate has no static/dynamic distinction and behaves like CuTe does
//! with everything static: size-1 modes are always simplified away).

use metile_layout::*;

fn l(text: &str) -> Layout {
    text.parse().unwrap_or_else(|e| panic!("bad layout {text}: {e}"))
}

fn t(text: &str) -> IntTuple {
    text.parse().unwrap_or_else(|e| panic!("bad tuple {text}: {e}"))
}

fn tiler(text: &str) -> Tiler {
    text.parse().unwrap_or_else(|e| panic!("bad tiler {text}: {e}"))
}

fn values(layout: &Layout) -> Vec<i64> {
    (0..layout.size()).map(|i| layout.eval(i).unwrap()).collect()
}

/// Rows of a rank-2 layout evaluated at 2-D coordinates (m, n).
fn table(layout: &Layout) -> Vec<Vec<i64>> {
    let rows = layout.mode(0).unwrap().size();
    let cols = layout.mode(1).unwrap().size();
    (0..rows)
        .map(|m| {
            (0..cols)
                .map(|n| layout.eval_coord(&IntTuple::from([m, n])).unwrap())
                .collect()
        })
        .collect()
}

// ---------------------------------------------------------------- 01_layout.md

#[test]
fn layout_constructing_a_layout_prints() {
    assert_eq!(Layout::column_major(t("8")).unwrap().to_string(), "8:1");
    assert_eq!(
        Layout::column_major(t("(2,4)")).unwrap().to_string(),
        "(2,4):(1,2)"
    );
    assert_eq!(l("(2,4):(12,1)").to_string(), "(2,4):(12,1)");
    assert_eq!(Layout::row_major(t("(2,4)")).unwrap().to_string(), "(2,4):(4,1)");
    let s2xh4 = Layout::new(t("(2,(2,2))"), t("(4,(2,1))")).unwrap();
    assert_eq!(s2xh4.to_string(), "(2,(2,2)):(4,(2,1))");
    // "the strides of s2xh4 above could be generated with LayoutRight"
    assert_eq!(Layout::row_major(s2xh4.shape().clone()).unwrap(), s2xh4);
    assert_eq!(
        Layout::column_major(s2xh4.shape().clone()).unwrap().to_string(),
        "(2,(2,2)):(1,(2,4))"
    );
    // CuTe's static-integer spelling parses to the same layouts.
    assert_eq!(l("(_2,4):(_12,_1)"), l("(2,4):(12,1)"));
    assert_eq!(l("_8:_1"), l("8:1"));
}

#[test]
fn layout_print2d_tables() {
    assert_eq!(table(&l("(2,4):(1,2)")), [[0, 2, 4, 6], [1, 3, 5, 7]]);
    assert_eq!(table(&l("(2,4):(12,1)")), [[0, 1, 2, 3], [12, 13, 14, 15]]);
    assert_eq!(table(&l("(2,(2,2)):(1,(2,4))")), [[0, 2, 4, 6], [1, 3, 5, 7]]);
    // Also the print_layout(s2xh4) table.
    assert_eq!(table(&l("(2,(2,2)):(4,(2,1))")), [[0, 2, 1, 3], [4, 6, 5, 7]]);
}

#[test]
fn layout_print1d_sequences() {
    assert_eq!(values(&l("(2,4):(1,2)")), [0, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(values(&l("(2,4):(12,1)")), [0, 12, 1, 13, 2, 14, 3, 15]);
    assert_eq!(values(&l("(2,(2,2)):(1,(2,4))")), [0, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(values(&l("(2,(2,2)):(4,(2,1))")), [0, 4, 2, 6, 1, 5, 3, 7]);
}

#[test]
fn layout_vector_layouts() {
    assert_eq!(values(&l("8:1")), [0, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(values(&l("8:2")), [0, 2, 4, 6, 8, 10, 12, 14]);
    let inner = l("((4,2)):((2,1))");
    assert_eq!(inner.rank(), 1);
    assert_eq!(values(&inner), [0, 2, 4, 6, 1, 3, 5, 7]);
    let identity = l("((4,2)):((1,4))");
    assert_eq!(values(&identity), values(&l("8:1")));
    assert_eq!(coalesce(&identity).unwrap(), l("8:1"));
}

#[test]
fn layout_matrix_examples() {
    assert_eq!(table(&l("(4,2):(1,4)")), [[0, 4], [1, 5], [2, 6], [3, 7]]);
    assert_eq!(table(&l("(4,2):(2,1)")), [[0, 1], [2, 3], [4, 5], [6, 7]]);
    assert_eq!(table(&l("((2,2),2):((4,1),2)")), [[0, 2], [4, 6], [1, 3], [5, 7]]);
}

#[test]
fn layout_compatibility() {
    let compatible = |a: &str, b: &str| t(a).is_compatible_with(&t(b));
    assert!(!compatible("24", "32"));
    assert!(compatible("24", "(4,6)"));
    assert!(compatible("(4,6)", "((2,2),6)"));
    assert!(compatible("((2,2),6)", "((2,2),(3,2))"));
    assert!(compatible("24", "((2,2),(3,2))"));
    assert!(compatible("24", "((2,3),4)"));
    assert!(!compatible("((2,3),4)", "((2,2),(3,2))"));
    assert!(!compatible("((2,2),(3,2))", "((2,3),4)"));
    assert!(compatible("24", "(24)"));
    assert!(!compatible("(24)", "24"));
    assert!(!compatible("(24)", "(4,6)"));
}

#[test]
fn layout_coordinate_mapping_table() {
    let shape = t("(3,(2,3))");
    let expected = [
        (0, "(0,0)", "(0,(0,0))"),
        (1, "(1,0)", "(1,(0,0))"),
        (2, "(2,0)", "(2,(0,0))"),
        (3, "(0,1)", "(0,(1,0))"),
        (4, "(1,1)", "(1,(1,0))"),
        (5, "(2,1)", "(2,(1,0))"),
        (6, "(0,2)", "(0,(0,1))"),
        (7, "(1,2)", "(1,(0,1))"),
        (8, "(2,2)", "(2,(0,1))"),
        (9, "(0,3)", "(0,(1,1))"),
        (10, "(1,3)", "(1,(1,1))"),
        (11, "(2,3)", "(2,(1,1))"),
        (12, "(0,4)", "(0,(0,2))"),
        (13, "(1,4)", "(1,(0,2))"),
        (14, "(2,4)", "(2,(0,2))"),
        (15, "(0,5)", "(0,(1,2))"),
        (16, "(1,5)", "(1,(1,2))"),
        (17, "(2,5)", "(2,(1,2))"),
    ];
    for (index, two_d, natural) in expected {
        let natural = t(natural);
        assert_eq!(idx2crd(&IntTuple::Int(index), &shape).unwrap(), natural);
        assert_eq!(idx2crd(&t(two_d), &shape).unwrap(), natural);
        assert_eq!(idx2crd(&natural, &shape).unwrap(), natural);
        assert_eq!(colex_index(&t(two_d), &shape).unwrap(), index);
        assert_eq!(colex_index(&natural, &shape).unwrap(), index);
    }
}

#[test]
fn layout_idx2crd_examples() {
    let shape = t("(3,(2,3))");
    assert_eq!(idx2crd(&t("16"), &shape).unwrap().to_string(), "(1,(1,2))");
    assert_eq!(idx2crd(&t("(1,5)"), &shape).unwrap().to_string(), "(1,(1,2))");
    assert_eq!(idx2crd(&t("(1,(1,2))"), &shape).unwrap().to_string(), "(1,(1,2))");
}

#[test]
fn layout_index_mapping_table() {
    let layout = l("(3,(2,3)):(3,(12,1))");
    assert_eq!(
        table(&layout),
        [
            [0, 12, 1, 13, 2, 14],
            [3, 15, 4, 16, 5, 17],
            [6, 18, 7, 19, 8, 20]
        ]
    );
    // The natural coordinate (i,(j,k)) maps to i*3 + j*12 + k.
    for (i, j, k) in [(2, 1, 2), (1, 0, 1), (0, 1, 0)] {
        let coord = IntTuple::tuple([IntTuple::Int(i), IntTuple::from([j, k])]);
        assert_eq!(layout.eval_coord(&coord).unwrap(), i * 3 + j * 12 + k);
    }
}

#[test]
fn layout_crd2idx_examples() {
    let (shape, stride) = (t("(3,(2,3))"), t("(3,(12,1))"));
    for coord in ["16", "(1,5)", "(1,(1,2))"] {
        assert_eq!(crd2idx(&t(coord), &shape, &stride).unwrap(), 17, "{coord}");
    }
}

#[test]
fn layout_sublayouts() {
    let a = Layout::column_major(t("(4,(3,6))")).unwrap();
    assert_eq!(a.to_string(), "(4,(3,6)):(1,(4,12))");
    assert_eq!(a.sub_layout(&[0]).unwrap().to_string(), "4:1");
    assert_eq!(a.sub_layout(&[1]).unwrap().to_string(), "(3,6):(4,12)");
    assert_eq!(a.sub_layout(&[1, 0]).unwrap().to_string(), "3:4");
    assert_eq!(a.sub_layout(&[1, 1]).unwrap().to_string(), "6:12");

    let b = Layout::column_major(t("(2,3,5,7)")).unwrap();
    assert_eq!(b.to_string(), "(2,3,5,7):(1,2,6,30)");
    assert_eq!(b.select(&[1, 3]).unwrap().to_string(), "(3,7):(2,30)");
    assert_eq!(b.select(&[0, 1, 3]).unwrap().to_string(), "(2,3,7):(1,2,30)");
    assert_eq!(b.select(&[2]).unwrap().to_string(), "(5):(6)");
    assert_eq!(b.take(1, 3).unwrap().to_string(), "(3,5):(2,6)");
    assert_eq!(b.take(1, 4).unwrap().to_string(), "(3,5,7):(2,6,30)");
    // "take<1,1> not allowed. Empty layouts not allowed."
    assert!(b.take(1, 1).is_err());
}

#[test]
fn layout_concatenation() {
    let a = l("3:1");
    let b = l("4:3");
    let row = Layout::concat(&[a.clone(), b.clone()]).unwrap();
    let col = Layout::concat(&[b.clone(), a.clone()]).unwrap();
    assert_eq!(row.to_string(), "(3,4):(1,3)");
    assert_eq!(col.to_string(), "(4,3):(3,1)");
    let q = Layout::concat(&[row.clone(), col]).unwrap();
    assert_eq!(q.to_string(), "((3,4),(4,3)):((1,3),(3,1))");
    let aa = Layout::concat(std::slice::from_ref(&a)).unwrap();
    assert_eq!(aa.to_string(), "(3):(1)");
    assert_eq!(
        Layout::concat(std::slice::from_ref(&aa)).unwrap().to_string(),
        "((3)):((1))"
    );
    let d = Layout::concat(&[a.clone(), aa, a.clone()]).unwrap();
    assert_eq!(d.to_string(), "(3,(3),3):(1,(1),1)");

    // append / prepend / replace are concatenations of modes.
    let ab = Layout::concat(&[a.clone(), b.clone()]).unwrap();
    assert_eq!(ab.to_string(), "(3,4):(1,3)");
    assert_eq!(
        Layout::concat(&[b.clone(), a]).unwrap().to_string(),
        "(4,3):(3,1)"
    );
    let mut c_modes = ab.modes();
    c_modes.push(ab.clone());
    let c = Layout::concat(&c_modes).unwrap();
    assert_eq!(c.to_string(), "(3,4,(3,4)):(1,3,(1,3))");
    let mut d_modes = c.modes();
    d_modes[2] = b;
    assert_eq!(Layout::concat(&d_modes).unwrap().to_string(), "(3,4,4):(1,3,3)");
}

#[test]
fn layout_grouping_and_flattening() {
    let a = Layout::column_major(t("(2,3,5,7)")).unwrap();
    let b = a.group(0, 2).unwrap();
    assert_eq!(b.to_string(), "((2,3),5,7):((1,2),6,30)");
    let c = b.group(1, 3).unwrap();
    assert_eq!(c.to_string(), "((2,3),(5,7)):((1,2),(6,30))");
    assert_eq!(b.flatten().to_string(), "(2,3,5,7):(1,2,6,30)");
    assert_eq!(c.flatten().to_string(), "(2,3,5,7):(1,2,6,30)");
}

// -------------------------------------------------------- 02_layout_algebra.md

#[test]
fn algebra_coalesce() {
    let layout = l("(2,(1,6)):(1,(6,2))");
    let result = coalesce(&layout).unwrap();
    assert_eq!(result.to_string(), "12:1");
    assert_eq!(values(&result), values(&layout));
    // Column-major layouts act like a single contiguous vector.
    assert_eq!(coalesce(&l("(2,4):(1,2)")).unwrap(), l("8:1"));
}

#[test]
fn algebra_coalesce_binary_cases() {
    // s0:d0 ++ 1:d1 => s0:d0
    assert_eq!(coalesce(&l("(4,1):(3,7)")).unwrap(), l("4:3"));
    // 1:d0 ++ s1:d1 => s1:d1
    assert_eq!(coalesce(&l("(1,4):(7,3)")).unwrap(), l("4:3"));
    // s0:d0 ++ s1:s0*d0 => s0*s1:d0
    assert_eq!(coalesce(&l("(4,5):(3,12)")).unwrap(), l("20:3"));
    // s0:d0 ++ s1:d1 => (s0,s1):(d0,d1)
    assert_eq!(coalesce(&l("(4,5):(3,11)")).unwrap(), l("(4,5):(3,11)"));
}

#[test]
fn algebra_coalesce_by_mode() {
    let a = l("(2,(1,6)):(1,(6,2))");
    let result = coalesce_by_mode(&a, &t("(1,1)")).unwrap();
    assert_eq!(result.to_string(), "(2,6):(1,2)");
    let same = Layout::concat(&[
        coalesce(&a.mode(0).unwrap()).unwrap(),
        coalesce(&a.mode(1).unwrap()).unwrap(),
    ])
    .unwrap();
    assert_eq!(result, same);
}

#[test]
fn algebra_composition_example_table() {
    let a = l("(6,2):(8,2)");
    let b = l("(4,3):(3,1)");
    let r = composition(&a, &b).unwrap();
    assert_eq!(r.to_string(), "((2,2),3):((24,2),8)");
    assert_eq!(values(&r), [0, 24, 2, 26, 8, 32, 10, 34, 16, 40, 18, 42]);
    for i in 0..b.size() {
        assert_eq!(r.eval(i).unwrap(), a.eval(b.eval(i).unwrap()).unwrap());
    }
    assert!(b.shape().is_compatible_with(r.shape()));
}

#[test]
fn algebra_composition_stride_and_shape_division() {
    // The divisions "(6,2) / d" and "(6,2) % s", observed through
    // composition with a layout of concrete strides (6,2):(1,100).
    let a = l("(6,2):(1,100)");
    assert_eq!(composition(&a, l("6:2")).unwrap(), l("(3,2):(2,100)")); // / 2 => (3,2)
    assert_eq!(composition(&a, l("4:3")).unwrap(), l("(2,2):(3,100)")); // / 3 => (2,2)
    assert_eq!(composition(&a, l("2:6")).unwrap(), l("2:100")); // / 6 => (1,2)
    assert_eq!(composition(&a, l("1:12")).unwrap(), l("1:0")); // / 12 => (1,1)
    assert_eq!(composition(&a, l("2:1")).unwrap(), l("2:1")); // % 2 => (2,1)
    assert_eq!(composition(&a, l("3:1")).unwrap(), l("3:1")); // % 3 => (3,1)
    assert_eq!(composition(&a, l("6:1")).unwrap(), l("6:1")); // % 6 => (6,1)
    assert_eq!(composition(&a, l("12:1")).unwrap(), a); // % 12 => (6,2)

    // (3,6,2,8):(w,x,y,z) with w,x,y,z = 1,100,10^4,10^6.
    let b = l("(3,6,2,8):(1,100,10000,1000000)");
    // / 3 => (1,6,2,8), strides (3w,x,y,z)
    assert_eq!(
        composition(&b, l("96:3")).unwrap(),
        l("(6,2,8):(100,10000,1000000)")
    );
    // / 6 => (1,3,2,8), strides (6w,2x,y,z)
    assert_eq!(
        composition(&b, l("48:6")).unwrap(),
        l("(3,2,8):(200,10000,1000000)")
    );
    // / 9 => (1,2,2,8), strides (9w,3x,y,z)
    assert_eq!(
        composition(&b, l("32:9")).unwrap(),
        l("(2,2,8):(300,10000,1000000)")
    );
    // / 72 => (1,1,1,4), strides (72w,24x,4y,2z)
    assert_eq!(composition(&b, l("4:72")).unwrap(), l("4:2000000"));
    // % 6 => (3,2,1,1)
    assert_eq!(composition(&b, l("6:1")).unwrap(), l("(3,2):(1,100)"));
    // % 9 => (3,3,1,1)
    assert_eq!(composition(&b, l("9:1")).unwrap(), l("(3,3):(1,100)"));
    // (1,2,2,8) % 2 => (1,2,1,1), after dividing by 9
    assert_eq!(composition(&b, l("2:9")).unwrap(), l("2:300"));
    // (3,6,2,8):(w,x,y,z) o 16:9 = (1,2,2,4):(9w,3x,y,z)
    assert_eq!(
        composition(&b, l("16:9")).unwrap(),
        l("(2,2,4):(300,10000,1000000)")
    );
}

#[test]
fn algebra_composition_worked_example_1() {
    let a = l("(6,2):(8,2)");
    assert_eq!(composition(&a, l("4:3")).unwrap(), l("(2,2):(24,2)"));
    assert_eq!(composition(&a, l("3:1")).unwrap(), l("3:8"));
    assert_eq!(
        composition(&a, l("(4,3):(3,1)")).unwrap().to_string(),
        "((2,2),3):((24,2),8)"
    );
    // The doc's spacing also parses.
    assert_eq!(l("((2, 2), 3): ((24, 2), 8)"), l("((2,2),3):((24,2),8)"));
}

#[test]
fn algebra_composition_worked_example_2() {
    let a = l("20:2");
    assert_eq!(composition(&a, l("5:4")).unwrap(), l("5:8"));
    assert_eq!(composition(&a, l("4:1")).unwrap(), l("4:2"));
    assert_eq!(
        composition(&a, l("(5,4):(4,1)")).unwrap().to_string(),
        "(5,4):(8,2)"
    );
}

#[test]
fn algebra_composition_worked_example_3() {
    let a = l("(10,2):(16,4)");
    // (5,1):(16,4) coalesces to 5:16.
    assert_eq!(composition(&a, l("5:1")).unwrap(), l("5:16"));
    assert_eq!(composition(&a, l("4:5")).unwrap(), l("(2,2):(80,4)"));
    // CuTe's static result (_5,(_2,_2)):(_16,(_80,_4)).
    assert_eq!(
        composition(&a, l("(5,4):(1,5)")).unwrap().to_string(),
        "(5,(2,2)):(16,(80,4))"
    );
}

#[test]
fn algebra_by_mode_composition() {
    let a = l("(12,(4,8)):(59,(13,1))");
    let result = composition(&a, tiler("<3:4,8:2>")).unwrap();
    assert_eq!(result.to_string(), "(3,(2,4)):(236,(26,1))");
    let same = Layout::concat(&[
        composition(&a.mode(0).unwrap(), l("3:4")).unwrap(),
        composition(&a.mode(1).unwrap(), l("8:2")).unwrap(),
    ])
    .unwrap();
    assert_eq!(result, same);
    // The doc's spelling with spaces.
    assert_eq!(tiler("<3:4, 8:2>"), tiler("<3:4,8:2>"));
}

#[test]
fn algebra_shape_as_tiler() {
    let a = l("(12,(4,8)):(59,(13,1))");
    let shape_tiler = Tiler::from_shape(&t("(3,8)")).unwrap();
    assert_eq!(shape_tiler, tiler("<3:1,8:1>"));
    let result = composition(&a, shape_tiler).unwrap();
    assert_eq!(result.to_string(), "(3,(4,2)):(59,(13,1))");
    assert_eq!(composition(&a, tiler("(3,8)")).unwrap(), result);
}

#[test]
fn algebra_complement_examples() {
    let cases = [
        ("4:1", "6:4"),
        ("6:4", "4:1"),
        ("(4,6):(1,4)", "1:0"),
        ("4:2", "(2,3):(1,8)"),
        ("(2,4):(1,6)", "3:2"),
        ("(2,2):(1,6)", "(3,2):(2,12)"),
    ];
    for (layout, expected) in cases {
        let layout = l(layout);
        let result = complement(&layout, 24).unwrap();
        assert_eq!(result.to_string(), expected, "complement({layout}, 24)");
        // The notes: (A, A*) has cosize 24 and produces unique offsets.
        let joined = Layout::concat(&[layout.clone(), result.clone()]).unwrap();
        assert_eq!(joined.cosize(), 24, "{joined}");
        let mut offsets = values(&joined);
        offsets.sort_unstable();
        offsets.dedup();
        assert_eq!(offsets.len() as i64, joined.size(), "{joined}");
    }
}

#[test]
fn algebra_complement_postconditions() {
    // The checked post-conditions quoted in the document, on its examples.
    for (layout, cotarget) in [("(2,2):(1,6)", 24), ("4:2", 24), ("(2,4):(1,6)", 24), ("6:4", 7)] {
        let layout = l(layout);
        let result = complement(&layout, cotarget).unwrap();
        let joined = Layout::concat(&[layout.clone(), result.clone()]).unwrap();
        assert!(joined.cosize() >= cotarget);
        let ordered = values(&result);
        assert!(ordered.windows(2).all(|w| w[0] < w[1]), "{result} is not ordered");
        let image = values(&layout);
        assert!(ordered.iter().skip(1).all(|r| !image.contains(r)));
    }
}

#[test]
fn algebra_logical_divide_1d() {
    let a = l("(4,2,3):(2,1,8)");
    let b = l("4:2");
    let rest = complement(&b, a.size()).unwrap();
    assert_eq!(rest.to_string(), "(2,3):(1,8)");
    let joined = Layout::concat(&[b.clone(), rest]).unwrap();
    assert_eq!(joined.to_string(), "(4,(2,3)):(2,(1,8))");
    assert_eq!(
        composition(&a, &joined).unwrap().to_string(),
        "((2,2),(2,3)):((4,1),(2,8))"
    );
    assert_eq!(
        logical_divide(&a, &b).unwrap().to_string(),
        "((2,2),(2,3)):((4,1),(2,8))"
    );
}

#[test]
fn algebra_logical_divide_2d() {
    let a = l("(9,(4,8)):(59,(13,1))");
    let b = tiler("<3:3,(2,4):(1,8)>");
    let divided = logical_divide(&a, b.clone()).unwrap();
    assert_eq!(
        divided.to_string(),
        "((3,3),((2,4),(2,2))):((177,59),((13,2),(26,1)))"
    );
    // "((TileM,RestM), (TileN,RestN)) with shape ((3,3), (8,4))"
    let mode_sizes: Vec<Vec<i64>> = divided
        .modes()
        .iter()
        .map(|m| m.modes().iter().map(Layout::size).collect())
        .collect();
    assert_eq!(mode_sizes, [[3, 3], [8, 4]]);
    // "the first mode of each mode of the result is the sublayout
    //  (3,(2,4)):(177,(13,2)) ... precisely composition"
    let firsts = Layout::concat(&[
        divided.sub_layout(&[0, 0]).unwrap(),
        divided.sub_layout(&[1, 0]).unwrap(),
    ])
    .unwrap();
    assert_eq!(firsts.to_string(), "(3,(2,4)):(177,(13,2))");
    assert_eq!(firsts, composition(&a, b).unwrap());
}

#[test]
fn algebra_zipped_tiled_flat_divide() {
    let a = l("(9,(4,8)):(59,(13,1))");
    let b = tiler("<3:3,(2,4):(1,8)>");
    let zd = zipped_divide(&a, b.clone()).unwrap();
    assert_eq!(zd.to_string(), "((3,(2,4)),(3,(2,2))):((177,(13,2)),(59,(26,1)))");
    // "((TileM,TileN), (RestM,RestN)) with shape ((3,8), (3,4))"
    let sizes: Vec<Vec<i64>> = zd
        .modes()
        .iter()
        .map(|m| m.modes().iter().map(Layout::size).collect())
        .collect();
    assert_eq!(sizes, [[3, 8], [3, 4]]);
    // "layout<0>(zipped_divide(a, b)) == composition(a, b)"
    assert_eq!(zd.mode(0).unwrap(), composition(&a, b.clone()).unwrap());
    // Offsets of the 3rd, 7th and (1,2)th tiles: zd(0,3), zd(0,7), zd(0,(1,2)).
    let tile_offset = |rest: IntTuple| zd.eval_coord(&IntTuple::tuple([IntTuple::Int(0), rest])).unwrap();
    assert_eq!(tile_offset(IntTuple::Int(3)), 26);
    assert_eq!(tile_offset(IntTuple::Int(7)), 60);
    assert_eq!(tile_offset(t("(1,2)")), 60);

    assert_eq!(
        tiled_divide(&a, b.clone()).unwrap().to_string(),
        "((3,(2,4)),3,(2,2)):((177,(13,2)),59,(26,1))"
    );
    assert_eq!(
        flat_divide(&a, b).unwrap().to_string(),
        "(3,(2,4),3,(2,2)):(177,(13,2),59,(26,1))"
    );
}

#[test]
fn algebra_divide_mode_regroupings() {
    // Layout (M,N,L) = (9,32,5) with tiler <TileM,TileN> = <3,8>.
    let a = Layout::column_major(t("(9,32,5)")).unwrap();
    let b = tiler("(3,8)");
    let sizes = |layout: &Layout| -> Vec<i64> { layout.modes().iter().map(Layout::size).collect() };
    // logical_divide : ((TileM,RestM), (TileN,RestN), L)
    let ld = logical_divide(&a, b.clone()).unwrap();
    assert_eq!(sizes(&ld), [9, 32, 5]);
    assert_eq!(sizes(&ld.mode(0).unwrap()), [3, 3]);
    assert_eq!(sizes(&ld.mode(1).unwrap()), [8, 4]);
    // zipped_divide  : ((TileM,TileN), (RestM,RestN,L))
    let zd = zipped_divide(&a, b.clone()).unwrap();
    assert_eq!(sizes(&zd.mode(0).unwrap()), [3, 8]);
    assert_eq!(sizes(&zd.mode(1).unwrap()), [3, 4, 5]);
    // tiled_divide   : ((TileM,TileN), RestM, RestN, L)
    let td = tiled_divide(&a, b.clone()).unwrap();
    assert_eq!(sizes(&td), [24, 3, 4, 5]);
    // flat_divide    : (TileM, TileN, RestM, RestN, L)
    let fd = flat_divide(&a, b).unwrap();
    assert_eq!(sizes(&fd), [3, 8, 3, 4, 5]);
    assert_eq!(fd.to_string(), "(3,8,3,4,5):(1,9,3,72,288)");
}

#[test]
fn algebra_logical_product_1d() {
    let a = l("(2,2):(4,1)");
    let b = l("6:1");
    let rest = complement(&a, a.size() * b.cosize()).unwrap();
    assert_eq!(rest.to_string(), "(2,3):(2,8)");
    assert_eq!(composition(&rest, &b).unwrap().to_string(), "(2,3):(2,8)");
    let product = logical_product(&a, &b).unwrap();
    assert_eq!(product.to_string(), "((2,2),(2,3)):((4,1),(2,8))");
    // "the result is identical to the result of the 1-D Logical Divide example"
    assert_eq!(product, logical_divide(&l("(4,2,3):(2,1,8)"), l("4:2")).unwrap());
}

#[test]
fn algebra_logical_product_reordered_tiles() {
    // Figure product2: B = (4,2):(2,1) gives 8 tiles in a different order.
    let a = l("(2,2):(4,1)");
    let product = logical_product(&a, l("(4,2):(2,1)")).unwrap();
    assert_eq!(product.to_string(), "((2,2),(4,2)):((4,1),(8,2))");
    assert_eq!(product.mode(1).unwrap().size(), 8);
}

#[test]
fn algebra_logical_product_2d_by_mode() {
    // Figure product2d: a 2x5 row-major block tiled by the tiler <3:5, 4:6>
    // into a 3x4 column-major arrangement of blocks.
    let a = l("(2,5):(5,1)");
    let product = logical_product(&a, tiler("<3:5,4:6>")).unwrap();
    assert_eq!(product.to_string(), "((2,3),(5,4)):((5,10),(1,30))");
}

#[test]
fn algebra_blocked_and_raked_products() {
    let block = l("(2,5):(5,1)");
    let arrangement = l("(3,4):(1,3)");
    let blocked = blocked_product(&block, &arrangement).unwrap();
    // The same function as the by-mode product above, with mode 0 coalesced.
    assert_eq!(blocked.to_string(), "(6,(5,4)):(5,(1,30))");
    let by_mode = logical_product(&block, tiler("<3:5,4:6>")).unwrap();
    assert_eq!(table(&blocked), table(&by_mode));

    let raked = raked_product(&block, &arrangement).unwrap();
    assert_eq!(raked.to_string(), "((3,2),(4,5)):((10,5),(30,1))");
    // Raked: each 2x5 block is spread over the 6x20 result with period 3x4.
    let raked_table = table(&raked);
    let blocked_table = table(&blocked);
    for (m, raked_row) in raked_table.iter().enumerate() {
        for (n, &raked_value) in raked_row.iter().enumerate() {
            // In the raked result the arrangement index varies fastest.
            let (tile_m, within_m) = (m % 3, m / 3);
            let (tile_n, within_n) = (n % 4, n / 4);
            assert_eq!(
                raked_value,
                blocked_table[within_m + 2 * tile_m][within_n + 5 * tile_n]
            );
        }
    }
}

// ------------------------------------------------------------ swizzle.hpp

#[test]
fn swizzle_masks_from_cute_comments() {
    // make_swizzle<0b1000, 0b0100>() -> Swizzle<1,2,1>
    let s = Swizzle::new(1, 2, 1).unwrap();
    assert_eq!((s.yyy_mask(), s.zzz_mask()), (0b1000, 0b0100));
    // make_swizzle<0b11000000, 0b00000110>() -> Swizzle<2,1,5>
    let s = Swizzle::new(2, 1, 5).unwrap();
    assert_eq!((s.yyy_mask(), s.zzz_mask()), (0b1100_0000, 0b0000_0110));
    assert_eq!(s.to_string(), "Sw<2,1,5>");
    assert_eq!("Sw<2,1,5>".parse::<Swizzle>().unwrap(), s);
    // abs(SShift) must be at least BBits.
    assert!(Swizzle::new(3, 4, 2).is_err());
}
