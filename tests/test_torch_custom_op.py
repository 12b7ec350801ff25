"""metile.torch.custom_op: meTile launchers as torch operators (opcheck, torch.compile
with fullgraph=True, autograd), on every backend present that reads torch's memory."""

import importlib.util
import pathlib
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dynamo_testing = pytest.importorskip("torch._dynamo.testing")

import metile  # noqa: E402
import metile.torch  # noqa: E402

EXAMPLE = pathlib.Path(__file__).resolve().parent.parent / "examples" / "torch_custom_op.py"


def _example():
    """The example module, loaded once (its operators register once per process)."""
    name = "metile_torch_custom_op_example"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, EXAMPLE)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture
def torch_device(device):
    """The torch device whose tensors the metile `device` reads in place."""
    if device == "metal":
        pytest.skip("torch tensors on metal are MPS tensors, which meTile does not read")
    return "cuda" if device == "cuda" else "cpu"


def _rmsnorm_reference(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


@pytest.mark.parametrize("rows,width", [(1, 1), (7, 33), (3, 1000), (5, 1025)])
def test_rmsnorm_op_matches_torch(torch_device, rows, width):
    ex = _example()
    x = torch.randn(rows, width, device=torch_device)
    w = torch.randn(width, device=torch_device)
    got = ex.rmsnorm(x, w, 1e-5)
    torch.testing.assert_close(got, _rmsnorm_reference(x, w, 1e-5), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (37, 96, 200), (33, 17, 65)])
def test_linear_gelu_op_matches_torch(torch_device, m, k, n):
    ex = _example()
    x, w, b = (torch.randn(*s, device=torch_device) for s in ((m, k), (k, n), (n,)))
    want = torch.nn.functional.gelu(x @ w + b, approximate="tanh")
    torch.testing.assert_close(ex.linear_gelu(x, w, b), want, rtol=1e-4, atol=1e-4)


def test_opcheck_passes_on_both_operators(torch_device):
    ex = _example()
    x = torch.randn(9, 40, device=torch_device, requires_grad=True)
    w = torch.randn(40, device=torch_device, requires_grad=True)
    torch.library.opcheck(ex.rmsnorm, (x, w, 1e-6))
    torch.library.opcheck(ex.rmsnorm, (x.detach(), w.detach(), 1e-6))
    a = torch.randn(10, 24, device=torch_device, requires_grad=True)
    b = torch.randn(24, 12, device=torch_device, requires_grad=True)
    bias = torch.randn(12, device=torch_device, requires_grad=True)
    torch.library.opcheck(ex.linear_gelu, (a, b, bias))


def test_the_module_compiles_with_no_graph_break(torch_device):
    ex = _example()
    torch.manual_seed(0)
    block = ex.Block(48, 70).to(torch_device)
    x = torch.randn(13, 48, device=torch_device)
    torch._dynamo.reset()
    # fullgraph=True raises at the first graph break; the counter sees one graph.
    counter = dynamo_testing.CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(block, fullgraph=True, backend=counter)
    torch.testing.assert_close(compiled(x), block.reference(x), rtol=1e-4, atol=1e-4)
    assert counter.frame_count == 1
    graph_ops = {str(n.target) for g in counter.graphs for n in g.graph.nodes if n.op == "call_function"}
    assert {"metile_examples.rmsnorm.default", "metile_examples.linear_gelu.default"} <= graph_ops, graph_ops


def test_the_example_runs_under_inductor(torch_device):
    torch._dynamo.reset()
    _example().main(torch_device)


def test_the_rmsnorm_gradients_match_finite_differences(device, torch_device):
    if device in ("msl-emu", "metal"):
        pytest.skip("finite differences need float64, which Apple GPUs do not have")
    ex = _example()
    x = torch.randn(4, 9, device=torch_device, dtype=torch.float64, requires_grad=True)
    w = torch.randn(9, device=torch_device, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: ex.rmsnorm(x, w, 1e-6), (x, w))


def test_the_gemm_gradients_match_torch_autograd(torch_device):
    # `dot` takes no float64 tiles, so this compares with autograd through torch's ops in f32.
    ex = _example()
    inputs = [torch.randn(*s, device=torch_device, requires_grad=True) for s in ((19, 7), (7, 11), (11,))]
    grad = torch.randn(19, 11, device=torch_device)
    got = torch.autograd.grad(ex.linear_gelu(*inputs), inputs, grad)
    a, b, bias = inputs
    want = torch.autograd.grad(torch.nn.functional.gelu(a @ b + bias, approximate="tanh"), inputs, grad)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


@metile.kernel
def _scale_into(X, Out, N, factor, BLOCK: metile.constexpr):
    cols = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    metile.store(Out + cols, metile.load(X + cols, mask=cols < N) * factor, mask=cols < N)


@metile.torch.custom_op("metile_tests::scale_into", mutates_args=("out",))
def scale_into(x: torch.Tensor, out: torch.Tensor, factor: float) -> None:
    n = x.numel()
    _scale_into[(metile.cdiv(n, 128),)](x, out, n, factor, BLOCK=128)


def test_an_operator_that_writes_its_argument_needs_no_fake(torch_device):
    x = torch.randn(300, device=torch_device)
    out = torch.zeros(300, device=torch_device)
    torch.library.opcheck(scale_into, (x, out, 3.0))
    compiled = torch.compile(lambda x, out: scale_into(x, out, 2.5), fullgraph=True, backend="aot_eager")
    compiled(x, out)
    torch.testing.assert_close(out, x * 2.5)


def _twice_launcher(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    _scale_into[(metile.cdiv(x.numel(), 128),)](x, out, x.numel(), 2.0, BLOCK=128)
    return out


def test_a_per_device_launcher_replaces_the_default(torch_device):
    def thrice(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        _scale_into[(metile.cdiv(x.numel(), 128),)](x, out, x.numel(), 3.0, BLOCK=128)
        return out

    name = f"metile_tests::scaled_{torch_device}"
    op = metile.torch.custom_op(name, _twice_launcher, mutates_args=(), outputs="x",
                                launchers={torch_device: thrice})
    x = torch.arange(200, dtype=torch.float32, device=torch_device)
    torch.testing.assert_close(op(x), x * 3)


def test_the_metile_device_follows_the_tensors_and_comes_back(device):
    if device not in ("cpu", "msl-emu"):
        pytest.skip("host tensors: the host backends keep their device")
    x = torch.arange(40, dtype=torch.float32)
    out = torch.zeros(40)
    seen = []

    @metile.torch.custom_op(f"metile_tests::seen_{device.replace('-', '_')}", mutates_args=("out",))
    def record(x: torch.Tensor, out: torch.Tensor) -> None:
        seen.append(metile.get_device())
        _scale_into[(1,)](x, out, 40, 1.0, BLOCK=64)

    record(x, out)
    assert seen == [device] and metile.get_device() == device
    np.testing.assert_array_equal(out.numpy(), x.numpy())


def test_importing_metile_does_not_import_torch():
    code = "import sys, metile; assert 'torch' not in sys.modules; metile.torch; assert 'torch' in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_outputs_must_name_a_parameter():
    with pytest.raises(ValueError, match=r"outputs= names the inputs .* 'y' is not a parameter of the launcher "
                                         r"\(parameters: x\)"):
        metile.torch.custom_op("metile_tests::bad_outputs", _twice_launcher, mutates_args=(), outputs="y")


def test_outputs_and_fake_together_are_refused():
    with pytest.raises(ValueError, match=r"give outputs= .* or fake=, not both"):
        metile.torch.custom_op("metile_tests::both", _twice_launcher, mutates_args=(), outputs="x",
                               fake=lambda x: torch.empty_like(x))


def test_setup_context_needs_backward():
    with pytest.raises(ValueError, match=r"setup_context= needs backward="):
        metile.torch.custom_op("metile_tests::no_backward", _twice_launcher, mutates_args=(),
                               outputs="x", setup_context=lambda ctx, inputs, output: None)


def test_the_launcher_must_be_callable():
    with pytest.raises(TypeError, match=r"the launcher must be a function, got 3"):
        metile.torch.custom_op("metile_tests::not_callable", 3, mutates_args=())


def test_tensors_of_other_torch_devices_are_refused():
    from metile.torch import _metile_device_for

    with pytest.raises(ValueError, match=r"torch device type 'mps' cannot be passed to a meTile kernel"):
        _metile_device_for("mps", "cpu")
    assert _metile_device_for("cpu", "cuda") == "cpu"
    assert _metile_device_for("cpu", "msl-emu") == "msl-emu"
    assert _metile_device_for("cuda", "cpu") == "cuda"


def test_parameters_and_tensors_that_require_grad_are_launched_in_place(torch_device):
    weight = torch.nn.Parameter(torch.arange(300, dtype=torch.float32, device=torch_device))
    out = torch.zeros(300, device=torch_device)
    _scale_into[(3,)](weight, out, 300, 2.0, BLOCK=128)
    torch.testing.assert_close(out, 2 * weight.detach())
    assert weight.requires_grad and weight.grad is None


def test_a_non_contiguous_tensor_is_refused(torch_device):
    x = torch.zeros(8, 6, device=torch_device).T
    out = torch.zeros(48, device=torch_device)
    kind = "CUDA tensor" if torch_device == "cuda" else "tensor"
    with pytest.raises(ValueError, match=rf"argument 'X' is a non-contiguous {kind} \(shape torch.Size\(\[6, 8\]\), "
                                         r"strides \(1, 6\)\); .* pass .contiguous\(\) instead"):
        _scale_into[(1,)](x, out, 48, 1.0, BLOCK=64)


def test_an_empty_tensor_launches_on_no_memory(torch_device):
    x = torch.empty(0, device=torch_device)
    out = torch.empty(0, device=torch_device)
    _scale_into[(1,)](x, out, 0, 1.0, BLOCK=64)
    assert out.shape == (0,)
