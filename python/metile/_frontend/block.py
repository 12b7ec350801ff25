"""Block pointers and tensor descriptors (Triton's `make_block_ptr`/`advance` and
`make_tensor_descriptor`), desugared while the kernel is traced.

A block pointer or a descriptor is a small traced struct: a scalar base pointer,
the parent tensor's shape and strides, and for a block pointer the block's
offsets (each a traced scalar or a Python int), plus its compile-time block
shape. Loading through it builds the pointer tile `base + sum(idx_d * stride_d)`
and the mask of the checked axes (`0 <= idx_d < shape_d`) from ordinary ops, so
every backend runs it and the compiler's fast paths see an ordinary masked load.

The control-flow rewrite carries these structs through compiled loops and
branches by their fields (`flatten`/`unflatten`), so `advance` in a loop body is
a loop-carried block pointer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from metile import _metile

_Tile = _metile.Tile
_PADDINGS = ("", "zero", "nan")


def _fail(message: str) -> Exception:
    """A CompilationError at the kernel's line (outside a trace: RuntimeError)."""
    return _metile.kernel_error(message)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _sequence(value: Any, what: str) -> list[Any]:
    if isinstance(value, (tuple, list)):
        return list(value)
    raise _fail(f"{what} must be a tuple or list with one entry per axis, got {value!r}")


def _index(value: Any, what: str) -> Any:
    """A shape, stride or offset entry: a Python int or a traced integer scalar."""
    if _is_int(value):
        return value
    if isinstance(value, _Tile) and value.shape == () and value.dtype[0] in "iu":
        return value
    if isinstance(value, _Tile):
        raise _fail(f"{what} must be an integer scalar, got a tile of shape {value.shape} and dtype {value.dtype}")
    raise _fail(f"{what} must be an int or an integer scalar, got {value!r}")


def _block_shape(value: Any, rank: int | None, what: str) -> tuple[int, ...]:
    dims = _sequence(value, what)
    if rank is not None and len(dims) != rank:
        raise _fail(f"{what} has {len(dims)} entries but the tensor has rank {rank}")
    for d in dims:
        if not _is_int(d) or d <= 0 or d & (d - 1):
            raise _fail(f"{what} must be powers of two known when the kernel is compiled, got {tuple(dims)!r}")
    return tuple(dims)


def _base_pointer(base: Any, what: str) -> str:
    """Checks `base` is a scalar pointer into global memory; returns its element dtype."""
    if not isinstance(base, _Tile) or not base.dtype.endswith(">") or "ptr<" not in base.dtype:
        raise _fail(f"{what}'s base must be a pointer (a kernel argument, or one plus an offset), got {base!r}")
    if base.dtype.startswith("shared_ptr<"):
        raise _fail(
            f"{what}'s base points into shared memory (metile.shared); block pointers and tensor "
            "descriptors address global memory, as Triton's"
        )
    if base.shape != ():
        raise _fail(f"{what}'s base must be one pointer, not a tile of pointers of shape {base.shape}")
    return base.dtype[len("ptr<") : -1]


def _boundary_axes(boundary_check: Any, rank: int) -> tuple[int, ...]:
    if boundary_check is None:
        return ()
    axes = list(boundary_check) if isinstance(boundary_check, (tuple, list)) else [boundary_check]
    for axis in axes:
        if not _is_int(axis):
            raise _fail(f"boundary_check must list axes (ints), got {boundary_check!r}")
        if not 0 <= axis < rank:
            raise _fail(f"boundary_check axis {axis} is out of range for a block of rank {rank} (0 to {rank - 1})")
    return tuple(sorted(set(axes)))


def _padding_value(padding_option: Any, dtype: str) -> float:
    if padding_option not in _PADDINGS:
        raise _fail(f'padding_option must be "zero", "nan" or "" (zero), got {padding_option!r}')
    if padding_option == "nan":
        if not (dtype.startswith(("f", "bf"))):
            raise _fail(f'padding_option="nan" needs a floating-point tensor, but this one holds {dtype}')
        return math.nan
    return 0


def _axis_indices(offsets: Sequence[Any], block_shape: tuple[int, ...]) -> list[Any]:
    """`offsets[d] + arange(0, block_shape[d])`, shaped to broadcast along axis d."""
    rank = len(block_shape)
    indices = []
    for d, (offset, size) in enumerate(zip(offsets, block_shape, strict=True)):
        index = _metile.arange(offset, size)
        for axis in range(rank):
            if axis != d:
                index = _metile.expand_dims(index, axis)
        indices.append(index)
    return indices


def _pointers_and_mask(
    base: Any,
    shape: Sequence[Any],
    strides: Sequence[Any],
    offsets: Sequence[Any],
    block_shape: tuple[int, ...],
    checked: tuple[int, ...],
) -> tuple[Any, Any]:
    indices = _axis_indices(offsets, block_shape)
    pointers = base
    for index, stride in zip(indices, strides, strict=True):
        pointers = pointers + (index if _is_int(stride) and stride == 1 else index * stride)
    pointers = _metile.broadcast_to(pointers, block_shape)
    mask = None
    for axis in checked:
        inside = indices[axis] < shape[axis]
        # A block at a non-negative constant offset cannot start before the tensor.
        if not (_is_int(offsets[axis]) and offsets[axis] >= 0):
            inside = inside & (indices[axis] >= 0)
        mask = inside if mask is None else mask & inside
    if mask is not None:
        mask = _metile.broadcast_to(mask, block_shape)
    return pointers, mask


def _block_value(value: Any, dtype: str, block_shape: tuple[int, ...], what: str, exact: bool) -> Any:
    if isinstance(value, _Tile):
        if exact and tuple(value.shape) != block_shape:
            raise _fail(f"{what}: the value has shape {tuple(value.shape)} but the block is {block_shape}")
        if value.dtype != dtype:
            value = value.to(dtype)
        return _metile.broadcast_to(value, block_shape)
    return _metile.full(block_shape, value, dtype)


class BlockPointer:
    """What `metile.make_block_ptr` returns: a pointer to a block of a tensor."""

    def __init__(self, base, shape, strides, offsets, block_shape, order, dtype):
        self.base = base
        self.shape = shape
        self.strides = strides
        self.offsets = offsets
        self.block_shape = block_shape
        self.order = order
        self.dtype = dtype

    def advance(self, offsets: Any) -> BlockPointer:
        """The block moved by `offsets` (one per axis), as `metile.advance(self, offsets)`."""
        return advance(self, offsets)

    def _load(self, boundary_check: Any, padding_option: Any) -> Any:
        checked = _boundary_axes(boundary_check, len(self.block_shape))
        other = _padding_value(padding_option, self.dtype)
        pointers, mask = _pointers_and_mask(
            self.base, self.shape, self.strides, self.offsets, self.block_shape, checked
        )
        if mask is None:
            return _metile.load(pointers)
        return _metile.load(pointers, mask=mask, other=other)

    def _store(self, value: Any, boundary_check: Any) -> None:
        checked = _boundary_axes(boundary_check, len(self.block_shape))
        value = _block_value(value, self.dtype, self.block_shape, "store through a block pointer", exact=False)
        pointers, mask = _pointers_and_mask(
            self.base, self.shape, self.strides, self.offsets, self.block_shape, checked
        )
        _metile.store(pointers, value, mask=mask)

    def __repr__(self) -> str:
        return f"<metile block pointer to {self.dtype}, block {self.block_shape}>"


def make_block_ptr(base: Any, shape: Any, strides: Any, offsets: Any, block_shape: Any, order: Any) -> BlockPointer:
    """Triton's `tl.make_block_ptr`: a pointer to the `block_shape` block at
    `offsets` of the tensor at `base` with the given `shape` and `strides`.
    `order` (the axes from fastest to slowest in memory) is checked and kept."""
    what = "make_block_ptr"
    dtype = _base_pointer(base, what)
    shape = [_index(s, f"{what}'s shape") for s in _sequence(shape, f"{what}'s shape")]
    rank = len(shape)
    if rank == 0:
        raise _fail(f"{what} needs a tensor of rank 1 or more, got shape=()")
    strides = [_index(s, f"{what}'s strides") for s in _sequence(strides, f"{what}'s strides")]
    offsets = [_index(s, f"{what}'s offsets") for s in _sequence(offsets, f"{what}'s offsets")]
    for name, entries in (("strides", strides), ("offsets", offsets)):
        if len(entries) != rank:
            raise _fail(f"{what}'s {name} has {len(entries)} entries but shape has {rank}")
    block = _block_shape(block_shape, rank, f"{what}'s block_shape")
    order = _sequence(order, f"{what}'s order")
    if sorted(o for o in order if _is_int(o)) != list(range(rank)) or len(order) != rank:
        raise _fail(f"{what}'s order must be a permutation of the axes 0..{rank - 1}, got {tuple(order)!r}")
    return BlockPointer(base, shape, strides, offsets, block, tuple(order), dtype)


def advance(base: Any, offsets: Any) -> BlockPointer:
    """Triton's `tl.advance`: the block pointer `base` moved by `offsets`."""
    if not isinstance(base, BlockPointer):
        raise _fail(f"advance needs a block pointer (from metile.make_block_ptr), got {base!r}")
    deltas = [_index(o, "advance's offsets") for o in _sequence(offsets, "advance's offsets")]
    if len(deltas) != len(base.block_shape):
        raise _fail(f"advance got {len(deltas)} offsets for a block pointer of rank {len(base.block_shape)}")
    moved = [o if _is_int(d) and d == 0 else o + d for o, d in zip(base.offsets, deltas, strict=True)]
    return BlockPointer(base.base, base.shape, base.strides, moved, base.block_shape, base.order, base.dtype)


class TensorDescriptor:
    """What `metile.make_tensor_descriptor` returns: a tensor whose blocks of
    `block_shape` are read and written at element offsets, out-of-bounds
    elements reading as the padding and dropped when written (as Triton's TMA
    descriptors)."""

    def __init__(self, base, shape, strides, block_shape, padding, dtype):
        self.base = base
        self.shape = shape
        self.strides = strides
        self.block_shape = block_shape
        self.padding = padding
        self.dtype = dtype

    def _offsets(self, offsets: Any, what: str) -> list[Any]:
        entries = [_index(o, f"{what}'s offsets") for o in _sequence(offsets, f"{what}'s offsets")]
        if len(entries) != len(self.block_shape):
            raise _fail(f"{what} got {len(entries)} offsets for a descriptor of rank {len(self.block_shape)}")
        return entries

    def load(self, offsets: Any) -> Any:
        """The block at `offsets` (one element offset per axis)."""
        offsets = self._offsets(offsets, "TensorDescriptor.load")
        every_axis = tuple(range(len(self.block_shape)))
        pointers, mask = _pointers_and_mask(self.base, self.shape, self.strides, offsets, self.block_shape, every_axis)
        return _metile.load(pointers, mask=mask, other=_padding_value(self.padding, self.dtype))

    def store(self, offsets: Any, value: Any) -> None:
        """Writes `value` (of the block's shape) at `offsets`; elements outside the tensor are dropped."""
        offsets = self._offsets(offsets, "TensorDescriptor.store")
        value = _block_value(value, self.dtype, self.block_shape, "TensorDescriptor.store", exact=True)
        every_axis = tuple(range(len(self.block_shape)))
        pointers, mask = _pointers_and_mask(self.base, self.shape, self.strides, offsets, self.block_shape, every_axis)
        _metile.store(pointers, value, mask=mask)

    def __repr__(self) -> str:
        return f"<metile tensor descriptor of {self.dtype}, block {self.block_shape}>"


def make_tensor_descriptor(
    base: Any, shape: Any, strides: Any, block_shape: Any, padding_option: str = "zero"
) -> TensorDescriptor:
    """Triton's `tl.make_tensor_descriptor`: the tensor at `base` with `shape` and
    `strides` (the last stride must be 1), read and written in `block_shape` blocks."""
    what = "make_tensor_descriptor"
    dtype = _base_pointer(base, what)
    shape = [_index(s, f"{what}'s shape") for s in _sequence(shape, f"{what}'s shape")]
    rank = len(shape)
    if not 1 <= rank <= 5:
        raise _fail(f"{what} needs a tensor of rank 1 to 5, got {rank}")
    strides = [_index(s, f"{what}'s strides") for s in _sequence(strides, f"{what}'s strides")]
    if len(strides) != rank:
        raise _fail(f"{what}'s strides has {len(strides)} entries but shape has {rank}")
    if not (_is_int(strides[-1]) and strides[-1] == 1):
        raise _fail(f"{what}'s last stride must be the constant 1 (the last axis is contiguous), got {strides[-1]!r}")
    block = _block_shape(block_shape, rank, f"{what}'s block_shape")
    _padding_value(padding_option, dtype)
    return TensorDescriptor(base, shape, strides, block, padding_option, dtype)


_CACHE_MODIFIERS = ("", ".ca", ".cg", ".cv", ".wb", ".cs", ".wt")
_EVICTION_POLICIES = ("", "evict_first", "evict_last")


def _check_cache_hints(cache_modifier: Any, eviction_policy: Any, volatile: Any = False) -> None:
    """Triton's cache hints are accepted and checked; meTile's loads and stores
    do not act on them."""
    if cache_modifier not in _CACHE_MODIFIERS:
        raise _fail(f"cache_modifier must be one of {_CACHE_MODIFIERS}, got {cache_modifier!r}")
    if eviction_policy not in _EVICTION_POLICIES:
        raise _fail(f"eviction_policy must be one of {_EVICTION_POLICIES}, got {eviction_policy!r}")
    if not isinstance(volatile, bool):
        raise _fail(f"volatile must be True or False, got {volatile!r}")


def load(
    ptr: Any,
    mask: Any = None,
    other: Any = None,
    boundary_check: Any = (),
    padding_option: str = "",
    cache_modifier: str = "",
    eviction_policy: str = "",
    volatile: bool = False,
) -> Any:
    """`metile.load`: through a pointer tile (`mask`, `other`), or through a block
    pointer (`boundary_check`, `padding_option`). Triton's cache hints
    (`cache_modifier`, `eviction_policy`, `volatile`) are checked and have no effect."""
    _check_cache_hints(cache_modifier, eviction_policy, volatile)
    if isinstance(ptr, BlockPointer):
        if mask is not None or other is not None:
            raise _fail("load through a block pointer takes boundary_check and padding_option, not mask or other")
        return ptr._load(boundary_check, padding_option)
    if boundary_check not in ((), None) or padding_option != "":
        raise _fail(
            "boundary_check and padding_option apply to block pointers (metile.make_block_ptr); use mask= and other="
        )
    return _metile.load(ptr, mask=mask, other=other)


def store(
    ptr: Any,
    value: Any,
    mask: Any = None,
    boundary_check: Any = (),
    cache_modifier: str = "",
    eviction_policy: str = "",
) -> None:
    """`metile.store`: through a pointer tile (`mask`) or a block pointer
    (`boundary_check`); the cache hints are checked and have no effect."""
    _check_cache_hints(cache_modifier, eviction_policy)
    if isinstance(ptr, BlockPointer):
        if mask is not None:
            raise _fail("store through a block pointer takes boundary_check, not mask")
        ptr._store(value, boundary_check)
        return
    if boundary_check not in ((), None):
        raise _fail("boundary_check applies to block pointers (metile.make_block_ptr); use mask=")
    _metile.store(ptr, value, mask=mask)


# ------------------------------------------------ carrying through control flow

_STRUCTS = (BlockPointer, TensorDescriptor)


def _fields(value: Any) -> list[Any]:
    if isinstance(value, BlockPointer):
        return [value.base, *value.shape, *value.strides, *value.offsets]
    return [value.base, *value.shape, *value.strides]


def _rebuild(template: Any, leaves: Sequence[Any]) -> Any:
    rank = len(template.block_shape)
    base, shape, strides = leaves[0], list(leaves[1 : 1 + rank]), list(leaves[1 + rank : 1 + 2 * rank])
    if isinstance(template, BlockPointer):
        offsets = list(leaves[1 + 2 * rank : 1 + 3 * rank])
        return BlockPointer(base, shape, strides, offsets, template.block_shape, template.order, template.dtype)
    return TensorDescriptor(base, shape, strides, template.block_shape, template.padding, template.dtype)


def _same_kind(a: Any, b: Any) -> bool:
    return (
        type(a) is type(b)
        and a.block_shape == b.block_shape
        and a.dtype == b.dtype
        and getattr(a, "order", None) == getattr(b, "order", None)
        and getattr(a, "padding", None) == getattr(b, "padding", None)
    )


class _Layout:
    """Where each carried variable's fields sit in the flat tuple the native
    control-flow helpers carry."""

    def __init__(self, templates: Sequence[Any], names: Sequence[str]):
        self.templates = list(templates)
        self.names = list(names)

    @staticmethod
    def of(values: Sequence[Any], names: Sequence[str]) -> _Layout | None:
        if not any(isinstance(v, _STRUCTS) for v in values):
            return None
        return _Layout([v if isinstance(v, _STRUCTS) else None for v in values], names)

    def flat_names(self) -> tuple[str, ...]:
        out: list[str] = []
        for template, name in zip(self.templates, self.names, strict=True):
            out.extend([name] if template is None else [f"{name}.{i}" for i in range(len(_fields(template)))])
        return tuple(out)

    def flatten(self, values: Sequence[Any], construct: str) -> tuple[Any, ...]:
        out: list[Any] = []
        for template, name, value in zip(self.templates, self.names, values, strict=True):
            if template is None:
                if isinstance(value, _STRUCTS):
                    raise _fail(
                        f"`{name}` becomes a {type(value).__name__} inside {construct}; create it before "
                        f"{construct} so its fields can be carried"
                    )
                out.append(value)
            elif not isinstance(value, _STRUCTS) or not _same_kind(template, value):
                raise _fail(
                    f"`{name}` is a {type(template).__name__} before {construct} and must stay one of the same "
                    f"block shape and dtype, got {value!r}"
                )
            else:
                out.extend(_fields(value))
        return tuple(out)

    def unflatten(self, flat: Sequence[Any]) -> tuple[Any, ...]:
        out: list[Any] = []
        i = 0
        for template in self.templates:
            if template is None:
                out.append(flat[i])
                i += 1
            else:
                n = len(_fields(template))
                out.append(_rebuild(template, flat[i : i + n]))
                i += n
        return tuple(out)


def carried_for(iterable: Any, body: Callable, inits: tuple, names: tuple) -> tuple:
    layout = _Layout.of(inits, names)
    if layout is None:
        return _metile.trace_for(iterable, body, inits, names)

    def flat_body(iv: Any, *flat: Any) -> tuple:
        return layout.flatten(body(iv, *layout.unflatten(flat)), "the loop")

    return layout.unflatten(
        _metile.trace_for(iterable, flat_body, layout.flatten(inits, "the loop"), layout.flat_names())
    )


def carried_while(cond: Callable, body: Callable, inits: tuple, names: tuple) -> tuple:
    layout = _Layout.of(inits, names)
    if layout is None:
        return _metile.trace_while(cond, body, inits, names)

    def flat_cond(*flat: Any) -> Any:
        return cond(*layout.unflatten(flat))

    def flat_body(*flat: Any) -> tuple:
        return layout.flatten(body(*layout.unflatten(flat)), "the loop")

    flat = _metile.trace_while(flat_cond, flat_body, layout.flatten(inits, "the loop"), layout.flat_names())
    return layout.unflatten(flat)


def carried_if(cond: Any, then_fn: Callable, else_fn: Callable, inits: tuple, names: tuple, params: tuple) -> tuple:
    if not isinstance(cond, _Tile) or not any(isinstance(v, _STRUCTS) for v in inits):
        return _metile.trace_if(cond, then_fn, else_fn, inits, names, params)
    before = dict(zip(params, inits, strict=True))
    params_layout = _Layout.of(inits, params)
    results_layout = _Layout([before.get(n) if isinstance(before.get(n), _STRUCTS) else None for n in names], names)

    def branch(fn: Callable) -> Callable:
        def flat_branch(*flat: Any) -> tuple:
            return results_layout.flatten(fn(*params_layout.unflatten(flat)), "an `if` on a run-time condition")

        return flat_branch

    flat = _metile.trace_if(
        cond,
        branch(then_fn),
        branch(else_fn),
        params_layout.flatten(inits, "an `if` on a run-time condition"),
        results_layout.flat_names(),
        params_layout.flat_names(),
    )
    return results_layout.unflatten(flat)
