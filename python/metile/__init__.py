"""meTile: write tile kernels in Python; run them on Apple GPUs, NVIDIA GPUs or the CPU."""

from metile._metile import CompilationError
from metile.language import *  # noqa: F403
