"""The dispatchers' one validation of the scan arguments (:mod:`ssmpde.kernels._checks`).

Every kind of bad input raises ValueError through ``selective_scan`` / ``selective_scan_2d``
before a backend runs, naming the argument and saying what it should be and how to get it
there; the reference and cpu backends see the same checks.
"""

import re

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ssmpde.kernels import selective_scan, selective_scan_2d
from ssmpde.kernels._checks import check_scan_inputs

f64 = torch.float64
BACKENDS = ("reference", "cpu")
ARGUMENTS = ("u", "delta", "A", "B", "C", "D", "R", "z", "delta_bias", "initial_state")


def valid_inputs(spatial, *, batch=2, channels=4, state=3, grid=None, groups=2, seed=0):
    """Valid inputs for a 1D (``spatial=1``) or 2D scan, every optional one present."""
    g = torch.Generator().manual_seed(seed)
    grid = grid or ((6,) if spatial == 1 else (3, 5))

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=f64)

    bc = (batch, state, *grid) if groups is None else (batch, groups, state, *grid)
    kw = dict(u=randn(batch, channels, *grid), delta=randn(batch, channels, *grid),
              A=-torch.exp(randn(channels, state)), B=randn(*bc), C=randn(*bc),
              D=randn(channels), R=randn(channels, state), z=randn(batch, channels, *grid),
              delta_bias=randn(channels))
    if spatial == 1:
        kw["initial_state"] = randn(batch, channels, state)
    return kw


def _with_groups(x, spatial, groups):
    """B or C regrouped into ``groups`` groups (None: plain), same batch, state and grid."""
    plain = x if x.dim() == 2 + spatial else x[:, 0]
    return plain if groups is None else plain.unsqueeze(1).expand(
        plain.shape[0], groups, *plain.shape[1:]).contiguous()


def _state_changed(x, spatial):
    """B or C with one state too many."""
    shape = list(x.shape)
    shape[-1 - spatial] += 1
    return torch.zeros(shape, dtype=x.dtype)


def _channels(kw):
    return kw["u"].shape[1]


#: kind of bad input -> (argument named in the message, change to valid inputs, 1D only)
CASES = {
    "u-rank-too-low": ("u", lambda kw, sp: {"u": kw["u"][0]}, False),
    "u-rank-too-high": ("u", lambda kw, sp: {"u": kw["u"].unsqueeze(-1)}, False),
    "u-empty": ("u", lambda kw, sp: {k: v[..., :0] for k, v in kw.items()
                                     if k in ("u", "delta", "B", "C", "z")}, False),
    "u-integer": ("u", lambda kw, sp: {"u": torch.ones_like(kw["u"], dtype=torch.int64)},
                  False),
    "u-not-a-tensor": ("u", lambda kw, sp: {"u": kw["u"].tolist()}, False),
    "delta-length": ("delta", lambda kw, sp: {"delta": kw["delta"][..., :-1]}, False),
    "delta-integer": ("delta", lambda kw, sp: {"delta": kw["delta"].to(torch.int32)}, False),
    "A-channels": ("A", lambda kw, sp: {"A": torch.cat([kw["A"], kw["A"][:1]])}, False),
    "A-rank": ("A", lambda kw, sp: {"A": kw["A"][0]}, False),
    "A-no-state": ("A", lambda kw, sp: {"A": kw["A"][:, :0]}, False),
    "A-integer": ("A", lambda kw, sp: {"A": kw["A"].long()}, False),
    "B-length": ("B", lambda kw, sp: {"B": kw["B"][..., :-1]}, False),
    "C-length": ("C", lambda kw, sp: {"C": kw["C"][..., :-1]}, False),
    "B-state": ("B", lambda kw, sp: {"B": _state_changed(kw["B"], sp)}, False),
    # Two extra axes: one would turn a batch-1 C into a valid grouped C.
    "C-rank": ("C", lambda kw, sp: {"C": kw["C"][None, None]}, False),
    "groups-not-dividing": ("B", lambda kw, sp: {
        n: _with_groups(kw[n], sp, _channels(kw) + 1) for n in "BC"}, False),
    "groups-mismatch": ("B and C", lambda kw, sp: {
        "B": _with_groups(kw["B"], sp, 1),
        "C": _with_groups(kw["C"], sp, _channels(kw))}, False),
    "D-shape": ("D", lambda kw, sp: {"D": kw["D"][:-1]}, False),
    "D-rank": ("D", lambda kw, sp: {"D": kw["D"][:, None]}, False),
    "D-integer": ("D", lambda kw, sp: {"D": kw["D"].to(torch.int64)}, False),
    "R-shape": ("R", lambda kw, sp: {"R": kw["R"][:, :-1]}, False),
    "z-shape": ("z", lambda kw, sp: {"z": kw["z"][..., :-1]}, False),
    "z-other-device": ("z", lambda kw, sp: {"z": kw["z"].to("meta")}, False),
    "delta_bias-shape": ("delta_bias", lambda kw, sp: {"delta_bias": kw["delta_bias"][None]},
                         False),
    "initial_state-shape": ("initial_state", lambda kw, sp: {
        "initial_state": kw["initial_state"][..., :-1]}, True),
}


def run(spatial, backend, kw):
    head = [kw[k] for k in ARGUMENTS[:5]]
    rest = {k: v for k, v in kw.items() if k not in ARGUMENTS[:5]}
    scan = selective_scan if spatial == 1 else selective_scan_2d
    return scan(*head, **rest, backend=backend)


def assert_names(error, name):
    """The message starts with the argument's name, says what it got and how to fix it."""
    message = str(error.value)
    assert re.match(rf"{re.escape(name)} must ", message), message
    assert re.search(r"; got .*?\. [A-Z]", message), message  # a fix after what was got


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case, spatial", [
    pytest.param(case, spatial, id=f"{case}-{spatial}d")
    for case in CASES for spatial in (1, 2) if spatial == 1 or not CASES[case][2]])
def test_bad_input_raises_through_the_dispatcher(case, spatial, backend):
    name, change, _ = CASES[case]
    kw = valid_inputs(spatial)
    kw.update(change(kw, spatial))
    with pytest.raises(ValueError) as error:
        run(spatial, backend, kw)
    assert_names(error, name)


@given(spatial=st.sampled_from([1, 2]), backend=st.sampled_from(BACKENDS),
       case=st.sampled_from(sorted(CASES)), batch=st.integers(1, 3),
       channels=st.integers(2, 6), state=st.integers(1, 4),
       grid=st.lists(st.integers(2, 5), min_size=2, max_size=2),
       grouped=st.booleans(), seed=st.integers(0, 2**16))
def test_any_bad_input_names_its_argument(spatial, backend, case, batch, channels, state, grid,
                                          grouped, seed):
    name, change, only_1d = CASES[case]
    if only_1d:
        spatial = 1
    groups = channels if grouped else None
    kw = valid_inputs(spatial, batch=batch, channels=channels, state=state,
                      grid=tuple(grid[:spatial]), groups=groups, seed=seed)
    check_scan_inputs(*(kw.get(k) for k in ARGUMENTS), spatial=spatial)  # valid: no error
    kw.update(change(kw, spatial))
    with pytest.raises(ValueError) as error:
        run(spatial, backend, kw)
    assert_names(error, name)


def test_error_message_gives_the_expected_shape():
    kw = valid_inputs(1)
    kw["D"] = kw["D"][:3]
    with pytest.raises(ValueError, match=r"D must have shape \[channel\] = \[4\]; got \[3\]"):
        run(1, "reference", kw)
    kw = valid_inputs(2, groups=None)
    kw["B"] = kw["B"][..., :4]
    with pytest.raises(ValueError, match=r"B must have shape \[batch, state, height, width\] "
                                         r"= \[2, 3, 3, 5\] or \[batch, groups, state, height, "
                                         r"width\]"):
        run(2, "cpu", kw)


@pytest.mark.parametrize("spatial", [1, 2], ids=["1d", "2d"])
def test_one_grouped_one_plain_is_the_cpu_backends_own_limit(spatial):
    # The reference (and Triton) broadcast a plain B or C to the other's groups; the cpu
    # kernels read both through one grouping and say how to expand the plain one.
    kw = valid_inputs(spatial, groups=2)
    kw["B"] = kw["B"][:, 0]
    ref = run(spatial, "reference", kw)
    with pytest.raises(ValueError, match="same number of groups for the cpu backend"):
        run(spatial, "cpu", kw)
    kw["B"] = _with_groups(kw["B"], spatial, 2)
    torch.testing.assert_close(run(spatial, "cpu", kw), ref, rtol=1e-10, atol=1e-12)
