"""Pictures of layouts as SVG: plain layouts (coordinate -> offset), thread-value layouts
(which thread holds which element of a tile) and threadgroup-memory banks.

The pictures follow CuTe's `print_latex` / `print_svg`: one cell per element of a grid,
coloured by what matters (the offset, the owning thread, the bank), labelled with the numbers.
SVG needs nothing but the standard library and opens in any browser.
"""

from __future__ import annotations

import math
import os
import sys
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

CELL = 36  # pixels per cell side
MARGIN = 28  # room for the row and column indices
TITLE = 22  # height of the title line


def _rank(layout) -> int:
    rank = layout.rank() if callable(getattr(layout, "rank", None)) else layout.layout.rank()
    if rank not in (1, 2):
        raise ValueError(f"a layout picture needs a layout of rank 1 or 2, got rank {rank}: {layout}")
    return rank


def _mode_sizes(layout) -> tuple[int, int]:
    """The grid a plain layout is drawn on: (rows, columns), a rank-1 layout as one row."""
    inner = layout if hasattr(layout, "modes") else layout.layout
    if _rank(layout) == 1:
        return 1, inner.size()
    rows, cols = (m.size() for m in inner.modes())
    return rows, cols


def _offset_at(layout, rank: int, i: int, j: int) -> int:
    return layout((j,)) if rank == 1 else layout((i, j))


def _thread_colour(t: int) -> str:
    """Neighbouring threads get distant hues (golden-angle steps), each thread its own."""
    hue = (t * 137.508) % 360
    lightness = 72 if (t // 8) % 2 == 0 else 84
    return f"hsl({hue:.1f},70%,{lightness}%)"


def _grey(k: int, levels: int = 8) -> str:
    shade = 255 - (k % levels) * (120 // levels)
    return f"rgb({shade},{shade},{shade})"


def _svg(
    rows: int,
    cols: int,
    cell: Callable[[int, int], tuple[str, Sequence[str]]],
    title: str,
    legend: Sequence[str] = (),
) -> str:
    """A grid of `rows` x `cols` cells; `cell(i, j)` gives the fill colour and the text lines."""
    width = MARGIN + cols * CELL + 8
    height = TITLE + MARGIN + rows * CELL + 8 + 16 * len(legend)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="monospace">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="4" y="16" font-size="13">{escape(title)}</text>',
    ]
    top = TITLE + MARGIN
    for j in range(cols):
        out.append(f'<text x="{MARGIN + j * CELL + CELL / 2}" y="{top - 6}" font-size="10" '
                   f'text-anchor="middle" fill="#555">{j}</text>')
    for i in range(rows):
        y = top + i * CELL
        out.append(f'<text x="{MARGIN - 4}" y="{y + CELL / 2 + 3}" font-size="10" '
                   f'text-anchor="end" fill="#555">{i}</text>')
        for j in range(cols):
            fill, lines = cell(i, j)
            x = MARGIN + j * CELL
            out.append(f'<rect x="{x}" y="{y}" width="{CELL}" height="{CELL}" fill="{fill}" '
                       f'stroke="black" stroke-width="0.5"/>')
            step = 11
            first = y + CELL / 2 + 4 - step * (len(lines) - 1) / 2
            for k, line in enumerate(lines):
                out.append(f'<text x="{x + CELL / 2}" y="{first + k * step:.1f}" font-size="9" '
                           f'text-anchor="middle">{escape(line)}</text>')
    for k, line in enumerate(legend):
        out.append(f'<text x="4" y="{top + rows * CELL + 18 + 16 * k}" font-size="11">{escape(line)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _write(svg: str, path: str | PathLike[str] | None) -> str:
    if path is not None:
        target = Path(path)
        if target.suffix.lower() != ".svg":
            raise ValueError(f"layout pictures are SVG files: give a path ending in .svg, got {str(path)!r}")
        target.write_text(svg)
    return svg


def draw(layout, path: str | PathLike[str] | None = None, *, title: str | None = None) -> str:
    """Draws a layout of rank 1 or 2 (a `Layout` or `SwizzledLayout`): one cell per
    coordinate, holding the offset it maps to, shaded by offset. Returns the SVG text and
    writes it to `path` (a `.svg` file) when given."""
    rank = _rank(layout)
    rows, cols = _mode_sizes(layout)

    def cell(i: int, j: int) -> tuple[str, list[str]]:
        offset = _offset_at(layout, rank, i, j)
        return _grey(offset), [str(offset)]

    return _write(_svg(rows, cols, cell, title or str(layout)), path)


def thread_value_cells(
    layout, tile: int | Sequence[int], order: str = "row"
) -> tuple[int, int, dict[tuple[int, int], list[tuple[int, int]]]]:
    """The `(thread, value)` pairs that hold each element of `tile` under a thread-value layout
    (rank 2: thread mode, value mode, mapping to the element's linear index, row-major for
    `order="row"` as meTile's tiles are, column-major for `order="col"` as CuTe's)."""
    if _rank(layout) != 2:
        raise ValueError(f"a thread-value layout has two modes (thread, value), got {layout}")
    shape = (1, tile) if isinstance(tile, int) else tuple(tile)
    if len(shape) == 1:
        shape = (1, shape[0])
    if len(shape) != 2 or any(not isinstance(s, int) or s <= 0 for s in shape):
        raise ValueError(f"tile must be a positive int or a pair of positive ints, got {tile!r}")
    if order not in ("row", "col"):
        raise ValueError(f"order must be 'row' (meTile's tiles) or 'col' (CuTe's), got {order!r}")
    rows, cols = shape
    threads, values = (m.size() for m in layout.modes())
    holders: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for t in range(threads):
        for v in range(values):
            e = layout((t, v))
            if not 0 <= e < rows * cols:
                raise ValueError(f"thread {t} value {v} maps to element {e}, outside the {rows}x{cols} tile")
            at = divmod(e, cols) if order == "row" else (e % rows, e // rows)
            holders[at].append((t, v))
    return rows, cols, holders


def draw_tv(
    layout,
    tile: int | Sequence[int],
    path: str | PathLike[str] | None = None,
    *,
    order: str = "row",
    title: str | None = None,
    values: Sequence[Sequence[str]] | None = None,
) -> str:
    """Draws which thread holds which element of a tile under a thread-value layout: each
    cell is labelled `T<thread> V<value>` (the first holder, `+k` more when replicated) and
    coloured by thread. `values`, a grid of strings, adds each element's value as a third line."""
    rows, cols, holders = thread_value_cells(layout, tile, order)
    svg = _holders_svg(rows, cols, holders, title or f"{layout} on a {rows}x{cols} tile", values)
    return _write(svg, path)


def _holders_svg(
    rows: int,
    cols: int,
    holders: dict[tuple[int, int], list[tuple[int, int]]],
    title: str,
    values: Sequence[Sequence[str]] | None = None,
) -> str:
    def cell(i: int, j: int) -> tuple[str, list[str]]:
        held = sorted(holders.get((i, j), []))
        if not held:
            return "white", ["-"]
        t, v = held[0]
        lines = [f"T{t}" + (f"+{len(held) - 1}" if len(held) > 1 else ""), f"V{v}"]
        if values is not None:
            lines.append(str(values[i][j]))
        return _thread_colour(t), lines

    replicated = sum(len(h) > 1 for h in holders.values())
    legend = [f"{len(holders)} of {rows * cols} elements held"
              + (f", {replicated} by several threads" if replicated else "")]
    return _svg(rows, cols, cell, title, legend)


def write_kernel_layouts(kernel: str, arch: str, tiles: Sequence[Mapping[str, Any]]) -> Path:
    """`METILE_DEBUG=layouts`: one picture per register tile of a compiled kernel, in
    `$METILE_LAYOUT_DIR/<kernel>-<arch>/` (default `./metile-layouts`). Each tile gives its
    shape and, per thread and per register, the element offset (row-major) they hold:
    element = thread_offsets[t] + value_offsets[v], held by thread thread_base + t."""
    folder = Path(os.environ.get("METILE_LAYOUT_DIR") or "metile-layouts") / f"{kernel}-{arch}"
    folder.mkdir(parents=True, exist_ok=True)
    for tile in tiles:
        shape = list(tile["shape"]) or [1]
        cols = shape[-1]
        rows = math.prod(shape[:-1])
        holders: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
        base = tile["thread_base"]
        for t, thread_offset in enumerate(tile["thread_offsets"]):
            for v, value_offset in enumerate(tile["value_offsets"]):
                holders[divmod(thread_offset + value_offset, cols)].append((base + t, v))
        where = f" at {tile['line']}" if tile["line"] else ""
        title = f"{kernel} {tile['value']} = {tile['op']}{where}: {tile['dtype']}{tuple(tile['shape'])} on {arch}"
        name = f"{tile['value'].lstrip('%')}-{tile['op']}.svg"
        (folder / name).write_text(_holders_svg(rows, cols, holders, title))
    print(f"// layouts of {kernel} for {arch}: {len(tiles)} pictures in {folder}", file=sys.stderr)
    return folder


def bank_conflicts(layout, element_bytes: int = 4, banks: int = 32, bank_bytes: int = 4,
                   lanes: int = 32) -> dict[str, int]:
    """The worst n-way bank conflict when `lanes` threads read `lanes` consecutive elements
    of a row (`"rows"`) or of a column (`"columns"`) of a rank-2 threadgroup-memory layout
    (offsets in elements), each thread one element; 1 means conflict-free."""
    if element_bytes <= 0 or banks <= 0 or bank_bytes <= 0 or lanes <= 0:
        raise ValueError("element_bytes, banks, bank_bytes and lanes must be positive")
    rank = _rank(layout)
    rows, cols = _mode_sizes(layout)

    def worst(cells: list[tuple[int, int]]) -> int:
        degree = 1
        for start in range(0, len(cells), lanes):
            words: dict[int, set[int]] = defaultdict(set)
            for i, j in cells[start:start + lanes]:
                byte = _offset_at(layout, rank, i, j) * element_bytes
                words[(byte // bank_bytes) % banks].add(byte // bank_bytes)
            degree = max(degree, max(len(w) for w in words.values()))
        return degree

    by_rows = max(worst([(i, j) for j in range(cols)]) for i in range(rows))
    by_cols = max(worst([(i, j) for i in range(rows)]) for j in range(cols))
    return {"rows": by_rows, "columns": by_cols}


def draw_banks(
    layout,
    path: str | PathLike[str] | None = None,
    *,
    element_bytes: int = 4,
    banks: int = 32,
    bank_bytes: int = 4,
    title: str | None = None,
) -> str:
    """Draws the threadgroup-memory bank of every element of a rank-1 or rank-2 layout
    (offsets in elements of `element_bytes`), coloured by bank, with the worst conflict of a
    warp reading a row and a column (32 banks of 4 bytes: NVIDIA's and Apple's)."""
    rank = _rank(layout)
    rows, cols = _mode_sizes(layout)
    conflicts = bank_conflicts(layout, element_bytes, banks, bank_bytes)

    def cell(i: int, j: int) -> tuple[str, list[str]]:
        bank = (_offset_at(layout, rank, i, j) * element_bytes // bank_bytes) % banks
        return _thread_colour(bank), [f"b{bank}"]

    legend = [f"reading a row: {conflicts['rows']}-way, a column: {conflicts['columns']}-way "
              f"({banks} banks of {bank_bytes} bytes, {element_bytes}-byte elements)"]
    return _write(_svg(rows, cols, cell, title or f"banks of {layout}", legend), path)
