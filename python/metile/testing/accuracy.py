"""Accuracy of the language's float functions, in units in the last place (ulp)
of f32, measured against numpy's float64 results on the same f32 inputs
(`metile.testing.accuracy_cases` holds the inputs, references and bounds).

    python -m metile.testing.accuracy                 # every backend present
    python -m metile.testing.accuracy --devices cpu --n 100000

prints the worst error of each function on each backend, the bound the tests
hold it to and the input that gave the worst error. docs/language.md lists the
results; tests/test_math_accuracy.py asserts the bounds.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np

import metile
from metile.testing.accuracy_cases import BOUNDS, CASES, inputs, ulp_error

BLOCK = 1024


@metile.kernel
def _unary(X, Y, N, OP: metile.constexpr, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    x = metile.load(X + offs, mask=mask, other=1.0)
    metile.store(Y + offs, getattr(metile, OP)(x), mask=mask)


@metile.kernel
def _binary(X, Z, Y, N, OP: metile.constexpr, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    x = metile.load(X + offs, mask=mask, other=1.0)
    z = metile.load(Z + offs, mask=mask, other=1.0)
    metile.store(Y + offs, getattr(metile, OP)(x, z), mask=mask)


@metile.kernel
def _fma(A, B, C, Y, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    a = metile.load(A + offs, mask=mask, other=1.0)
    b = metile.load(B + offs, mask=mask, other=1.0)
    c = metile.load(C + offs, mask=mask, other=1.0)
    metile.store(Y + offs, metile.fma(a, b, c), mask=mask)


def run(name: str, args: list[np.ndarray]) -> np.ndarray:
    """`name` applied to f32 arrays on the current device."""
    n = len(args[0])
    out = np.zeros(n, np.float32)
    grid = (metile.cdiv(n, BLOCK),)
    if name == "fma":
        _fma[grid](*args, out, n, BLOCK=BLOCK)
    elif CASES[name].arity == 2:
        _binary[grid](args[0], args[1], out, n, OP=name, BLOCK=BLOCK)
    else:
        _unary[grid](args[0], out, n, OP=name, BLOCK=BLOCK)
    return out


@dataclass(frozen=True)
class Measurement:
    name: str
    device: str
    worst_ulp: float
    worst_input: tuple


def measure(name: str, n: int = 100_000, seed: int = 0) -> Measurement:
    """The worst error of `name` on the current device over its inputs."""
    args = inputs(name, n, seed)
    got = run(name, args)
    with np.errstate(all="ignore"):
        want = CASES[name].reference(*[a.astype(np.float64) for a in args])
    err = ulp_error(got, want)
    i = int(np.argmax(err))
    return Measurement(name, metile.get_device(), float(err[i]), tuple(float(a[i]) for a in args))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--devices", default=",".join(d for d in ("cpu", "msl-emu", "cuda", "metal") if metile.device_available(d))
    )
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--ops", default=",".join(CASES))
    a = parser.parse_args(argv)
    print("| function | device | worst ulp | bound | worst input |")
    print("|---|---|---|---|---|")
    for name in a.ops.split(","):
        for device in a.devices.split(","):
            metile.set_device(device)
            m = measure(name, a.n)
            bound = BOUNDS.get(device, {}).get(name)
            inputs_text = ", ".join(f"{x:.9g}" for x in m.worst_input)
            print(f"| {name} | {device} | {m.worst_ulp:.3f} | {bound} | {inputs_text} |", flush=True)


if __name__ == "__main__":
    main()
