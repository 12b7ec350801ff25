"""Timing kernels: `do_bench` (the one timing helper, used by autotune and the
benchmarks) and `perf_report`, which sweeps a benchmark over sizes and writes a
markdown table and, when matplotlib is installed, a PNG plot.

`warmup` and `rep` count runs, unlike Triton's, which are milliseconds of
budget: a count behaves the same on a GPU and on the CPU backends (where one
run can take a second), and a test can bound its cost exactly."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from metile._metile import device_time_ms, synchronize


def _count(name: str, value: Any, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be an int >= {least} (a number of runs), got {value!r}")
    return value


def do_bench(
    fn: Callable[[], Any],
    warmup: int = 25,
    rep: int = 100,
    quantiles: Sequence[float] | None = None,
) -> float | list[float]:
    """Runs `fn()` `warmup` times, then times `rep` runs and returns the median in
    milliseconds (or, with `quantiles`, the time at each quantile, e.g.
    `quantiles=[0.5, 0.2, 0.8]`). Each run is timed with the current device's own
    clock where it has one (CUDA events, Metal command-buffer times), else with
    the wall clock around the run and `metile.synchronize()`."""
    if not callable(fn):
        raise TypeError(f"do_bench times a callable taking no arguments, got {type(fn).__name__}")
    _count("warmup", warmup, 0)
    _count("rep", rep, 1)
    if quantiles is not None:
        quantiles = list(quantiles)
        if not quantiles or not all(isinstance(q, (int, float)) and 0 <= q <= 1 for q in quantiles):
            raise ValueError(f"quantiles must be a non-empty list of numbers in [0, 1], got {quantiles!r}")
    for _ in range(warmup):
        fn()
    synchronize()
    times = []
    device_clock = True
    while len(times) < rep:
        ms = device_time_ms(fn) if device_clock else None
        if ms is None:
            # No device clock: that run (if any) only warmed up; time by the wall clock.
            device_clock = False
            start = time.perf_counter()
            fn()
            synchronize()
            ms = (time.perf_counter() - start) * 1e3
        times.append(ms)
    if quantiles is None:
        return statistics.median(times)
    return [_quantile(sorted(times), q) for q in quantiles]


def _quantile(ordered: list[float], q: float) -> float:
    """Linear interpolation between the nearest ranks (numpy's default)."""
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass
class Benchmark:
    """One sweep: `x_names` take each of `x_vals` (one value shared by all names, or
    a tuple with one value per name); each line sets `line_arg` to one of
    `line_vals`, shown as the matching `line_names`; `args` are passed to every call."""

    x_names: list[str]
    x_vals: list[Any]
    line_arg: str
    line_vals: list[Any]
    line_names: list[str]
    plot_name: str
    args: dict[str, Any] = field(default_factory=dict)
    ylabel: str = "ms"
    xlabel: str | None = None
    x_log: bool = False
    y_log: bool = False

    def __post_init__(self) -> None:
        if len(self.line_vals) != len(self.line_names):
            raise ValueError(
                f"Benchmark {self.plot_name!r}: {len(self.line_vals)} line_vals but "
                f"{len(self.line_names)} line_names"
            )
        if not self.x_names or not self.x_vals:
            raise ValueError(f"Benchmark {self.plot_name!r} needs at least one x_name and one x_val")


class PerfReport:
    """A benchmark function bound to its sweeps; `run()` measures and reports."""

    def __init__(self, fn: Callable[..., Any], benchmarks: list[Benchmark]) -> None:
        self.fn = fn
        self.benchmarks = benchmarks

    def run(self, print_data: bool = True, save_path: str | None = None, show_plots: bool = False) -> list[str]:
        """Measures every point; prints each table when `print_data`, writes
        `<plot_name>.md` (and `<plot_name>.png` when matplotlib is installed) under
        `save_path`. Returns the markdown tables."""
        tables = []
        for bench in self.benchmarks:
            rows = self._measure(bench)
            text = _markdown(bench, rows)
            tables.append(text)
            if print_data:
                print(f"{bench.plot_name}:\n{text}\n")
            if save_path is not None:
                os.makedirs(save_path, exist_ok=True)
                with open(os.path.join(save_path, f"{bench.plot_name}.md"), "w") as f:
                    f.write(text + "\n")
            if save_path is not None or show_plots:
                _plot(bench, rows, save_path, show_plots)
        return tables

    def _measure(self, bench: Benchmark) -> list[tuple[tuple, list[float]]]:
        rows = []
        for x in bench.x_vals:
            xs = tuple(x) if isinstance(x, (tuple, list)) else (x,) * len(bench.x_names)
            if len(xs) != len(bench.x_names):
                raise ValueError(
                    f"Benchmark {bench.plot_name!r}: x value {x!r} does not match x_names {bench.x_names}"
                )
            values = []
            for line in bench.line_vals:
                kwargs = {**dict(zip(bench.x_names, xs)), bench.line_arg: line, **bench.args}
                result = self.fn(**kwargs)
                values.append(float(result[0] if isinstance(result, (tuple, list)) else result))
            rows.append((xs, values))
        return rows


def perf_report(benchmarks: Benchmark | list[Benchmark]) -> Callable[[Callable[..., Any]], PerfReport]:
    """`@perf_report(Benchmark(...))` over a function of the x and line arguments
    returning a time (or a tuple whose first item is one); call `.run()` on the result."""
    listed = benchmarks if isinstance(benchmarks, list) else [benchmarks]
    if not all(isinstance(b, Benchmark) for b in listed):
        raise TypeError("perf_report takes a metile.testing.Benchmark or a list of them")
    return lambda fn: PerfReport(fn, listed)


def _markdown(bench: Benchmark, rows: list[tuple[tuple, list[float]]]) -> str:
    headers = [*bench.x_names, *(f"{name} ({bench.ylabel})" for name in bench.line_names)]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---:" for _ in headers) + "|"]
    for xs, values in rows:
        cells = [str(x) for x in xs] + [f"{v:.4g}" for v in values]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _plot(bench: Benchmark, rows: list[tuple[tuple, list[float]]], save_path: str | None, show: bool) -> None:
    try:
        import matplotlib

        if not show:
            matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots()
    xs = [r[0][0] for r in rows]
    for i, name in enumerate(bench.line_names):
        ax.plot(xs, [r[1][i] for r in rows], marker="o", label=name)
    ax.set_xlabel(bench.xlabel or bench.x_names[0])
    ax.set_ylabel(bench.ylabel)
    ax.set_title(bench.plot_name)
    if bench.x_log:
        ax.set_xscale("log")
        ax.minorticks_off()
    ax.set_xticks(xs, [str(x) for x in xs])  # label the measured points, not the axis' own ticks
    if bench.y_log:
        ax.set_yscale("log")
    ax.legend()
    if save_path is not None:
        fig.savefig(os.path.join(save_path, f"{bench.plot_name}.png"))
    if show:
        plt.show()
    plt.close(fig)
