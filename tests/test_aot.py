"""Ahead-of-time artifacts (`python -m metile compile`, `metile.aot`): the files
written, that their source is what a launch compiles, the checked-in fixtures
the Rust tests launch, and every refusal (type and message)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import metile
from metile import _frontend, _metile, aot

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "crates" / "metile-runtime" / "tests" / "aot" / "kernels.py"
ADD_SIGNATURE = "X:*fp32,Y:*fp32,Out:*fp32,N:i32,BLOCK:256"


def _fixtures_module():
    spec = importlib.util.spec_from_file_location("aot_fixtures", ROOT / "scripts" / "aot_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def add():
    return aot.load_kernel(f"{KERNELS}:add_kernel")


def _cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "metile", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def test_the_checked_in_fixtures_are_what_the_compiler_writes(tmp_path):
    fixtures = _fixtures_module()
    fixtures.write(tmp_path)
    for folder, *_ in fixtures.ARTIFACTS:
        written = sorted(p.name for p in (tmp_path / folder).iterdir())
        checked_in = sorted(p.name for p in (fixtures.FIXTURES / folder).iterdir())
        assert written == checked_in, folder
        for name in written:
            assert (tmp_path / folder / name).read_bytes() == (fixtures.FIXTURES / folder / name).read_bytes(), (
                f"{folder}/{name} is stale: run .venv/bin/python scripts/aot_fixtures.py"
            )


def test_the_cli_writes_source_header_and_manifest(tmp_path):
    r = _cli(
        "compile", f"{KERNELS}:add_kernel", "--signature", ADD_SIGNATURE.replace("N:i32", "N:i32:16"),
        "--target", "apple", "--grid", "cdiv(N,BLOCK),1,1", "-o", str(tmp_path / "out"),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["add_kernel.h", "add_kernel.metal", "manifest.json"]
    assert r.stdout.split() == [str(out / n) for n in ("add_kernel.metal", "add_kernel.h", "manifest.json")]
    m = json.loads((out / "manifest.json").read_text())
    assert m["format"] == "metile-aot-1" and m["kernel"] == m["entry_point"] == "add_kernel"
    assert (m["target"], m["language"], m["language_version"]) == ("apple", "msl", "3.1")
    assert [(p["name"], p["kind"], p["dtype"], p["index"], p["written"]) for p in m["parameters"]] == [
        ("X", "pointer", "f32", 0, False),
        ("Y", "pointer", "f32", 1, False),
        ("Out", "pointer", "f32", 2, True),
        ("N", "scalar", "i32", 3, False),
    ]
    assert m["parameters"][3]["multiple_of"] == 16
    assert m["constexprs"] == [{"name": "BLOCK", "value": 256}]
    assert m["grid"] == "cdiv(N,BLOCK),1,1" and m["num_sgs"] is None
    assert m["threads_per_group"] == 64 and m["shared_memory_bytes"] == 0 and m["buffer_alignment"] == 16
    import hashlib

    source = (out / "add_kernel.metal").read_bytes()
    assert m["source"] == {"file": "add_kernel.metal", "sha256": hashlib.sha256(source).hexdigest()}
    assert m["binary"] is None and m["header"] == "add_kernel.h"
    kinds = [(e["kind"], e.get("index"), e.get("builtin")) for e in m["entry_parameters"]]
    assert kinds == [
        ("buffer", 0, None), ("buffer", 1, None), ("buffer", 2, None), ("scalar", 3, None),
        ("builtin", None, "threadgroup_position_in_grid"), ("builtin", None, "thread_index_in_threadgroup"),
    ]  # fmt: skip
    assert m["metile_version"] == metile.__version__
    assert len(m["checksum"]) == 64


def _cc():
    return shutil.which("cc") or shutil.which("clang") or shutil.which("clang-19") or shutil.which("gcc")


def test_the_header_compiles_and_computes_the_grid(tmp_path, add):
    cc = _cc()
    if cc is None:
        pytest.skip("no C compiler here")
    aot.compile_kernel(add, ADD_SIGNATURE, "sm_90", tmp_path, grid="cdiv(N, BLOCK), max(N % 3, 1), 2")
    header = (tmp_path / "add_kernel.h").read_text()
    assert "#define ADD_KERNEL_THREADS_PER_GROUP 64" in header and "#define ADD_KERNEL_BLOCK 256" in header
    assert "    const float* X;" in header and "    float* Out;" in header and "    int32_t N;" in header
    program = tmp_path / "main.c"
    program.write_text(
        textwrap.dedent("""
            #include <stdio.h>
            #include "add_kernel.h"
            int main(void) {
                add_kernel_args args = {0, 0, 0, 1000};
                int64_t grid[3];
                add_kernel_grid(&args, grid);
                printf("%lld %lld %lld %s\\n", (long long)grid[0], (long long)grid[1], (long long)grid[2],
                       ADD_KERNEL_ENTRY_POINT);
                return 0;
            }
        """)
    )
    subprocess.run([cc, "-std=c99", "-Wall", "-Werror", "-o", str(tmp_path / "main"), str(program)], check=True)
    run = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True, check=True)
    assert run.stdout.split() == ["4", "1", "2", "add_kernel"]


@pytest.mark.parametrize(("n", "hint"), [(1001, ""), (1024, ":16"), (1000, ":8")])
def test_the_msl_is_what_a_launch_on_msl_emu_compiles(tmp_path, n, hint, capfd):
    if not metile.device_available("msl-emu"):
        pytest.skip("no msl-emu device here")
    add = aot.load_kernel(f"{KERNELS}:add_kernel")  # a fresh kernel: nothing cached
    files = aot.compile_kernel(add, ADD_SIGNATURE.replace("N:i32", f"N:i32{hint}"), "apple", tmp_path)
    previous = metile.get_device()
    metile.set_device("msl-emu")
    os.environ["METILE_DEBUG"] = "msl"
    try:
        capfd.readouterr()
        x = np.arange(n, dtype=np.float32)
        out = np.zeros_like(x)
        add[(metile.cdiv(n, 256),)](x, x, out, n, BLOCK=256)
    finally:
        del os.environ["METILE_DEBUG"]
        metile.set_device(previous)
    printed = capfd.readouterr().err
    np.testing.assert_array_equal(out, 2 * x)
    source = files["add_kernel.metal"].read_text()
    assert printed == f"// MSL of add_kernel\n{source}\n"


@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
def test_the_cuda_is_what_the_cuda_backend_compiles(tmp_path, add, target):
    files = aot.compile_kernel(add, ADD_SIGNATURE, target, tmp_path, cubin=False)
    traced = _frontend.specialize(
        add.fn, [("X", "ptr", "f32"), ("Y", "ptr", "f32"), ("Out", "ptr", "f32"), ("N", "scalar", "i32")],
        {"BLOCK": 256}, {"threads_per_group": 128},
    )  # fmt: skip
    assert files["add_kernel.cu"].read_text() == _metile.compile_cuda(traced, arch=target)["cuda"]
    m = json.loads(files["manifest.json"].read_text())
    assert (m["language"], m["language_version"], m["nvrtc_arch"]) == ("cuda", "c++17", target)
    assert m["default_shared_bytes"] > 0


def test_extra_runtime_parameters_are_in_the_manifest(tmp_path):
    k = aot.load_kernel(f"{KERNELS}:neg_row_max")
    signature = "X:*i32,Out:*i32,M:i32,N:i32,BLOCK:64"
    cuda = json.loads(aot.compile_kernel(k, signature, "sm_90", tmp_path / "c", grid="M")["manifest.json"].read_text())
    assert {"kind": "minus_one"} in cuda["entry_parameters"]
    assert "an int holding -1" in (tmp_path / "c" / "neg_row_max.h").read_text()
    msl = json.loads(aot.compile_kernel(k, signature, "apple", tmp_path / "m", num_sgs=2)["manifest.json"].read_text())
    assert msl["num_sgs"] == 2 and msl["threads_per_group"] == 64
    assert [e["kind"] for e in msl["entry_parameters"]].count("threadgroup") >= 1
    assert msl["shared_memory_bytes"] == sum(e["bytes"] for e in msl["entry_parameters"] if e["kind"] == "threadgroup")
    unread_m = {"kind": "scalar", "index": 2, "msl_type": "constant int&"}
    assert unread_m in msl["entry_parameters"], "M, unread, is declared"


@pytest.mark.parametrize(
    ("signature", "message"),
    [
        ("*fp32,Y:*fp32,Out:*fp32,N:i32,BLOCK:256", "signature entry '*fp32' does not start with a parameter name"),
        ("X:*fp32,Y:*fp32,Out:*fp32,N:i32,BLOCK:256,Z:i32", "names 'Z', which is no parameter of add_kernel(X, Y"),
        ("X:*fp32,X:*fp32,Y:*fp32,Out:*fp32,N:i32,BLOCK:256", "the signature gives 'X' twice"),
        ("X:*fp32,Y:*fp32,Out:*fp32,BLOCK:256", "no type for the run-time parameter 'N' of add_kernel(X, Y, Out, N, B"),
        ("X:*fp32,Y:*fp32,Out:*fp32,N:i32", "no value for the constexpr 'BLOCK' of add_kernel(X, Y, Out, N, BLOCK)"),
        ("X:*fp32,Y:*fp32,Out:*fp32,N:1024,BLOCK:256", "'N' is a run-time parameter: give its type, not a value"),
        ("X:*fp32,Y:*fp32,Out:*fp32,N:i32,BLOCK:i32", "'BLOCK' is a constexpr: give its value (BLOCK:256), not a type"),
        ("X:*fp32,Y:*fp32,Out:*fp32,N:i32,BLOCK:2x6", "the value '2x6' of the constexpr 'BLOCK' is not a Python"),
        ("X:*fp33,Y:*fp32,Out:*fp32,N:i32,BLOCK:256", "unknown type '*fp33' for 'X'"),
        ("X:*fp32:16,Y:*fp32,Out:*fp32,N:i32,BLOCK:256", "'X:*fp32:16': pointers take no hint"),
        ("X:*fp32,Y:*fp32,Out:*fp32,N:fp32:16,BLOCK:256", "'N:fp32:16': only integer scalars take a multiple-of hint"),
        ("X:*fp32,Y:*fp32,Out:*fp32,N:i32:0,BLOCK:256", "'N:i32:0': the hint after the type is a positive multiple"),
        ("X:*fp32,Y:*fp32,,Out:*fp32,N:i32,BLOCK:256", "has an empty entry"),
        ("X:,Y:*fp32,Out:*fp32,N:i32,BLOCK:256", "signature entry 'X:' gives no type or value for 'X'"),
    ],
)  # fmt: skip
def test_bad_signatures_are_refused(tmp_path, add, signature, message):
    with pytest.raises(aot.AotError) as e:
        aot.compile_kernel(add, signature, "apple", tmp_path)
    assert message in str(e.value)
    assert not any(tmp_path.iterdir()), "nothing is written"


@pytest.mark.parametrize(
    ("grid", "error", "message"),
    [
        ("cdiv(M, BLOCK)", ValueError, "reads 'M', which is no parameter of add_kernel; it may read N, BLOCK"),
        ("cdiv(N, BLOCK", ValueError, "bad grid rule 'cdiv(N, BLOCK': expected ')' at the end"),
        ("X", ValueError, "the grid rule reads 'X', a f32 pointer; it may read integer scalars and integer constexprs"),
        ("1,2,3,4", ValueError, "a grid has 1 to 3 axes, this rule has 4"),
    ],
)  # fmt: skip
def test_bad_grid_rules_are_refused(tmp_path, add, grid, error, message):
    with pytest.raises(error) as e:
        aot.compile_kernel(add, ADD_SIGNATURE, "apple", tmp_path, grid=grid)
    assert message in str(e.value)


def test_a_float_constexpr_in_the_grid_is_refused(tmp_path):
    path = tmp_path / "scale.py"
    path.write_text(
        textwrap.dedent("""
            import metile
            @metile.kernel
            def scale(X, N, S: metile.constexpr, BLOCK: metile.constexpr):
                offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
                metile.store(X + offs, metile.load(X + offs, mask=offs < N) * S, mask=offs < N)
        """)
    )
    k = aot.load_kernel(f"{path}:scale")
    with pytest.raises(ValueError, match="the grid rule reads the constexpr 'S' = 1.5, which is not an integer"):
        aot.compile_kernel(k, "X:*fp32,N:i32,S:1.5,BLOCK:128", "apple", tmp_path / "o", grid="cdiv(N, S)")
    files = aot.compile_kernel(k, "X:*fp32,N:i32,S:1.5,BLOCK:128", "apple", tmp_path / "o", grid="cdiv(N, BLOCK)")
    m = json.loads(files["manifest.json"].read_text())
    assert m["constexprs"] == [{"name": "S", "value": 1.5}, {"name": "BLOCK", "value": 128}]


def test_unknown_targets_and_bad_num_sgs_are_refused(tmp_path, add):
    with pytest.raises(ValueError, match="unknown target 'sm_9'; the targets are 'apple' or 'apple10', and sm_XY"):
        aot.compile_kernel(add, ADD_SIGNATURE, "sm_9", tmp_path)
    with pytest.raises(aot.AotError, match="num_sgs is a positive number of simdgroups, got 0"):
        aot.compile_kernel(add, ADD_SIGNATURE, "apple", tmp_path, num_sgs=0)
    with pytest.raises(aot.AotError, match="compile_kernel takes a @metile.kernel function, got function"):
        aot.compile_kernel(add.fn, ADD_SIGNATURE, "apple", tmp_path)


def test_a_kernel_the_target_cannot_compile_is_a_compilation_error(tmp_path):
    path = tmp_path / "double.py"
    path.write_text(
        textwrap.dedent("""
            import metile
            @metile.kernel
            def twice(X, N, BLOCK: metile.constexpr):
                offs = metile.arange(0, BLOCK)
                metile.store(X + offs, metile.load(X + offs, mask=offs < N) * 2.0, mask=offs < N)
        """)
    )
    k = aot.load_kernel(f"{path}:twice")
    with pytest.raises(metile.CompilationError) as e:
        aot.compile_kernel(k, "X:*fp64,N:i32,BLOCK:64", "apple", tmp_path / "o")
    assert "parameter 'X' is float64: float64 is not supported on Apple GPUs" in str(e.value)
    aot.compile_kernel(k, "X:*fp64,N:i32,BLOCK:64", "sm_90", tmp_path / "o", cubin=False)


def test_kernels_that_cannot_be_found_are_refused(tmp_path):
    with pytest.raises(aot.AotError, match="'add.py' does not name a kernel; write FILE.py:KERNEL"):
        aot.load_kernel("add.py")
    with pytest.raises(aot.AotError, match="there is no file nowhere.py"):
        aot.load_kernel("nowhere.py:add")
    listed = r"defines no kernel named 'sub'; its kernels: add_kernel, gemm, neg_row_max$"
    with pytest.raises(aot.AotError, match=listed):
        aot.load_kernel(f"{KERNELS}:sub")
    with pytest.raises(aot.AotError, match="'metile' in .*kernels.py is a module, not a @metile.kernel function"):
        aot.load_kernel(f"{KERNELS}:metile")
    broken = tmp_path / "broken.py"
    broken.write_text("import metile\nraise RuntimeError('no GPU today')\n")
    with pytest.raises(aot.AotError, match="importing .*broken.py failed: RuntimeError: no GPU today"):
        aot.load_kernel(f"{broken}:k")


def test_cli_errors_exit_nonzero_with_the_message(tmp_path):
    r = _cli("compile", f"{KERNELS}:add_kernel", "-s", "X:*fp32", "-t", "apple", "-o", str(tmp_path))
    assert r.returncode == 1
    assert r.stderr.startswith("python -m metile compile: error: the signature gives no type for the run-time")
    r = _cli("compile", f"{KERNELS}:nope", "-s", ADD_SIGNATURE, "-t", "apple", "-o", str(tmp_path))
    assert r.returncode == 1 and "defines no kernel named 'nope'" in r.stderr
    r = _cli("compile", f"{KERNELS}:add_kernel", "-s", ADD_SIGNATURE, "-t", "gfx90a", "-o", str(tmp_path))
    assert r.returncode == 1 and "unknown target 'gfx90a'" in r.stderr
    r = _cli("compile", f"{KERNELS}:add_kernel", "-s", ADD_SIGNATURE, "-o", str(tmp_path))
    assert r.returncode == 2 and "the following arguments are required: --target/-t" in r.stderr
    assert not any(tmp_path.iterdir())


def test_an_autotuned_kernel_compiles_its_kernel(tmp_path):
    path = tmp_path / "tuned.py"
    path.write_text(
        textwrap.dedent("""
            import metile
            @metile.autotune([metile.Config(BLOCK=128), metile.Config(BLOCK=256)], key=["N"])
            @metile.kernel
            def fill(X, N, BLOCK: metile.constexpr):
                offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
                metile.store(X + offs, offs, mask=offs < N)
        """)
    )
    files = aot.compile_kernel(aot.load_kernel(f"{path}:fill"), "X:*i32,N:i32,BLOCK:128", "apple", tmp_path / "o")
    assert json.loads(files["manifest.json"].read_text())["constexprs"] == [{"name": "BLOCK", "value": 128}]


def test_the_cuda_is_what_a_launch_on_this_gpu_prints(tmp_path, capfd):
    if not metile.device_available("cuda") or shutil.which("nvidia-smi") is None:
        pytest.skip("no cuda device here")
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True, text=True
    )
    arch = "sm_" + smi.stdout.split()[0].replace(".", "")
    add = aot.load_kernel(f"{KERNELS}:add_kernel")
    files = aot.compile_kernel(add, ADD_SIGNATURE, arch, tmp_path, cubin=False)
    previous = metile.get_device()
    metile.set_device("cuda")
    os.environ["METILE_DEBUG"] = "cuda"
    try:
        capfd.readouterr()
        x = np.arange(1001, dtype=np.float32)
        out = np.zeros_like(x)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", metile.MetileWarning)  # numpy arrays are staged
            add[(4,)](x, x, out, 1001, BLOCK=256)
    finally:
        del os.environ["METILE_DEBUG"]
        metile.set_device(previous)
    np.testing.assert_array_equal(out, 2 * x)
    assert capfd.readouterr().err == f"// CUDA C++ of add_kernel\n{files['add_kernel.cu'].read_text()}\n"


def test_a_gemm_takes_each_targets_matrix_path(tmp_path):
    from metile.testing.reference_kernels import gemm

    signature = "A:*fp16,B:*fp16,C:*fp32,M:i32,N:i32:16,K:i32:16,BLOCK_M:64,BLOCK_N:64,BLOCK_K:32"
    grid = "cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)"
    def manifest(target, signature=signature, num_sgs=None):
        files = aot.compile_kernel(gemm, signature, target, tmp_path / target, grid, num_sgs, cubin=False)
        return json.loads(files["manifest.json"].read_text())

    manifests = {target: manifest(target) for target in ("apple", "apple10")}
    # The H100's warpgroup MMA, its operands copied by the tensor memory accelerator.
    big_blocks = signature.replace("64,BLOCK_N:64,BLOCK_K:32", "128,BLOCK_N:128,BLOCK_K:64")
    manifests["sm_90"] = manifest("sm_90", big_blocks, 8)
    assert manifests["apple"]["language_version"] == "3.1"
    assert "simdgroup_multiply_accumulate" in (tmp_path / "apple" / "gemm.metal").read_text()
    assert manifests["apple10"]["language_version"] == "4.0"
    assert "matmul2d" in (tmp_path / "apple10" / "gemm.metal").read_text()
    cuda = manifests["sm_90"]
    assert cuda["nvrtc_arch"] == "sm_90a" and cuda["shared_memory_bytes"] > 0
    maps = [e for e in cuda["entry_parameters"] if e["kind"] == "tensor_map"]
    assert {m["buffer"] for m in maps} == {0, 1}, cuda["entry_parameters"]
    # A's rows are K elements apart (argument 5); tile_load has no row bound.
    assert maps[0]["cols"] == maps[0]["stride"] == {"arg": 5} and maps[0]["dtype"] == "f16"
    assert "a CUtensorMap by value" in (tmp_path / "sm_90" / "gemm.h").read_text()
