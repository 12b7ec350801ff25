"""Pictures of layouts: plain layouts, thread-value layouts of tiles, threadgroup-memory banks."""

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import metile
from metile.layout import (
    Layout,
    Swizzle,
    SwizzledLayout,
    bank_conflicts,
    draw,
    draw_banks,
    draw_tv,
    thread_value_cells,
)

SVG = "{http://www.w3.org/2000/svg}"


def _cells(svg: str) -> list[list[str]]:
    """The text lines of each grid cell, in drawing order."""
    root = ET.fromstring(svg)
    texts = [t.text for t in root.iter(f"{SVG}text") if t.get("font-size") == "9"]
    return texts


def test_a_plain_layout_shows_each_coordinates_offset(tmp_path):
    layout = Layout((3, 5), (5, 1))  # row-major 3x5
    path = tmp_path / "plain.svg"
    svg = draw(layout, path)
    assert path.read_text() == svg
    assert _cells(svg) == [str(i * 5 + j) for i in range(3) for j in range(5)]
    # Column-major: the offsets run down the columns.
    assert _cells(draw(Layout((3, 5))))[:5] == ["0", "3", "6", "9", "12"]


def test_a_thread_value_layout_names_the_holder_of_every_element():
    # 32 threads x 4 values over an 8x16 tile: thread t holds row t // 4, columns 4 * (t % 4) + v.
    tv = Layout((32, 4), (4, 1))
    rows, cols, holders = thread_value_cells(tv, (8, 16))
    assert (rows, cols) == (8, 16)
    for t in range(32):
        for v in range(4):
            assert holders[(t // 4, 4 * (t % 4) + v)] == [(t, v)]
    svg = draw_tv(tv, (8, 16), values=[[f"{i}.{j}" for j in range(16)] for i in range(8)])
    cells = _cells(svg)
    assert cells[:3] == ["T0", "V0", "0.0"] and cells[3 * 5:3 * 5 + 3] == ["T1", "V1", "0.5"]
    # Same thread, same colour; neighbouring threads, different colours.
    fills = [r.get("fill") for r in ET.fromstring(svg).iter(f"{SVG}rect")][1:]
    assert fills[0] == fills[3] != fills[4]


def test_column_major_order_and_replication_are_shown():
    # Threads 0..3 and 4..7 hold the same 4 elements (stride 0 on the second thread leaf).
    tv = Layout(((4, 2), 1), ((1, 0), 0))
    rows, cols, holders = thread_value_cells(tv, (2, 2), order="col")
    assert holders[(1, 0)] == [(1, 0), (5, 0)]  # element 1 is (1, 0) in column-major order
    svg = draw_tv(tv, (2, 2), order="col")
    assert "T1+1" in _cells(svg)
    assert "4 of 4 elements held, 4 by several threads" in svg


def test_banks_and_conflicts_of_shared_memory_layouts(tmp_path):
    # A 32x32 f32 tile, row-major: a warp reading a column hits one bank 32 times.
    assert bank_conflicts(Layout((32, 32), (32, 1))) == {"rows": 1, "columns": 32}
    # One word of padding per row spreads a column over every bank.
    assert bank_conflicts(Layout((32, 32), (33, 1))) == {"rows": 1, "columns": 1}
    # 16-bit elements: two share a word, which is a broadcast, not a conflict.
    assert bank_conflicts(Layout((32, 64), (64, 1)), element_bytes=2)["rows"] == 1
    # A swizzle (xor of the row into the 16-byte chunk) makes 8 rows of 128 bytes conflict-free by column.
    swizzled = SwizzledLayout(Swizzle(3, 2, 3), Layout((8, 32), (32, 1)))
    assert bank_conflicts(Layout((8, 32), (32, 1)))["columns"] == 8
    assert bank_conflicts(swizzled)["columns"] == 1
    svg = draw_banks(Layout((32, 32), (32, 1)), tmp_path / "banks.svg")
    assert "a column: 32-way" in svg and _cells(svg)[:2] == ["b0", "b1"]


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda: draw(Layout((2, 2, 2))), "rank 1 or 2, got rank 3"),
        (lambda: draw(Layout((2, 2)), "x.png"), "SVG files: give a path ending in .svg"),
        (lambda: thread_value_cells(Layout(8), 8), "two modes (thread, value)"),
        (lambda: thread_value_cells(Layout((4, 2), (2, 1)), (2, 2)), "outside the 2x2 tile"),
        (lambda: thread_value_cells(Layout((4, 2), (2, 1)), (2, 0)), "pair of positive ints"),
        (lambda: thread_value_cells(Layout((4, 2), (2, 1)), 8, order="diag"), "order must be"),
        (lambda: bank_conflicts(Layout((2, 2)), banks=0), "must be positive"),
    ],
)
def test_bad_requests_are_value_errors(call, error):
    with pytest.raises(ValueError, match=re.escape(error)):
        call()


@metile.kernel
def _row_scale(X, Out, M, N, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr):
    rows = metile.program_id(0) * BLOCK_M + metile.arange(0, BLOCK_M)
    cols = metile.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = metile.load(X + rows[:, None] * N + cols[None, :], mask=mask, other=0.0)
    metile.store(Out + rows[:, None] * N + cols[None, :], x / (metile.sum(x, axis=1)[:, None] + 1.0), mask=mask)


def test_metile_debug_layouts_draws_every_register_tile_of_a_kernel(device, tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("METILE_DEBUG", "layouts")
    monkeypatch.setenv("METILE_LAYOUT_DIR", str(tmp_path))
    x = np.arange(5 * 40, dtype=np.float32).reshape(5, 40)
    out = np.zeros_like(x)
    _row_scale[(2,)](x, out, 5, 40, BLOCK_M=4, BLOCK_N=64, num_sgs=2)
    np.testing.assert_allclose(out, x / (x.sum(axis=1, keepdims=True) + 1.0), rtol=1e-6)
    target = {"cuda": "sm_"}.get(device, "apple")
    (folder,) = [p for p in tmp_path.iterdir() if p.name.startswith(f"_row_scale-{target}")]
    assert f"pictures in {folder}" in capfd.readouterr().err
    pictures = {p.name: p.read_text() for p in folder.glob("*.svg")}
    loads = [svg for name, svg in pictures.items() if name.endswith("-load.svg")]
    assert loads, sorted(pictures)
    svg = loads[0]
    assert "float32" in svg or "f32" in svg
    assert "test_layout_draw.py:" in svg  # the kernel line of the load
    # Every element of the 4x64 tile is held by some thread of the 64 (2 simdgroups).
    assert "256 of 256 elements held" in svg
    held = [t for t in _cells(svg) if t.startswith("T")]
    assert len(held) == 4 * 64 and {int(t[1:].split("+")[0]) for t in held} <= set(range(64))
