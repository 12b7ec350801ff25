"""Helpers for testing and timing meTile kernels and backends."""

from metile.testing.bench import Benchmark, PerfReport, do_bench, perf_report

__all__ = ["Benchmark", "PerfReport", "do_bench", "perf_report"]
