"""The clock of the compile-time benchmarks, importing nothing else: `original_compile.py`
runs it in a process whose `metile` is the original package, not this one."""

import time


def best_per_call(fn, number, rep):
    """(wall ms, CPU ms) per call: the minimum over `rep` batches of `number` calls."""
    wall = cpu = float("inf")
    for _ in range(rep):
        w0, c0 = time.perf_counter(), time.process_time()
        for _ in range(number):
            fn()
        wall = min(wall, (time.perf_counter() - w0) / number)
        cpu = min(cpu, (time.process_time() - c0) / number)
    return wall * 1e3, cpu * 1e3
