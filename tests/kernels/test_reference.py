"""The reference scans: gradcheck, and the algebra every backend inherits through it."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ssmpde.kernels import selective_scan, selective_scan_2d
from ssmpde.kernels.reference import selective_scan_2d_ref, selective_scan_ref

f64 = torch.float64


def inputs_1d(seed, batch=2, channels=3, state=4, length=9, groups=None):
    g = torch.Generator().manual_seed(seed)
    shape_bc = (batch, state, length) if groups is None else (batch, groups, state, length)
    return dict(
        u=torch.randn(batch, channels, length, generator=g, dtype=f64),
        delta=torch.randn(batch, channels, length, generator=g, dtype=f64),
        A=-torch.exp(torch.randn(channels, state, generator=g, dtype=f64)),
        B=torch.randn(*shape_bc, generator=g, dtype=f64),
        C=torch.randn(*shape_bc, generator=g, dtype=f64),
        D=torch.randn(channels, generator=g, dtype=f64),
        R=torch.randn(channels, state, generator=g, dtype=f64),
        z=torch.randn(batch, channels, length, generator=g, dtype=f64),
        delta_bias=torch.randn(channels, generator=g, dtype=f64))


def positional(kw):
    return kw["u"], kw["delta"], kw["A"], kw["B"], kw["C"]


def rest(kw):
    return {k: v for k, v in kw.items() if k not in ("u", "delta", "A", "B", "C")}


def test_gradcheck_1d_every_input():
    kw = inputs_1d(0, batch=1, channels=2, state=2, length=5)
    names = list(kw)
    tensors = [kw[n].requires_grad_() for n in names]
    init = torch.randn(1, 2, 2, dtype=f64, requires_grad=True)

    def scan(*args):
        d = dict(zip(names, args[:-1]))
        out, last = selective_scan_ref(*positional(d), **rest(d), initial_state=args[-1],
                                       return_last_state=True)
        return out, last

    assert torch.autograd.gradcheck(scan, (*tensors, init))


def test_gradcheck_2d_every_input():
    kw = inputs_1d(1, batch=1, channels=2, state=2, length=6)
    grid = {k: (v.reshape(*v.shape[:-1], 2, 3) if v.dim() == 3 else v) for k, v in kw.items()}
    names = list(grid)
    tensors = [grid[n].requires_grad_() for n in names]

    def scan(*args):
        d = dict(zip(names, args))
        return selective_scan_2d_ref(*positional(d), **rest(d))

    assert torch.autograd.gradcheck(scan, tuple(tensors))


@given(seed=st.integers(0, 10_000), length=st.integers(2, 30), reverse=st.booleans())
def test_two_halves_with_carried_state_equal_the_whole(seed, length, reverse):
    kw = inputs_1d(seed, length=length)
    whole, last = selective_scan_ref(*positional(kw), **rest(kw), reverse=reverse,
                                     return_last_state=True)
    cut = length // 2
    first, second = (slice(cut, None), slice(None, cut)) if reverse else \
        (slice(None, cut), slice(cut, None))

    def part(index):
        return {k: (v[..., index] if v.dim() >= 3 else v) for k, v in kw.items()}

    y1, carry = selective_scan_ref(*positional(part(first)), **rest(part(first)),
                                   reverse=reverse, return_last_state=True)
    y2, last2 = selective_scan_ref(*positional(part(second)), **rest(part(second)),
                                   reverse=reverse, initial_state=carry,
                                   return_last_state=True)
    joined = torch.cat([y2, y1], -1) if reverse else torch.cat([y1, y2], -1)
    torch.testing.assert_close(joined, whole, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(last2, last, rtol=1e-12, atol=1e-12)


@given(seed=st.integers(0, 10_000), groups=st.sampled_from([None, 1, 3]))
def test_reverse_is_flip_scan_flip(seed, groups):
    kw = inputs_1d(seed, groups=groups)
    flipped = {k: (v.flip(-1) if v.dim() >= 3 else v) for k, v in kw.items()}
    reverse = selective_scan_ref(*positional(kw), **rest(kw), reverse=True)
    forward = selective_scan_ref(*positional(flipped), **rest(flipped)).flip(-1)
    torch.testing.assert_close(reverse, forward, rtol=1e-12, atol=1e-12)


@given(seed=st.integers(0, 10_000), length=st.integers(1, 12))
def test_one_row_or_one_column_2d_scan_equals_the_1d_scan(seed, length):
    kw = inputs_1d(seed, length=length)
    y1 = selective_scan_ref(*positional(kw), **rest(kw))
    for axis in (-2, -1):  # a 1 x L grid (row) and an L x 1 grid (column)
        grid = {k: (v.unsqueeze(axis) if v.dim() >= 3 else v) for k, v in kw.items()}
        y2 = selective_scan_2d_ref(*positional(grid), **rest(grid)).squeeze(axis)
        torch.testing.assert_close(y2, y1, rtol=1e-12, atol=1e-12)


@given(seed=st.integers(0, 10_000), height=st.integers(1, 5), width=st.integers(1, 6))
def test_constant_decay_2d_state_is_the_manhattan_closed_form(seed, height, width):
    # Constant Ā (delta constant, no softplus): h[i,j] = Σ_{i'≤i, j'≤j} Ā^{(i−i')+(j−j')} B̄x[i',j']
    # (GeoMaNO Eq. 23); C = e_n picks state n, D = R = 0, so y is that state.
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(1, 1, height, width, generator=g, dtype=f64)
    dt = 0.3
    delta = torch.full_like(u, dt)
    A = torch.tensor([[-0.7]], dtype=f64)
    B = torch.randn(1, 1, height, width, generator=g, dtype=f64)
    C = torch.ones(1, 1, height, width, dtype=f64)
    y = selective_scan_2d_ref(u, delta, A, B, C, delta_softplus=False)[0, 0]
    a = torch.exp(torch.tensor(dt * -0.7, dtype=f64))
    bx = dt * B[0, 0] * u[0, 0]
    expected = torch.zeros(height, width, dtype=f64)
    for i in range(height):
        for j in range(width):
            for k in range(i + 1):
                for m in range(j + 1):
                    expected[i, j] += a ** ((i - k) + (j - m)) * bx[k, m]
    torch.testing.assert_close(y, expected, rtol=1e-12, atol=1e-12)


def test_grouped_b_c_equal_their_explicit_expansion():
    kw = inputs_1d(5, channels=6, groups=3)
    out = selective_scan_ref(*positional(kw), **rest(kw))
    for channel in range(6):
        single = {k: v for k, v in kw.items()}
        single["u"], single["delta"], single["z"] = (kw[n][:, channel:channel + 1]
                                                     for n in ("u", "delta", "z"))
        single["A"], single["R"] = kw["A"][channel:channel + 1], kw["R"][channel:channel + 1]
        single["D"], single["delta_bias"] = (kw[n][channel:channel + 1] for n in ("D", "delta_bias"))
        single["B"], single["C"] = kw["B"][:, channel // 2], kw["C"][:, channel // 2]
        torch.testing.assert_close(selective_scan_ref(*positional(single), **rest(single)),
                                   out[:, channel:channel + 1], rtol=1e-12, atol=1e-12)


def test_dispatcher_reference_backend_and_errors():
    kw = inputs_1d(2)
    torch.testing.assert_close(selective_scan(*positional(kw), **rest(kw), backend="reference"),
                               selective_scan_ref(*positional(kw), **rest(kw)))
    grid = {k: (v.unsqueeze(-2) if v.dim() >= 3 else v) for k, v in kw.items()}
    torch.testing.assert_close(
        selective_scan_2d(*positional(grid), **rest(grid), backend="reference"),
        selective_scan_2d_ref(*positional(grid), **rest(grid)))
    with pytest.raises(ValueError, match="unknown backend 'cuda'"):
        selective_scan(*positional(kw), backend="cuda")


def test_bad_group_count_is_rejected():
    # Validated by the dispatcher before it chooses the reference.
    kw = inputs_1d(3, channels=4, groups=3)
    with pytest.raises(ValueError, match="groups dividing"):
        selective_scan(*positional(kw), **rest(kw), backend="reference")


@pytest.mark.parametrize("kind", ["1d", "2d"])
def test_benchmark_loop_baselines_compute_the_same_scan(kind):
    from benchmarks.bench_scan import loop_scan_1d, loop_scan_2d, make_inputs

    kw = {k: v.detach().double() for k, v in make_inputs(kind, 2, 3, 4, 5).items()}
    loop = loop_scan_1d if kind == "1d" else loop_scan_2d
    ref = selective_scan_ref if kind == "1d" else selective_scan_2d_ref
    extra = {k: kw[k] for k in ("D", "R", "z", "delta_bias")}
    torch.testing.assert_close(loop(*positional(kw), **extra), ref(*positional(kw), **extra),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", ["auto", "cpu", "triton"])
def test_every_backend_matches_the_reference_through_the_dispatcher(backend):
    kw = {k: v.float() for k, v in inputs_1d(7, channels=4, groups=2, length=11).items()}
    init = torch.randn(2, 4, 4)
    out, last = selective_scan(*positional(kw), **rest(kw), reverse=True, initial_state=init,
                               return_last_state=True, backend=backend)
    ref_out, ref_last = selective_scan_ref(*positional(kw), **rest(kw), reverse=True,
                                           initial_state=init, return_last_state=True)
    torch.testing.assert_close(out, ref_out, rtol=6e-4, atol=2e-3)
    torch.testing.assert_close(last, ref_last, rtol=6e-4, atol=2e-3)
    grid = {k: (v.reshape(*v.shape[:-1], 1, 11) if v.dim() >= 3 else v)
            for k, v in kw.items()}
    grid["B"], grid["C"] = (grid[n].reshape(2, 2, 4, 11, 1).transpose(-1, -2) for n in "BC")
    torch.testing.assert_close(selective_scan_2d(*positional(grid), **rest(grid), backend=backend),
                               selective_scan_2d_ref(*positional(grid), **rest(grid)),
                               rtol=6e-4, atol=2e-3)


def test_triton_backend_on_cpu_without_the_interpreter_says_what_to_do(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    kw = inputs_1d(8)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        selective_scan(*positional(kw), backend="triton")
