"""Shared fixtures: the conformance suite runs once per backend present here
(cpu always; msl-emu with clang; cuda on NVIDIA; metal on macOS).
`METILE_TEST_DEVICES=cpu,msl-emu` narrows the list."""

import os

import numpy as np
import pytest

# Every kernel a test traces, on any backend, is also compiled for every GPU target:
# an internal compiler error on any of them fails the test (documented refusals pass).
os.environ.setdefault("METILE_CHECK_TARGETS", "all")

import metile  # noqa: E402

_ALL = ("cpu", "msl-emu", "cuda", "metal")


def _backends():
    wanted = os.environ.get("METILE_TEST_DEVICES")
    names = [n.strip() for n in wanted.split(",")] if wanted else list(_ALL)
    return [n for n in names if metile.device_available(n)]


BACKENDS = _backends()


def _backend_params():
    """Every backend asked for; those absent here are skipped with the reason."""
    wanted = os.environ.get("METILE_TEST_DEVICES")
    names = [n.strip() for n in wanted.split(",")] if wanted else list(_ALL)
    return [
        n if n in BACKENDS else pytest.param(n, marks=pytest.mark.skip(reason=f"no {n} device here"))
        for n in names
    ]


@pytest.fixture(params=_backend_params())
def device(request):
    previous = metile.get_device()
    metile.set_device(request.param)
    yield request.param
    metile.set_device(previous)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
