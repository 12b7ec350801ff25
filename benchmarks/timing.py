"""Small helpers shared by the benchmark scripts; every timing goes through
`metile.testing.do_bench`."""

from metile.testing import do_bench


def per_call(fn, number=1, rep=7, warmup=1):
    """Median seconds per call of `fn`, timing batches of `number` calls (host-side
    costs of a microsecond need batches to rise above the clock's resolution)."""
    if number == 1:
        return do_bench(fn, warmup=warmup, rep=rep) / 1e3

    def batch():
        for _ in range(number):
            fn()

    return do_bench(batch, warmup=warmup, rep=rep) / 1e3 / number


def table(headers, rows):
    """A plain-text table with right-aligned numeric columns."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, r in enumerate(cells):
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
