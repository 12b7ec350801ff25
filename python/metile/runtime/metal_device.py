"""`MetalDevice.get().sync()`: waits for the current device, whichever backend it is.

The name follows meTile's Apple-first API; on the CPU backends launches are
synchronous and `sync()` returns at once, on GPUs it waits for queued work.
"""

from __future__ import annotations

from metile._metile import get_device, synchronize


class MetalDevice:
    _instance: MetalDevice | None = None

    @classmethod
    def get(cls) -> MetalDevice:
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    @property
    def name(self) -> str:
        return get_device()

    def sync(self) -> None:
        synchronize()

    def __repr__(self) -> str:
        return f"MetalDevice(backend={self.name!r})"
