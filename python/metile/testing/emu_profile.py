"""Counting what kernels do on msl-emu: `emu_profile()`.

    with metile.testing.emu_profile() as profile:
        kernel[grid](...)
    profile.launches   # one dict per launch, in the order they finished
    profile.total()    # the counters of every launch added up

Inside the block every launch on the msl-emu device runs the profiled build of its kernel
(compiled on first use, cached apart from the default build, which contains none of it) and
counts, per launch: threadgroup, device and constant memory accesses and bytes (per thread),
threadgroup access instructions (the n-th access of each lane of a simdgroup between two
synchronisation points) and their bank-conflict wavefronts (32 banks of 4 bytes, an
assumption), simdgroup matrix loads/stores/products and `matmul2d` runs (per simdgroup),
barriers (per threadgroup) and SIMD-group operations, and the threadgroup instructions by access
site (`threadgroup_sites`: MSL line, kernel source line, loads or stores, instructions,
wavefronts). docs/msl-emu.md ("Profiling") gives every key. The current device must be msl-emu;
profiles do not nest.
"""

import contextlib

from metile import _metile

__all__ = ["EmuProfile", "emu_profile"]

# Keys of a launch's dict that are not counters.
_DESCRIPTION = ("kernel", "grid", "threads_per_threadgroup", "threadgroup_memory_bytes",
                "bank_conflict_ratio", "bank_conflict_excess", "threadgroup_sites")
_SITE_COUNTS = ("instructions", "wavefronts", "min_wavefronts")


class EmuProfile:
    """The launches recorded by one `emu_profile()` block (filled when the block ends)."""

    def __init__(self):
        self.launches = []

    def total(self, kernel=None):
        """The counters of the recorded launches (of `kernel`'s name only, if given) added up,
        with the bank-conflict ratios of the sum and the sites of each kernel merged by line
        (each site then names its `kernel`), most wavefronts first."""
        launches = [launch for launch in self.launches if kernel is None or launch["kernel"] == kernel]
        total = {}
        sites = {}
        for launch in launches:
            for key, value in launch.items():
                if key not in _DESCRIPTION:
                    total[key] = total.get(key, 0) + value
            for site in launch["threadgroup_sites"]:
                merged = sites.setdefault((launch["kernel"], site["msl_line"], site["store"]),
                                          dict(site, kernel=launch["kernel"], **{k: 0 for k in _SITE_COUNTS}))
                for key in _SITE_COUNTS:
                    merged[key] += site[key]
        total["launches"] = len(launches)
        total["threadgroup_sites"] = sorted(sites.values(), key=lambda site: -site["wavefronts"])
        instructions = total.get("threadgroup_load_instructions", 0) + total.get("threadgroup_store_instructions", 0)
        wavefronts = total.get("threadgroup_load_wavefronts", 0) + total.get("threadgroup_store_wavefronts", 0)
        minimum = total.get("threadgroup_min_wavefronts", 0)
        total["bank_conflict_ratio"] = wavefronts / instructions if instructions else None
        total["bank_conflict_excess"] = wavefronts / minimum if minimum else None
        return total


@contextlib.contextmanager
def emu_profile():
    """Profiles the msl-emu launches made inside the block; yields an `EmuProfile`."""
    _metile.emu_profile_start()
    profile = EmuProfile()
    try:
        yield profile
    finally:
        profile.launches.extend(_metile.emu_profile_stop())
