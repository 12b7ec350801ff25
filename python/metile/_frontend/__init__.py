"""The Python half of the frontend: signature analysis, the control-flow
rewrite of a kernel's source, and the tracing driver. Proxies and every op
live in Rust (`metile._metile`)."""

from metile._frontend.captures import captures
from metile._frontend.signature import analyze_signature, declared_dtypes
from metile._frontend.specialize import debug_enabled, specialize

__all__ = ["analyze_signature", "captures", "debug_enabled", "declared_dtypes", "specialize"]
