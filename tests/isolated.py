"""Runs a snippet of Python in a fresh process, so that a crash (a signal, an abort) in the
case under test is a failed test instead of a lost test run. The hostile-input suites use it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str

    def crashed(self) -> bool:
        """A signal or an abort, rather than a Python exit."""
        return self.returncode < 0 or self.returncode > 1


def run_isolated(code: str, device: str | None = None, env: dict[str, str] | None = None,
                 timeout: float = 120.0, cwd: str | None = None) -> Outcome:
    """Runs `code` (dedented) with this interpreter; `device` sets METILE_DEVICE."""
    full_env = dict(os.environ)
    if device is not None:
        full_env["METILE_DEVICE"] = device
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, env=full_env, timeout=timeout, cwd=cwd,
    )
    return Outcome(proc.returncode, proc.stdout, proc.stderr)


def assert_ok(outcome: Outcome) -> str:
    """The case ran to completion; returns its standard output."""
    assert outcome.returncode == 0, f"exit {outcome.returncode}\n{outcome.stdout}\n{outcome.stderr}"
    return outcome.stdout
