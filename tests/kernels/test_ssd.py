"""SSD (Mamba-2's multi-head scan): the chunked path against the loop oracle.

* :func:`ssmpde.kernels.ssd_scan` (chunked, plain torch) against
  :func:`ssmpde.kernels.ssd_ref` (loop, float64) in values, last states and the gradients of
  every input, over random shapes (one head, grouped B/C, lengths that are not a multiple of
  the chunk) with and without each option, in float64 (tight) and float32 (loose);
* chunk sizes 1, 7, 64 at lengths 1, 63, 1936; ``gradcheck`` on tiny shapes;
* the reverse direction by flipping, against a reverse loop written here;
* large steps on long sequences (finite values and gradients; no ``exp`` of a positive
  number, watched directly) and the accuracy of the float32 decays;
* carried states (two halves equal the whole), the S6 scan with a per-head decay (the same
  recurrence in another layout), and the errors raised for malformed input.
"""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ssmpde.kernels import selective_scan_ref, ssd_ref, ssd_scan
from ssmpde.kernels.ssd import SSD_BACKENDS, segment_sums

f64 = torch.float64
f32 = torch.float32
POSITIONAL = ("x", "dt", "A", "B", "C")


def make_inputs(seed, *, batch=1, length=9, heads=2, head_dim=2, groups=1, d_state=3,
                D="head", z=True, dt_bias=True, initial_state=True, dt_softplus=True,
                dt_range=None, dtype=f64):
    """SSD arguments as one dict: ``A = −exp(N(0, 1))``; ``dt`` standard normal (through the
    softplus) or uniform in ``[0, 1)`` (without it, so that ``Δ ≥ 0``), or uniform in
    ``dt_range``; everything else standard normal. ``D``: "head", "channel" or None."""
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=f64)

    def rand(*shape):
        return torch.rand(*shape, generator=g, dtype=f64)

    if dt_range is not None:
        dt = dt_range[0] + (dt_range[1] - dt_range[0]) * rand(batch, length, heads)
    else:
        dt = randn(batch, length, heads) if dt_softplus else rand(batch, length, heads)
    kw = dict(x=randn(batch, length, heads, head_dim), dt=dt, A=-torch.exp(randn(heads)),
              B=randn(batch, length, groups, d_state), C=randn(batch, length, groups, d_state))
    if D == "head":
        kw["D"] = randn(heads)
    elif D == "channel":
        kw["D"] = randn(heads, head_dim)
    if z:
        kw["z"] = randn(batch, length, heads, head_dim)
    if dt_bias:
        kw["dt_bias"] = randn(heads) if dt_softplus else 0.1 * rand(heads)
    if initial_state:
        kw["initial_state"] = randn(batch, heads, head_dim, d_state)
    return {k: v.to(dtype) for k, v in kw.items()}


def split(kw):
    return [kw[k] for k in POSITIONAL], {k: v for k, v in kw.items() if k not in POSITIONAL}


def run(fn, kw, **options):
    """``fn(x, dt, A, B, C, **rest, return_last_state=True, **options)``."""
    args, rest = split(kw)
    return fn(*args, **rest, return_last_state=True, **options)


def values_and_grads(fn, kw, seed=0, **options):
    """Output, last state and the gradients of ``<out, U> + <last, V>`` (random ``U``, ``V``)
    with respect to every tensor in ``kw``."""
    leaves = {k: v.detach().clone().requires_grad_() for k, v in kw.items()}
    out, last = run(fn, leaves, **options)
    g = torch.Generator().manual_seed(seed + 1)
    loss = ((out * torch.randn(out.shape, generator=g, dtype=f64).to(out.dtype)).sum()
            + (last * torch.randn(last.shape, generator=g, dtype=f64).to(last.dtype)).sum())
    grads = torch.autograd.grad(loss, list(leaves.values()))
    return out.detach(), last.detach(), dict(zip(leaves, grads))


def assert_close_scaled(got, want, rel, what):
    """``|got − want| ≤ rel · max|want|`` elementwise, compared in float64 (NaN fails)."""
    got, want = got.to(f64), want.to(f64)
    scale = max(want.abs().max().item(), 1e-30)
    torch.testing.assert_close(got, want, rtol=0, atol=rel * scale,
                               msg=lambda m: f"{what}: {m}")


def assert_matches(kw, rel_values, rel_grads, *, reference_kw=None, **options):
    """The chunked path on ``kw`` against the reference on ``reference_kw`` (default ``kw``)
    in the output, the last state and every gradient."""
    out, last, grads = values_and_grads(ssd_scan, kw, **options)
    ref_options = {k: v for k, v in options.items() if k != "chunk_size"}
    want_out, want_last, want_grads = values_and_grads(ssd_ref, reference_kw or kw,
                                                       **ref_options)
    assert out.dtype == kw["x"].dtype and last.dtype == kw["x"].dtype
    assert_close_scaled(out, want_out, rel_values, "output")
    assert_close_scaled(last, want_last, rel_values, "last state")
    for name in kw:
        assert_close_scaled(grads[name], want_grads[name], rel_grads, f"gradient of {name}")


HEADS_GROUPS = [(1, 1), (2, 1), (2, 2), (3, 1), (4, 2), (6, 3), (4, 4)]


def shapes_and_options():
    return dict(seed=st.integers(0, 10_000), batch=st.integers(1, 2),
                length=st.integers(1, 40), heads_groups=st.sampled_from(HEADS_GROUPS),
                head_dim=st.integers(1, 3), d_state=st.integers(1, 4),
                chunk_size=st.integers(1, 16), D=st.sampled_from([None, "head", "channel"]),
                z=st.booleans(), dt_bias=st.booleans(), initial_state=st.booleans(),
                dt_softplus=st.booleans())


# ---------------------------------------------------------------------------------------
# The chunked path against the loop reference
# ---------------------------------------------------------------------------------------
@settings(max_examples=40)
@given(**shapes_and_options())
def test_chunked_matches_reference_float64(seed, batch, length, heads_groups, head_dim,
                                           d_state, chunk_size, D, z, dt_bias, initial_state,
                                           dt_softplus):
    heads, groups = heads_groups
    kw = make_inputs(seed, batch=batch, length=length, heads=heads, head_dim=head_dim,
                     groups=groups, d_state=d_state, D=D, z=z, dt_bias=dt_bias,
                     initial_state=initial_state, dt_softplus=dt_softplus)
    assert_matches(kw, 1e-10, 1e-10, chunk_size=chunk_size, dt_softplus=dt_softplus)


@given(**shapes_and_options())
def test_chunked_matches_reference_float32(seed, batch, length, heads_groups, head_dim,
                                           d_state, chunk_size, D, z, dt_bias, initial_state,
                                           dt_softplus):
    # float32 inputs against the float64 loop on the same (rounded) inputs; mamba-ssm allows
    # 6e-4 / 1e-3 against its reference
    heads, groups = heads_groups
    kw = make_inputs(seed, batch=batch, length=length, heads=heads, head_dim=head_dim,
                     groups=groups, d_state=d_state, D=D, z=z, dt_bias=dt_bias,
                     initial_state=initial_state, dt_softplus=dt_softplus, dtype=f32)
    reference_kw = {k: v.to(f64) for k, v in kw.items()}
    assert_matches(kw, 2e-5, 1e-4, reference_kw=reference_kw, chunk_size=chunk_size,
                   dt_softplus=dt_softplus)


@pytest.fixture(scope="module")
def reference_runs():
    """Reference outputs and gradients per length (the 1936-step loop is run once)."""
    cache = {}

    def get(length):
        if length not in cache:
            kw = make_inputs(length, length=length, heads=2, head_dim=2, d_state=2)
            cache[length] = kw, values_and_grads(ssd_ref, kw)
        return cache[length]

    return get


@pytest.mark.parametrize("length", [1, 63, 1936], ids=lambda n: f"L{n}")
@pytest.mark.parametrize("chunk_size", [1, 7, 64], ids=lambda q: f"chunk{q}")
def test_chunk_sizes_and_lengths(chunk_size, length, reference_runs):
    kw, (want_out, want_last, want_grads) = reference_runs(length)
    out, last, grads = values_and_grads(ssd_scan, kw, chunk_size=chunk_size)
    assert_close_scaled(out, want_out, 1e-10, "output")
    assert_close_scaled(last, want_last, 1e-10, "last state")
    for name in kw:
        assert_close_scaled(grads[name], want_grads[name], 1e-10, f"gradient of {name}")


def test_gradcheck_chunked_every_input():
    # length 5 in chunks of 2: two full chunks and one padded, with a carried initial state
    kw = make_inputs(0, length=5, heads=2, head_dim=2, groups=1, d_state=2, D="channel")
    names = list(kw)

    def scan(*tensors):
        args, rest = split(dict(zip(names, tensors)))
        return ssd_scan(*args, **rest, chunk_size=2, return_last_state=True)

    assert torch.autograd.gradcheck(scan, tuple(v.requires_grad_() for v in kw.values()))


def test_gradcheck_reference_every_input():
    kw = make_inputs(1, batch=2, length=4, heads=2, head_dim=1, groups=2, d_state=2)
    names = list(kw)

    def scan(*tensors):
        args, rest = split(dict(zip(names, tensors)))
        return ssd_ref(*args, **rest, return_last_state=True)

    assert torch.autograd.gradcheck(scan, tuple(v.requires_grad_() for v in kw.values()))


def test_reference_backend_is_the_loop():
    kw = make_inputs(2, length=11, heads=4, groups=2, dtype=f32)
    args, rest = split(kw)
    out = ssd_scan(*args, **rest, backend="reference")
    assert out.dtype == f32
    torch.testing.assert_close(out, ssd_ref(*args, **rest), rtol=0, atol=0)
    auto = ssd_scan(*args, **rest)  # backend="auto": the chunked path
    torch.testing.assert_close(auto, out, rtol=1e-5, atol=1e-5)


def test_bfloat16_inputs_are_computed_in_float32():
    kw = make_inputs(3, batch=2, length=50, heads=2, head_dim=4, d_state=8, dtype=torch.bfloat16)
    args, rest = split(kw)
    out, last = ssd_scan(*args, **rest, chunk_size=16, return_last_state=True)
    assert out.dtype == last.dtype == torch.bfloat16
    want_out, want_last = run(ssd_ref, {k: v.to(f64) for k, v in kw.items()})
    assert_close_scaled(out, want_out, 1e-2, "output")  # bfloat16 rounding of the output
    assert_close_scaled(last, want_last, 1e-2, "last state")


# ---------------------------------------------------------------------------------------
# Reverse direction, long sequences, large steps
# ---------------------------------------------------------------------------------------
def reverse_loop(x, dt, A, B, C, D=None, z=None, dt_bias=None, initial_state=None):
    """The scan from the last position to the first, written out per position, batch and
    head in float64: ``H_t = exp(Δ_t A) H_{t+1} + Δ_t x_t B_tᵀ``, ``y_t = H_t C_t + D x_t``."""
    batch, length, heads, head_dim = x.shape
    groups = B.shape[2]
    delta = torch.nn.functional.softplus(dt + (0 if dt_bias is None else dt_bias))
    out = torch.empty_like(x)
    last = torch.empty(batch, heads, head_dim, B.shape[-1], dtype=x.dtype)
    for b in range(batch):
        for h in range(heads):
            g = h // (heads // groups)
            state = (torch.zeros(head_dim, B.shape[-1], dtype=x.dtype) if initial_state is None
                     else initial_state[b, h])
            for t in range(length - 1, -1, -1):
                state = (math.exp(delta[b, t, h] * A[h]) * state
                         + delta[b, t, h] * torch.outer(x[b, t, h], B[b, t, g]))
                y = state @ C[b, t, g]
                if D is not None:
                    y = y + D[h] * x[b, t, h]  # D[h]: a scalar, or [head_dim]
                if z is not None:
                    y = y * torch.nn.functional.silu(z[b, t, h])
                out[b, t, h] = y
            last[b, h] = state
    return out, last


@given(seed=st.integers(0, 10_000), length=st.integers(1, 20),
       heads_groups=st.sampled_from(HEADS_GROUPS), chunk_size=st.integers(1, 8))
def test_reverse_by_flipping(seed, length, heads_groups, chunk_size):
    heads, groups = heads_groups
    kw = make_inputs(seed, batch=2, length=length, heads=heads, groups=groups, D="channel")
    args, rest = split(kw)
    per_position = {"x", "dt", "B", "C", "z"}
    flipped = {k: (v.flip(1) if k in per_position else v) for k, v in kw.items()}
    f_args, f_rest = split(flipped)
    out, last = ssd_scan(*f_args, **f_rest, chunk_size=chunk_size, return_last_state=True)
    want_out, want_last = reverse_loop(*args, **rest)
    torch.testing.assert_close(out.flip(1), want_out, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(last, want_last, rtol=1e-10, atol=1e-10)
    ref_out, ref_last = ssd_ref(*f_args, **f_rest, return_last_state=True)
    torch.testing.assert_close(out, ref_out, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(last, ref_last, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("dtype", [f64, f32], ids=["float64", "float32"])
def test_long_sequence_with_large_steps_stays_finite(dtype):
    # L = 4096 with dt in [10, 50] (Δ ≈ dt): one chunk's total decay reaches Σ Δ|A| ≈ 10⁴,
    # far past exp's float32 range (88), so any exp of a positive sum would overflow
    kw = make_inputs(4, length=4096, heads=2, head_dim=2, d_state=2, dt_range=(10.0, 50.0),
                     dtype=dtype)
    reference_kw = {k: v.to(f64) for k, v in kw.items()}
    out, last, grads = values_and_grads(ssd_scan, kw)
    assert torch.isfinite(out).all() and torch.isfinite(last).all()
    for name, grad in grads.items():
        assert torch.isfinite(grad).all(), f"gradient of {name} is not finite"
    want_out, want_last, want_grads = values_and_grads(ssd_ref, reference_kw)
    rel = 1e-10 if dtype == f64 else 1e-5
    assert_close_scaled(out, want_out, rel, "output")
    assert_close_scaled(last, want_last, rel, "last state")
    for name in kw:
        if name != "A":
            assert_close_scaled(grads[name], want_grads[name], 10 * rel, f"gradient of {name}")
    # ∂/∂A_h = Σ_t Δ_t ∂/∂(Δ_t A_h) sums 4096 terms of size ~10⁴ to ~10⁻³: both paths round
    # at the size of the terms, Σ_t |Δ_t ∂/∂dt_t| / |A_h| (∂/∂dt_t = A_h ∂/∂(Δ_t A_h) here,
    # softplus' = 1), not at the size of the sum (float64 differences: 5e-11 of 1.4e-3)
    delta = torch.nn.functional.softplus(reference_kw["dt"] + reference_kw["dt_bias"])
    terms = (delta * want_grads["dt"]).abs().sum(dim=(0, 1)) / reference_kw["A"].abs()
    error = (grads["A"].to(f64) - want_grads["A"]).abs()
    assert (error <= (1e-13 if dtype == f64 else 1e-6) * terms).all(), (error, terms)


def test_exp_never_sees_a_positive_argument(monkeypatch):
    """Watch every ``torch.exp`` of the chunked path: no finite argument above 0."""
    kw = make_inputs(5, batch=2, length=300, heads=4, groups=2, head_dim=3, d_state=4,
                     dt_range=(-5.0, 50.0), dtype=f32)
    real_exp = torch.exp
    largest = []

    def watched_exp(value, *args, **kwargs):
        finite = value[torch.isfinite(value)]
        largest.append(finite.max().item() if finite.numel() else -math.inf)
        return real_exp(value, *args, **kwargs)

    monkeypatch.setattr(torch, "exp", watched_exp)
    args, rest = split(kw)
    ssd_scan(*args, **rest, chunk_size=64)
    assert largest and max(largest) <= 0.0


def test_segment_sums_are_non_positive_and_masked():
    g = torch.Generator().manual_seed(6)
    steps = -torch.rand(3, 9, generator=g, dtype=f64) * 40
    sums = segment_sums(steps.cumsum(-1))
    for t in range(9):
        for s in range(9):
            if t >= s:
                want = steps[:, s + 1:t + 1].sum(-1)
                torch.testing.assert_close(sums[:, t, s], want, rtol=1e-13, atol=1e-12)
            else:
                assert (sums[:, t, s] == -math.inf).all()
    assert (sums[torch.isfinite(sums)] <= 0).all()


def test_float32_decays_keep_their_accuracy_after_large_steps():
    # Δ = 50 on the first half of each chunk, 0.01 on the second: the running decay reaches
    # ~1600 while the late decays stay near 1. float32 running sums would lose eps·1600 ≈ 1e-4
    # in those exponents (2.7e-5 relative error here); float64 running sums keep 1.6e-7.
    kw = make_inputs(7, length=512, heads=2, head_dim=4, d_state=8, D=None, z=False,
                     dt_bias=False, initial_state=False, dt_softplus=False, dtype=f32)
    position = torch.arange(512) % 64
    kw["dt"] = torch.where(position < 32, 50.0, 0.01)[None, :, None].expand(1, 512, 2)
    kw["A"] = -0.5 - torch.rand(2, generator=torch.Generator().manual_seed(7))
    args, rest = split(kw)
    out = ssd_scan(*args, **rest, dt_softplus=False)
    want = ssd_ref(*(a.to(f64) for a in args), dt_softplus=False)
    assert_close_scaled(out, want, 2e-6, "output")


# ---------------------------------------------------------------------------------------
# Algebra: carried states, the S6 scan in another layout
# ---------------------------------------------------------------------------------------
@given(seed=st.integers(0, 10_000), length=st.integers(2, 40), data=st.data(),
       chunk_size=st.integers(1, 8), heads_groups=st.sampled_from(HEADS_GROUPS))
def test_two_halves_with_carried_state_equal_the_whole(seed, length, data, chunk_size,
                                                       heads_groups):
    heads, groups = heads_groups
    cut = data.draw(st.integers(1, length - 1), label="cut")
    kw = make_inputs(seed, length=length, heads=heads, groups=groups)
    args, rest = split(kw)
    whole, last = ssd_scan(*args, **rest, chunk_size=chunk_size, return_last_state=True)
    per_position = {"x", "dt", "B", "C", "z"}

    def part(index):
        return split({k: (v[:, index] if k in per_position else v) for k, v in kw.items()})

    first_args, first_rest = part(slice(None, cut))
    y1, carry = ssd_scan(*first_args, **first_rest, chunk_size=chunk_size,
                         return_last_state=True)
    second_args, second_rest = part(slice(cut, None))
    second_rest["initial_state"] = carry
    y2, last2 = ssd_scan(*second_args, **second_rest, chunk_size=chunk_size,
                         return_last_state=True)
    torch.testing.assert_close(torch.cat([y1, y2], dim=1), whole, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(last2, last, rtol=1e-12, atol=1e-12)


@given(seed=st.integers(0, 10_000), length=st.integers(1, 12),
       heads_groups=st.sampled_from(HEADS_GROUPS), head_dim=st.integers(1, 3))
def test_ssd_is_the_s6_scan_with_one_decay_per_head(seed, length, heads_groups, head_dim):
    # channels = heads × head_dim, A repeated per channel and state, Δ per head repeated over
    # head_dim, B/C grouped alike: selective_scan_ref's recurrence is then the SSD's
    heads, groups = heads_groups
    kw = make_inputs(seed, batch=2, length=length, heads=heads, head_dim=head_dim,
                     groups=groups, d_state=3, initial_state=False)
    out = ssd_scan(*split(kw)[0], **split(kw)[1], chunk_size=4)
    batch, channels = 2, heads * head_dim

    def channel_first(t):  # [b, l, h, p] -> [b, h·p, l]
        return t.reshape(batch, length, channels).transpose(1, 2)

    s6 = selective_scan_ref(
        channel_first(kw["x"]), kw["dt"].repeat_interleave(head_dim, dim=2).transpose(1, 2),
        kw["A"].repeat_interleave(head_dim)[:, None].expand(channels, 3),
        kw["B"].permute(0, 2, 3, 1), kw["C"].permute(0, 2, 3, 1),
        D=kw["D"].repeat_interleave(head_dim), z=channel_first(kw["z"]),
        delta_bias=kw["dt_bias"].repeat_interleave(head_dim))
    torch.testing.assert_close(channel_first(out), s6, rtol=1e-10, atol=1e-10)


def test_chunk_longer_than_the_sequence():
    kw = make_inputs(8, length=10, heads=2)
    args, rest = split(kw)
    torch.testing.assert_close(ssd_scan(*args, **rest, chunk_size=1000),
                               ssd_scan(*args, **rest, chunk_size=3), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------
def _replace(**changes):
    kw = make_inputs(9, batch=2, length=6, heads=4, head_dim=3, groups=2, d_state=5)
    kw.update(changes)
    return kw


BAD_INPUTS = {
    "x_3d": (dict(x=torch.randn(2, 6, 12, dtype=f64)),
             r"x must be a non-empty \[batch, length, heads, head_dim\]"),
    "x_empty": (dict(x=torch.randn(2, 0, 4, 3, dtype=f64)), r"x must be a non-empty"),
    "x_int": (dict(x=torch.ones(2, 6, 4, 3, dtype=torch.int64)), r"x must be a floating-point"),
    "x_list": (dict(x=[[1.0]]), r"x must be a torch.Tensor; got list"),
    "dt_shape": (dict(dt=torch.randn(2, 6, 3, dtype=f64)),
                 r"dt must have shape \[batch, length, heads\] = \[2, 6, 4\]"),
    "A_s6_layout": (dict(A=-torch.ones(4, 5, dtype=f64)),
                    r"A must have shape \[heads\] = \[4\].*one scalar decay per head"),
    "groups_not_dividing_heads": (dict(B=torch.randn(2, 6, 3, 5, dtype=f64),
                                       C=torch.randn(2, 6, 3, 5, dtype=f64)),
                                  (r"B must have shape .* groups dividing heads=4; got "
                                   r"\[2, 6, 3, 5\]")),
    "B_wrong_length": (dict(B=torch.randn(2, 5, 2, 5, dtype=f64)), r"B must have shape"),
    "B_C_differ": (dict(C=torch.randn(2, 6, 1, 5, dtype=f64)),
                   r"B and C must have the same shape"),
    "D_shape": (dict(D=torch.randn(3, dtype=f64)),
                r"D must have shape \[heads\] = \[4\] or \[heads, head_dim\] = \[4, 3\]"),
    "z_shape": (dict(z=torch.randn(2, 6, 4, 2, dtype=f64)), r"z must have shape"),
    "dt_bias_shape": (dict(dt_bias=torch.randn(2, dtype=f64)),
                      r"dt_bias must have shape \[heads\] = \[4\]"),
    "initial_state_shape": (dict(initial_state=torch.randn(2, 4, 3, 4, dtype=f64)),
                            (r"initial_state must have shape \[batch, heads, head_dim, "
                             r"d_state\] = \[2, 4, 3, 5\]")),
    "A_other_device": (dict(A=torch.empty(4, dtype=f64, device="meta")),
                       r"A must be on x's device cpu; got meta"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_raises_a_clear_value_error(case):
    changes, message = BAD_INPUTS[case]
    args, rest = split(_replace(**changes))
    with pytest.raises(ValueError, match=message):
        ssd_scan(*args, **rest)


@pytest.mark.parametrize("backend", ["cpu", "triton", "fast", ""])
def test_unknown_backend_lists_the_choices(backend):
    args, rest = split(_replace())
    with pytest.raises(ValueError, match=r"unknown SSD backend .*choose one of") as error:
        ssd_scan(*args, **rest, backend=backend)
    assert all(choice in str(error.value) for choice in SSD_BACKENDS)


@pytest.mark.parametrize("chunk_size", [0, -3, 2.5, True, "64"])
def test_bad_chunk_size(chunk_size):
    args, rest = split(_replace())
    with pytest.raises(ValueError, match=r"chunk_size must be a positive integer"):
        ssd_scan(*args, **rest, chunk_size=chunk_size)


# ---------------------------------------------------------------------------------------
# The fused decay-weighted scores of the CPU path (ssmpde.kernels.ssd_cpu) against the torch
# composition they replace, values and gradients.
# ---------------------------------------------------------------------------------------
def _weighted_by_torch(running, scores):
    """The slow, obvious form: exp of the masked float64 differences rounded to the scores'
    dtype, times the scores, broadcast over heads."""
    return torch.exp(segment_sums(running, scores.dtype)) * scores.unsqueeze(-3)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), blocks=st.integers(1, 3), heads=st.integers(1, 3),
       size=st.integers(1, 17), scale=st.sampled_from([0.1, 3.0, 60.0]),
       dtype=st.sampled_from([f32, f64]))
def test_fused_decay_weighted_scores_match_the_torch_composition(seed, blocks, heads, size,
                                                                 scale, dtype):
    from ssmpde.kernels.ssd_cpu import decay_weighted_scores

    g = torch.Generator().manual_seed(seed)
    steps = -scale * torch.rand(blocks, heads, size, generator=g, dtype=f64)
    running = steps.cumsum(-1).requires_grad_()
    scores = torch.randn(blocks, size, size, generator=g, dtype=f64).to(dtype).requires_grad_()
    upstream = torch.randn(blocks, heads, size, size, generator=g, dtype=f64).to(dtype)
    fused = decay_weighted_scores(running, scores)
    slow = _weighted_by_torch(running, scores)
    assert fused.dtype == dtype and fused.shape == slow.shape
    tol = dict(rtol=1e-12, atol=1e-14) if dtype == f64 else dict(rtol=3e-7, atol=1e-7)
    torch.testing.assert_close(fused, slow, **tol)
    assert (fused.detach().triu(1) == 0).all()
    fused_grads = torch.autograd.grad(fused, (running, scores), upstream)
    slow_grads = torch.autograd.grad(slow, (running, scores), upstream)
    grad_tol = dict(rtol=1e-10, atol=1e-12) if dtype == f64 else dict(rtol=2e-5, atol=2e-5)
    for name, a, b in zip(("running", "scores"), fused_grads, slow_grads):
        torch.testing.assert_close(a, b, **grad_tol, msg=lambda m, n=name: f"{n}: {m}")


def test_fused_decay_weighted_scores_gradcheck():
    from ssmpde.kernels.ssd_cpu import decay_weighted_scores

    g = torch.Generator().manual_seed(3)
    running = (-torch.rand(2, 2, 5, generator=g, dtype=f64)).cumsum(-1).requires_grad_()
    scores = torch.randn(2, 5, 5, generator=g, dtype=f64, requires_grad=True)
    assert torch.autograd.gradcheck(decay_weighted_scores, (running, scores))


def test_fused_decay_weighted_scores_pass_torch_opcheck():
    from ssmpde.kernels import ssd_cpu  # noqa: F401 - registers the operators

    running = (-torch.rand(2, 3, 6, dtype=f64)).cumsum(-1).requires_grad_()
    scores = torch.randn(2, 6, 6, requires_grad=True)
    torch.library.opcheck(torch.ops.ssmpde.ssd_decay_weighted_scores, (running, scores))
