"""Compiled Triton scans on a CUDA GPU, at the sizes the surrogates use (marked ``gpu``).

``test_scan_triton.py`` runs its small cases compiled whenever CUDA is present and under the
interpreter otherwise; the cases here only make sense compiled: the default tile sizes, long
sequences that cross many chunks, the GeoMaNO latent grids, and float32 / bfloat16 / float16
inputs, values and gradients against the float64 reference. Without CUDA they are skipped
(``tests/conftest.py``).
"""

import pytest
import torch

from ssmpde.kernels import selective_scan, selective_scan_2d
from ssmpde.kernels.reference import selective_scan_2d_ref, selective_scan_ref

pytestmark = pytest.mark.gpu

if torch.cuda.is_available():
    # The helpers run the reference and the kernels on DEVICE; with CUDA that is the GPU.
    from tests.kernels.test_scan_triton import (  # noqa: F401 (nan_buffers is a fixture)
        TOLERANCES,
        _scan_triton_chunked,
        assert_matches,
        make_inputs,
        nan_buffers,
        run_with_grads,
        scan_triton,
    )

DTYPES = [pytest.param(torch.float32, id="float32"), pytest.param(torch.bfloat16, id="bfloat16"),
          pytest.param(torch.float16, id="float16")]


def test_kernels_are_compiled():
    """On a GPU the kernels are JIT functions, not the interpreter's stand-ins."""
    from triton.runtime.interpreter import InterpretedFunction

    assert not isinstance(_scan_triton_chunked._scan_fwd_kernel, InterpretedFunction)
    inputs = {k: v.cuda() for k, v in make_inputs((8,)).items()}
    assert selective_scan(**inputs).is_cuda


KERNELS = [pytest.param("chunked", id="chunked"), pytest.param("recurrent", id="recurrent")]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", [
    pytest.param(dict(length=2048), id="mamba_length2048"),
    pytest.param(dict(length=2048, reverse=True, return_last_state=True), id="reverse-last"),
    pytest.param(dict(length=1000, channels=8, groups=2), id="grouped-odd_length"),
    pytest.param(dict(length=289, channels=16, options=("D", "R", "z", "delta_bias")),
                 id="geomano_latent_289"),
])
def test_compiled_1d_matches_reference(dtype, case, kernel):
    """Default chunk size, state 16: many chunks, the carry crossing each boundary; the
    recurrent kernel with its default segments (several at these sizes)."""
    case = dict(case)
    length = case.pop("length")
    flags = dict(reverse=case.pop("reverse", False),
                 return_last_state=case.pop("return_last_state", False))
    inputs = make_inputs((length,), **{"batch": 2, "channels": 4, "state": 16, "dtype": dtype,
                                      **case})
    fast = run_with_grads(scan_triton.selective_scan_triton, inputs, kernel=kernel, **flags)
    ref = run_with_grads(selective_scan_ref, inputs, **flags)
    assert_matches(fast, ref, dtype)


@pytest.mark.parametrize("segments", [1, 3, 16])
def test_compiled_recurrent_segments(segments):
    """The recurrent kernel with one, three and sixteen segments, several channel blocks,
    grouped B/C, every option: float32 values and gradients."""
    inputs = make_inputs((700,), batch=2, channels=96, groups=3, state=16)
    flags = dict(reverse=True, return_last_state=True)
    fast = run_with_grads(scan_triton.selective_scan_triton, inputs, kernel="recurrent",
                          segments=segments, **flags)
    ref = run_with_grads(selective_scan_ref, inputs, **flags)
    assert_matches(fast, ref, torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", [
    pytest.param(dict(grid=(17, 17), channels=8), id="geomano_darcy_17x17"),
    pytest.param(dict(grid=(44, 44), channels=4), id="grid44x44"),
    pytest.param(dict(grid=(16, 40), channels=4, groups=2), id="grid16x40-grouped"),
])
def test_compiled_2d_matches_reference(dtype, case):
    """Default row chunk (16): the backward recomputes rows from several checkpoints."""
    case = dict(case)
    grid = case.pop("grid")
    inputs = make_inputs(grid, batch=2, state=16, dtype=dtype, **case)
    inputs.pop("initial_state")
    fast = run_with_grads(selective_scan_2d, inputs, backend="triton")
    ref = run_with_grads(selective_scan_2d_ref, inputs)
    assert_matches(fast, ref, dtype)


def test_long_sequence_stays_finite_and_exact():
    """L = 16384 in float32: the state decays and re-grows over hundreds of chunks without
    overflow, and still matches the reference (forward; the reference backward is too slow)."""
    inputs = {k: v.cuda() for k, v in make_inputs((16384,), batch=1, channels=2, state=16,
                                                  options=("D", "z", "delta_bias")).items()}
    ref = selective_scan_ref(**inputs)
    rtol, atol = TOLERANCES[torch.float32]["fwd"]
    for kernel in ("chunked", "recurrent"):
        out = scan_triton.selective_scan_triton(**inputs, kernel=kernel)
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out, ref, rtol=rtol, atol=atol, msg=kernel)


def test_model_backends_agree_on_gpu():
    """A GeoMaNO block gives the same output and parameter gradients with the Triton scans as
    with the reference scans (the dispatcher's ``auto`` picks Triton for CUDA tensors)."""
    from ssmpde.surrogates import build_model

    x = torch.randn(2, 1, 29, 29, device="cuda", dtype=torch.float64)
    results, state = {}, None
    for backend in ("triton", "reference"):
        torch.manual_seed(0)
        model = build_model("geomano", preset="darcy", grid=(29, 29), latent_grid=(9, 9),
                            depth=2, width=16, scan_backend=backend).cuda().double()
        if state is None:
            state = model.state_dict()
        model.load_state_dict(state)
        out = model(x)
        out.square().sum().backward()
        results[backend] = (out.detach(), [p.grad.clone() for p in model.parameters()])
    (out_t, grads_t), (out_r, grads_r) = results["triton"], results["reference"]
    torch.testing.assert_close(out_t, out_r, rtol=1e-9, atol=1e-9)
    for g_t, g_r in zip(grads_t, grads_r, strict=True):
        torch.testing.assert_close(g_t, g_r, rtol=1e-8, atol=1e-9)
