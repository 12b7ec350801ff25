"""Device access (the seed's `metile.runtime.metal_device` spelling lives here)."""
