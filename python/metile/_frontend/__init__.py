"""The Python half of the frontend: signature analysis, the control-flow
rewrite of a kernel's source, the tracing driver, and block pointers and tensor
descriptors (desugared into pointer tiles and masks). Proxies and every other op
live in Rust (`metile._metile`)."""

from metile._frontend.captures import captures
from metile._frontend.signature import analyze_signature, declared_dtypes
from metile._frontend.specialize import debug_enabled, specialize

__all__ = ["analyze_signature", "captures", "debug_enabled", "declared_dtypes", "specialize"]
