"""`python -m metile compile FILE.py:KERNEL --signature ... --target ... -o DIR`:
writes an ahead-of-time artifact of one kernel specialisation (see `metile.aot`)."""

from __future__ import annotations

import argparse
import sys


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m metile", description="meTile command-line tools")
    commands = parser.add_subparsers(dest="command", required=True)
    compile_ = commands.add_parser(
        "compile",
        help="compile one kernel specialisation ahead of time",
        description="Compiles one specialisation of a kernel for a target, without a GPU, into DIR: "
        "its MSL or CUDA C++ source, a C header and manifest.json (docs/aot.md).",
    )
    compile_.add_argument("kernel", metavar="FILE.py:KERNEL", help="the file defining the kernel, and its name")
    compile_.add_argument(
        "--signature",
        "-s",
        required=True,
        help="NAME:TYPE for run-time parameters (X:*fp32, N:i32, N:i32:16 for multiples of 16) and "
        "NAME:VALUE for constexprs (BLOCK:256), comma-separated",
    )
    compile_.add_argument(
        "--target", "-t", required=True, help="apple, apple10 (Metal 4) or sm_XY (sm_80, sm_90, ...)"
    )
    compile_.add_argument(
        "--grid", "-g", help="the grid rule, 1 to 3 integer expressions (cdiv(N,BLOCK),1,1)"
    )
    compile_.add_argument(
        "--num-sgs", type=int, help="simdgroups (warps) per threadgroup; default: as a launch without num_sgs"
    )
    compile_.add_argument("--out-dir", "-o", required=True, metavar="DIR", help="the folder to write")
    compile_.add_argument(
        "--no-cubin", action="store_true", help="do not build a cubin even where NVRTC is installed"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from metile import CompilationError, aot

    try:
        kernel = aot.load_kernel(args.kernel)
        files = aot.compile_kernel(
            kernel,
            args.signature,
            args.target,
            args.out_dir,
            grid=args.grid,
            num_sgs=args.num_sgs,
            cubin=not args.no_cubin,
        )
    except (CompilationError, ValueError, TypeError) as e:
        print(f"python -m metile compile: error: {e}", file=sys.stderr)
        return 1
    for path in files.values():
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
