"""Autotuning costs on the current device: the time to tune softmax over 8
configs (compilation included), the host overhead of a tuned launch and of a
prepare()d dispatcher beside a plain cached launch, and a sweep of softmax
widths, tuned against one fixed config (table, and a plot with matplotlib).

    python benchmarks/autotune.py [--save DIR]"""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

from kernels import add, softmax  # noqa: E402
from timing import per_call, table  # noqa: E402

import metile  # noqa: E402
from metile.testing import Benchmark, do_bench, perf_report  # noqa: E402

SOFTMAX_CONFIGS = [metile.Config(BLOCK=b, num_sgs=s) for b in (256, 512, 1024, 2048) for s in (2, 4)]


def tuned_softmax():
    return metile.autotune(configs=SOFTMAX_CONFIGS, key=["N"], warmup=2, rep=5, verbose=False)(softmax)


def tuning_time(rows=256, cols=1024):
    """Wall time of the first tuned launch: traces, compiles and times all 8 configs."""
    # Buffers live in device memory on a GPU, so no launch pays for staging copies.
    x_host = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    x, out = metile.Buffer(data=x_host), metile.Buffer.zeros((rows * cols,))
    os.environ["METILE_AUTOTUNE"] = "0"  # measure a search, not a disk hit
    # Device start-up (a CUDA context, loading NVRTC) is the process's, not the search's.
    warm = metile.Buffer.zeros((16,))
    add[(1,)](warm, warm, warm, 16, BLOCK=16)
    metile.synchronize()
    tuned = tuned_softmax()
    start = time.perf_counter()
    tuned[(rows,)](x, out, cols)
    metile.synchronize()
    seconds = time.perf_counter() - start
    e = np.exp(x_host - x_host.max(1, keepdims=True))
    np.testing.assert_allclose(out.numpy().reshape(rows, cols), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    return [(f"softmax {rows}x{cols}, {len(SOFTMAX_CONFIGS)} configs", f"{seconds:.3f}", repr(tuned.best_config))]


def launch_overheads():
    """Host cost per launch of a 16-element add: the prepared dispatcher against a plain cached launch."""
    x = metile.Buffer(data=np.ones(16, np.float32))
    out = metile.Buffer.zeros((16,))
    configs = [metile.Config(BLOCK=16), metile.Config(BLOCK=32)]
    tuned = metile.autotune(configs=configs, key=["N"], warmup=1, rep=3, verbose=False)(add)
    dispatch = tuned[(1,)].prepare(x, x, out, 16)
    block = tuned.best_config["BLOCK"]
    tuned_launcher = tuned[(1,)]
    plain_launcher = add[(1,)]
    cases = [
        ("plain cached launch add[(1,)](..., BLOCK=b)", lambda: add[(1,)](x, x, out, 16, BLOCK=block)),
        ("plain launcher kept, launcher(..., BLOCK=b)", lambda: plain_launcher(x, x, out, 16, BLOCK=block)),
        ("tuned launch tuned[(1,)](...)", lambda: tuned[(1,)](x, x, out, 16)),
        ("tuned launcher kept, launcher(...)", lambda: tuned_launcher(x, x, out, 16)),
        ("prepare()d dispatcher", lambda: dispatch(x, x, out, 16)),
    ]
    times = {label: per_call(fn, number=2000, rep=9) for label, fn in cases}
    plain = times[cases[0][0]]
    return [(label, f"{t * 1e6:.2f}", f"{t / plain:.2f}") for label, t in times.items()]


def width_sweep(save_path):
    fixed = metile.Config(BLOCK=1024, num_sgs=4)
    tuned = tuned_softmax()
    rows = 64

    @perf_report(
        Benchmark(
            x_names=["N"], x_vals=[256, 1024, 4096], line_arg="provider", line_vals=["tuned", "fixed"],
            line_names=["autotuned", f"fixed {fixed!r}"], plot_name=f"softmax-{metile.get_device()}",
            xlabel="row width", x_log=True,
        )
    )
    def bench(N, provider):
        x = metile.Buffer(data=np.random.default_rng(0).standard_normal((rows, N)).astype(np.float32))
        out = metile.Buffer.zeros((rows * N,))
        if provider == "tuned":
            return do_bench(lambda: tuned[(rows,)](x, out, N), warmup=2, rep=10)
        return do_bench(lambda: softmax[(rows,)](x, out, N, **fixed), warmup=2, rep=10)

    return bench.run(print_data=False, save_path=save_path)[0]


def main():
    save_path = sys.argv[sys.argv.index("--save") + 1] if "--save" in sys.argv else None
    print(f"device: {metile.get_device()} ({metile._metile.device_model()})\n")
    print("Tuning time, first launch (trace + compile + time every config)")
    print(table(["search", "s", "winner"], tuning_time()))
    print("\nHost overhead per launch, 16-element add (ratio vs a plain cached launch)")
    print(table(["case", "us/launch", "ratio"], launch_overheads()))
    print(f"\nsoftmax over {64} rows, median ms\n")
    print(width_sweep(save_path))


if __name__ == "__main__":
    main()
