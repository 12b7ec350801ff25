"""`@metile.autotune`: the search picks the fastest config, never disturbs the
caller's outputs, skips configs the target refuses, persists winners across
processes; plus `metile.testing.do_bench` / `perf_report` and every error path."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import metile
from metile.testing import Benchmark, do_bench, perf_report


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Winners persist under a private folder; tests that do not test persistence
    switch it off so each one searches afresh."""
    monkeypatch.setenv("METILE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("METILE_AUTOTUNE", "0")
    return tmp_path / "cache"


@metile.kernel
def repeated_halving(X, Out, N, BLOCK: metile.constexpr, WORK: metile.constexpr):
    """out = x * (2 - 2^(1-WORK)): WORK rounds of `acc = acc / 2 + x`, so the time grows with WORK."""
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    x = metile.load(X + offs, mask=mask, other=0.0)
    acc = metile.zeros((BLOCK,), metile.float32)
    for _ in range(WORK):
        acc = acc * 0.5 + x
    metile.store(Out + offs, acc, mask=mask)


@metile.kernel
def accumulate(X, Out, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    metile.store(Out + offs, metile.load(Out + offs, mask=mask) + metile.load(X + offs, mask=mask), mask=mask)


def grid_1d(meta):
    return (metile.cdiv(meta["N"], meta["BLOCK"]),)


def tuned(kernel, configs, **options):
    options = {"key": ["N"], "warmup": 1, "rep": 3, "verbose": False, **options}
    return metile.autotune(configs=configs, **options)(kernel)


def test_the_search_picks_the_config_doing_the_least_work(device):
    configs = [
        metile.Config(BLOCK=256, WORK=1000),
        metile.Config(BLOCK=256, WORK=1),
        metile.Config(BLOCK=256, WORK=500, num_sgs=2),
    ]
    k = tuned(repeated_halving, configs, rep=9)
    # On a GPU a small launch costs the same whatever its arithmetic: enough
    # elements, resident in device memory (Buffers), make the planted work dominate.
    n = 1 << 22 if device in ("cuda", "metal") else 1000
    x_host = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    x, out = metile.Buffer(data=x_host), metile.Buffer(data=np.zeros_like(x_host))
    k[grid_1d](x, out, n)
    assert k.best_config is configs[1]
    assert set(k.timings) == set(configs)
    assert k.timings[configs[1]] < k.timings[configs[0]]
    metile.synchronize()
    np.testing.assert_allclose(out.numpy(), x_host, rtol=1e-6)  # the winner's result: WORK=1 gives x


def test_tuning_leaves_outputs_as_one_launch_of_the_winner(device):
    configs = [metile.Config(BLOCK=b) for b in (32, 128, 512)]
    k = tuned(accumulate, configs)
    n = 300  # not a multiple of any BLOCK
    x = np.arange(n, dtype=np.float32)
    out = np.full(n, 5.0, np.float32)
    k[grid_1d](x, out, n)  # tunes: candidates ran on copies of Out
    np.testing.assert_array_equal(out, x + 5)
    k[grid_1d](x, out, n)  # same key: straight to the winner
    np.testing.assert_array_equal(out, 2 * x + 5)

    buf = metile.Buffer(data=np.full(n, 1.0, np.float32))
    k[grid_1d](x, buf, n)
    np.testing.assert_array_equal(buf.numpy(), x + 1)


class _DLPackOutput:
    """A DLPack producer over a numpy array (as a torch tensor would be)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


class _InterfaceOutput:
    """An `__array_interface__` producer over a numpy array."""

    def __init__(self, array):
        self.array = array
        self.__array_interface__ = array.__array_interface__


@pytest.mark.parametrize("wrap", [_DLPackOutput, _InterfaceOutput], ids=["dlpack", "array_interface"])
def test_tuning_copies_dlpack_and_array_interface_outputs(wrap):
    configs = [metile.Config(BLOCK=16), metile.Config(BLOCK=64)]
    k = tuned(accumulate, configs, rep=4)
    x = np.arange(50, dtype=np.float32)
    target = np.full(50, 2.0, np.float32)
    k[grid_1d](x, wrap(target), 50)
    np.testing.assert_array_equal(target, x + 2)


def test_a_new_key_value_tunes_again_and_the_same_value_does_not(device, capsys):
    configs = [metile.Config(BLOCK=32), metile.Config(BLOCK=64)]
    k = tuned(accumulate, configs, verbose=True)
    for n in (40, 40, 70):
        x = np.ones(n, np.float32)
        out = np.zeros(n, np.float32)
        k[grid_1d](x, out, n)
        np.testing.assert_array_equal(out, x)
    printed = capsys.readouterr().out
    assert printed.count("config 1/2") == 2
    assert "N=40" in printed and "N=70" in printed and "best Config(" in printed


def test_a_tuple_grid_and_key_arrays(device):
    configs = [metile.Config(BLOCK=64), metile.Config(BLOCK=128)]
    k = tuned(accumulate, configs, key=["X"])
    x = np.arange(64, dtype=np.float32)
    out = np.zeros_like(x)
    k[(1,)](x, out, 64)
    np.testing.assert_array_equal(out, x)


def test_arguments_by_keyword_share_the_key_of_positional_ones(capsys):
    k = tuned(accumulate, [metile.Config(BLOCK=32), metile.Config(BLOCK=64)], verbose=True)
    x = np.arange(40, dtype=np.float32)
    out = np.zeros_like(x)
    k[grid_1d](x, out, N=40)
    k[grid_1d](x, N=40, Out=out)
    k[grid_1d](N=40, Out=out, X=x)
    np.testing.assert_array_equal(out, 3 * x)
    assert capsys.readouterr().out.count("best Config(") == 1


def test_configs_the_target_refuses_are_skipped_with_the_reason(device, capsys):
    ok = metile.Config(BLOCK=64)
    bad = metile.Config(BLOCK=0)
    configs = [bad, ok]
    if device == "msl-emu":
        configs.append(metile.Config(BLOCK=1 << 20))  # more registers than a thread has
    k = tuned(accumulate, configs, verbose=True)
    x = np.ones(100, np.float32)
    out = np.zeros_like(x)
    k[grid_1d](x, out, 100)
    np.testing.assert_array_equal(out, x)
    assert k.best_config is ok
    assert list(k.timings) == [ok]
    assert "arange's size must be a positive int, got 0" in k.skipped[bad]
    printed = capsys.readouterr().out
    assert "config 1/" in printed and "skipped: arange's size must be a positive int" in printed
    if device == "msl-emu":
        assert "registers per thread" in k.skipped[configs[2]]


def test_no_config_compiling_is_an_error_naming_each_reason(device):
    k = tuned(accumulate, [metile.Config(BLOCK=0), metile.Config(BLOCK=-8)])
    x = np.ones(8, np.float32)
    with pytest.raises(metile.CompilationError) as e:
        k[grid_1d](x, x.copy(), 8)
    message = str(e.value)
    assert "none of the 2 configs compiles" in message
    assert "Config(BLOCK=0): arange's size must be a positive int, got 0" in message
    assert "Config(BLOCK=-8): arange's size must be a positive int, got -8" in message


@metile.kernel
def unmasked_increment(X, N, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(X + offs, metile.load(X + offs) + 1.0)


def test_a_config_failing_at_run_time_is_an_error_naming_it(device):
    """Only compile-time refusals are skipped: an out-of-bounds access is a bug to report."""
    if device not in ("cpu", "msl-emu"):
        pytest.skip("only the CPU backends check every access")
    k = tuned(unmasked_increment, [metile.Config(BLOCK=8), metile.Config(BLOCK=64)], warmup=0, rep=1)
    x = np.zeros(8, np.float32)
    with pytest.raises(IndexError, match="out-of-bounds access") as e:
        k[(1,)](x, 8)
    if hasattr(e.value, "__notes__"):
        assert e.value.__notes__ == ["(while autotune timed unmasked_increment with Config(BLOCK=64))"]
    np.testing.assert_array_equal(x, 0)  # the failed search ran on a copy


def test_verbose_false_prints_nothing(capsys):
    k = tuned(accumulate, [metile.Config(BLOCK=16), metile.Config(BLOCK=0)])
    x = np.ones(16, np.float32)
    k[(1,)](x, np.zeros_like(x), 16)
    assert capsys.readouterr().out == ""


def test_prepare_tunes_once_and_returns_a_fixed_launcher(device):
    configs = [metile.Config(BLOCK=32, num_sgs=1), metile.Config(BLOCK=256)]
    k = tuned(accumulate, configs)
    n = 200
    x = np.arange(n, dtype=np.float32)
    out = np.zeros_like(x)
    launch = k[grid_1d].prepare(x, out, n)
    np.testing.assert_array_equal(out, 0)  # prepare does not launch
    launch(x, out, n)
    launch(x, out, n)
    np.testing.assert_array_equal(out, 2 * x)
    assert launch.grid == (metile.cdiv(n, k.best_config["BLOCK"]), 1, 1)
    with pytest.raises(TypeError, match="got multiple values for argument 'BLOCK': the launcher's configuration"):
        launch(x, out, n, BLOCK=32)


def test_winners_persist_on_disk_and_a_corrupt_entry_is_retuned(monkeypatch, private_cache, capsys):
    monkeypatch.setenv("METILE_AUTOTUNE", "1")
    configs = [metile.Config(BLOCK=32), metile.Config(BLOCK=64)]
    x = np.ones(50, np.float32)

    first = tuned(accumulate, configs, verbose=True)
    first[grid_1d](x, np.zeros_like(x), 50)
    entries = list((private_cache / "autotune").iterdir())
    assert len(entries) == 1
    assert "config 1/2" in capsys.readouterr().out

    second = tuned(accumulate, configs, verbose=True)  # a fresh tuner: only the disk knows
    out = np.zeros_like(x)
    second[grid_1d](x, out, 50)
    assert "cached for N=50" in capsys.readouterr().out
    assert second.best_config == first.best_config and second.timings == first.timings
    np.testing.assert_array_equal(out, x)

    entries[0].write_bytes(entries[0].read_bytes()[:-3] + b"xyz")
    third = tuned(accumulate, configs, verbose=True)
    third[grid_1d](x, np.zeros_like(x), 50)
    assert "config 1/2" in capsys.readouterr().out
    assert len(list((private_cache / "autotune").iterdir())) == 1


def test_autotune_0_keeps_nothing_on_disk(private_cache):
    k = tuned(accumulate, [metile.Config(BLOCK=32)])
    x = np.ones(10, np.float32)
    k[grid_1d](x, np.zeros_like(x), 10)
    assert not (private_cache / "autotune").exists()


_SCRIPT = """
import numpy as np
import metile

@metile.autotune(configs=[metile.Config(BLOCK=16), metile.Config(BLOCK=32, num_sgs=2)], key=["N"], warmup=1, rep=2)
@metile.kernel
def add_one(X, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    metile.store(X + offs, metile.load(X + offs, mask=mask) + 1.0, mask=mask)

x = np.zeros(40, np.float32)
add_one[lambda meta: (metile.cdiv(meta["N"], meta["BLOCK"]),)](x, 40)
assert (x == 1).all(), x
print("traces", add_one.kernel.cache_info()["traces"])
"""


def test_a_new_process_reuses_the_winner_without_benchmarking(tmp_path, private_cache):
    script = tmp_path / "tune_once.py"
    script.write_text(textwrap.dedent(_SCRIPT))
    env = {**os.environ, "METILE_AUTOTUNE": "1", "METILE_CACHE_DIR": str(private_cache), "METILE_DEVICE": "cpu"}

    def run():
        done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    first, second = run(), run()
    assert "config 1/2" in first and "traces 2" in first
    assert "config 1/2" not in second and "cached for N=40" in second and "traces 1" in second


def test_a_cached_entry_naming_another_config_is_ignored(monkeypatch, private_cache):
    monkeypatch.setenv("METILE_AUTOTUNE", "1")
    configs = [metile.Config(BLOCK=32), metile.Config(BLOCK=64)]
    k = tuned(accumulate, configs)
    x = np.ones(50, np.float32)
    k[grid_1d](x, np.zeros_like(x), 50)
    (entry,) = (private_cache / "autotune").iterdir()
    key = k._disk_parts(next(iter(k._winners)))
    metile._metile.autotune_cache_put(key, json.dumps({"best": 0, "config": "Config(BLOCK=7)", "timings": []}))
    again = tuned(accumulate, configs)
    again[grid_1d](x, np.zeros_like(x), 50)
    assert set(again.timings) == set(configs)  # searched afresh


# ------------------------------------------------------------------ errors


def test_decorator_arguments_are_checked():
    with pytest.raises(ValueError, match="autotune needs a non-empty list of metile.Config, got \\[\\]"):
        metile.autotune(configs=[], key=["N"])
    with pytest.raises(TypeError, match="autotune configs must be metile.Config objects, got dict"):
        metile.autotune(configs=[{"BLOCK": 32}], key=["N"])
    with pytest.raises(TypeError, match="autotune key must be a list of argument names, e.g. key=\\['N'\\], got 'N'"):
        metile.autotune(configs=[metile.Config(BLOCK=32)], key="N")
    with pytest.raises(ValueError, match="warmup must be an int >= 0 \\(a number of runs\\), got -1"):
        metile.autotune(configs=[metile.Config(BLOCK=32)], key=["N"], warmup=-1)
    with pytest.raises(ValueError, match="rep must be an int >= 1 \\(a number of runs\\), got 0"):
        metile.autotune(configs=[metile.Config(BLOCK=32)], key=["N"], rep=0)


def test_autotune_must_sit_on_a_kernel_whose_parameters_it_names():
    decorate = metile.autotune(configs=[metile.Config(BLOCK=32)], key=["N"])
    with pytest.raises(TypeError, match="@metile.autotune decorates a @metile.kernel .*got function"):
        decorate(lambda X, N: None)
    with pytest.raises(ValueError, match="autotune key 'M' is not a parameter of accumulate\\(X, Out, N, BLOCK\\)"):
        metile.autotune(configs=[metile.Config(BLOCK=32)], key=["M"])(accumulate)
    with pytest.raises(ValueError, match="Config\\(BLOCK=32, N=4\\) sets 'N', which is not a constexpr of accumulate"):
        metile.autotune(configs=[metile.Config(BLOCK=32, N=4)], key=["N"])(accumulate)
    with pytest.raises(ValueError, match="Config\\(SIZE=4\\) sets 'SIZE', which is not a constexpr"):
        metile.autotune(configs=[metile.Config(SIZE=4)], key=["N"])(accumulate)


def test_launch_errors():
    k = tuned(accumulate, [metile.Config(BLOCK=32)])
    x = np.ones(8, np.float32)
    with pytest.raises(TypeError, match="an autotuned kernel is launched over a grid: accumulate\\[grid\\]"):
        k(x, x, 8)
    with pytest.raises(TypeError, match="the grid of an autotuned kernel is a tuple of ints or a callable"):
        k[3]
    with pytest.raises(TypeError, match="accumulate: BLOCK is chosen by autotune; do not pass it at launch"):
        k[(1,)](x, x, 8, BLOCK=32)
    with pytest.raises(TypeError, match="the autotune key argument 'N' was not passed"):
        k[(1,)](x, x)
    with pytest.raises(TypeError, match="takes 4 arguments but 5 were given positionally"):
        k[(1,)](x, x, 8, 32, 1)
    with pytest.raises(ValueError, match="the grid must be a tuple of 1 to 3 ints, each 0 or more"):
        k[lambda meta: (-1,)](x, x.copy(), 8)


def test_configure_errors():
    launcher = accumulate[(1,)]
    with pytest.raises(TypeError, match="configure\\(\\) takes constexprs and launch options; 'N' is a runtime"):
        launcher.configure(N=3)
    with pytest.raises(TypeError, match="accumulate\\(X, Out, N, BLOCK\\) has no constexpr 'SIZE'"):
        launcher.configure(SIZE=3)
    with pytest.raises(ValueError, match="num_sgs must be an int from 1 to 32"):
        launcher.configure(num_sgs=0)
    x = np.ones(8, np.float32)
    with pytest.raises(TypeError, match="got multiple values for the launch option num_sgs"):
        launcher.configure(BLOCK=8, num_sgs=1)(x, x, 8, num_sgs=2)


def test_kernel_warmup_compiles_and_names_the_written_parameters():
    x = np.ones(8, np.float32)
    assert accumulate.warmup(x, x, 8, BLOCK=8) == ["Out"]
    assert repeated_halving.warmup(x, x, 8, BLOCK=8, WORK=2) == ["Out"]
    with pytest.raises(metile.CompilationError, match="arange's size must be a positive int, got 0"):
        accumulate.warmup(x, x, 8, BLOCK=0)


# ------------------------------------------------------------------ do_bench and perf_report


def test_do_bench_returns_the_median_or_quantiles(device):
    calls = []
    x = np.ones(64, np.float32)
    out = np.zeros_like(x)

    def run():
        calls.append(1)
        accumulate[(1,)](x, out, 64, BLOCK=64)

    ms = do_bench(run, warmup=2, rep=5)
    assert isinstance(ms, float) and ms > 0
    assert len(calls) in (7, 8)  # the first timed call may only probe for a device clock
    lo, mid, hi = do_bench(run, warmup=0, rep=5, quantiles=[0.1, 0.5, 0.9])
    assert 0 < lo <= mid <= hi


def test_do_bench_errors():
    with pytest.raises(TypeError, match="do_bench times a callable taking no arguments, got int"):
        do_bench(3)
    with pytest.raises(ValueError, match="rep must be an int >= 1"):
        do_bench(lambda: None, rep=0)
    with pytest.raises(ValueError, match="quantiles must be a non-empty list of numbers in \\[0, 1\\], got \\[1.5\\]"):
        do_bench(lambda: None, quantiles=[1.5])


def test_perf_report_writes_a_markdown_table(tmp_path):
    bench = Benchmark(
        x_names=["N"], x_vals=[16, 32], line_arg="scale", line_vals=[1, 2], line_names=["one", "two"],
        plot_name="toy",
    )

    @perf_report(bench)
    def toy(N, scale):
        return float(N * scale)

    (table,) = toy.run(print_data=False, save_path=str(tmp_path))
    assert table.splitlines() == [
        "| N | one (ms) | two (ms) |",
        "|---:|---:|---:|",
        "| 16 | 16 | 32 |",
        "| 32 | 32 | 64 |",
    ]
    assert (tmp_path / "toy.md").read_text() == table + "\n"


def test_perf_report_plots_when_matplotlib_is_installed(tmp_path):
    pytest.importorskip("matplotlib")

    @perf_report(Benchmark(x_names=["N"], x_vals=[1, 2], line_arg="k", line_vals=[1], line_names=["a"], plot_name="p"))
    def toy(N, k):
        return float(N)

    toy.run(print_data=False, save_path=str(tmp_path))
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_perf_report_errors():
    with pytest.raises(ValueError, match="Benchmark 'b': 2 line_vals but 1 line_names"):
        Benchmark(x_names=["N"], x_vals=[1], line_arg="p", line_vals=[1, 2], line_names=["a"], plot_name="b")
    with pytest.raises(TypeError, match="perf_report takes a metile.testing.Benchmark or a list of them"):
        perf_report({"x_names": ["N"]})


def test_tuning_copies_cuda_tensor_outputs_on_the_gpu():
    if not metile.device_available("cuda"):
        pytest.skip("no cuda device here")
    torch = pytest.importorskip("torch")
    previous = metile.get_device()
    metile.set_device("cuda")
    try:
        k = tuned(accumulate, [metile.Config(BLOCK=b) for b in (32, 128)])
        n = 300
        x = torch.arange(n, dtype=torch.float32, device="cuda")
        out = torch.full((n,), 5.0, dtype=torch.float32, device="cuda")
        k[grid_1d](x, out, n)
        metile.synchronize()
        np.testing.assert_array_equal(out.cpu().numpy(), np.arange(n, dtype=np.float32) + 5)
    finally:
        metile.set_device(previous)
