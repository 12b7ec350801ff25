"""A fixed-seed slice of the differential fuzzer (`python -m metile.testing.fuzz`):
random kernels written as users write them, on the cpu oracle and every other
backend present. Longer runs: `--count 10000` (docs/testing.md)."""

import re

import numpy as np
import pytest
from conftest import BACKENDS

import metile
from metile.testing import fuzz

OTHERS = [d for d in BACKENDS if d != "cpu"]


@pytest.mark.skipif(not OTHERS, reason="no backend besides the cpu here")
def test_a_fixed_slice_of_random_kernels_agrees_with_the_interpreter(tmp_path):
    report = fuzz.fuzz(OTHERS, count=12, seed=20261132, folder=str(tmp_path))
    assert report.failures == []
    assert all(report.launches.get(d, 0) + len(report.refusals.get(d, [])) == 12 for d in OTHERS)


def test_the_generator_writes_what_the_fuzzer_promises():
    sources = [fuzz.generate(s).source for s in range(200)]
    for spelling in ["axis=0)", "axis=1)", "axis=-1)", "[:, None]", "[None, :]", "/ (metile.abs(",
                     "    if ", "for it in range", "        jc += 1", " // ", "metile.load(XF + offs, mask=mask)\n",
                     "metile.cumsum(", "metile.sort(", "metile.argmax(", "metile.erf(", ".T, axis=0)",
                     "metile.trans(", ".reshape(BM, BN)", "metile.split(", "metile.permute(", "w.T)",
                     # Pointer-tile products: plain, wrapped from a start of either sign, clamped.
                     "pb += ", "N + rn % N", "- 16 + rn) % N", "N + metile.where(rn < N, rn, 0)",
                     # Chained products: K^T three ways, both masks, both loops, f16 and bf16 P.
                     "other=0.0).T)", "+ cn[None, :] * KD", "ck_desc.load([ks, 0]).T",
                     "(rm[:, None] >= cn[None, :])", "+ metile.where(",
                     "for ks in metile.range(0, L,", "for ks in range(0, L,", "p.to(metile.bfloat16)",
                     "p.to(metile.float16)", "* 2.0"]:
        assert any(spelling in s for s in sources), spelling
    # Reductions of 1-D tiles (a row `r0`, a column `c0`) to scalars.
    assert any("metile.max(r0, axis=0)" in s or "metile.sum(r0, axis=0)" in s or "metile.min(r0, axis=0)" in s
               for s in sources)


def test_the_comparison_reports_a_wrong_answer():
    ref = (np.arange(6, dtype=np.float32), np.arange(6, dtype=np.int32))
    assert fuzz.compare(ref, (ref[0].copy(), ref[1].copy())) is None
    wrong_int = ref[1].copy()
    wrong_int[4] += 1
    assert "integer outputs differ at [4]" in fuzz.compare(ref, (ref[0], wrong_int))
    wrong_float = ref[0].copy()
    wrong_float[2] = 2.01
    assert "float outputs differ at [2]" in fuzz.compare(ref, (wrong_float, ref[1]))


def test_the_same_seed_is_the_same_case():
    assert fuzz.generate(7) == fuzz.generate(7)
    assert fuzz.generate(7).source != fuzz.generate(8).source


def test_the_command_line_runs_and_reports(capsys):
    before = metile.get_device()
    assert fuzz.main(["--devices", "cpu", "--count", "2", "--seed", "5"]) == 0
    assert metile.get_device() == before
    assert "2 kernels (seeds 5..6)" in capsys.readouterr().out


def test_floats_that_round_differently_by_backend_are_not_made_integers():
    # Seed 18270 once summed a quotient and truncated the sum: 3.9999998 on one backend
    # and 4.0 on another gave integers 3 and 4. Quotients and transcendental results, and
    # what is computed from them, are no longer cast to integers or ranked by argmax.
    source = fuzz.generate(18270).source
    assert "/ (metile.abs(" in source and ".to(metile.int32)" not in source
    # Exact floats still are.
    assert any(".to(metile.int32)" in fuzz.generate(s).source for s in range(50))


def _attention(q, k, v, scale, causal):
    qk = q @ k.T * scale
    if causal:
        qk = np.where(np.arange(len(q))[:, None] >= np.arange(len(k))[None, :], qk, -1.0e6)
    p = np.exp2(qk - qk.max(axis=1, keepdims=True))
    return (p @ v) / p.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("seed", [7, 11, 20261140])
def test_the_chained_products_compute_attention(tmp_path, seed):
    # The oracle's answer for the generated attention is numpy's (the inputs make every
    # exponent an integer, so the f16 P of the online softmax is exact); seed 7 is 64 rows tall.
    case = fuzz.generate(seed)
    assert case.kd and case.keys
    out_f, _ = fuzz.run(fuzz._load(case, str(tmp_path)), case, "cpu")
    m, n, kd, keys = case.m, case.n, case.kd, case.keys
    xc = fuzz._inputs(case)[3].astype(np.float32)
    q = xc[:m * kd].reshape(m, kd)
    k = xc[m * kd:(m + keys) * kd].reshape(keys, kd)
    v = xc[(m + keys) * kd:(m + keys) * kd + keys * n].reshape(keys, n)
    expected = _attention(q, k, v, 2.0 if "qk * 2.0" in case.source else 1.0, "rm[:, None] >= cn" in case.source)
    name = re.search(r"    (v\d+) = v\d+ / cl\[:, None\]", case.source).group(1)
    slot = int(re.search(rf"OutF \+ (\d+) \* M \* N \+ offs, {name} \+ zf", case.source).group(1))
    np.testing.assert_allclose(out_f[slot * m * n:(slot + 1) * m * n].reshape(m, n), expected, rtol=1e-6, atol=1e-6)
