"""`@metile.autotune`: times every `metile.Config` the first time a launch brings a
new value of the key arguments, launches the fastest, and remembers it (in
memory, and on disk under METILE_CACHE_DIR so later processes skip the search).

Tuning never changes the caller's data: candidates run on copies of the buffers
the kernel stores to (the compiler names them), so the caller's outputs see
exactly one launch, of the winner. Configs the target cannot compile
(threadgroup memory, thread limits, refused ops) are skipped with the reason."""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import struct
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from metile import _frontend
from metile._config import Config
from metile._metile import (
    Buffer,
    CompilationError,
    Kernel,
    autotune_cache_get,
    autotune_cache_put,
    get_device,
)
from metile.testing.bench import _count, do_bench

GridSpec = tuple | list | Callable[[dict[str, Any]], Sequence[int]]


def autotune(
    configs: Sequence[Config],
    key: Sequence[str],
    warmup: int = 5,
    rep: int = 20,
    verbose: bool = True,
) -> Callable[[Kernel], Autotuner]:
    """`@metile.autotune(configs=[metile.Config(BLOCK=256, num_sgs=4), ...], key=["N"])`
    above `@metile.kernel`: each new value of the `key` arguments times every config
    (`warmup` runs, then the median of `rep` runs) and launches the fastest."""
    configs = list(configs) if isinstance(configs, (list, tuple)) else configs
    if not isinstance(configs, list) or not configs:
        raise ValueError(f"autotune needs a non-empty list of metile.Config, got {configs!r}")
    for c in configs:
        if not isinstance(c, Config):
            raise TypeError(f"autotune configs must be metile.Config objects, got {type(c).__name__}: {c!r}")
    if isinstance(key, str) or not all(isinstance(k, str) for k in key):
        raise TypeError(f"autotune key must be a list of argument names, e.g. key=['N'], got {key!r}")
    _count("warmup", warmup, 0)
    _count("rep", rep, 1)

    def decorate(kernel: Kernel) -> Autotuner:
        if not isinstance(kernel, Kernel):
            raise TypeError(
                f"@metile.autotune decorates a @metile.kernel (put @metile.kernel below it), "
                f"got {type(kernel).__name__}"
            )
        return Autotuner(kernel, configs, list(key), warmup, rep, bool(verbose))

    return decorate


def _key_value(name: str, value: Any) -> tuple:
    """What a key argument contributes: its type and exact value (a float by its
    bits, a numpy scalar by its dtype and bytes), or an array's dtype and shape.
    Never the value alone: `4`, `4.0` and `True` are equal (and hash equal) in
    Python, and would share a winner."""
    kind = type(value)
    if value is None:
        return ("None",)
    if kind in (bool, int, str):
        return (kind.__name__, value)
    if kind is float:
        return ("float", struct.pack("<d", value).hex())
    if kind is tuple:
        return ("tuple", *(_key_value(name, v) for v in value))
    if isinstance(value, np.generic):
        return ("numpy", repr(value.dtype), value.tobytes().hex())
    if isinstance(value, np.dtype):
        return ("dtype", repr(value))
    if isinstance(value, (bool, int, float, str)):
        base = next(t for t in (bool, int, float, str) if isinstance(value, t))
        return (f"{kind.__module__}.{kind.__qualname__}", *_key_value(name, base(value))[1:])
    if hasattr(value, "dtype") and hasattr(value, "shape"):
        return ("array", str(value.dtype), tuple(int(n) for n in value.shape))
    raise TypeError(
        f"the autotune key argument '{name}' is a {kind.__module__}.{kind.__qualname__}; a key argument "
        "must be None, bool, int, float, str, a tuple of these, a numpy scalar or dtype, or an array "
        "(keyed by its dtype and shape)"
    )


def _show_key_value(tagged: tuple) -> str:
    """A key value as the user wrote it, for messages."""
    kind, *parts = tagged
    if kind == "float":
        return repr(struct.unpack("<d", bytes.fromhex(parts[0]))[0])
    if kind == "tuple":
        return "(" + ", ".join(_show_key_value(p) for p in parts) + ("," if len(parts) == 1 else "") + ")"
    if kind == "array":
        return f"array of {parts[0]} {tuple(parts[1])}"
    if kind in ("numpy", "dtype"):
        return f"{kind} {parts[0]}"
    return repr(parts[0]) if parts else kind


_DLPACK_CPU = 1


def _on_a_gpu(value: Any) -> bool:
    """Whether an array-like lives in GPU memory (a CUDA tensor, a CuPy array)."""
    if hasattr(value, "__cuda_array_interface__"):
        return True
    device = getattr(value, "__dlpack_device__", None)
    return callable(device) and device()[0] != _DLPACK_CPU


def _scratch_copy(value: Any) -> Any:
    """A copy, with the same contents, of a buffer argument that a candidate may write."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, Buffer):
        return Buffer(data=value.numpy().copy())
    if _on_a_gpu(value):
        # A device copy with the framework's own method (torch: clone, CuPy: copy).
        for method in ("clone", "copy"):
            copy = getattr(value, method, None)
            if callable(copy):
                return copy()
        raise TypeError(
            f"autotune cannot copy the GPU array {type(value).__name__} that the kernel writes; "
            "pass a torch tensor, a CuPy array or a metile.Buffer"
        )
    if hasattr(value, "__dlpack__"):
        return np.from_dlpack(value).copy()
    if hasattr(value, "__array_interface__"):
        return np.array(value, copy=True)
    return value


def _disk_cache_enabled() -> bool:
    return os.environ.get("METILE_AUTOTUNE", "1").strip() != "0"


class Autotuner:
    """A kernel with a search space; launch it as `tuned[grid](*args)`."""

    def __init__(
        self, kernel: Kernel, configs: list[Config], key: list[str], warmup: int, rep: int, verbose: bool
    ) -> None:
        params, is_constexpr = _frontend.analyze_signature(kernel.fn)
        constexprs = {p for p, c in zip(params, is_constexpr) if c}
        for k in key:
            if k not in params:
                raise ValueError(
                    f"autotune key '{k}' is not a parameter of {kernel.__name__}({', '.join(params)})"
                )
        for c in configs:
            for name in c.kwargs:
                if name not in constexprs:
                    raise ValueError(
                        f"{c!r} sets '{name}', which is not a constexpr of {kernel.__name__}({', '.join(params)}); "
                        f"a config sets constexprs, num_sgs, pass switches and arch"
                    )
        self.kernel = kernel
        self.fn = kernel.fn
        self.__name__ = kernel.__name__
        self.configs = configs
        self.key = key
        self.warmup = warmup
        self.rep = rep
        self.verbose = verbose
        self.params = params
        self._defaults = {
            n: p.default
            for n, p in inspect.signature(kernel.fn).parameters.items()
            if p.default is not inspect.Parameter.empty
        }
        self._config_names = {n for c in configs for n in c}
        self._key_positions = [(k, params.index(k)) for k in key]
        self._winners: dict[tuple, Config] = {}
        self._launchers: dict[tuple, Any] = {}
        self._source_hash = self._hash_source()
        #: The winner of the latest search (or cache hit), and every config's median ms.
        self.best_config: Config | None = None
        self.timings: dict[Config, float] = {}
        #: Configs the latest search skipped, with the reason.
        self.skipped: dict[Config, str] = {}

    def _hash_source(self) -> str | None:
        try:
            source = inspect.getsource(self.fn)
        except (OSError, TypeError):
            return None  # no source to key a persisted winner by: tune once per process
        return hashlib.sha256(source.encode()).hexdigest()

    def __getitem__(self, grid: GridSpec) -> TunedLauncher:
        return TunedLauncher(self, grid)

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            f"an autotuned kernel is launched over a grid: {self.__name__}[grid](...), e.g. "
            f"{self.__name__}[lambda meta: (metile.cdiv(N, meta['BLOCK']),)](...)"
        )

    def __repr__(self) -> str:
        return f"<metile.autotune {self.__name__} over {len(self.configs)} configs, key={self.key}>"

    # ---------------------------------------------------------------- binding

    def _check_call(self, args: tuple, kwargs: dict[str, Any]) -> None:
        if len(args) > len(self.params):
            raise TypeError(
                f"{self.__name__}({', '.join(self.params)}) takes {len(self.params)} arguments "
                f"but {len(args)} were given positionally"
            )
        if kwargs and not self._config_names.isdisjoint(kwargs):
            clash = ", ".join(sorted(self._config_names.intersection(kwargs)))
            raise TypeError(f"{self.__name__}: {clash} is chosen by autotune; do not pass it at launch")

    def _named(self, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
        """Every argument by parameter name, defaults included."""
        return {**self._defaults, **dict(zip(self.params, args)), **kwargs}

    def _key_of(self, args: tuple, kwargs: dict[str, Any]) -> tuple:
        """The device, the key arguments' values and every array argument's dtype;
        read straight from the call, since this runs on every launch."""
        values = []
        for k, pos in self._key_positions:
            if pos < len(args):
                value = args[pos]
            elif k in kwargs:
                value = kwargs[k]
            elif k in self._defaults:
                value = self._defaults[k]
            else:
                raise TypeError(f"{self.__name__}: the autotune key argument '{k}' was not passed")
            values.append(_key_value(k, value))
        dtypes = [a.dtype for a in args if hasattr(a, "dtype")]
        if kwargs:
            later = (kwargs[p] for p in self.params[len(args):] if p in kwargs)  # in signature order
            dtypes.extend(v.dtype for v in later if hasattr(v, "dtype"))
        return (get_device(), tuple(values), tuple(dtypes))

    # ---------------------------------------------------------------- search

    def _disk_parts(self, key: tuple) -> list[str] | None:
        if self._source_hash is None or not _disk_cache_enabled():
            return None
        return [self._source_hash, repr(self.configs), repr(self.key), repr(key)]

    def _load(self, key: tuple) -> Config | None:
        parts = self._disk_parts(key)
        text = autotune_cache_get(parts) if parts is not None else None
        if text is None:
            return None
        try:
            entry = json.loads(text)
            best = self.configs[entry["best"]]
            if repr(best) != entry["config"]:
                return None
            timings = {self.configs[i]: float(ms) for i, ms in entry["timings"]}
        except (ValueError, KeyError, IndexError, TypeError):
            return None  # an entry this version cannot read: search again and replace it
        self.timings = timings
        self.skipped = {}
        if self.verbose:
            print(f"autotune {self.__name__}: {best!r} (cached for {self._describe(key)})")
        return best

    def _store(self, key: tuple, best: Config) -> None:
        parts = self._disk_parts(key)
        if parts is None:
            return
        index = {id(c): i for i, c in enumerate(self.configs)}
        entry = {
            "best": index[id(best)],
            "config": repr(best),
            "timings": [[index[id(c)], ms] for c, ms in self.timings.items()],
        }
        autotune_cache_put(parts, json.dumps(entry))

    def _describe(self, key: tuple) -> str:
        return ", ".join(f"{k}={_show_key_value(v)}" for k, v in zip(self.key, key[1])) + f" on {key[0]}"

    def _winner(self, key: tuple, grid: GridSpec, args: tuple, kwargs: dict, named: dict) -> Config:
        best = self._winners.get(key)
        if best is None:
            best = self._load(key)
            if best is None:
                best = self._search(key, grid, args, kwargs, named)
                self._store(key, best)
            self._winners[key] = best
        self.best_config = best
        return best

    def _search(self, key: tuple, grid: GridSpec, args: tuple, kwargs: dict, named: dict) -> Config:
        n = len(self.configs)
        self.timings, self.skipped = {}, {}
        compiled = []
        written: set[str] = set()
        for c in self.configs:
            try:
                written.update(self.kernel.warmup(*args, **kwargs, **c))
                compiled.append(c)
            except CompilationError as e:
                self.skipped[c] = str(e)
        if not compiled:
            reasons = "\n".join(f"  {c!r}: {reason}" for c, reason in self.skipped.items())
            raise CompilationError(
                f"autotune {self.__name__}: none of the {n} configs compiles on {get_device()}:\n{reasons}"
            )
        # Candidates write to copies, so the caller's outputs see only the winner's launch.
        scratch = {name: _scratch_copy(named[name]) for name in written if name in named}
        run_args = tuple(scratch.get(p, a) for p, a in zip(self.params, args))
        run_kwargs = {k: scratch.get(k, v) for k, v in kwargs.items()}
        for i, c in enumerate(self.configs, 1):
            if c in self.skipped:
                if self.verbose:
                    print(f"autotune {self.__name__}: config {i}/{n} {c!r}: skipped: {self.skipped[c]}")
                continue
            launcher = self.kernel[_grid_for(grid, named, c)].configure(**c)
            try:
                ms = do_bench(lambda la=launcher: la(*run_args, **run_kwargs), warmup=self.warmup, rep=self.rep)
            except Exception as e:
                if hasattr(e, "add_note"):
                    e.add_note(f"(while autotune timed {self.__name__} with {c!r})")
                raise
            self.timings[c] = ms
            if self.verbose:
                print(f"autotune {self.__name__}: config {i}/{n} {c!r}: {ms:.4f} ms")
        best = min(self.timings, key=self.timings.__getitem__)
        if self.verbose:
            print(
                f"autotune {self.__name__}: best {best!r} at {self.timings[best]:.4f} ms "
                f"for {self._describe(key)}"
            )
        return best


def _grid_for(grid: GridSpec, named: dict[str, Any], config: Config) -> Any:
    """The launch grid: `grid` itself, or `grid(meta)` with the arguments and the config's values."""
    if callable(grid):
        return grid({**named, **config})
    return grid


class TunedLauncher:
    """`tuned[grid]`: launching it tunes on a new key and runs the winner."""

    def __init__(self, tuner: Autotuner, grid: GridSpec) -> None:
        if not callable(grid) and not isinstance(grid, (tuple, list)):
            raise TypeError(
                f"the grid of an autotuned kernel is a tuple of ints or a callable of the config, "
                f"e.g. lambda meta: (metile.cdiv(N, meta['BLOCK']),); got {type(grid).__name__}"
            )
        self.tuner = tuner
        self.grid = grid

    def _launcher(self, args: tuple, kwargs: dict[str, Any]) -> Any:
        tuner = self.tuner
        tuner._check_call(args, kwargs)
        key = tuner._key_of(args, kwargs)
        # A tuple grid's configured launcher is kept per key (`tuned[grid]` is a new
        # object each launch); a callable grid may read any argument, so it runs each time.
        kept = None if callable(self.grid) else (tuple(self.grid), key)
        launcher = tuner._launchers.get(kept) if kept is not None else None
        if launcher is None:
            named = tuner._named(args, kwargs)
            best = tuner._winner(key, self.grid, args, kwargs, named)
            launcher = tuner.kernel[_grid_for(self.grid, named, best)].configure(**best)
            if kept is not None:
                tuner._launchers[kept] = launcher
        else:
            tuner.best_config = tuner._winners[key]
        return launcher

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self._launcher(args, kwargs)(*args, **kwargs)

    def prepare(self, *args: Any, **kwargs: Any) -> Any:
        """Tunes for these arguments (unless already tuned) without launching, and
        returns a launcher fixed to the winning config and its grid: calling it
        costs what a plain cached launch does. It does not retune when later
        arguments bring a new key value."""
        return self._launcher(args, kwargs)
