"""meTile: write tile kernels in Python; run them on Apple GPUs, NVIDIA GPUs or the CPU.

    @metile.kernel
    def add(X, Y, Out, N, BLOCK: metile.constexpr):
        offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
        mask = offs < N
        metile.store(Out + offs, metile.load(X + offs, mask=mask) + metile.load(Y + offs, mask=mask), mask=mask)

    add[(metile.cdiv(N, 256),)](x, y, out, N, BLOCK=256)
"""

from metile._autotune import autotune
from metile._config import Config
from metile._kernel import kernel
from metile._metile import (
    Buffer,
    CompilationError,
    MetileWarning,
    device_available,
    get_device,
    set_device,
    synchronize,
)
from metile.language import *  # noqa: F403
from metile.language import __all__ as _language_all

# isort: split
# Triton's `tl.math` and `triton.language.extra` namespaces, made of the names above.
from metile import extra, math

__all__ = [
    "autotune",
    "Buffer",
    "Config",
    "CompilationError",
    "device_available",
    "extra",
    "get_device",
    "kernel",
    "math",
    "MetileWarning",
    "set_device",
    "synchronize",
    *_language_all,
]

# The installed distribution's version (pyproject.toml's), looked up on first use:
# importing importlib.metadata would add tens of milliseconds to every `import metile`.
__version__: str


def __getattr__(name: str) -> object:
    if name == "aot":  # ahead-of-time artifacts, imported when first used
        import metile.aot

        return metile.aot
    if name == "__version__":
        from importlib.metadata import version

        globals()["__version__"] = found = version("metile")
        return found
    if name == "torch":
        # torch operators (metile.torch.custom_op): imported on first use, since
        # importing torch costs seconds and most programs do not need it.
        import importlib

        return importlib.import_module("metile.torch")
    raise AttributeError(f"module 'metile' has no attribute {name!r}")
