"""Kernels in a module with postponed annotations (every annotation is a string);
used by test_tracing.py."""

from __future__ import annotations

import metile
import metile as mt
from metile import constexpr


def scale(X, N, BLOCK: metile.constexpr, FACTOR: constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    x = metile.load(X + offs, mask=offs < N)
    metile.store(X + offs, x * FACTOR, mask=offs < N)


def aliased(X, BLOCK: mt.constexpr):
    metile.store(X + metile.arange(0, BLOCK), 1.0)
