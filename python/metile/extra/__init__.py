"""`metile.extra`: Triton's `triton.language.extra` namespace (`libdevice`)."""

from metile.extra import libdevice

__all__ = ["libdevice"]
