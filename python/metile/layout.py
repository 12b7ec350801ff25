"""CuTe's layout algebra: layouts, composition, complement, divide, product, swizzle.

A ``Layout(shape, stride)`` maps coordinates to offsets; shapes and strides are
ints or nested tuples, and a missing stride means compact column-major::

    >>> from metile.layout import Layout, composition
    >>> a = Layout((6, 2), (8, 2))
    >>> str(composition(a, Layout((4, 3), (3, 1))))
    '((2,2),3):((24,2),8)'

Operations whose preconditions fail raise ``ValueError`` with the reason.
The implementation is the Rust crate ``metile-layout``.
"""

# The extension registers the algebra as the attribute ``layout`` of
# ``metile._metile``; importing it as an attribute works whether or not that
# submodule is also registered in ``sys.modules``.
from metile._layout_draw import bank_conflicts, draw, draw_banks, draw_tv, thread_value_cells
from metile._metile import layout as _impl

Layout = _impl.Layout
Swizzle = _impl.Swizzle
SwizzledLayout = _impl.SwizzledLayout
row_major = _impl.row_major
column_major = _impl.column_major
coalesce = _impl.coalesce
filter = _impl.filter  # noqa: A001 - CuTe's name
composition = _impl.composition
complement = _impl.complement
right_inverse = _impl.right_inverse
left_inverse = _impl.left_inverse
logical_divide = _impl.logical_divide
zipped_divide = _impl.zipped_divide
tiled_divide = _impl.tiled_divide
flat_divide = _impl.flat_divide
logical_product = _impl.logical_product
blocked_product = _impl.blocked_product
raked_product = _impl.raked_product
max_common_vector = _impl.max_common_vector
idx2crd = _impl.idx2crd
crd2idx = _impl.crd2idx

__all__ = [
    "Layout",
    "bank_conflicts",
    "draw",
    "draw_banks",
    "draw_tv",
    "thread_value_cells",
    "Swizzle",
    "SwizzledLayout",
    "blocked_product",
    "coalesce",
    "column_major",
    "complement",
    "composition",
    "crd2idx",
    "filter",
    "flat_divide",
    "idx2crd",
    "left_inverse",
    "logical_divide",
    "logical_product",
    "max_common_vector",
    "raked_product",
    "right_inverse",
    "row_major",
    "tiled_divide",
    "zipped_divide",
]
