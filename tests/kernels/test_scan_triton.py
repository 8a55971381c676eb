"""Triton selective scans against the float64 reference: values and gradients of every input.

Without CUDA the kernels run under ``TRITON_INTERPRET=1`` on CPU tensors (small shapes: the
interpreter is slow); on a CUDA machine the same tests run compiled on CUDA tensors. Every
buffer the wrapper allocates is filled with NaN first (fla's trick), so an element a kernel
forgets to write fails loudly.
"""

import contextlib
import importlib
import os

import pytest
import torch

_CUDA = torch.cuda.is_available()
if not _CUDA:
    # @triton.jit decides compiled-or-interpreted when a kernel is *defined*, so this must come
    # before the module is first imported in this process (else see the reload below).
    os.environ.setdefault("TRITON_INTERPRET", "1")

triton = pytest.importorskip("triton")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from triton.runtime.interpreter import InterpretedFunction  # noqa: E402

from ssmpde.kernels import (  # noqa: E402
    _scan_triton_2d,
    _scan_triton_chunked,
    _scan_triton_common,
    _scan_triton_recurrent,
    scan_triton,
    selective_scan,
    selective_scan_2d,
)
from ssmpde.kernels.reference import selective_scan_2d_ref, selective_scan_ref  # noqa: E402

#: The modules of the Triton scans, each after the ones it imports from.
TRITON_MODULES = (_scan_triton_common, _scan_triton_chunked, _scan_triton_recurrent,
                  _scan_triton_2d, scan_triton)

if not _CUDA and not isinstance(_scan_triton_chunked._scan_fwd_kernel, InterpretedFunction):
    # Another test imported the modules before TRITON_INTERPRET was set. Triton reads the flag
    # when a kernel is defined, so re-executing the modules (in place, in import order: each
    # binds the kernels and helpers of those before it, and the dispatcher looks its functions
    # up in scan_triton) defines interpreted kernels, unless the flag was set to something else.
    if os.environ.get("TRITON_INTERPRET") == "1":
        for module in TRITON_MODULES:
            importlib.reload(module)
    if not isinstance(_scan_triton_chunked._scan_fwd_kernel, InterpretedFunction):
        pytest.skip("no CUDA and TRITON_INTERPRET is not 1: the kernels were built for a GPU",
                    allow_module_level=True)

selective_scan_triton = scan_triton.selective_scan_triton
selective_scan_2d_triton = scan_triton.selective_scan_2d_triton
DEVICE = "cuda" if _CUDA else "cpu"
OPTIONS = ("D", "R", "z", "delta_bias", "initial_state")

# mamba-ssm's tolerances against its reference (forward: float32 6e-4/2e-3, float16 3e-3/5e-3,
# bfloat16 3e-2/5e-2); gradients to 1e-3 of their scale in float32 (to the forward rtol of their
# scale in half precision, where rounding the result alone costs that much). Float64 inputs run
# the kernels in float64, so they must agree to rounding.
TOLERANCES = {
    torch.float32: dict(fwd=(6e-4, 2e-3), grad=1e-3),
    torch.float64: dict(fwd=(1e-10, 1e-10), grad=1e-10),
    torch.float16: dict(fwd=(3e-3, 5e-3), grad=5e-3),
    torch.bfloat16: dict(fwd=(3e-2, 5e-2), grad=5e-2),
}


@pytest.fixture(autouse=True)
def nan_buffers(monkeypatch):
    """Fill every buffer the Triton wrapper allocates with NaN (an unwritten element leaks):
    each module of the scans allocates through the ``_empty`` it imported."""
    def empty_nan(shape, *, dtype, device):
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    for module in TRITON_MODULES:
        if hasattr(module, "_empty"):
            monkeypatch.setattr(module, "_empty", empty_nan)


def make_inputs(space, *, batch=2, channels=2, state=3, groups=None, options=OPTIONS,
                softplus=True, dtype=torch.float32, seed=0):
    """Random inputs for a scan over ``space`` (``(length,)`` or ``(height, width)``).

    ``groups=None`` gives ungrouped ``B, C`` ``[batch, state, *space]``; otherwise
    ``[batch, groups, state, *space]``. Δ stays O(0.1–1) so that Ā spans (0, 1) usefully.
    """
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=dtype)

    group_dim = () if groups is None else (groups,)
    if softplus:
        delta = 0.5 * randn(batch, channels, *space) - 1.0
    else:  # Δ = delta directly: keep it positive, as a softplus would
        delta = 0.05 + torch.rand(batch, channels, *space, generator=gen, dtype=dtype)
    inputs = dict(
        u=randn(batch, channels, *space),
        delta=delta,
        A=-torch.exp(0.5 * randn(channels, state)),
        B=randn(batch, *group_dim, state, *space),
        C=randn(batch, *group_dim, state, *space),
        D=randn(channels),
        R=0.5 * randn(channels, state),
        z=randn(batch, channels, *space),
        delta_bias=0.3 * randn(channels),
        initial_state=randn(batch, channels, state),
    )
    return {k: v for k, v in inputs.items() if k not in OPTIONS or k in options}


def run_with_grads(fn, inputs, cotangent_seed=1, **kwargs):
    """Outputs of ``fn`` and the gradients of ``<outputs, random cotangents>`` w.r.t. inputs."""
    leaves = {k: v.detach().to(DEVICE).requires_grad_() for k, v in inputs.items()}
    outputs = fn(**leaves, **kwargs)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    gen = torch.Generator().manual_seed(cotangent_seed)
    loss = sum((o * torch.randn(o.shape, generator=gen, dtype=o.dtype).to(DEVICE)).sum()
               for o in outputs)
    grads = torch.autograd.grad(loss, list(leaves.values()))
    return outputs, dict(zip(leaves, grads))


def assert_matches(fast, ref, dtype):
    """Outputs within the forward tolerance, every gradient within 1e-3 of its scale."""
    (out, grads), (out_ref, grads_ref) = fast, ref
    rtol, atol = TOLERANCES[dtype]["fwd"]
    for o, o_ref in zip(out, out_ref, strict=True):
        assert o.dtype == o_ref.dtype == dtype
        torch.testing.assert_close(o, o_ref, rtol=rtol, atol=atol)
    rel = TOLERANCES[dtype]["grad"]
    assert grads.keys() == grads_ref.keys()
    for name in grads_ref:
        g, g_ref = grads[name], grads_ref[name]
        assert g.shape == g_ref.shape and g.dtype == g_ref.dtype, name
        scale = max(g_ref.abs().max().item(), 1.0)
        torch.testing.assert_close(g, g_ref, rtol=rel, atol=rel * scale,
                                   msg=lambda m, name=name: f"d{name}: {m}")


def check_1d(length, *, reverse=False, return_last_state=False, softplus=True, chunk_size=8,
             dtype=torch.float32, kernel=None, segments=None, **make):
    inputs = make_inputs((length,), softplus=softplus, dtype=dtype, **make)
    flags = dict(reverse=reverse, return_last_state=return_last_state, delta_softplus=softplus)
    fast = run_with_grads(selective_scan_triton, inputs, chunk_size=chunk_size, kernel=kernel,
                          segments=segments, **flags)
    ref = run_with_grads(selective_scan_ref, inputs, **flags)
    assert_matches(fast, ref, dtype)
    return fast


def check_2d(height, width, *, softplus=True, row_chunk=2, dtype=torch.float32, **make):
    inputs = make_inputs((height, width), softplus=softplus, dtype=dtype, **make)
    inputs.pop("initial_state", None)  # the 2D scan starts from zero
    fast = run_with_grads(selective_scan_2d_triton, inputs, row_chunk=row_chunk,
                          delta_softplus=softplus)
    ref = run_with_grads(selective_scan_2d_ref, inputs, delta_softplus=softplus)
    assert_matches(fast, ref, dtype)
    return fast


# ------------------------------------------------------------------------------------------
# 1D
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", [
    pytest.param(dict(length=1), id="length1"),
    pytest.param(dict(length=1, reverse=True, return_last_state=True), id="length1-reverse-last"),
    pytest.param(dict(length=7, state=1), id="length7-one_state"),
    pytest.param(dict(length=33), id="length33-crosses_chunks"),
    pytest.param(dict(length=33, reverse=True, return_last_state=True),
                 id="length33-reverse-last_state"),
    pytest.param(dict(length=16, chunk_size=16), id="length_equals_chunk"),
    pytest.param(dict(length=24, chunk_size=8, return_last_state=True), id="whole_chunks"),
    pytest.param(dict(length=5, chunk_size=64), id="chunk_longer_than_length"),
    pytest.param(dict(length=19, channels=4, groups=2), id="grouped2-channels4"),
    pytest.param(dict(length=19, channels=4, groups=4, reverse=True), id="grouped4-reverse"),
    pytest.param(dict(length=13, channels=3, state=4), id="channels3-odd_blocks"),
    pytest.param(dict(length=11, options=()), id="plain_mamba-no_options"),
    pytest.param(dict(length=11, options=("R",)), id="R_only"),
    pytest.param(dict(length=11, options=("z", "D")), id="z_D-no_R"),
    pytest.param(dict(length=11, options=("initial_state",), return_last_state=True),
                 id="initial_and_last_state_only"),
    pytest.param(dict(length=9, softplus=False), id="no_softplus"),
    pytest.param(dict(length=21, batch=1, channels=4, state=4, chunk_size=4),
                 id="chunk4-channels4-state4"),
    pytest.param(dict(length=17, dtype=torch.float64, return_last_state=True),
                 id="float64"),
    pytest.param(dict(length=17, dtype=torch.float64, reverse=True, groups=2, channels=2),
                 id="float64-reverse-grouped"),
])
def test_scan_1d_matches_reference(case):
    check_1d(**case)


@pytest.fixture
def deterministic():
    """``torch.use_deterministic_algorithms(True)`` for one test, restored afterwards."""
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(before)


@pytest.mark.parametrize("case", [
    pytest.param(dict(length=21, channels=4, groups=2, chunk_size=4), id="grouped2"),
    pytest.param(dict(length=21, channels=8, reverse=True, return_last_state=True),
                 id="shared-reverse"),
    pytest.param(dict(length=17, channels=4, groups=4, dtype=torch.float64), id="float64"),
])
def test_scan_1d_deterministic_backward(case, deterministic):
    """Under deterministic algorithms dB, dC come from partials summed in torch (no atomics):
    still the reference's gradients, and bit-identical from run to run."""
    first = check_1d(**case)
    second = check_1d(**case)
    for name, grad in first[1].items():
        assert torch.equal(grad, second[1][name]), name


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_half_precision_inputs(dtype):
    """Half-precision inputs accumulate in float32 and come back in their own dtype."""
    check_1d(19, dtype=dtype, channels=2, groups=2, return_last_state=True)
    check_2d(3, 5, dtype=dtype)


@pytest.mark.parametrize("grouped", ["B", "C"])
def test_one_of_B_C_grouped(grouped):
    """A grouped B with a shared C (or the reverse) broadcasts the shared one to every group."""
    inputs = make_inputs((10,), channels=4, groups=2)
    shared = "C" if grouped == "B" else "B"
    inputs[shared] = inputs[shared][:, 0]
    fast = run_with_grads(selective_scan_triton, inputs, chunk_size=4)
    ref = run_with_grads(selective_scan_ref, inputs)
    assert_matches(fast, ref, torch.float32)
    grid = make_inputs((3, 4), channels=4, groups=2)
    grid.pop("initial_state")
    grid[shared] = grid[shared][:, 0]
    fast = run_with_grads(selective_scan_2d_triton, grid, row_chunk=2)
    ref = run_with_grads(selective_scan_2d_ref, grid)
    assert_matches(fast, ref, torch.float32)


def test_scan_1d_softplus_threshold():
    """Raw Δ above torch's softplus threshold 20 passes through (value 20+, gradient 1)."""
    inputs = make_inputs((12,), channels=2, state=2)
    inputs["delta"] = inputs["delta"].clone()
    inputs["delta"][:, :, ::3] += 21.5  # x = delta + bias > 20 at every third position
    flags = dict(return_last_state=True)
    fast = run_with_grads(selective_scan_triton, inputs, chunk_size=4, **flags)
    ref = run_with_grads(selective_scan_ref, inputs, **flags)
    assert_matches(fast, ref, torch.float32)


@settings(max_examples=10)
@given(
    batch=st.integers(1, 2),
    channels=st.sampled_from([1, 2, 3, 4]),
    state=st.integers(1, 4),
    length=st.integers(1, 40),
    grouped=st.booleans(),
    options=st.sets(st.sampled_from(OPTIONS)),
    reverse=st.booleans(),
    softplus=st.booleans(),
    return_last_state=st.booleans(),
    chunk_size=st.sampled_from([4, 8, 16]),
    seed=st.integers(0, 2**16),
)
def test_scan_1d_random_shapes(batch, channels, state, length, grouped, options, reverse,
                               softplus, return_last_state, chunk_size, seed):
    groups = channels if grouped and channels % 2 else (2 if grouped and channels > 1 else None)
    check_1d(length, batch=batch, channels=channels, state=state, groups=groups,
             options=tuple(options), reverse=reverse, softplus=softplus,
             return_last_state=return_last_state, chunk_size=chunk_size, seed=seed)


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_scan_1d_continues_from_last_state(reverse):
    """Scanning a sequence in two pieces, passing the last state on, equals one scan."""
    length, cut = 21, 9
    inputs = {k: v.to(DEVICE) for k, v in
              make_inputs((length,), options=("D", "R", "z", "delta_bias")).items()}
    whole = selective_scan_triton(**inputs, reverse=reverse, chunk_size=8)
    # Processing order: the reverse scan visits the tail [cut:] first.
    first, second = (slice(cut, None), slice(None, cut)) if reverse else \
        (slice(None, cut), slice(cut, None))
    per_position = ("u", "delta", "B", "C", "z")

    def piece(part, **extra):
        sliced = {k: v[..., part] if k in per_position else v for k, v in inputs.items()}
        return selective_scan_triton(**sliced, reverse=reverse, chunk_size=8, **extra)

    out_first, state = piece(first, return_last_state=True)
    out_second = piece(second, initial_state=state)
    # Compiled on a GPU the two runs round differently (fused multiply-adds, tl.exp), so the
    # float32 forward tolerance applies; a lost or misplaced state is an O(1) error.
    rtol, atol = TOLERANCES[torch.float32]["fwd"]
    torch.testing.assert_close(whole[..., first], out_first, rtol=rtol, atol=atol)
    torch.testing.assert_close(whole[..., second], out_second, rtol=rtol, atol=atol)


def test_fresh_nan_buffers_never_leak():
    """With every allocated buffer NaN-filled, outputs and all gradients stay finite."""
    for (out, grads) in (
        check_1d(13, channels=3, state=3, chunk_size=4, reverse=True, return_last_state=True),
        check_1d(13, channels=4, groups=2, state=3, chunk_size=8),
        check_2d(3, 5, channels=3, state=3, row_chunk=2),
    ):
        for tensor in (*out, *grads.values()):
            assert torch.isfinite(tensor).all()


# ------------------------------------------------------------------------------------------
# 1D, recurrent kernels (kernel="recurrent")
# ------------------------------------------------------------------------------------------


@contextlib.contextmanager
def channels_per_program(count):
    """The recurrent kernels with at most ``count`` channels per program, so that small tests
    run several channel blocks (the default puts up to 64 channels in one)."""
    saved = {k: dict(scan_triton.TUNING[k]) for k in ("scan_rec_fwd", "scan_rec_bwd")}
    for k in saved:
        scan_triton.TUNING[k]["max_block_d"] = count
    try:
        yield
    finally:
        scan_triton.TUNING.update(saved)


@pytest.mark.parametrize("case", [
    pytest.param(dict(length=13, chunk_size=4, channels=4, groups=2, return_last_state=True),
                 id="one_segment-grouped"),
    pytest.param(dict(length=21, chunk_size=4, segments=2, reverse=True,
                      return_last_state=True), id="two_segments-reverse-last_state"),
    pytest.param(dict(length=21, chunk_size=4, segments=3, channels=3, batch=1),
                 id="three_segments-odd_channels"),
    pytest.param(dict(length=9, chunk_size=4, segments=8, return_last_state=True),
                 id="more_segments_than_chunks"),
    pytest.param(dict(length=17, chunk_size=4, options=(), segments=2), id="plain_mamba"),
    pytest.param(dict(length=17, chunk_size=4, dtype=torch.float64, reverse=True, groups=2,
                      segments=2, return_last_state=True), id="float64-reverse-grouped"),
    pytest.param(dict(length=19, chunk_size=8), id="default_segments"),
])
def test_recurrent_matches_reference(case):
    """Values and gradients of every input, with one to several segments; the segments are
    joined by a first pass and a carry kernel (forward) and the same backwards (adjoint)."""
    check_1d(kernel="recurrent", **case)


@pytest.mark.parametrize("deterministic_mode", [False, True], ids=["atomic", "deterministic"])
def test_recurrent_several_channel_blocks(deterministic_mode):
    """Two channels per program: dB, dC summed over blocks by atomics, or from partials under
    deterministic algorithms (then bit-identical from run to run)."""
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(deterministic_mode)
    try:
        with channels_per_program(2):
            case = dict(length=10, chunk_size=4, channels=4, groups=2, segments=2,
                        return_last_state=True, kernel="recurrent")
            first = check_1d(**case)
            if deterministic_mode:
                second = check_1d(**case)
                for name, grad in first[1].items():
                    assert torch.equal(grad, second[1][name]), name
    finally:
        torch.use_deterministic_algorithms(before)


def test_recurrent_half_precision_inputs():
    """bfloat16 inputs accumulate in float32 and come back in bfloat16."""
    check_1d(11, dtype=torch.bfloat16, chunk_size=4, segments=2, channels=2, groups=2,
             return_last_state=True, kernel="recurrent")


def test_recurrent_agrees_with_chunked():
    """The two kernels compute the same scan: float64 values and gradients to rounding."""
    inputs = make_inputs((14,), channels=2, dtype=torch.float64)
    flags = dict(return_last_state=True, reverse=True, chunk_size=4)
    chunked = run_with_grads(selective_scan_triton, inputs, kernel="chunked", **flags)
    recurrent = run_with_grads(selective_scan_triton, inputs, kernel="recurrent", segments=3,
                               **flags)
    for a, b in zip(chunked[0], recurrent[0], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    for name, grad in chunked[1].items():
        torch.testing.assert_close(recurrent[1][name], grad, rtol=1e-11, atol=1e-11)


@settings(max_examples=4, deadline=None)
@given(
    batch=st.integers(1, 2),
    channels=st.sampled_from([1, 2, 3, 4]),
    state=st.integers(1, 4),
    length=st.integers(1, 16),
    options=st.sets(st.sampled_from(OPTIONS)),
    reverse=st.booleans(),
    softplus=st.booleans(),
    segments=st.sampled_from([None, 1, 2, 3, 5]),
    block=st.sampled_from([1, 2, 64]),
    seed=st.integers(0, 2**16),
)
def test_recurrent_random_shapes(batch, channels, state, length, options, reverse, softplus,
                                 segments, block, seed):
    """Random shapes (lengths 1–16, one to four states), options, directions, softplus or not,
    segments and channels per program."""
    with channels_per_program(block):
        check_1d(length, batch=batch, channels=channels, state=state, options=tuple(options),
                 reverse=reverse, softplus=softplus, return_last_state=True, chunk_size=4,
                 kernel="recurrent", segments=segments, seed=seed)


def test_recurrent_segments_fill_the_grid():
    """Default segments: the fewest powers of two giving ``min_programs`` programs, never more
    than one per chunk; every segment gets at least one chunk."""
    segments = _scan_triton_recurrent._segments
    assert segments(4, 24, 64, None, 528) == (8, 8)    # 4·24·8 = 768 >= 528
    assert segments(256, 2, 2, None, 528) == (2, 1)    # capped at the chunks
    assert segments(64, 96, 64, None, 528) == (1, 64)  # enough programs already
    assert segments(1, 1, 10, 4, 528) == (4, 3)        # 3 + 3 + 3 + 1 chunks
    assert segments(1, 1, 9, 4, 528) == (3, 3)         # 4 would leave one empty


def test_recurrent_continues_from_last_state():
    """Two pieces with the last state passed on equal one scan (segments inside each)."""
    length, cut = 22, 9
    inputs = {k: v.to(DEVICE) for k, v in
              make_inputs((length,), options=("D", "z", "delta_bias")).items()}
    run = dict(kernel="recurrent", chunk_size=4, segments=2)
    whole = selective_scan_triton(**inputs, **run)
    per_position = ("u", "delta", "B", "C", "z")
    pieces = [{k: v[..., part] if k in per_position else v for k, v in inputs.items()}
              for part in (slice(None, cut), slice(cut, None))]
    out_first, state = selective_scan_triton(**pieces[0], return_last_state=True, **run)
    out_second = selective_scan_triton(**pieces[1], initial_state=state, **run)
    rtol, atol = TOLERANCES[torch.float32]["fwd"]
    torch.testing.assert_close(whole, torch.cat([out_first, out_second], -1), rtol=rtol,
                               atol=atol)


# ------------------------------------------------------------------------------------------
# 2D
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", [
    pytest.param(dict(height=1, width=7), id="grid1x7"),
    pytest.param(dict(height=5, width=3), id="grid5x3"),
    pytest.param(dict(height=4, width=6), id="grid4x6"),
    pytest.param(dict(height=4, width=6, row_chunk=1), id="grid4x6-row_chunk1"),
    pytest.param(dict(height=5, width=3, row_chunk=16), id="grid5x3-one_row_chunk"),
    pytest.param(dict(height=4, width=6, channels=4, groups=2), id="grid4x6-grouped2"),
    pytest.param(dict(height=5, width=3, options=()), id="grid5x3-plain"),
    pytest.param(dict(height=3, width=4, state=1, channels=3, softplus=False),
                 id="grid3x4-one_state-no_softplus"),
    pytest.param(dict(height=4, width=5, dtype=torch.float64), id="grid4x5-float64"),
])
def test_scan_2d_matches_reference(case):
    check_2d(**case)


# ------------------------------------------------------------------------------------------
# Argument checks (no kernel launch)
# ------------------------------------------------------------------------------------------


def test_rejects_bad_arguments():
    # Tile sizes are the Triton backend's own check; shapes are the dispatcher's, run before
    # it chooses this backend.
    inputs = make_inputs((8,))
    with pytest.raises(ValueError, match="chunk_size"):
        selective_scan_triton(**inputs, chunk_size=6)
    with pytest.raises(ValueError, match="unknown kernel 'scan'; choose one of"):
        selective_scan_triton(**inputs, kernel="scan")
    with pytest.raises(ValueError, match="kernel='recurrent' only"):
        selective_scan_triton(**inputs, segments=2)
    with pytest.raises(ValueError, match="positive integer"):
        selective_scan_triton(**inputs, kernel="recurrent", segments=0)
    with pytest.raises(ValueError, match=r"A must have shape \[channel=2, state\]"):
        selective_scan(**{**inputs, "A": inputs["A"][:1]}, backend="triton")
    with pytest.raises(ValueError, match=r"B must have shape \[batch, state, length\]"):
        selective_scan(**{**inputs, "B": inputs["B"][..., :5]}, backend="triton")
    with pytest.raises(ValueError, match="groups dividing"):
        selective_scan(**{**inputs, "C": torch.zeros(2, 3, 3, 8)}, backend="triton")
    grid = make_inputs((3, 4))
    grid.pop("initial_state")
    with pytest.raises(ValueError, match="row_chunk"):
        selective_scan_2d_triton(**grid, row_chunk=3)
    with pytest.raises(ValueError, match="R must have shape"):
        selective_scan_2d(**{**grid, "R": grid["R"][:, :1]}, backend="triton")
