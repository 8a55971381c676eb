"""The numba CPU scans against the reference: values and gradients of every input.

Hypothesis draws shapes (odd lengths, length 1, grouped B/C, small grids), the optional inputs
and the flags; named cases pin lengths 63 and 1937, one state, chunked scans with carried
state, and a 4096-step sequence on which a cumulative-product formulation breaks down.
"""

import math

import numba
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ssmpde.kernels import _numba_cpu, scan_cpu, selective_scan, selective_scan_2d
from ssmpde.kernels.reference import selective_scan_2d_ref, selective_scan_ref
from ssmpde.kernels.scan_cpu import selective_scan_2d_cpu, selective_scan_cpu

f64 = torch.float64
f32 = torch.float32
OPTIONAL = ("D", "R", "z", "delta_bias")


def make_inputs(seed, *, batch, channels, state, grid, groups=None, dtype=f64,
                optional=OPTIONAL, delta_softplus=True, a_min=None):
    """Random scan inputs; B/C plain if ``groups`` is None. All leaves require grad.

    Without the softplus the raw delta is the step, so it is drawn in [0, 1] (and the bias in
    [0, 0.5]) to keep Δ ≥ 0, hence Ā ≤ 1, as the model guarantees.
    """
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=f64)

    def rand(*shape):
        return torch.rand(*shape, generator=g, dtype=f64)

    space = (batch, channels, *grid)
    bc = (batch, state, *grid) if groups is None else (batch, groups, state, *grid)
    if a_min is None:
        A = -torch.exp(randn(channels, state))
    else:
        A = -a_min * rand(channels, state)
        A.view(-1)[0] = -a_min  # the extreme value itself, not just values near it
    kw = dict(u=randn(*space), delta=randn(*space) if delta_softplus else rand(*space),
              A=A, B=randn(*bc), C=randn(*bc))
    if "D" in optional:
        kw["D"] = randn(channels)
    if "R" in optional:
        kw["R"] = randn(channels, state)
    if "z" in optional:
        kw["z"] = randn(*space)
    if "delta_bias" in optional:
        kw["delta_bias"] = randn(channels) if delta_softplus else 0.5 * rand(channels)
    return {k: v.to(dtype).requires_grad_() for k, v in kw.items()}


def tolerances(dtype):
    """(forward rtol, forward atol, gradient rtol, gradient atol relative to the grad scale).

    float32: mamba-ssm's tolerances against its reference. float64: tight.
    """
    if dtype == f64:
        return 1e-10, 1e-12, 1e-10, 1e-10
    return 6e-4, 2e-3, 1e-3, 1e-3


def assert_outputs_and_grads(fast, ref, inputs, dtype):
    """Compare outputs, then gradients of a random projection w.r.t. every input.

    ``fast`` and ``ref`` are tuples of outputs. NaN anywhere fails assert_close, so an
    unwritten element of a NaN-filled buffer cannot pass.
    """
    rtol, atol, grad_rtol, grad_atol = tolerances(dtype)
    g = torch.Generator().manual_seed(1234)
    weights = [torch.randn(r.shape, generator=g, dtype=f64).to(dtype) for r in ref]
    for f, r in zip(fast, ref):
        assert f.dtype == r.dtype == dtype
        torch.testing.assert_close(f, r, rtol=rtol, atol=atol)
    names = list(inputs)
    leaves = [inputs[n] for n in names]
    grads_fast = torch.autograd.grad(sum((f * w).sum() for f, w in zip(fast, weights)), leaves)
    grads_ref = torch.autograd.grad(sum((r * w).sum() for r, w in zip(ref, weights)), leaves)
    for name, gf, gr in zip(names, grads_fast, grads_ref):
        scale = max(gr.abs().max().item(), 1e-30)
        torch.testing.assert_close(gf, gr, rtol=grad_rtol, atol=grad_atol * scale,
                                   msg=lambda m, name=name: f"gradient of {name}: {m}")


def split(kw):
    """Positional (u, delta, A, B, C) and keyword remainder of an input dict."""
    head = ("u", "delta", "A", "B", "C")
    return [kw[k] for k in head], {k: v for k, v in kw.items() if k not in head}


def check_1d(seed, *, dtype, batch, channels, state, length, groups, optional, reverse,
             delta_softplus, with_initial_state, return_last_state=True):
    kw = make_inputs(seed, batch=batch, channels=channels, state=state, grid=(length,),
                     groups=groups, dtype=dtype, optional=optional,
                     delta_softplus=delta_softplus)
    if with_initial_state:
        g = torch.Generator().manual_seed(seed + 1)
        kw["initial_state"] = torch.randn(batch, channels, state, generator=g,
                                          dtype=f64).to(dtype).requires_grad_()
    args, rest = split(kw)
    options = dict(delta_softplus=delta_softplus, reverse=reverse,
                   return_last_state=return_last_state)
    fast = selective_scan_cpu(*args, **rest, **options)
    ref = selective_scan_ref(*args, **rest, **options)
    if not return_last_state:
        fast, ref = (fast,), (ref,)
    assert_outputs_and_grads(fast, ref, kw, dtype)


def check_2d(seed, *, dtype, batch, channels, state, height, width, groups, optional,
             delta_softplus):
    kw = make_inputs(seed, batch=batch, channels=channels, state=state, grid=(height, width),
                     groups=groups, dtype=dtype, optional=optional,
                     delta_softplus=delta_softplus)
    args, rest = split(kw)
    fast = selective_scan_2d_cpu(*args, **rest, delta_softplus=delta_softplus)
    ref = selective_scan_2d_ref(*args, **rest, delta_softplus=delta_softplus)
    assert_outputs_and_grads((fast,), (ref,), kw, dtype)


@st.composite
def channels_and_groups(draw):
    """Channels 1–4 and either plain B/C (None) or a group count dividing the channels."""
    channels = draw(st.integers(1, 4))
    divisors = [g for g in range(1, channels + 1) if channels % g == 0]
    return channels, draw(st.one_of(st.none(), st.sampled_from(divisors)))


optional_subsets = st.sets(st.sampled_from(OPTIONAL)).map(tuple)


# ---------------------------------------------------------------------------------------
# Hypothesis: random shapes, optional inputs and flags, against the reference.
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [f64, f32], ids=["float64", "float32"])
@settings(max_examples=60)  # a few ms per example: more coverage than the profile's 25
@given(seed=st.integers(0, 2**31 - 1), batch=st.integers(1, 2), cg=channels_and_groups(),
       state=st.integers(1, 4), length=st.one_of(st.just(1), st.integers(1, 70)),
       optional=optional_subsets, reverse=st.booleans(), delta_softplus=st.booleans(),
       with_initial_state=st.booleans())
def test_scan_1d_matches_reference(dtype, seed, batch, cg, state, length, optional, reverse,
                                   delta_softplus, with_initial_state):
    channels, groups = cg
    check_1d(seed, dtype=dtype, batch=batch, channels=channels, state=state, length=length,
             groups=groups, optional=optional, reverse=reverse,
             delta_softplus=delta_softplus, with_initial_state=with_initial_state)


@pytest.mark.parametrize("dtype", [f64, f32], ids=["float64", "float32"])
@settings(max_examples=60)  # a few ms per example: more coverage than the profile's 25
@given(seed=st.integers(0, 2**31 - 1), batch=st.integers(1, 2), cg=channels_and_groups(),
       state=st.integers(1, 4), height=st.integers(1, 7), width=st.integers(1, 7),
       optional=optional_subsets, delta_softplus=st.booleans())
def test_scan_2d_matches_reference(dtype, seed, batch, cg, state, height, width, optional,
                                   delta_softplus):
    channels, groups = cg
    check_2d(seed, dtype=dtype, batch=batch, channels=channels, state=state, height=height,
             width=width, groups=groups, optional=optional, delta_softplus=delta_softplus)


# ---------------------------------------------------------------------------------------
# Named cases.
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [f64, f32], ids=["float64", "float32"])
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("length", [1, 63], ids=lambda n: f"length{n}")
def test_scan_1d_everything_on(length, reverse, dtype):
    check_1d(7, dtype=dtype, batch=2, channels=4, state=3, length=length, groups=2,
             optional=OPTIONAL, reverse=reverse, delta_softplus=True, with_initial_state=True)


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_scan_1d_length_1937_float64(reverse):
    # A long odd length (one more than 44², the token count of a 44×44 grid): only a small
    # batch/channel/state so the Python-loop reference stays fast.
    check_1d(11, dtype=f64, batch=1, channels=2, state=2, length=1937, groups=None,
             optional=OPTIONAL, reverse=reverse, delta_softplus=True, with_initial_state=True)


@pytest.mark.parametrize("dtype", [f64, f32], ids=["float64", "float32"])
def test_scan_one_state(dtype):
    check_1d(3, dtype=dtype, batch=2, channels=3, state=1, length=17, groups=None,
             optional=OPTIONAL, reverse=False, delta_softplus=True, with_initial_state=True)
    check_2d(3, dtype=dtype, batch=2, channels=3, state=1, height=4, width=5, groups=3,
             optional=OPTIONAL, delta_softplus=True)


@pytest.mark.parametrize("dtype", [f64, f32], ids=["float64", "float32"])
@pytest.mark.parametrize("grid", [(1, 7), (7, 1), (5, 3)], ids=lambda g: f"{g[0]}x{g[1]}")
def test_scan_2d_named_grids(grid, dtype):
    check_2d(5, dtype=dtype, batch=2, channels=4, state=3, height=grid[0], width=grid[1],
             groups=2, optional=OPTIONAL, delta_softplus=True)


def test_softplus_threshold():
    # delta + bias straddles 20, where softplus switches to the identity and its derivative
    # to exactly 1 (torch's convention, which the kernels copy).
    kw = make_inputs(2, batch=1, channels=2, state=2, grid=(12,), optional=("delta_bias",))
    with torch.no_grad():
        kw["delta"].copy_(torch.linspace(18.0, 23.0, 24, dtype=f64).reshape(1, 2, 12))
        kw["delta_bias"].zero_()
        kw["A"].mul_(0.01)  # keep Ā = exp(ΔA) away from 0 so the state still matters
    args, rest = split(kw)
    fast = selective_scan_cpu(*args, **rest)
    ref = selective_scan_ref(*args, **rest)
    assert_outputs_and_grads((fast,), (ref,), kw, f64)


@pytest.mark.parametrize("width, chunk", [(1, 1), (2, 3), (3, 4), (4, 7), (16, 100)])
def test_independent_of_channel_blocks_and_chunks(width, chunk, monkeypatch):
    # The kernels split each group's channels into blocks (with their own dB/dC partials,
    # summed afterwards), and the backward recomputes positions/rows in chunks from
    # checkpoints. Any split gives the same values and gradients: blocks that do not divide
    # the channels (3 of 5), chunks of one, chunks that do not divide the length or the
    # height, and one chunk longer than everything.
    def blocking(batch, groups, per_group, steps, step_bytes):
        w = min(width, per_group)
        return w, -(-per_group // w), chunk

    monkeypatch.setattr(scan_cpu, "_blocking", blocking)
    check_1d(9, dtype=f64, batch=2, channels=5, state=3, length=10, groups=1,
             optional=OPTIONAL, reverse=False, delta_softplus=True, with_initial_state=True)
    check_1d(10, dtype=f64, batch=1, channels=4, state=2, length=9, groups=2,
             optional=OPTIONAL, reverse=True, delta_softplus=True, with_initial_state=False)
    check_2d(9, dtype=f64, batch=1, channels=5, state=2, height=7, width=4, groups=None,
             optional=OPTIONAL, delta_softplus=True)


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_full_blocks_match_the_reference(reverse, monkeypatch):
    # A block of exactly MAX_BLOCK channels runs a state loop compiled with a constant trip
    # count, any other block the general loop: MAX_BLOCK + 2 channels give one block of
    # each. Values and gradients against the reference, with every optional input.
    def blocking(batch, groups, per_group, steps, step_bytes):
        w = min(scan_cpu.MAX_BLOCK, per_group)
        return w, -(-per_group // w), 3

    monkeypatch.setattr(scan_cpu, "_blocking", blocking)
    check_1d(21, dtype=f64, batch=2, channels=scan_cpu.MAX_BLOCK + 2, state=3, length=7,
             groups=1, optional=OPTIONAL, reverse=reverse, delta_softplus=True,
             with_initial_state=True)


def test_blocking_fills_vectors_and_threads():
    # Darcy's 1D case: one block of all 128 channels per batch item, chunks of √(L/2).
    width, blocks, chunk = scan_cpu._blocking(4, 1, 128, 1936, 16 * 4)
    assert (width, blocks, chunk) == (128, 1, 31)
    # One sequence, many channels: blocks of a multiple of 16 that feed every thread.
    width, blocks, _ = scan_cpu._blocking(1, 1, 128, 1936, 16 * 4)
    assert width % 16 == 0 and blocks * width >= 128 > (blocks - 1) * width
    assert blocks >= min(128 // 16, 2 * numba.get_num_threads())
    # Few channels: one block of all of them.
    assert scan_cpu._blocking(1, 1, 5, 10, 8)[:2] == (5, 1)
    # Wide rows: the block narrows to keep one task's scratch under the cap.
    row_bytes = 256 * 16 * 4
    width, blocks, chunk = scan_cpu._blocking(8, 1, 128, 256, row_bytes)
    steps = -(-256 // chunk) + 2 * chunk + 1
    assert 16 <= width < 128 and width % 16 == 0 and blocks * width >= 128
    assert width * steps * row_bytes <= scan_cpu.SCRATCH_BYTES
    # ... but not below 16 channels.
    assert scan_cpu._blocking(8, 1, 128, 1024, 1024 * 16 * 4)[0] == 16


# ---------------------------------------------------------------------------------------
# gradcheck (float64, tiny shapes).
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_gradcheck_1d_everything_on(reverse):
    kw = make_inputs(0, batch=1, channels=2, state=2, grid=(5,), groups=2)
    kw["initial_state"] = torch.randn(1, 2, 2, dtype=f64, requires_grad=True)
    names = list(kw)

    def scan(*tensors):
        args, rest = split(dict(zip(names, tensors)))
        return selective_scan_cpu(*args, **rest, reverse=reverse, return_last_state=True)

    assert torch.autograd.gradcheck(scan, tuple(kw.values()))


def test_gradcheck_2d_everything_on():
    kw = make_inputs(1, batch=1, channels=2, state=2, grid=(3, 2), groups=1)
    names = list(kw)

    def scan(*tensors):
        args, rest = split(dict(zip(names, tensors)))
        return selective_scan_2d_cpu(*args, **rest)

    assert torch.autograd.gradcheck(scan, tuple(kw.values()))


# ---------------------------------------------------------------------------------------
# Chunked scans: the carried state makes two halves one scan.
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_two_halves_with_carried_state_equal_whole_scan(reverse):
    kw = make_inputs(4, batch=2, channels=3, state=4, grid=(31,))
    args, rest = split(kw)
    whole, whole_last = selective_scan_cpu(*args, **rest, reverse=reverse,
                                           return_last_state=True)
    cut = 14
    per_position = ("u", "delta", "B", "C", "z")
    first = {k: (v[..., :cut] if k in per_position else v) for k, v in kw.items()}
    second = {k: (v[..., cut:] if k in per_position else v) for k, v in kw.items()}
    # The recurrence visits the second half first when reversed.
    start, then = (second, first) if reverse else (first, second)
    args_a, rest_a = split(start)
    out_a, carry = selective_scan_cpu(*args_a, **rest_a, reverse=reverse,
                                      return_last_state=True)
    args_b, rest_b = split(then)
    out_b, last = selective_scan_cpu(*args_b, **rest_b, reverse=reverse,
                                     initial_state=carry, return_last_state=True)
    out = torch.cat((out_b, out_a) if reverse else (out_a, out_b), dim=-1)
    torch.testing.assert_close(out, whole, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(last, whole_last, rtol=1e-12, atol=1e-12)
    # The gradient flows back through the carried state as well.
    w = torch.randn_like(whole)
    leaves = list(kw.values())
    grads_whole = torch.autograd.grad((whole * w).sum() + whole_last.sum(), leaves)
    grads_split = torch.autograd.grad((out * w).sum() + last.sum(), leaves)
    for name, a, b in zip(kw, grads_split, grads_whole):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=lambda m, n=name: f"{n}: {m}")


# ---------------------------------------------------------------------------------------
# Long-sequence stability.
# ---------------------------------------------------------------------------------------
def test_long_sequence_stable_where_cumulative_product_breaks():
    length = 4096
    kw = make_inputs(6, batch=1, channels=2, state=3, grid=(length,), delta_softplus=False,
                     a_min=16.0)
    args, rest = split(kw)

    # Why no cumulative product: h_l = e^{S_l} Σ_{k≤l} e^{-S_k} B̄x_k with S = cumsum(ΔA).
    # S reaches thousands below zero, so e^{-S_k} overflows and e^{S_l} underflows (inf · 0).
    with torch.no_grad():
        dA = kw["delta"].unsqueeze(2) * kw["A"][None, :, :, None]
        bx = kw["delta"].unsqueeze(2) * kw["B"].unsqueeze(1) * kw["u"].unsqueeze(2)
        cumulative = torch.cumsum(dA, dim=-1)
        assert cumulative.min().item() < -1000.0  # far beyond float64's exp range (~−745)
        naive_h = torch.exp(cumulative) * torch.cumsum(torch.exp(-cumulative) * bx, dim=-1)
        assert not torch.isfinite(naive_h).all()

    fast = selective_scan_cpu(*args, **rest, delta_softplus=False)
    ref = selective_scan_ref(*args, **rest, delta_softplus=False)
    assert torch.isfinite(fast).all()
    weights = torch.randn_like(fast)
    grads = torch.autograd.grad((fast * weights).sum(), list(kw.values()), retain_graph=True)
    assert all(torch.isfinite(g).all() for g in grads)
    assert_outputs_and_grads((fast,), (ref,), kw, f64)


# ---------------------------------------------------------------------------------------
# NaN-filled buffers: an element a kernel does not write cannot pass as a number.
# ---------------------------------------------------------------------------------------
def test_unwritten_outputs_are_nan(monkeypatch):
    kw = make_inputs(8, batch=1, channels=2, state=2, grid=(5,))
    args, rest = split(kw)
    monkeypatch.setattr(scan_cpu, "_scan_1d_forward", lambda *a: None)
    out, last = selective_scan_cpu(*args, **rest, return_last_state=True)
    assert torch.isnan(out).all() and torch.isnan(last).all()
    monkeypatch.undo()
    monkeypatch.setattr(scan_cpu, "_scan_1d_backward", lambda *a: None)
    out = selective_scan_cpu(*args, **rest)
    grads = torch.autograd.grad(out.sum(), list(kw.values()))
    assert all(torch.isnan(g).all() for g in grads)


def test_unwritten_2d_outputs_are_nan(monkeypatch):
    kw = make_inputs(8, batch=1, channels=2, state=2, grid=(3, 2))
    args, rest = split(kw)
    monkeypatch.setattr(scan_cpu, "_scan_2d_forward", lambda *a: None)
    assert torch.isnan(selective_scan_2d_cpu(*args, **rest)).all()


# ---------------------------------------------------------------------------------------
# Dtypes and bad input.
# ---------------------------------------------------------------------------------------
def test_float32_computed_in_float32():
    # Single-precision inputs stay single precision (no silent float64 copies), and the
    # result still meets mamba-ssm's float32 tolerance against the float64 reference.
    kw = make_inputs(12, batch=1, channels=2, state=3, grid=(40,), dtype=f32)
    args, rest = split(kw)
    out, last = selective_scan_cpu(*args, **rest, return_last_state=True)
    assert out.dtype == last.dtype == f32
    ref = selective_scan_ref(*args, **rest)
    torch.testing.assert_close(out, ref, rtol=6e-4, atol=2e-3)
    assert not torch.equal(out, ref)  # genuinely single-precision arithmetic


def bad_case(change):
    kw = {k: v.detach() for k, v in make_inputs(0, batch=2, channels=4, state=3, grid=(6,),
                                                  groups=2).items()}
    kw.update(change(kw))
    return kw


BAD_1D = {
    "u-2d": (lambda kw: {"u": kw["u"][0]}, r"u must be a non-empty \[batch, channel, length\]"),
    "delta-length": (lambda kw: {"delta": kw["delta"][..., :5]}, r"delta must have shape"),
    "A-channels": (lambda kw: {"A": kw["A"][:3]}, r"A must have shape \[channel=4, state\]"),
    "B-length": (lambda kw: {"B": kw["B"][..., :5]}, r"B must have shape"),
    "C-state": (lambda kw: {"C": kw["C"][:, :, :2]}, r"C must have shape"),
    "groups-not-dividing": (lambda kw: {"B": torch.randn(2, 3, 3, 6), "C": torch.randn(2, 3, 3, 6)},
                            r"groups dividing channel=4"),
    "B-C-groups-differ": (lambda kw: {"C": torch.randn(2, 4, 3, 6, dtype=f64)},
                          r"same number of groups"),
    "D-shape": (lambda kw: {"D": torch.randn(3, dtype=f64)}, r"D must have shape \[channel\]"),
    "R-shape": (lambda kw: {"R": torch.randn(4, 2, dtype=f64)}, r"R must have shape"),
    "z-shape": (lambda kw: {"z": torch.randn(2, 4, 7, dtype=f64)}, r"z must have shape"),
    "bias-shape": (lambda kw: {"delta_bias": torch.randn(4, 1, dtype=f64)}, r"delta_bias must"),
    "initial-state": (lambda kw: {"initial_state": torch.randn(2, 4, 2, dtype=f64)},
                      r"initial_state must have shape"),
    "integer-u": (lambda kw: {"u": torch.ones(2, 4, 6, dtype=torch.int64)}, r"floating-point"),
    "empty-length": (lambda kw: {"u": kw["u"][..., :0], "delta": kw["delta"][..., :0]},
                     r"non-empty"),
}


@pytest.mark.parametrize("case", list(BAD_1D))
def test_bad_input_1d_raises(case):
    # The inputs are validated by the dispatcher, before it chooses the cpu backend.
    change, message = BAD_1D[case]
    args, rest = split(bad_case(change))
    with pytest.raises(ValueError, match=message):
        selective_scan(*args, **rest, backend="cpu")


def test_bad_input_2d_raises():
    kw = make_inputs(0, batch=1, channels=4, state=2, grid=(3, 5), groups=2)
    args, rest = split({k: v.detach() for k, v in kw.items()})
    with pytest.raises(ValueError, match=r"B must have shape \[batch, state, height, width\]"):
        selective_scan_2d(args[0], args[1], args[2], args[3][..., :4], args[4], **rest,
                          backend="cpu")
    with pytest.raises(ValueError, match=r"groups dividing channel=4"):
        selective_scan_2d(*args[:3], torch.randn(1, 3, 2, 3, 5, dtype=f64),
                          torch.randn(1, 3, 2, 3, 5, dtype=f64), **rest, backend="cpu")
    with pytest.raises(ValueError, match=r"u must be a non-empty \[batch, channel, height"):
        selective_scan_2d(args[0][..., 0], *args[1:], **rest, backend="cpu")


@pytest.mark.parametrize("grid", [(1936,), (44, 44)], ids=["1d", "2d"])
def test_saved_tensors_are_far_smaller_than_the_states(grid):
    # What the backward keeps: the inputs, two per-position tensors (δ + b and Δ, so that it
    # needs no second softplus), the output before the gate, and the state only at
    # checkpoints (every ~√(steps / 2) positions or rows) -- never h at every position.
    batch, channels, state = 2, 64, 16
    kw = make_inputs(13, batch=batch, channels=channels, state=state, grid=grid,
                     optional=("z",))
    args, rest = split(kw)
    scan = selective_scan_cpu if len(grid) == 1 else selective_scan_2d_cpu
    out = scan(*args, **rest)
    saved = [t for t in out.grad_fn.saved_tensors if t is not None]
    states_numel = batch * channels * state * math.prod(grid)
    per_position = batch * channels * math.prod(grid)
    steps = grid[0]  # positions in 1D, rows in 2D
    checkpoints = states_numel // steps * -(-steps // math.isqrt(steps // 2))
    stand_ins = channels * (state + 2)  # zeros for the absent D, R and delta_bias
    largest_input = max(t.numel() for t in kw.values())
    assert max(t.numel() for t in saved) <= max(checkpoints, per_position, largest_input)
    assert sum(t.numel() for t in saved) <= (sum(t.numel() for t in kw.values())
                                             + 2 * per_position + checkpoints + stand_ins)
    assert sum(t.numel() for t in saved) < states_numel


@pytest.mark.slow
def test_85x85_grid_matches_the_reference_values_and_gradients():
    # Darcy's stored grid: the CPU 2D scan against the float64 loop reference.
    g = torch.Generator().manual_seed(85)
    shape = (1, 2, 85, 85)
    args = [torch.randn(*shape, generator=g, dtype=torch.float64),
            torch.randn(*shape, generator=g, dtype=torch.float64),
            -torch.exp(torch.randn(2, 3, generator=g, dtype=torch.float64)),
            torch.randn(1, 3, 85, 85, generator=g, dtype=torch.float64),
            torch.randn(1, 3, 85, 85, generator=g, dtype=torch.float64)]
    extra = dict(D=torch.randn(2, generator=g, dtype=torch.float64),
                 R=torch.randn(2, 3, generator=g, dtype=torch.float64),
                 z=torch.randn(*shape, generator=g, dtype=torch.float64),
                 delta_bias=torch.randn(2, generator=g, dtype=torch.float64))
    leaves = [t.requires_grad_() for t in (*args, *extra.values())]
    fast = selective_scan_2d_cpu(*args, **extra)
    fast_grads = torch.autograd.grad((fast * fast.detach().cos()).sum(), leaves)
    ref = selective_scan_2d_ref(*args, **extra)
    ref_grads = torch.autograd.grad((ref * ref.detach().cos()).sum(), leaves)
    torch.testing.assert_close(fast, ref, rtol=1e-10, atol=1e-10)
    for mine, theirs in zip(fast_grads, ref_grads):
        torch.testing.assert_close(mine, theirs, rtol=1e-9, atol=1e-9)


# ---------------------------------------------------------------------------------------
# The vectorised softplus against torch's.
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [f64, f32], ids=["float64", "float32"])
@settings(max_examples=40)
@given(values=st.lists(st.floats(-120.0, 60.0, allow_nan=False, width=32), min_size=1,
                       max_size=70),
       bias=st.floats(-5.0, 5.0, width=32))
def test_softplus_kernel_matches_torch(dtype, values, bias):
    # Over the whole range the scans meet: far below zero (softplus ≈ e^x), around zero,
    # across the threshold 20 (the identity above it, as torch), a few ulps from torch.
    x = torch.tensor(values, dtype=dtype).reshape(1, -1)
    b = torch.full((x.shape[1],), bias, dtype=dtype)
    out = torch.full_like(x, float("nan"))
    scan_cpu._softplus_kernel(x.numpy(), b.numpy(), out.numpy())
    expected = torch.nn.functional.softplus((x + b).double(), threshold=20.0)
    eps = torch.finfo(dtype).eps
    # Below e^-87 the float32 exp flushes to zero: Δ there is under 1e-37 either way.
    torch.testing.assert_close(out.double(), expected, rtol=4 * eps,
                               atol=1e-37 if dtype == f32 else 1e-300)


def test_softplus_kernel_threshold_and_extremes():
    x = torch.tensor([[19.999, 20.0, 20.001, 40.0, -30.0, -200.0, 0.0]], dtype=f32)
    out = torch.empty_like(x)
    scan_cpu._softplus_kernel(x.numpy(), torch.zeros(7).numpy(), out.numpy())
    torch.testing.assert_close(out, torch.nn.functional.softplus(x), rtol=3e-7, atol=1e-37)
    assert out[0, 3] == 40.0 and out[0, 5] >= 0.0


# ---------------------------------------------------------------------------------------
# The custom operators: registration, no-grad forwards that keep nothing, torch.compile.
# ---------------------------------------------------------------------------------------
def op_inputs(spatial, seed=14, **options):
    grid = (6,) if spatial == 1 else (3, 4)
    kw = make_inputs(seed, batch=2, channels=4, state=3, grid=grid, groups=2, **options)
    args, rest = split(kw)
    D, R, z, bias = (rest.get(k) for k in ("D", "R", "z", "delta_bias"))
    if spatial == 1:
        state = torch.randn(2, 4, 3, dtype=f64, requires_grad=True)
        return (*args, D, R, z, bias, state, True, True, True)
    return (*args, D, R, z, bias, True, True)


@pytest.mark.parametrize("spatial", [1, 2], ids=["1d", "2d"])
def test_operators_pass_torch_opcheck(spatial):
    # Schema, fake implementation (shapes, strides, dtypes), autograd registration and AOT
    # dispatch, as torch.library documents them; absent optional inputs too.
    op = scan_cpu._scan_1d_op if spatial == 1 else scan_cpu._scan_2d_op
    torch.library.opcheck(op, op_inputs(spatial))
    plain = list(op_inputs(spatial, seed=15, optional=()))
    torch.library.opcheck(op, tuple(plain))


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode],
                         ids=["no_grad", "inference_mode"])
@pytest.mark.parametrize("spatial", [1, 2], ids=["1d", "2d"])
def test_forward_without_autograd_keeps_no_checkpoints(spatial, mode, monkeypatch):
    # Parameters still report requires_grad under no_grad: the forward must not take that
    # as a request for the backward's checkpoints and pre-gate output.
    name = "_scan_1d_forward" if spatial == 1 else "_scan_2d_forward"
    kernel = getattr(scan_cpu, name)
    kept = []

    def spy(*args):
        kept.append((args[-2].size, args[-1].size))  # saved, y_pre
        return kernel(*args)

    monkeypatch.setattr(scan_cpu, name, spy)
    kw = make_inputs(16, batch=1, channels=2, state=2, grid=(5,) if spatial == 1 else (3, 2))
    args, rest = split(kw)
    scan = selective_scan_cpu if spatial == 1 else selective_scan_2d_cpu
    with mode():
        quiet = scan(*args, **rest)
    loud = scan(*args, **rest)
    assert kept[0] == (0, 0) and kept[1][0] > 0 and kept[1][1] > 0
    assert quiet.grad_fn is None and loud.grad_fn is not None
    torch.testing.assert_close(quiet, loud, rtol=0, atol=0)


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode],
                         ids=["no_grad", "inference_mode"])
def test_compile_traces_through_the_scans(mode):
    # One graph (fullgraph) under no_grad and inference_mode: the scans are operators, not
    # numba calls dynamo would have to trace (torch.from_numpy failed under inference_mode).
    kw1 = {k: v.detach() for k, v in make_inputs(17, batch=2, channels=4, state=3,
                                                  grid=(9,), groups=2).items()}
    kw2 = {k: v.detach() for k, v in make_inputs(18, batch=1, channels=2, state=2,
                                                  grid=(3, 4)).items()}

    def both(a, b):
        args_a, rest_a = split(a)
        args_b, rest_b = split(b)
        return (selective_scan(*args_a, **rest_a, reverse=True, backend="cpu"),
                selective_scan_2d(*args_b, **rest_b, backend="cpu"))

    torch._dynamo.reset()
    compiled = torch.compile(both, backend="aot_eager", fullgraph=True)
    with mode():
        for eager, traced in zip(both(kw1, kw2), compiled(kw1, kw2)):
            torch.testing.assert_close(traced, eager, rtol=0, atol=0)


def test_compiled_scans_backpropagate_like_eager():
    kw = make_inputs(19, batch=2, channels=4, state=3, grid=(7,), groups=2)
    args, rest = split(kw)

    def loss(*tensors):
        a, r = split(dict(zip(kw, tensors)))
        out, last = selective_scan_cpu(*a, **r, return_last_state=True)
        return (out * out.detach().cos()).sum() + last.sum()

    torch._dynamo.reset()
    compiled = torch.compile(loss, backend="aot_eager", fullgraph=True)
    leaves = list(kw.values())
    eager_grads = torch.autograd.grad(loss(*leaves), leaves)
    compiled_grads = torch.autograd.grad(compiled(*leaves), leaves)
    for name, a, b in zip(kw, compiled_grads, eager_grads):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12, msg=lambda m, n=name: f"{n}: {m}")


@numba.njit
def _exp_each(x, out):
    for i in range(x.size):
        out[i] = _numba_cpu.exp(x[i])


@numba.njit
def _exp2_each(x, out):
    for i in range(x.size):
        out[i] = _numba_cpu.exp2(x[i])


#: (kernel, exact function, float32 range, float64 range, bound in ulps): the exp of the
#: softplus over its range, and Ā = 2^(Δ A log2 e) of the state loops from the smallest
#: normal to just below the overflow band.
INLINED = {"exp": (_exp_each, np.exp, (-86.5, 88.7), (-707.5, 709.7), 1.1),
           "exp2": (_exp2_each, np.exp2, (-126.0, 127.49), (-1022.0, 1023.49), 1.0)}


@pytest.mark.parametrize("name", list(INLINED))
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@settings(max_examples=30)
@given(data=st.data())
def test_inlined_exponentials_within_an_ulp(name, dtype, data):
    # The polynomials against the exact value (long double), in units in the last place,
    # over their whole range and densely just below 0 (where Δ A lives).
    kernel, exact_of, range32, range64, bound = INLINED[name]
    low, high = range32 if dtype == np.float32 else range64
    wide = data.draw(st.lists(st.floats(low, high), min_size=1, max_size=200))
    near = data.draw(st.lists(st.floats(-3.0, 0.0), min_size=1, max_size=200))
    x = np.array(wide + near, dtype=dtype)
    out = np.empty_like(x)
    kernel(x, out)
    exact = exact_of(x.astype(np.longdouble))
    ulps = np.abs(out - exact) / np.spacing(exact.astype(dtype)).astype(np.longdouble)
    assert ulps.max() <= bound


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_inlined_exp2_edges(dtype):
    # Below the smallest normal: that normal (an absolute error under 1.2e-38 / 2.3e-308);
    # from bias + 1/2 up: +inf; NaN stays NaN; integers are exact powers of two.
    info = np.finfo(dtype)
    bias = 127 if dtype == np.float32 else 1023
    x = np.array([-np.inf, -1e4, -bias - 5.0, bias + 0.5, bias + 1.0, 1e4, np.inf, np.nan],
                 dtype=dtype)
    out = np.empty_like(x)
    _exp2_each(x, out)
    assert (out[:3] == info.smallest_normal).all()
    assert np.isposinf(out[3:7]).all() and np.isnan(out[7])
    k = np.arange(1 - bias, bias + 1, dtype=dtype)
    powers = np.empty_like(k)
    _exp2_each(k, powers)
    np.testing.assert_array_equal(powers, np.ldexp(dtype(1), k.astype(int)))


def test_inlined_exp_edges():
    x = np.array([-np.inf, -1000.0, -86.6, 0.0, 89.0, np.inf, np.nan], dtype=np.float32)
    out = np.empty_like(x)
    _exp_each(x, out)
    assert out[0] == out[1] == out[2] == 0.0 and out[3] == 1.0
    assert out[4] == out[5] == np.inf and np.isnan(out[6])
