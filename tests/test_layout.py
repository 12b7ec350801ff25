"""metile.layout: CuTe's layout algebra from Python (examples from CuTe's docs)."""

import pytest

import metile.layout as ml
from metile.layout import Layout


def values(layout):
    return [layout(i) for i in range(layout.size())]


def test_construction_queries_and_text():
    layout = Layout((3, (2, 3)), (3, (12, 1)))
    assert str(layout) == "(3,(2,3)):(3,(12,1))"
    assert repr(layout) == str(layout)
    assert layout.shape == (3, (2, 3))
    assert layout.stride == (3, (12, 1))
    assert (layout.size(), layout.cosize(), layout.rank(), layout.depth()) == (18, 21, 2, 2)
    assert Layout((2, 4)).stride == (1, 2)
    assert ml.row_major((2, 4)) == Layout((2, 4), (4, 1))
    assert Layout.row_major((2, (2, 2))) == Layout.parse("(2,(2,2)):(4,(2,1))")
    assert Layout.parse("(4,8)") == Layout((4, 8))
    assert Layout(8).shape == 8 and str(Layout(8)) == "8:1"
    assert hash(Layout.parse("8:1")) == hash(Layout(8, 1))


def test_evaluation_by_index_and_coordinate():
    layout = Layout.parse("(3,(2,3)):(3,(12,1))")
    assert layout(16) == 17
    assert layout((1, 5)) == 17
    assert layout(1, 5) == 17
    assert layout((1, (1, 2))) == 17
    assert values(Layout.parse("(2,(2,2)):(4,(2,1))")) == [0, 4, 2, 6, 1, 5, 3, 7]
    assert ml.idx2crd(16, (3, (2, 3))) == (1, (1, 2))
    assert ml.crd2idx((1, 5), (3, (2, 3)), (3, (12, 1))) == 17


def test_modes():
    a = Layout((4, (3, 6)))
    assert str(a[0]) == "4:1"
    assert str(a[1]) == "(3,6):(4,12)"
    assert str(a[-1]) == "(3,6):(4,12)"
    assert str(a.sub_layout((1, 0))) == "3:4"
    assert [str(m) for m in a.modes()] == ["4:1", "(3,6):(4,12)"]
    with pytest.raises(IndexError):
        a[2]


def test_algebra_examples():
    assert str(ml.coalesce(Layout.parse("(2,(1,6)):(1,(6,2))"))) == "12:1"
    assert str(ml.coalesce(Layout.parse("(2,(1,6)):(1,(6,2))"), (1, 1))) == "(2,6):(1,2)"
    assert str(ml.filter(Layout.parse("(4,2):(1,0)"))) == "4:1"
    a = Layout((6, 2), (8, 2))
    assert str(ml.composition(a, Layout((4, 3), (3, 1)))) == "((2,2),3):((24,2),8)"
    wide = Layout.parse("(12,(4,8)):(59,(13,1))")
    by_mode = ml.composition(wide, (Layout(3, 4), Layout(8, 2)))
    assert str(by_mode) == "(3,(2,4)):(236,(26,1))"
    assert str(ml.composition(wide, (3, 8))) == "(3,(4,2)):(59,(13,1))"
    assert str(ml.complement(Layout.parse("(2,2):(1,6)"), 24)) == "(3,2):(2,12)"
    divided = ml.logical_divide(Layout.parse("(4,2,3):(2,1,8)"), Layout(4, 2))
    assert str(divided) == "((2,2),(2,3)):((4,1),(2,8))"
    tiler = (Layout(3, 3), Layout((2, 4), (1, 8)))
    a2 = Layout.parse("(9,(4,8)):(59,(13,1))")
    assert str(ml.zipped_divide(a2, tiler)) == "((3,(2,4)),(3,(2,2))):((177,(13,2)),(59,(26,1)))"
    assert str(ml.tiled_divide(a2, tiler)) == "((3,(2,4)),3,(2,2)):((177,(13,2)),59,(26,1))"
    assert str(ml.flat_divide(a2, tiler)) == "(3,(2,4),3,(2,2)):(177,(13,2),59,(26,1))"
    product = ml.logical_product(Layout((2, 2), (4, 1)), Layout(6, 1))
    assert str(product) == "((2,2),(2,3)):((4,1),(2,8))"
    block, grid = Layout((2, 5), (5, 1)), Layout((3, 4), (1, 3))
    assert str(ml.blocked_product(block, grid)) == "(6,(5,4)):(5,(1,30))"
    assert str(ml.raked_product(block, grid)) == "((3,2),(4,5)):((10,5),(30,1))"


def test_inverses_and_common_vector():
    layout = Layout((4, 8), (8, 1))
    right = ml.right_inverse(layout)
    assert all(layout(right(i)) == i for i in range(right.size()))
    left = ml.left_inverse(layout)
    assert all(left(layout(i)) == i for i in range(layout.size()))
    assert ml.max_common_vector(Layout((8, 4), (1, 8)), Layout((8, 4), (1, 16))) == 8


def test_swizzle():
    swizzle = ml.Swizzle(3, 4, 3)
    assert str(swizzle) == "Sw<3,4,3>"
    domain = range(1 << (3 + 4 + 3))
    assert sorted(swizzle(x) for x in domain) == list(domain)
    swizzled = ml.composition(ml.Swizzle(3, 0, 3), Layout((8, 8), (8, 1)))
    assert str(swizzled) == "Sw<3,0,3> o 0 o (8,8):(8,1)"
    assert swizzled(1, 0) == 9
    assert isinstance(swizzled, ml.SwizzledLayout)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: ml.composition(Layout((4, 3), (1, 10)), Layout(6, 1)), "shape divisibility"),
        (lambda: ml.complement(Layout((2, 2), (1, 1)), 8), "not injective"),
        (lambda: Layout.parse("(4,8):(1"), "parse error"),
        (lambda: Layout((4, 8), (1,)), "not congruent"),
        (lambda: ml.coalesce(Layout(8), (1, 1)), "rank mismatch"),
        (lambda: Layout(8)(8), "outside [0, 8)"),
        (lambda: ml.Swizzle(3, 4, 2), "|S| must be at least B"),
    ],
)
def test_errors_are_value_errors(call, message):
    with pytest.raises(ValueError, match=None) as info:
        call()
    assert message in str(info.value)


def test_bad_argument_types():
    with pytest.raises(TypeError):
        Layout("4")


def test_hostile_nesting_is_rejected():
    deep = 8
    for _ in range(10_000):
        deep = (deep,)
    with pytest.raises(ValueError):
        Layout(deep)
    with pytest.raises(ValueError):
        ml.composition(Layout(8), deep)
