"""Hostile input for the cpu backend's arithmetic checks, and Ctrl-C during long
launches. Every case runs in a fresh process (tests/isolated.py), so a crash is a
failed test rather than a lost run; the kernels live in hostile_interp_kernels.py."""

import json
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from isolated import assert_ok, run_isolated

import metile

TESTS = os.path.dirname(os.path.abspath(__file__))
KERNELS = os.path.join(TESTS, "hostile_interp_kernels.py")

PRELUDE = """
import json, os, sys
sys.path.insert(0, os.getcwd())
import numpy as np
import metile
from hostile_interp_kernels import *

def report(fn):
    try:
        result = fn()
    except Exception as e:
        print(json.dumps({"type": type(e).__name__, "message": str(e)}), flush=True)
    else:
        value = None if result is None else np.asarray(result).tolist()
        print(json.dumps({"type": None, "result": value}), flush=True)

X = np.array([7, -7, 100, 5, 9, 1, 2, 3], np.int32)
Y = np.array([2, 3, 7, -5, 4, 0, 6, 1], np.int32)  # a zero divisor in lane 5
"""


def line_of(text):
    """The line number of `text` in the kernels' file."""
    with open(KERNELS) as f:
        for number, line in enumerate(f, 1):
            if text in line:
                return number
    raise AssertionError(f"{text!r} is not in {KERNELS}")


def where(text):
    return f"hostile_interp_kernels.py:{line_of(text)}"


def run_case(body, device="cpu"):
    """Runs PRELUDE + `body` in a fresh process; returns what each `report` printed."""
    outcome = run_isolated(PRELUDE + textwrap.dedent(body), device=device, cwd=TESTS)
    return [json.loads(line) for line in assert_ok(outcome).splitlines() if line.startswith("{")]


def assert_raised(report, error, *fragments):
    assert report["type"] == error, report
    for fragment in fragments:
        assert fragment in report["message"], (fragment, report["message"])


def trunc_div(x, y):
    return np.trunc(x / y).astype(np.int32)


def test_division_by_zero_on_a_live_lane_names_the_line_and_the_use():
    first, later = run_case("""
        q = np.zeros(8, np.int32)
        report(lambda: divide[(1,)](X, Y, q, 8, BLOCK=8))
        # The process stays usable: a later launch with a safe divisor works.
        report(lambda: (divide[(1,)](X, np.ones(8, np.int32), q, 8, BLOCK=8), q)[1])
    """)
    assert_raised(
        first, "ZeroDivisionError",
        f"{where('q = x // y')}: integer division by zero: 1 // 0 on i32",
        f"the result is used as the value of `store` at {where('metile.store(Q + offs, q, mask=mask)')} "
        "(element 5)",
        f'line {line_of("q = x // y")}\n    q = x // y',
    )
    assert later["result"] == [7, -7, 100, 5, 9, 1, 2, 3]


def test_remainder_by_zero_raises():
    (r,) = run_case("""
        out = np.zeros(8, np.int32)
        report(lambda: remainder[(1,)](X, Y, out, 8, BLOCK=8))
    """)
    assert_raised(r, "ZeroDivisionError", f"{where('r = x % y')}: integer remainder by zero: 1 % 0 on i32",
                  "`store`")


@pytest.mark.parametrize("n", [5, 13])
def test_lanes_outside_the_mask_may_divide_by_zero(n):
    # The divisor's masked-off lanes are absent (read as 0) and the store skips them.
    (r,) = run_case(f"""
        x = np.arange(1, 17, dtype=np.int32) * 7
        y = np.zeros(16, np.int32)
        y[:{n}] = np.arange(1, {n} + 1)
        q = np.full(16, -99, np.int32)
        report(lambda: (divide[(2,)](x, y, q, {n}, BLOCK=8), q)[1])
    """)
    x = np.arange(1, 17, dtype=np.int32) * 7
    want = np.full(16, -99, np.int32)
    want[:n] = trunc_div(x[:n], np.arange(1, n + 1))
    assert r["result"] == want.tolist()


@pytest.mark.parametrize("other", [0, 1])
def test_triton_idiom_divisor_loaded_with_other(other):
    (r,) = run_case(f"""
        x = np.arange(10, dtype=np.int32) * 5 - 20
        y = np.array([3, -2, 7, 1, 4, 9, 2, 5, 6, 8], np.int32)
        q, r = np.zeros(10, np.int32), np.zeros(10, np.int32)
        report(lambda: (divide_other[(2,)](x, y, q, r, 10, OTHER={other}, BLOCK=8), [q, r])[1])
    """)
    x = np.arange(10, dtype=np.int32) * 5 - 20
    y = np.array([3, -2, 7, 1, 4, 9, 2, 5, 6, 8], np.int32)
    assert r["result"] == [trunc_div(x, y).tolist(), np.fmod(x, y).tolist()]


def test_a_where_that_discards_the_quotient_hides_it():
    (r,) = run_case("""
        q = np.zeros(8, np.int32)
        report(lambda: (guarded_divide[(1,)](X, Y, q, BLOCK=8), q)[1])
    """)
    assert r["result"] == [3, -2, 14, -1, 2, -1, 0, 3]


def test_offsets_divided_by_a_run_time_scalar():
    ok, zero = run_case("""
        out = np.zeros(8, np.int32)
        report(lambda: (row_of[(1,)](out, 3, BLOCK=8), out)[1])
        report(lambda: row_of[(1,)](out, 0, BLOCK=8))
    """)
    assert ok["result"] == [0, 0, 0, 1, 1, 1, 2, 2]
    assert_raised(zero, "ZeroDivisionError", f"{where('rows = offs // N')}: integer division by zero: 0 // 0",
                  "(element 0)")


def test_reductions_skip_absent_lanes_but_observe_present_ones():
    absent, present = run_case("""
        out = np.zeros(1, np.int32)
        report(lambda: (sum_of_quotients[(1,)](X, Y, out, 5, BLOCK=8), out)[1])
        report(lambda: sum_of_quotients[(1,)](X, Y, out, 6, BLOCK=8))
    """)
    assert absent["result"] == [int(trunc_div(np.array([7, -7, 100, 5, 9]), np.array([2, 3, 7, -5, 4])).sum())]
    assert_raised(present, "ZeroDivisionError", "1 // 0",
                  f"used as the operand of `reduce_sum` at {where('total = metile.sum(x // y)')} (element 5)")


def test_a_literal_zero_divisor_raises_only_where_observed():
    live, masked = run_case("""
        q = np.zeros(8, np.int32)
        report(lambda: divide_by_literal_zero[(1,)](X, q, 3, BLOCK=8))
        report(lambda: (divide_by_literal_zero[(1,)](X, q, 0, BLOCK=8), q)[1])
    """)
    assert_raised(live, "ZeroDivisionError", "integer division by zero: 7 // 0 on i32")
    assert masked["result"] == [0] * 8


@pytest.mark.parametrize("count", [32, 33, -1, -32])
def test_shift_counts_outside_the_width_raise_value_error(count):
    (r,) = run_case(f"""
        out = np.zeros(16, np.int32)
        report(lambda: shift[(1,)](X, {count}, out, BLOCK=8))
    """)
    assert_raised(r, "ValueError", f"{where('shifted = x << S')}: shift count out of range: 7 << {count} on i32 "
                  "(the count must be in [0, 32))", "`store`")


def test_shift_counts_inside_the_width_are_fine():
    zero, last = run_case("""
        out = np.zeros(16, np.int32)
        report(lambda: (shift[(1,)](X, 0, out, BLOCK=8), out.copy())[1])
        report(lambda: (shift[(1,)](X, 31, out, BLOCK=8), out.copy())[1])
    """)
    x = np.array([7, -7, 100, 5, 9, 1, 2, 3], np.int32)
    assert zero["result"] == np.concatenate([x, x]).tolist()
    assert last["result"] == np.concatenate([x << 31, x >> 31]).tolist()


def test_msl_emu_gives_the_guarded_value_zero():
    """The GPU backends do not check: their code gives 0 (docs/semantics.md)."""
    if not metile.device_available("msl-emu"):
        pytest.skip("no msl-emu device here")
    (r,) = run_case("""
        q = np.full(8, -99, np.int32)
        report(lambda: (divide[(1,)](X, Y, q, 8, BLOCK=8), q)[1])
    """, device="msl-emu")
    assert r["result"] == [3, -2, 14, -1, 2, 0, 0, 3]


# ------------------------------------------------------------------ Ctrl-C

INTERRUPTED = """
import os, signal, sys, time
# Python leaves SIGINT ignored where it started ignored (a background job of a
# script): what a terminal's Ctrl-C does is Python's own handler.
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, os.getcwd())
import numpy as np
import metile
from hostile_interp_kernels import busy_grid, busy_loop

out = np.zeros(128, np.int32)

def small():
    out[:] = 0
    busy_grid[(1,)](out, BLOCK=128)
    assert (out == 6 * np.arange(128)).all(), out

small()  # compiled before the clock starts
print("launching", flush=True)
start = time.monotonic()
try:
    LONG
except KeyboardInterrupt:
    print(f"interrupted after {time.monotonic() - start:.2f} s", flush=True)
else:
    print(f"finished after {time.monotonic() - start:.2f} s", flush=True)
    sys.exit(3)
small()
print("usable", flush=True)
"""


# Seconds to wait for the interrupted launch to answer (it should take under two).
ANSWER_TIMEOUT = 60


def _lines(stream, q):
    for line in stream:
        q.put(line.rstrip("\n"))
    q.put(None)


def interrupt_long_launch(device, long_launch):
    """Starts the launch in a fresh process, sends SIGINT a second in, and returns
    the seconds from the signal to the KeyboardInterrupt, after checking that the
    process then launched again and exited cleanly."""
    code = INTERRUPTED.replace("LONG", long_launch)
    env = dict(os.environ, METILE_DEVICE=device)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=TESTS, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stdout, lines), daemon=True).start()
    try:
        assert lines.get(timeout=300) == "launching"
        time.sleep(1.0)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        answer = lines.get(timeout=ANSWER_TIMEOUT)
        delay = time.monotonic() - sent
        assert answer is not None and answer.startswith("interrupted"), (answer, proc.stderr.read())
        assert lines.get(timeout=60) == "usable"
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
        return delay
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


LONG_LAUNCHES = {
    # Minutes of program instances, each a short loop.
    ("cpu", "grid"): "busy_grid[(2**31 - 1,)](out, BLOCK=128)",
    # One program instance looping for minutes: interrupted inside its loop.
    ("cpu", "loop"): "busy_loop[(1,)](out, 2**31 - 1, BLOCK=128)",
    # The most threadgroups Apple GPUs allow with 128 threads each.
    ("msl-emu", "grid"): "busy_grid[(2**25 - 1,)](out, BLOCK=128)",
}


@pytest.mark.parametrize("device,shape", sorted(LONG_LAUNCHES))
def test_ctrl_c_stops_a_long_launch_and_the_process_stays_usable(device, shape):
    if not metile.device_available(device):
        pytest.skip(f"no {device} device here")
    delay = interrupt_long_launch(device, LONG_LAUNCHES[(device, shape)])
    assert delay < 2.0, f"KeyboardInterrupt came {delay:.2f} s after SIGINT"


def test_an_exception_from_any_signal_handler_stops_the_launch():
    # A timeout raised from a SIGALRM handler (as pytest-timeout's signal method does).
    (r,) = run_case("""
        import signal, time

        def on_alarm(signum, frame):
            raise TimeoutError("the alarm rang")

        signal.signal(signal.SIGALRM, on_alarm)
        out = np.zeros(128, np.int32)

        def long_launch():
            busy_grid[(1,)](out, BLOCK=128)  # compiled before the clock starts
            signal.setitimer(signal.ITIMER_REAL, 0.5)
            start = time.monotonic()
            try:
                busy_grid[(2**31 - 1,)](out, BLOCK=128)
            except TimeoutError as e:
                elapsed = time.monotonic() - start
                busy_grid[(1,)](out, BLOCK=128)
                return [elapsed, str(e), int(out[1])]
            return ["finished"]

        report(long_launch)
    """)
    elapsed, message, second = r["result"]
    assert message == "the alarm rang"
    assert 0.4 < float(elapsed) < 2.5, elapsed
    assert int(second) == 6
