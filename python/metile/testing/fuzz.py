"""Differential fuzzing from Python: random kernels, written as kernel source the way
people write them (2-D pointer tiles, `x[:, None]`, masked loads, axis reductions,
loops and branches on traced values, products chained as attention chains them),
run on the cpu interpreter (the oracle) and on every other backend asked for; the
results must agree. Integers are compared bit for bit, floats within a tolerance
that covers the order of float sums.

    python -m metile.testing.fuzz --devices cpu,msl-emu,cuda --count 1000 --seed 0

A case that a GPU backend refuses with a documented limit is counted apart from a
failure; an internal compiler error, a crash of the launch or a wrong answer is a
failure. Each case's kernel source is kept in the report, so a failure can be
replayed by itself (`--seed S --count 1`).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np

_FLOAT_BOUND = 1000.0
_INT_BOUND = 100000


@dataclass
class Value:
    """A name in the generated kernel: its shape kind and whether it holds integers.

    Kinds: `full` [BM, BN]; `rows` [BM] and `cols` [BN] (1-D); `rcol` [BM, 1] and
    `rrow` [1, BN] (kept dimensions); `scalar`."""

    name: str
    kind: str
    is_int: bool
    # Computed exactly on every backend (no division, no transcendental function on the
    # way): only such floats are turned into integers, whose outputs are compared exactly,
    # since a float a few ulps apart can truncate or rank the other way.
    exact: bool = True


@dataclass
class Case:
    seed: int
    source: str
    m: int
    n: int
    bm: int
    bn: int
    num_sgs: int | None
    float_slots: int
    int_slots: int
    divides: bool
    # The K extent of the pointer-tile product (0 without one): XH holds its A (M x KH) and
    # then its B (KH x 2N).
    kh: int = 0
    # The chained products' head dim and key count (0 without them): XC holds their
    # Q (M x KD), K (L x KD) and V (L x N).
    kd: int = 0
    keys: int = 0

    @property
    def grid(self) -> tuple[int]:
        return (-(-self.m // self.bm),)


def _to_2d(v: Value) -> str:
    """`v` as an expression that broadcasts against a [BM, BN] tile."""
    return {"rows": f"{v.name}[:, None]", "cols": f"{v.name}[None, :]"}.get(v.kind, v.name)


def _join(a: str, b: str) -> str:
    if a == b:
        return a
    if a == "scalar":
        return b
    if b == "scalar":
        return a
    return "full"


def _operands(x: Value, y: Value) -> tuple[str, str, str]:
    """The two operand spellings and the result kind of an element-wise op: 1-D
    values of the same kind stay 1-D, anything else meets as 2-D."""
    if x.kind == y.kind or "scalar" in (x.kind, y.kind):
        return x.name, y.name, _join(x.kind, y.kind)
    kinds = {x.kind, y.kind}
    result = "full"
    if kinds <= {"rows", "rcol"}:
        result = "rcol"
    elif kinds <= {"cols", "rrow"}:
        result = "rrow"
    return _to_2d(x), _to_2d(y), result


@dataclass
class _Generator:
    rng: random.Random
    lines: list[str] = field(default_factory=list)
    pool: list[Value] = field(default_factory=list)
    divides: bool = False
    count: int = 0

    def fresh(self) -> str:
        self.count += 1
        return f"v{self.count}"

    def pick(self, is_int: bool | None = None, kinds: tuple[str, ...] | None = None) -> Value | None:
        options = [
            v for v in self.pool
            if (is_int is None or v.is_int == is_int) and (kinds is None or v.kind in kinds)
        ]
        return self.rng.choice(options) if options else None

    def emit(self, kind: str, is_int: bool, expr: str, indent: str = "    ", exact: bool = True) -> Value:
        used = set(re.findall(r"[A-Za-z_]\w*", expr))
        exact = exact and all(v.exact for v in self.pool if v.name in used)
        value = Value(self.fresh(), kind, is_int, exact)
        self.lines.append(f"{indent}{value.name} = {expr}")
        self.pool.append(value)
        return value

    def bounded(self, expr: str, is_int: bool) -> str:
        bound = _INT_BOUND if is_int else _FLOAT_BOUND
        return f"metile.minimum(metile.maximum({expr}, -{bound}), {bound})"

    def step(self) -> None:
        x = self.pick()
        assert x is not None
        choice = self.rng.randrange(19)
        if choice <= 2:
            y = self.pick(x.is_int)
            a, b, kind = _operands(x, y)
            op = self.rng.choice(["+", "-", "*", "max", "min"])
            if op in ("max", "min"):
                expr = f"metile.{'maximum' if op == 'max' else 'minimum'}({a}, {b})"
            else:
                expr = self.bounded(f"({a} {op} {b})", x.is_int)
            self.emit(kind, x.is_int, expr)
        elif choice == 3:
            self.emit(x.kind, x.is_int, self.rng.choice([f"-{x.name}", f"metile.abs({x.name})"]))
        elif choice == 4:
            y = self.pick(x.is_int)
            a, b, kind = _operands(x, y)
            cmp = self.rng.choice(["<", "<=", ">", "==", "!="])
            self.emit(kind, x.is_int, f"metile.where({a} {cmp} {b}, {b}, {a})")
        elif choice in (5, 6) and x.kind in ("full", "rows", "cols", "rcol", "rrow"):
            self.reduce(x)
        elif choice == 7 and x.is_int:
            y = self.pick(True)
            a, b, kind = _operands(x, y)
            op = self.rng.choice(["//", "%", "&", "|", "^", "<<", ">>"])
            if op in ("//", "%"):
                # A divisor in 1..8: division by zero and i32 overflow are not the subject
                # (a mask, not `abs`, whose result is negative for the most negative int).
                b = f"(({b} & 7) + 1)"
            elif op in ("<<", ">>"):
                b = f"({b} & 3)"
            expr = f"({a} {op} {b})"
            self.emit(kind, True, self.bounded(expr, True) if op == "<<" else expr)
        elif choice == 8 and not x.is_int:
            s = self.pick(False, ("scalar",))
            if s is not None:
                self.divides = True
                self.emit(x.kind, False, f"{x.name} / (metile.abs({s.name}) + 1.0)", exact=False)
        elif choice == 9 and (x.is_int or x.exact):
            target = "metile.float32" if x.is_int else "metile.int32"
            self.emit(x.kind, not x.is_int, f"{x.name}.to({target})")
        elif choice == 10:
            self.branch()
        elif choice == 11:
            self.keepdims(x)
        elif choice == 12 and not x.is_int:
            fn = self.rng.choice([
                "sqrt(metile.abs({}))", "exp(-metile.abs({}))", "tanh({})", "sin({})", "atan({})", "erf({})",
                "sigmoid({})", "exp2(-metile.abs({}))", "log1p(metile.abs({}))", "floor({})", "rint({})",
            ])
            self.emit(x.kind, False, "metile." + fn.format(x.name), exact=fn.startswith(("floor", "rint")))
        elif choice == 13 and not x.is_int:
            # Through a narrower float and back: the same rounding everywhere.
            narrow = self.rng.choice(["metile.float16", "metile.bfloat16"])
            self.emit(x.kind, False, f"{x.name}.to({narrow}).to(metile.float32)")
        elif choice == 14 and not x.is_int and x.kind == "full":
            # A product with a [BN, BN] tile of XF (square, so the result is [BM, BN] again).
            self.emit("full", False, self.bounded(f"metile.dot({x.name}, w)", False))
        elif choice == 15:
            self.carried_reduction()
        elif choice == 16 and x.kind in ("full", "rows", "cols"):
            self.scan_or_sort(x)
        elif choice == 17 and x.kind in ("full", "rows", "cols") and (x.is_int or x.exact):
            self.arg_reduce(x)
        elif choice == 18 and x.kind == "full":
            self.shape_op(x)

    def shape_op(self, x: Value) -> None:
        """Transposes, reshapes (to 1-D, through 3-D), join/split round trips and
        `dot(x, w.T)` of a [BM, BN] value (every BN is even)."""
        y = self.pick(x.is_int, ("full",))
        forms = [
            ("rows", f"metile.sum({x.name}.T, axis=0)"),
            ("cols", f"metile.max(metile.trans({x.name}), axis=1)"),
            ("full", self.bounded(f"({x.name}.T + {y.name}.T).T", x.is_int)),
            ("full", f"metile.reshape({x.name}, (BM * BN,)).reshape(BM, BN)"),
            ("full", self.bounded(f"({x.name}.reshape(BM * BN) * (metile.arange(0, BM * BN) % 3)).reshape(BM, BN)",
                                  x.is_int)),
            ("full", f"metile.permute({x.name}[None, :, :], 1, 0, 2).reshape(BM, BN)"),
            ("full", f"metile.join(*metile.split({x.name}.reshape(BM, BN // 2, 2))).reshape(BM, BN)"),
            ("full", f"metile.split(metile.join({x.name}, {y.name}))[1]"),
        ]
        if not x.is_int:
            forms.append(("full", self.bounded(f"metile.dot({x.name}, w.T)", False)))
        kind, expr = self.rng.choice(forms)
        self.emit(kind, x.is_int, expr)

    def scan_or_sort(self, x: Value) -> None:
        """A scan or a sort along an axis (every block extent is a power of two)."""
        axis = self.rng.choice(["0", "1"]) if x.kind == "full" else "0"
        op = self.rng.choice(["cumsum", "cumprod", "sort"] if x.is_int else ["cumsum", "sort"])
        flag = self.rng.choice(["True", "False"])
        if op == "sort":
            expr = f"metile.sort({x.name}, dim={axis}, descending={flag})"
        else:
            expr = f"metile.{op}({x.name}, axis={axis}, reverse={flag})"
        self.emit(x.kind, x.is_int, self.bounded(expr, x.is_int) if op != "sort" else expr)

    def arg_reduce(self, x: Value) -> None:
        """An index reduction (`argmax`/`argmin`) or an integer `xor_sum`."""
        axes = {"full": [("0", "cols"), ("1", "rows"), ("None", "scalar")], "rows": [("0", "scalar")],
                "cols": [("0", "scalar")]}
        axis, kind = self.rng.choice(axes[x.kind])
        op = self.rng.choice(["argmax", "argmin", "xor_sum"] if x.is_int else ["argmax", "argmin"])
        self.emit(kind, True, f"metile.{op}({x.name}, axis={axis})")

    def pointer_product(self, rng: random.Random) -> None:
        """A product over a K loop written with pointer tiles, as Triton's matmul
        tutorial writes it: A's rows wrapped by `% M`, pointers advanced each step,
        the K edge masked, and B's columns plain, wrapped from a start that may be
        negative (the run-time sign test of the asynchronous copies), or clamped by
        `where` (their bounds test)."""
        bk = rng.choice([8, 16, 32])
        shift = rng.choice([0, 3, 8, 16])
        col = rng.choice([
            "rn % N",
            f"(pid * BN - {shift} + rn) % N",
            "metile.where(rn < N, rn, 0)",
        ])
        acc = self.fresh()
        self.lines += [
            f"    pk = metile.arange(0, {bk})",
            f"    pcol = N + {col}",
            "    pa = XH + (rm[:, None] % M) * KH + pk[None, :]",
            "    pb = XH + M * KH + pk[:, None] * (2 * N) + pcol[None, :]",
            f"    {acc} = zf",
            f"    for kt in range(0, metile.cdiv(KH, {bk})):",
            f"        pav = metile.load(pa, mask=pk[None, :] < KH - kt * {bk}, other=0.0)",
            f"        pbv = metile.load(pb, mask=pk[:, None] < KH - kt * {bk}, other=0.0)",
            f"        {acc} = metile.dot(pav, pbv, {acc})",
            f"        pa += {bk}",
            f"        pb += {bk} * (2 * N)",
        ]
        self.pool.append(Value(acc, "full", False))

    def chained_products(self, rng: random.Random, kd: int) -> None:
        """Two products chained in one loop over key blocks, as attention writes them:
        `qk = dot(q, k.T)`, a running softmax on `qk` (masked past the last key, or
        causally), then `acc = dot(p.to(f16), v, acc)`. Q, K and V hold -1, 0 and 1 and
        the scale is a power of two, so every exponent is an integer and `exp2` exact
        on every backend; only the order of the sums rounds."""
        bn2 = rng.choice([8, 16, 32])
        narrow = rng.choice(["metile.float16", "metile.bfloat16"])
        exp2 = rng.choice(["metile.math.exp2", "metile.exp2"])
        scale = rng.choice(["", " * 2.0"])
        # K^T as `k.T` of a loaded [BN2, KD] block (through pointers or a tensor descriptor),
        # or loaded transposed through its pointers.
        k_tile = rng.choice([
            "metile.load(XC + M * KD + ck[:, None] + cn[None, :] * KD, mask=cn[None, :] < L, other=0.0)",
            "metile.load(XC + M * KD + cn[:, None] * KD + ck[None, :], mask=cn[:, None] < L, other=0.0).T",
            "ck_desc.load([ks, 0]).T",
        ])
        keep = rng.choice(["(cn < L)[None, :]", "(rm[:, None] >= cn[None, :]) & (cn[None, :] < L)"])
        masked = rng.choice([f"metile.where({keep}, qk{scale}, -1.0e6)",
                             f"qk{scale} + metile.where({keep}, 0.0, -1.0e6)"])
        loop = rng.choice([f"range(0, L, {bn2})", f"metile.range(0, L, {bn2})"])
        acc, out = self.fresh(), self.fresh()
        self.lines += [
            f"    KD = {kd}",
            "    ck = metile.arange(0, KD)",
            "    ck_desc = metile.make_tensor_descriptor(XC + M * KD, shape=[L, KD], strides=[KD, 1],",
            f"                                            block_shape=[{bn2}, KD])",
            "    cq = metile.load(XC + rm[:, None] * KD + ck[None, :], mask=rm[:, None] < M, other=0.0)",
            '    cm = metile.zeros((BM,), dtype=metile.float32) - float("inf")',
            "    cl = metile.zeros((BM,), dtype=metile.float32)",
            f"    {acc} = zf",
            f"    for ks in {loop}:",
            f"        cn = ks + metile.arange(0, {bn2})",
            f"        qk = metile.dot(cq, {k_tile})",
            f"        qk = {masked}",
            "        mij = metile.maximum(cm, metile.max(qk, 1))",
            f"        p = {exp2}(qk - mij[:, None])",
            f"        alpha = {exp2}(cm - mij)",
            "        cl = cl * alpha + metile.sum(p, 1)",
            f"        {acc} = {acc} * alpha[:, None]",
            "        cv = metile.load(XC + M * KD + L * KD + cn[:, None] * N + rn[None, :],",
            "                         mask=(cn[:, None] < L) & (rn[None, :] < N), other=0.0)",
            f"        {acc} = metile.dot(p.to({narrow}), cv.to({narrow}), {acc})",
            "        cm = mij",
            f"    {out} = {acc} / cl[:, None]",
        ]
        self.pool.append(Value(out, "full", False, exact=False))

    def carried_reduction(self) -> None:
        """A scalar and a 1-D value carried through a loop with a run-time trip count,
        weighted by a counter kept in lockstep with the loop's variable (as Triton's
        persistent matmul keeps `tile_id_c`)."""
        x = self.pick(False, ("full",))
        if x is None:
            return
        total, rows = self.fresh(), self.fresh()
        self.lines += [
            f"    {total} = 0.0",
            f"    {rows} = metile.zeros((BM,), dtype=metile.float32)",
            "    jc = -1",
            "    for j in range(0, K):",
            "        jc += 1",
            f"        {total} += metile.max({x.name}, axis=None) * jc",
            f"        {rows} = metile.maximum({rows}, metile.sum({x.name} * jc, axis=1))",
        ]
        self.pool += [Value(total, "scalar", False, x.exact), Value(rows, "rows", False, x.exact)]

    def reduce(self, x: Value) -> None:
        op = self.rng.choice(["sum", "max", "min"])
        axes: dict[str, list[tuple[str, str]]] = {
            "full": [("0", "cols"), ("1", "rows"), ("-1", "rows"), ("None", "scalar")],
            "rows": [("0", "scalar"), ("-1", "scalar"), ("None", "scalar")],
            "cols": [("0", "scalar"), ("None", "scalar")],
            "rcol": [("1", "rows"), ("-1", "rows"), ("None", "scalar")],
            "rrow": [("0", "cols"), ("None", "scalar")],
        }
        axis, kind = self.rng.choice(axes[x.kind])
        arg = "" if axis == "None" else f", axis={axis}"
        self.emit(kind, x.is_int, f"metile.{op}({x.name}{arg})")

    def keepdims(self, x: Value) -> None:
        """A 1-D value given back its reduced dimension (`[:, None]` / `[None, :]`)."""
        if x.kind == "rows":
            self.emit("rcol", x.is_int, f"{x.name}[:, None]")
        elif x.kind == "cols":
            self.emit("rrow", x.is_int, f"{x.name}[None, :]")

    def branch(self) -> None:
        """An `if` on a traced scalar, assigning one name on both sides."""
        s = self.pick(None, ("scalar",))
        x = self.pick()
        if s is None or x is None:
            return
        y = self.pick(x.is_int, (x.kind,))
        name = self.fresh()
        zero = "0" if s.is_int else "0.0"
        self.lines += [
            f"    if {s.name} > {zero}:",
            f"        {name} = {x.name}",
            "    else:",
            f"        {name} = -{y.name}",
        ]
        self.pool.append(Value(name, x.kind, x.is_int, x.exact and y.exact))


_PRELUDE = """\
import metile


@metile.kernel
def fuzz(XF, XI, XH, XC, OutF, OutI, M, N, K, KH, L, BM: metile.constexpr, BN: metile.constexpr):
    pid = metile.program_id(0)
    rm = pid * BM + metile.arange(0, BM)
    rn = metile.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    offs = rm[:, None] * N + rn[None, :]
    zf = metile.zeros((BM, BN), dtype=metile.float32)
    zi = metile.zeros((BM, BN), dtype=metile.int32)
    w = metile.load(XF + rn[:, None] * BN + rn[None, :], mask=(rn[:, None] < N) & (rn[None, :] < N), other=0.0)
"""


def _broadcast(v: Value) -> str:
    zero = "zi" if v.is_int else "zf"
    return f"{_to_2d(v)} + {zero}"


def generate(seed: int) -> Case:
    """The random case of `seed`: shapes, launch options and kernel source."""
    rng = random.Random(seed)
    bm = rng.choice([1, 2, 4, 8, 16, 32])
    bn = rng.choice([2, 8, 16, 32, 64])
    m = rng.randint(1, 3 * bm)
    n = rng.randint(1, bn)
    g = _Generator(rng)
    g.lines += [
        "    f0 = metile.load(XF + offs, mask=mask, other=0.25)",
        "    f1 = metile.load(XF + offs, mask=mask)",
        "    i0 = metile.load(XI + offs, mask=mask, other=1)",
        "    i1 = metile.load(XI + offs, mask=mask)",
        "    r0 = metile.load(XF + rm * N, mask=rm < M, other=-1.0)",
        "    c0 = metile.load(XI + rn, mask=rn < N)",
        "    s0 = metile.load(XF + pid)",
    ]
    g.pool += [
        Value("f0", "full", False), Value("f1", "full", False), Value("i0", "full", True),
        Value("i1", "full", True), Value("r0", "rows", False), Value("c0", "cols", True),
        Value("s0", "scalar", False), Value("rn", "cols", True),
    ]
    for _ in range(rng.randint(4, 16)):
        g.step()
    # A carried value fed by a masked load whose mask shrinks each iteration.
    if rng.random() < 0.5:
        init = g.pick(False)
        shrink = rng.randint(1, max(1, m * n // 2))
        op = rng.choice(["metile.maximum", "metile.minimum"])
        acc = g.fresh()
        g.lines += [
            f"    {acc} = {_broadcast(init)}",
            "    for it in range(0, 3):",
            f"        part = metile.load(XF + offs, mask=offs < M * N - it * {shrink})",
            f"        {acc} = {op}({acc}, part)",
        ]
        g.pool.append(Value(acc, "full", False, init.exact))
    # A product with pointer tiles, drawn from a stream of its own so that the rest of a
    # seed's case stays as it was; its wrapped columns keep runs of 8 only for N a
    # multiple of 8, so N is often made one.
    products = random.Random(seed ^ 0x5EED)
    kh = products.choice([0, 0, 16, 40, 64])
    if kh:
        n = max(8, n - n % 8) if products.random() < 0.5 and bn >= 8 else n
        g.pointer_product(products)
    # Chained products (attention's two), from a stream of their own too.
    chained = random.Random(seed ^ 0xA77E)
    kd = chained.choice([0, 0, 0, 8, 16, 32])
    keys = chained.randint(1, 48) if kd else 0
    if kd:
        g.chained_products(chained, kd)
        # Now and then as tall as the tensor cores' tiles (64 rows a warpgroup), where the
        # second product may read P from registers.
        if chained.random() < 0.25:
            bm, m = 64, chained.randint(1, 160)
    floats = [v for v in g.pool if not v.is_int]
    ints = [v for v in g.pool if v.is_int]
    for out, values in (("OutF", floats), ("OutI", ints)):
        for slot, v in enumerate(values):
            g.lines.append(f"    metile.store({out} + {slot} * M * N + offs, {_broadcast(v)}, mask=mask)")
    source = _PRELUDE + "\n".join(g.lines) + "\n"
    num_sgs = rng.choice([None, 1, 2, 4, 8])
    return Case(seed, source, m, n, bm, bn, num_sgs, len(floats), len(ints), g.divides, kh, kd, keys)


def _load(case: Case, folder: str):
    path = os.path.join(folder, f"fuzz_{case.seed}.py")
    with open(path, "w") as f:
        f.write(case.source)
    spec = importlib.util.spec_from_file_location(f"metile_fuzz_{case.seed}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.fuzz


def _inputs(case: Case) -> list[np.ndarray]:
    rng = np.random.default_rng(case.seed)
    size = case.m * case.n
    # Multiples of 1/4 in [-8, 8): exact in f32, so only the order of sums rounds.
    xf = (rng.integers(-32, 32, max(size, case.bn * case.bn, case.grid[0])) / 4).astype(np.float32)
    xi = rng.integers(-1000, 1000, size).astype(np.int32)
    out_f = np.full(max(1, case.float_slots) * size, -7.0, np.float32)
    out_i = np.full(max(1, case.int_slots) * size, -7, np.int32)
    # Small integers: the products and their sums are exact in f32.
    xh = rng.integers(-3, 4, max(1, case.m * case.kh + case.kh * 2 * case.n)).astype(np.float16)
    # Drawn after the others, so that a case without chained products keeps its inputs.
    xc = rng.integers(-1, 2, max(1, (case.m + case.keys) * case.kd + case.keys * case.n)).astype(np.float16)
    return [xf, xi, xh, xc, out_f, out_i]


def run(kernel, case: Case, device: str) -> tuple[np.ndarray, np.ndarray]:
    """Launches `case` on `device`; returns the float and integer outputs."""
    import metile

    metile.set_device(device)
    xf, xi, xh, xc, out_f, out_i = _inputs(case)
    options = {} if case.num_sgs is None else {"num_sgs": case.num_sgs}
    kernel[case.grid](xf, xi, xh, xc, out_f, out_i, case.m, case.n, 3, max(case.kh, 1), case.keys, BM=case.bm,
                      BN=case.bn, **options)
    return out_f, out_i


def compare(ref: tuple[np.ndarray, np.ndarray], got: tuple[np.ndarray, np.ndarray]) -> str | None:
    """None when `got` agrees with the oracle's `ref`, else what differs."""
    if not np.array_equal(ref[1], got[1]):
        bad = np.flatnonzero(ref[1] != got[1])
        return f"integer outputs differ at {bad[:8].tolist()}: {ref[1][bad[:4]]} vs {got[1][bad[:4]]}"
    scale = float(np.nanmax(np.abs(ref[0][np.isfinite(ref[0])]), initial=1.0))
    close = np.isclose(ref[0], got[0], rtol=1e-5, atol=1e-5 * scale, equal_nan=True)
    if not close.all():
        bad = np.flatnonzero(~close)
        return f"float outputs differ at {bad[:8].tolist()}: {ref[0][bad[:4]]} vs {got[0][bad[:4]]}"
    return None


@dataclass
class Report:
    cases: int = 0
    launches: dict[str, int] = field(default_factory=dict)
    refusals: dict[str, list[str]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


def fuzz(devices: list[str], count: int, seed: int, folder: str | None = None,
         report: Report | None = None) -> Report:
    """Runs `count` cases from `seed` on the cpu and each of `devices`."""
    import metile

    report = report or Report()
    previous = metile.get_device()
    own = folder is None
    folder = folder or tempfile.mkdtemp(prefix="metile-fuzz-")
    try:
        for s in range(seed, seed + count):
            case = generate(s)
            kernel = _load(case, folder)
            report.cases += 1
            try:
                ref = run(kernel, case, "cpu")
            except Exception as e:  # noqa: BLE001 - the oracle (or METILE_CHECK_TARGETS) refused it
                report.failures.append(f"seed {s} on cpu: {type(e).__name__}: {e}\n{case.source}")
                continue
            for device in devices:
                if device == "cpu":
                    continue
                try:
                    got = run(kernel, case, device)
                except metile.CompilationError as e:
                    if "internal compiler error" in str(e):
                        report.failures.append(f"seed {s} on {device}: {e}\n{case.source}")
                    else:
                        report.refusals.setdefault(device, []).append(f"seed {s}: {str(e).splitlines()[0]}")
                    continue
                except Exception as e:  # noqa: BLE001 - every other error is a failure to report
                    report.failures.append(f"seed {s} on {device}: {type(e).__name__}: {e}\n{case.source}")
                    continue
                report.launches[device] = report.launches.get(device, 0) + 1
                diff = compare(ref, got)
                if diff is not None:
                    report.failures.append(f"seed {s} on {device}: {diff}\n{case.source}")
    finally:
        metile.set_device(previous)
        if own:
            for name in os.listdir(folder):
                os.remove(os.path.join(folder, name))
            os.rmdir(folder)
    return report


def _fuzz_in_parallel(devices: list[str], count: int, seed: int, jobs: int) -> Report:
    """`fuzz` over `jobs` processes, each taking a contiguous share of the seeds."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    shares = [(seed + count * j // jobs, count * (j + 1) // jobs - count * j // jobs) for j in range(jobs)]
    total = Report()
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(fuzz, devices, n, s) for s, n in shares if n > 0]
        for future in futures:
            part = future.result()
            total.cases += part.cases
            total.failures += part.failures
            for device, n in part.launches.items():
                total.launches[device] = total.launches.get(device, 0) + n
            for device, refused in part.refusals.items():
                total.refusals.setdefault(device, []).extend(refused)
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", default="cpu,msl-emu", help="comma list of backends besides the cpu oracle")
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1, help="processes, each running a share of the seeds")
    parser.add_argument("--show", action="store_true", help="print the first case's kernel source and stop")
    args = parser.parse_args(argv)
    if args.show:
        print(generate(args.seed).source)
        return 0
    import metile

    devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    missing = [d for d in devices if not metile.device_available(d)]
    if missing:
        print(f"not available here: {', '.join(missing)}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    report = _fuzz_in_parallel(devices, args.count, args.seed, args.jobs) if args.jobs > 1 \
        else fuzz(devices, args.count, args.seed)
    took = time.perf_counter() - start
    launched = ", ".join(f"{d} {n}" for d, n in report.launches.items()) or "none"
    print(f"{report.cases} kernels (seeds {args.seed}..{args.seed + args.count - 1}) in {took:.1f} s; "
          f"compared launches: {launched}")
    for device, refused in report.refusals.items():
        print(f"{device} refused {len(refused)} (documented limits), e.g. {refused[0]}")
    for failure in report.failures:
        print("FAIL", failure, sep="\n")
    print(f"{len(report.failures)} failures")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
