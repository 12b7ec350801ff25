"""The compile pipeline seen from Python: METILE_DEBUG=pipeline lists the stages with
what each did, METILE_DEBUG=<stage> prints the IR after that stage, an unknown name is
refused, and the pass switches come from the compiler's policy table (docs/pipeline.md)."""

import os

import numpy as np
import pytest

import metile
from metile import _config, _frontend, _metile
from metile.testing.reference_kernels import gemm_bounded

STAGES = _metile.pipeline_stages()
TRACE_STAGES = [name for name, _, phase, _ in STAGES if phase == "trace"]
TARGET_STAGES = [name for name, _, phase, _ in STAGES if phase == "target"]
EMU = metile.device_available("msl-emu")
ADD_PARAMS = [("X", "ptr", "f32"), ("Out", "ptr", "f32"), ("n", "scalar", "i32")]


@metile.kernel
def add_one(X, Out, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    metile.store(Out + offs, metile.load(X + offs, mask=offs < n, other=0.0) + 1.0, mask=offs < n)


@metile.kernel
def absent_lanes(X, Out, n, BLOCK: metile.constexpr):
    """Traced only: its masked load leaves lanes absent, which the trace phase makes explicit."""
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    x = metile.load(X + offs, mask=offs < n)
    metile.store(Out + offs, x + 1.0)


def _launch_add(**options):
    n = 37
    x = np.arange(n, dtype=np.float32)
    out = np.zeros_like(x)
    add_one[(metile.cdiv(n, 16),)](x, out, n, BLOCK=16, **options)
    np.testing.assert_array_equal(out, x + 1)


def _launch_gemm(block_k, **options):
    """A ragged GEMM; each test picks its own BLOCK_K, so that it compiles afresh
    rather than finding another test's specialisation."""
    rng = np.random.default_rng(7)
    M, N, K = 37, 29, 40
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    c = np.zeros((M, N), np.float32)
    gemm_bounded[(metile.cdiv(M, 16), metile.cdiv(N, 16))](a, b, c, M, N, K, BLOCK_M=16, BLOCK_N=16,
                                                            BLOCK_K=block_k, **options)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


def _stage_lines(err, title):
    """The stage lines of the run headed `// pipeline of <title>`, as (name, level, outcome, switch)."""
    head = f"// pipeline of {title}\n"
    assert head in err, err
    lines = []
    for line in err.split(head, 1)[1].splitlines():
        if not line.startswith("//   "):
            break
        parts = line[5:].split()
        switch = parts[-1][1:-1] if parts[-1].startswith("[") else None
        lines.append((parts[0], parts[1], parts[2], switch))
    return lines


def test_the_stage_table_is_snake_case_and_ends_in_emission():
    names = [name for name, _, _, _ in STAGES]
    assert names[0] == "check_kernel" and names[-1] == "emit"
    assert all(n.replace("_", "").isalnum() and n == n.lower() for n in names)
    assert {level for _, level, _, _ in STAGES} == {"tile", "layout", "gpu", "emit"}
    # Every switch that gates a stage is a pass switch, and every stage is a METILE_DEBUG value.
    switches = {s for _, _, _, s in STAGES if s is not None}
    assert switches <= set(_metile.pass_names())
    assert set(names) <= set(_metile.debug_names())


def test_pass_switches_come_from_the_compiler():
    assert _config.PASS_OPTIONS == tuple(_metile.pass_names())
    assert len(set(_config.PASS_OPTIONS)) == len(_config.PASS_OPTIONS) >= 13
    for name in _config.PASS_OPTIONS:
        assert metile.Config(BLOCK=16, **{name: False})[name] is False
    with pytest.raises(TypeError) as info:
        _launch_add(l2_ordr=False)
    message = str(info.value)
    assert "unknown keyword argument 'l2_ordr'" in message
    assert all(name in message for name in _config.PASS_OPTIONS)


def test_pipeline_lists_the_trace_stages(monkeypatch, capfd):
    monkeypatch.setenv("METILE_DEBUG", "pipeline")
    _frontend.specialize(absent_lanes.fn, ADD_PARAMS, {"BLOCK": 16}, {})
    lines = _stage_lines(capfd.readouterr().err, "absent_lanes (trace)")
    assert [name for name, _, _, _ in lines] == TRACE_STAGES
    assert {level for _, level, _, _ in lines} == {"tile"}
    outcomes = [outcome for _, _, outcome, _ in lines]
    # The masked load leaves lanes absent: the pass changes the IR, so the second clean-up runs.
    assert outcomes == ["ran", "ran", "changed", "ran"]
    # Without absent lanes the pass changes nothing and the second clean-up has nothing to do.
    _frontend.specialize(add_one.fn, ADD_PARAMS, {"BLOCK": 16}, {})
    lines = _stage_lines(capfd.readouterr().err, "add_one (trace)")
    assert [outcome for _, _, outcome, _ in lines][2:] == ["ran", "skipped"]


@pytest.mark.skipif(not EMU, reason="no msl-emu device here")
def test_pipeline_lists_the_target_stages_with_their_switches(monkeypatch, capfd):
    monkeypatch.setenv("METILE_DEBUG", "pipeline")
    previous = metile.get_device()
    metile.set_device("msl-emu")
    try:
        _launch_gemm(32)
        default = _stage_lines(capfd.readouterr().err, "gemm_bounded (apple)")
        _launch_gemm(32, l2_order=False, async_copy=True)
        switched = _stage_lines(capfd.readouterr().err, "gemm_bounded (apple)")
    finally:
        metile.set_device(previous)
    assert [name for name, _, _, _ in default] == TARGET_STAGES
    by_name = {name: (level, outcome, switch) for name, level, outcome, switch in default}
    assert by_name["l2_order"] == ("tile", "changed", "l2_order")
    # Apple GPUs keep the asynchronous ring off unless asked (the policy table).
    assert by_name["prefetch_dot_operands_async"][1:] == ("off", "async_copy")
    assert by_name["layout_assign"][:2] == ("layout", "changed")
    assert by_name["lower"][:2] == ("gpu", "changed")
    assert by_name["emit"][:2] == ("emit", "changed")
    by_name = {name: outcome for name, _, outcome, _ in switched}
    assert by_name["l2_order"] == "off"
    assert by_name["prefetch_dot_operands_async"] != "off"


@pytest.mark.skipif(not EMU, reason="no msl-emu device here")
def test_a_stage_name_prints_the_ir_after_it(monkeypatch, capfd):
    monkeypatch.setenv("METILE_DEBUG", "l2_order,lower,emit,msl")
    previous = metile.get_device()
    metile.set_device("msl-emu")
    try:
        _launch_gemm(block_k=8)
    finally:
        metile.set_device(previous)
    err = capfd.readouterr().err
    after_l2 = err.split("// gemm_bounded after l2_order (apple)\n", 1)[1]
    assert after_l2.startswith("tile.func @gemm_bounded(")
    after_lower = err.split("// gemm_bounded after lower (apple)\n", 1)[1]
    assert after_lower.startswith("gpu.func @gemm_bounded(")
    emitted = err.split("// gemm_bounded after emit (apple)\n", 1)[1]
    msl = err.split("// MSL of gemm_bounded\n", 1)[1]
    # The source after emission is the MSL the device compiled.
    assert emitted.split("\n// ", 1)[0].strip() == msl.split("\n// ", 1)[0].strip()


def test_a_trace_stage_prints_its_tile_ir(monkeypatch, capfd):
    monkeypatch.setenv("METILE_DEBUG", "resolve_absent_lanes,check_kernel")
    f = _frontend.specialize(absent_lanes.fn, ADD_PARAMS, {"BLOCK": 16}, {})
    err = capfd.readouterr().err
    traced = err.split("// absent_lanes after check_kernel (trace)\n", 1)[1].split("\n// ", 1)[0]
    resolved = err.split("// absent_lanes after resolve_absent_lanes (trace)\n", 1)[1]
    assert traced.startswith("tile.func @absent_lanes(") and resolved.startswith("tile.func @absent_lanes(")
    # The pass made the absent lanes explicit: the stored value is selected by the load's mask.
    assert " select " not in traced and " select " in resolved
    assert " select " in f.text


@pytest.mark.parametrize("value, unknown",
                         [("lowr", "lowr"), ("tile_ir, l2_ordr", "l2_ordr"), ("pipelines", "pipelines")])
def test_an_unknown_stage_name_is_refused(monkeypatch, value, unknown):
    monkeypatch.setenv("METILE_DEBUG", value)
    with pytest.raises(ValueError) as info:
        _frontend.specialize(add_one.fn, ADD_PARAMS, {"BLOCK": 16}, {})
    message = str(info.value)
    assert f"METILE_DEBUG names an unknown stage '{unknown}'" in message
    assert "pipeline" in message and "l2_order" in message and "tile_ir" in message


def test_every_existing_debug_value_is_still_accepted(monkeypatch, capfd):
    for value in ("tile_ir", "gpu_ir", "msl", "cuda", "repack", "all", "pipeline", "msl,tile_ir", "all,"):
        monkeypatch.setenv("METILE_DEBUG", value)
        _frontend.specialize(add_one.fn, ADD_PARAMS, {"BLOCK": 16}, {})
    capfd.readouterr()
    assert os.environ["METILE_DEBUG"] == "all,"
