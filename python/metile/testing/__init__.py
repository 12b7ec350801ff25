"""Helpers for testing and timing meTile kernels and backends."""

from metile.testing.bench import Benchmark, PerfReport, do_bench, perf_report
from metile.testing.emu_profile import EmuProfile, emu_profile

__all__ = ["Benchmark", "EmuProfile", "PerfReport", "do_bench", "emu_profile", "perf_report"]
