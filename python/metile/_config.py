"""`metile.Config`: one set of constexpr values plus launch options (`num_sgs`, the
GEMM pass switches, `split_k` and the Apple GPU family `arch`), the unit autotuning
searches over. A Config is a read-only mapping, so it can also be splatted into a launch:
`kernel[grid](*args, **config)`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from metile import _metile

# Switches of optional GEMM passes, from the compiler's policy table (each target's
# defaults are there too); see docs/gemm.md and docs/pipeline.md.
PASS_OPTIONS = tuple(_metile.pass_names())

# Programs per output tile sharing a GEMM's K loop (docs/gemm.md); 1 is no split.
MAX_SPLIT_K = 65535
# Values of the `arch` launch option: Apple7 and later, or Apple10 (M5) with Metal 4
# tensor ops; see docs/gemm.md.
APPLE_ARCHS = ("apple", "apple10")


class Config(Mapping):
    """`Config(BLOCK=256, num_sgs=4)`: constexprs by name; `num_sgs` (simdgroups of
    32 threads per threadgroup) is a launch option, left to the compiler when None,
    and so are the pass switches, `split_k` and the Apple GPU family
    (`Config(BLOCK_M=128, prefetch=False, split_k=4, arch="apple10")`)."""

    def __init__(self, num_sgs: int | None = None, split_k: int | None = None, **constexprs: Any) -> None:
        if num_sgs is not None and (isinstance(num_sgs, bool) or not isinstance(num_sgs, int)
                                    or not 1 <= num_sgs <= 32):
            raise ValueError(f"num_sgs must be an int from 1 to 32 (simdgroups of 32 threads), got {num_sgs!r}")
        self.options = {k: constexprs.pop(k) for k in PASS_OPTIONS if k in constexprs}
        for name, on in self.options.items():
            if not isinstance(on, bool):
                raise ValueError(f"{name} switches a pass on or off and must be True or False, got {on!r}")
        if split_k is not None:
            if isinstance(split_k, bool) or not isinstance(split_k, int):
                raise TypeError(f"split_k is the number of programs that share each output tile's K loop and "
                                f"must be an int, got {split_k!r}")
            if not 1 <= split_k <= MAX_SPLIT_K:
                raise ValueError(f"split_k must be from 1 (no split) to {MAX_SPLIT_K}, got {split_k!r}")
        if "arch" in constexprs:
            arch = constexprs.pop("arch")
            if not isinstance(arch, str) or arch not in APPLE_ARCHS:
                raise ValueError(f"arch must be 'apple' or 'apple10' (an Apple GPU family), got {arch!r}")
            self.options["arch"] = arch
        self.kwargs = dict(constexprs)
        self.num_sgs = num_sgs
        self.split_k = split_k

    def _items(self) -> dict[str, Any]:
        items = dict(self.kwargs)
        if self.num_sgs is not None:
            items["num_sgs"] = self.num_sgs
        items.update(self.options)
        if self.split_k is not None:
            items["split_k"] = self.split_k
        return items

    def __getitem__(self, key: str) -> Any:
        return self._items()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items())

    def __len__(self) -> int:
        return len(self._items())

    def __repr__(self) -> str:
        return "Config(" + ", ".join(f"{k}={v!r}" for k, v in self._items().items()) + ")"

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._items().items())))
