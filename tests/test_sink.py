"""The `sink` pass switch (`sink_to_first_use`): pure ops, loads and register reads
move down to just before their first reader, so a row kernel's per-lane work
comes together and fewer values are live at once (docs/pipeline.md, docs/cuda.md).
The order is checked on the emitted CUDA (no GPU needed); results with the pass
on and off are compared on every backend."""

import re

import numpy as np
import pytest

import metile
from metile import _frontend, _metile


@metile.kernel
def layernorm_row(X, W, B, Out, N, eps, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    cols = metile.arange(0, BLOCK)
    mask = cols < N
    x = metile.load(X + row * N + cols, mask=mask, other=0.0).to(metile.float32)
    mean = metile.sum(x, axis=0) / N
    d = metile.where(mask, x - mean, 0.0)
    rstd = 1.0 / metile.sqrt(metile.sum(d * d, axis=0) / N + eps)
    w = metile.load(W + cols, mask=mask).to(metile.float32)
    b = metile.load(B + cols, mask=mask).to(metile.float32)
    metile.store(Out + row * N + cols, d * rstd * w + b, mask=mask)


@metile.kernel
def softmax_row(X, Out, N, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    cols = metile.arange(0, BLOCK)
    x = metile.load(X + row * N + cols, mask=cols < N, other=-float("inf")).to(metile.float32)
    e = metile.exp(x - metile.max(x, axis=0))
    metile.store(Out + row * N + cols, e / metile.sum(e, axis=0), mask=cols < N)


def layernorm_source(dtype, **passes):
    params = [("X", "ptr", dtype), ("W", "ptr", dtype), ("B", "ptr", dtype), ("Out", "ptr", dtype),
              ("N", "scalar", "i32", 16), ("eps", "scalar", "f32")]
    traced = _frontend.specialize(layernorm_row.fn, params, {"BLOCK": 4096}, {})
    return _metile.compile_cuda(traced, arch="sm_90", num_sgs=8, **passes)["cuda"].split('extern "C"')[1]


def lines_to_first_reader(body, pattern):
    """For each line defining a value whose right-hand side matches `pattern`,
    how many lines later that value is first read."""
    lines = body.splitlines()
    gaps = []
    for i, line in enumerate(lines):
        m = re.match(r"\s*\w+ (v\d+) = (.*);$", line)
        if m and re.search(pattern, m.group(2)):
            name = re.compile(rf"\b{m.group(1)}\b")
            gaps.append(next(j for j in range(i + 1, len(lines)) if name.search(lines[j])) - i)
    return gaps


@pytest.mark.parametrize("dtype", ["bf16", "f32"])
def test_each_lane_is_converted_and_computed_where_it_is_used(dtype):
    # 16 elements a thread: unsunk, every lane of W and B is converted (or extracted)
    # before any arithmetic; sunk, each is read within a few lines.
    pattern = r"^float\(v\d+\)$" if dtype == "bf16" else r"^v\d+\.(x|y|z|w)$"
    sunk = lines_to_first_reader(layernorm_source(dtype), pattern)
    unsunk = lines_to_first_reader(layernorm_source(dtype, sink=False), pattern)
    assert len(sunk) == len(unsunk) >= 48
    assert max(sunk) <= 4, sunk
    assert max(unsunk) > 30, unsunk


def test_the_loads_of_w_and_b_stay_after_the_last_barrier_and_move_to_their_lanes():
    body = layernorm_source("bf16")
    lines = body.splitlines()
    last_barrier = max(i for i, line in enumerate(lines) if "__syncthreads" in line)
    w_loads = [i for i, line in enumerate(lines) if "(W + " in line]
    b_loads = [i for i, line in enumerate(lines) if "(B + " in line]
    assert len(w_loads) == len(b_loads) == 2
    assert min(w_loads + b_loads) > last_barrier
    # Interleaved: the second W load comes after the first B load.
    assert b_loads[0] < w_loads[1]


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_narrowing_conversions_of_one_vector_stay_next_to_each_other(dtype):
    params = [("X", "ptr", dtype), ("Out", "ptr", dtype), ("N", "scalar", "i32", 16)]
    traced = _frontend.specialize(softmax_row.fn, params, {"BLOCK": 4096}, {})
    body = _metile.compile_cuda(traced, arch="sm_90", num_sgs=8)["cuda"].split('extern "C"')[1]
    ty = "bfloat" if dtype == "bf16" else "half"
    line_of = {m.group(1): i for i, m in enumerate(re.finditer(rf"^\s*{ty} (v\d+) = {ty}\(v\d+\);$", body,
                                                                   re.M))}
    vectors = re.findall(rf"metile_vec<{ty}, 8>\(((?:v\d+, ){{7}}v\d+)\)", body)
    assert vectors
    for lanes in vectors:
        names = lanes.split(", ")
        for a, b in zip(names[::2], names[1::2]):
            assert line_of[b] == line_of[a] + 1, (a, b)


def test_the_switch_is_listed_and_checked():
    assert "sink" in _metile.pass_names()
    with pytest.raises(TypeError, match="the pass sink is switched on or off with True or False, got 1"):
        layernorm_source("bf16", sink=1)


def _dtype(name):
    return {"f32": np.float32, "f16": np.float16}[name]


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("n", [1000, 1024, 77])
def test_results_are_the_same_with_the_pass_on_and_off(device, rng, dtype, n):
    rows, block = 3, metile.next_power_of_2(n)
    x = rng.standard_normal((rows, n)).astype(_dtype(dtype))
    w = rng.standard_normal(n).astype(_dtype(dtype))
    b = rng.standard_normal(n).astype(_dtype(dtype))
    outs = []
    for sink in (True, False):
        ln = np.zeros_like(x)
        sm = np.zeros_like(x)
        layernorm_row[(rows,)](x, w, b, ln, n, 1e-5, BLOCK=block, num_sgs=2, sink=sink)
        softmax_row[(rows,)](x, sm, n, BLOCK=block, num_sgs=2, sink=sink)
        outs.append((ln, sm))
    for on, off in zip(*outs):
        np.testing.assert_array_equal(on, off)
    xf = x.astype(np.float64)
    mean = xf.mean(1, keepdims=True)
    ref = (xf - mean) / np.sqrt(((xf - mean) ** 2).mean(1, keepdims=True) + 1e-5) * w + b
    tol = 1e-4 if dtype == "f32" else 2e-2
    np.testing.assert_allclose(outs[0][0].astype(np.float64), ref, rtol=tol, atol=tol * 4)
    e = np.exp(xf - xf.max(1, keepdims=True))
    np.testing.assert_allclose(outs[0][1].astype(np.float64), e / e.sum(1, keepdims=True), rtol=tol, atol=tol)


def test_apple_targets_keep_the_lowered_order_unless_asked():
    params = [("X", "ptr", "f16"), ("W", "ptr", "f16"), ("B", "ptr", "f16"), ("Out", "ptr", "f16"),
              ("N", "scalar", "i32", 16), ("eps", "scalar", "f32")]
    traced = _frontend.specialize(layernorm_row.fn, params, {"BLOCK": 256}, {})
    default = _metile.compile_msl(traced, num_sgs=1)["msl"]
    assert default == _metile.compile_msl(traced, num_sgs=1, sink=False)["msl"]
    assert default != _metile.compile_msl(traced, num_sgs=1, sink=True)["msl"]
