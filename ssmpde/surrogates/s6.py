r"""Selective-scan (S6) blocks: GeoMaNO's GeoMamba mixer and the MNO S6 mixers.

* :class:`SelectiveScanMixer`, the selective SSM block (S6) with multi-direction scans, per
  direction Δ/B/C projections, A, D and the geometric correction R: GeoMaNO's GeoMamba
  kernel (Algorithm 1; Eq. 9 for the 1D scan, Eq. 10 for the 2D scan), on token grids
  ``[batch, channel, *grid]`` of one or two dimensions. See ``docs/models/geomano.md``.
* :class:`BidirectionalS6` and :class:`CrossS6`, the token mixers of the Mamba Neural
  Operator, on token sequences ``[batch, tokens, width]``. See ``docs/models/mno.md``.

Both families start Δ the same way, through :func:`init_delta`. They call
:mod:`ssmpde.kernels`, never loops of their own (``docs/kernels/selective_scan.md``).

References
----------
X. Han, J. Zhang, D. Samaras, F. Hou, H. Qin, "GeoMaNO: Geometric Mamba Neural Operator for
Partial Differential Equations", 2025.
C.-W. Cheng, J. Huang, Y. Zhang, G. Yang, C.-B. Schönlieb, A. I. Aviles-Rivero, "Mamba
neural operator: Who wins? Transformers vs. state-space models for PDEs", arXiv:2410.02113.
A. Gu and T. Dao, "Mamba: Linear-time sequence modeling with selective state spaces", 2023.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ssmpde.kernels import cross_merge_2d, cross_scan_2d, selective_scan, selective_scan_2d

from .layers import channels_first, channels_last

__all__ = ["CORRECTIONS", "BidirectionalS6", "CrossS6", "SelectiveScanMixer", "init_delta"]


#: Geometric corrections: none, fixed patterns (digit k: R ≡ 0 or 1 for direction k), learnable.
CORRECTIONS = ("none", "0001", "0011", "0111", "learnable")


def _inverse_softplus(x: torch.Tensor) -> torch.Tensor:
    return x + torch.log(-torch.expm1(-x))


def init_delta(directions: int, inner: int, rank: int) -> tuple[nn.Parameter, nn.Parameter]:
    r"""Mamba's initialisation of the step Δ for ``directions`` stacked scans.

    Δ is :math:`\mathrm{softplus}(W_\Delta r + b_\Delta)`, with :math:`r` the rank-R
    projection of the token. :math:`W_\Delta` is drawn uniformly in
    :math:`[-R^{-1/2}, R^{-1/2}]`; :math:`b_\Delta` is the inverse softplus of a log-uniform
    draw in [1e-3, 1e-1], so Δ starts there (Gu & Dao 2023).

    Parameters
    ----------
    directions : int
        Scan directions, each with its own Δ parameters.
    inner : int
        Channels E_inner of each direction.
    rank : int
        R, the rank of the Δ projection.

    Returns
    -------
    dt_proj : nn.Parameter
        :math:`W_\Delta`, ``[directions, inner, rank]``.
    dt_bias : nn.Parameter
        :math:`b_\Delta`, ``[directions, inner]``.

    Notes
    -----
    The two draws are made in this order from the global generator; the models' golden
    outputs depend on it.
    """
    dt_proj = torch.empty(directions, inner, rank).uniform_(-rank ** -0.5, rank ** -0.5)
    dt = torch.exp(torch.empty(directions, inner).uniform_(math.log(1e-3), math.log(1e-1)))
    return nn.Parameter(dt_proj), nn.Parameter(_inverse_softplus(dt))


class SelectiveScanMixer(nn.Module):
    r"""Selective SSM block over a grid of tokens (GeoMaNO Algorithm 1).

    in_proj splits each token into x and the gate z; x passes a depthwise convolution (3×3 on
    2D grids, width 4 causal on 1D ones) and SiLU, and is traversed in every direction
    (four orders or four corners on 2D grids, forward and backward on 1D ones). Per
    direction, Δ (rank ⌈E/16⌉, then up-projected), B and C are linear in x; A = −exp(A_log)
    with A_log = log(1..N) (S4D-real), D = 1, Δ bias the inverse softplus of a log-uniform
    draw in [1e-3, 1e-1] (:func:`init_delta`). The scan (Eq. 9, or Eq. 10 with ``scan="2d"``)

    .. math:: h_l = \bar A_l h_{l-1} + \bar B_l x_l,\quad
              y_l = C_l h_l - R\,\bar B_l x_l + D x_l

    runs in every direction; the directions are merged by summing, then LayerNorm (and SiLU
    with ``norm_activation``), times SiLU(z), out_proj. With ``scan="1d"`` the block works on
    channel-last tokens without copying them per direction: a direction and its reverse scan
    the same sequence (the second with ``reverse=True``, whose outputs land where they came
    from), column orders read one transposed copy, and Δ, B, C of all directions come from
    one matrix product in grid order. With ``scan="2d"`` the four corners are flipped copies,
    scanned at once (directions folded into channels, B/C grouped by direction).

    Parameters
    ----------
    width : int
        Token channels E.
    spatial_dims : {1, 2}
        Grid dimensions of the tokens.
    state_size : int
        N, the SSM state per channel.
    expand : int
        E_inner = expand · E.
    scan : {"1d", "2d"}
        Traversal-order 1D scans, or the 2D two-pass scan from the four corners (2D grids).
    correction : str
        One of :data:`CORRECTIONS`. Fixed patterns need four directions (2D grids).
    norm_activation : bool
        Algorithm 1, line 10, as printed: :math:`\sigma(\mathrm{LN}(Y)) \circ \sigma(Z)` with
        σ = SiLU. ``False`` (default) leaves out the first σ, :math:`\mathrm{LN}(Y) \circ
        \sigma(Z)`, VMamba's gate, which ssmpde's GeoMaNO presets were trained with.
    scan_backend : str
        Passed to :func:`ssmpde.kernels.selective_scan` ("auto", "reference", "cpu",
        "triton"); it does not change the mathematics.
    """

    def __init__(self, width: int, *, spatial_dims: int, state_size: int = 16, expand: int = 2,
                 scan: str = "1d", correction: str = "none", norm_activation: bool = False,
                 scan_backend: str = "auto"):
        super().__init__()
        if spatial_dims not in (1, 2):
            raise ValueError(f"spatial_dims must be 1 or 2, got {spatial_dims}")
        if scan not in ("1d", "2d"):
            raise ValueError(f"scan must be '1d' or '2d', got {scan!r}")
        if scan == "2d" and spatial_dims != 2:
            raise ValueError("scan='2d' needs a 2D grid; use scan='1d' for 1D grids")
        if correction not in CORRECTIONS:
            raise ValueError(f"unknown correction {correction!r}; choose one of {CORRECTIONS}")
        directions = 4 if spatial_dims == 2 else 2
        if correction not in ("none", "learnable") and directions != 4:
            raise ValueError(f"correction={correction!r} names four directions; a 1D grid is "
                             "scanned in two: use 'none' or 'learnable'")
        inner = expand * width
        rank = math.ceil(width / 16)
        self.width, self.inner, self.rank = width, inner, rank
        self.state_size, self.directions = state_size, directions
        self.spatial_dims, self.scan, self.correction = spatial_dims, scan, correction
        self.norm_activation, self.scan_backend = norm_activation, scan_backend

        self.in_proj = nn.Linear(width, 2 * inner, bias=False)
        if spatial_dims == 2:
            self.conv = nn.Conv2d(inner, inner, 3, padding=1, groups=inner)
        else:
            self.conv = nn.Conv1d(inner, inner, 4, padding=3, groups=inner)
        # Per-direction projections, stacked: x_proj gives (Δ rank, B, C) from x.
        bound = inner ** -0.5
        self.x_proj = nn.Parameter(
            torch.empty(directions, rank + 2 * state_size, inner).uniform_(-bound, bound))
        self.dt_proj, self.dt_bias = init_delta(directions, inner, rank)
        a_log = torch.log(torch.arange(1, state_size + 1, dtype=torch.float32))
        self.A_log = nn.Parameter(a_log.repeat(directions * inner, 1))
        self.D = nn.Parameter(torch.ones(directions * inner))
        if correction == "learnable":
            # Starts as plain Mamba (R = 0) and learns the correction.
            self.R = nn.Parameter(torch.zeros(directions * inner, state_size))
        elif correction == "none":
            self.R = None
        else:
            mask = torch.tensor([float(c) for c in correction]).repeat_interleave(inner)
            self.register_buffer("R", mask[:, None].expand(-1, state_size).contiguous())
        self.norm = nn.LayerNorm(inner)
        self.out_proj = nn.Linear(inner, width, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``[batch, width, *grid] -> [batch, width, *grid]``."""
        return channels_first(self.forward_channels_last(channels_last(tokens).contiguous()))

    def forward_channels_last(self, tokens: torch.Tensor) -> torch.Tensor:
        """``[batch, *grid, width] -> [batch, *grid, width]``: the same map on channel-last
        tokens, the layout every linear map, norm and scan of the block reads without a copy.
        """
        if self.scan == "2d":
            return self._forward_2d_scan(tokens)
        batch, *grid, _ = tokens.shape
        x, z = self.in_proj(tokens).split(self.inner, dim=-1)
        x = F.silu(self._convolve(x.contiguous()))                # [b, *grid, inner]
        # One matrix product gives Δ's low-rank input, B and C of every direction (they are
        # linear in each token, so they are computed in grid order and read in scan order).
        k, rank, n = self.directions, self.rank, self.state_size
        projected = F.linear(x, self.x_proj.reshape(k * (rank + 2 * n), self.inner))
        projected = projected.unflatten(-1, (k, rank + 2 * n))    # [b, *grid, k, R + 2N]
        A = -torch.exp(self.A_log).unflatten(0, (k, self.inner))
        D = self.D.unflatten(0, (k, self.inner))
        R = None if self.R is None else self.R.unflatten(0, (k, self.inner))
        # Directions k and k + 2 (2D grids) or 0 and 1 (1D) traverse the same order, the
        # second from the far end: a reversed scan of the same sequence, whose outputs land
        # on the positions they came from. Odd directions on 2D grids go column by column.
        orders = {False: x.flatten(1, -2)}
        if self.spatial_dims == 2:
            orders[True] = x.transpose(1, 2).flatten(1, 2)      # one copy, shared by two
        y = None
        for direction in range(k):
            transposed = self.spatial_dims == 2 and direction % 2 == 1
            p = projected[..., direction, :]
            p = (p.transpose(1, 2) if transposed else p).flatten(1, -2)
            dt, B, C = p.split([rank, n, n], dim=-1)
            dt = F.linear(dt, self.dt_proj[direction])            # [b, L, inner]
            out = selective_scan(
                orders[transposed].transpose(1, 2), dt.transpose(1, 2), A[direction],
                B.transpose(1, 2).contiguous(), C.transpose(1, 2).contiguous(),
                D=D[direction], R=None if R is None else R[direction],
                delta_bias=self.dt_bias[direction], delta_softplus=True,
                reverse=direction >= k // 2, backend=self.scan_backend).transpose(1, 2)
            if transposed:
                out = out.unflatten(1, (grid[1], grid[0])).transpose(1, 2)
            else:
                out = out.unflatten(1, tuple(grid))
            y = out if y is None else y + out
        return self._output(y, z)

    def _convolve(self, x: torch.Tensor) -> torch.Tensor:
        """The depthwise convolution of ``x [b, *grid, inner]`` (contiguous), channel-last in
        and out: as a 2D convolution in torch's channels_last memory format (a 1D grid is a
        grid of one row), which reads and writes this layout without copies. The 1D
        convolution is causal: of its outputs (padding 3 at both ends) it keeps the first
        ``length``, which saw no future token."""
        if self.spatial_dims == 2:
            out = F.conv2d(x.permute(0, 3, 1, 2), self.conv.weight, self.conv.bias, padding=1,
                           groups=self.inner)
            return out.permute(0, 2, 3, 1)
        length = x.shape[1]
        out = F.conv2d(x.unsqueeze(1).permute(0, 3, 1, 2), self.conv.weight.unsqueeze(2),
                       self.conv.bias, padding=(0, 3), groups=self.inner)
        return out.permute(0, 2, 3, 1)[:, 0, :length]

    def _forward_2d_scan(self, tokens: torch.Tensor) -> torch.Tensor:
        """The 2D scan (Eq. 10) from the four corners: ``[b, H, W, width]`` in and out."""
        batch, *grid, _ = tokens.shape
        x, z = channels_first(self.in_proj(tokens)).chunk(2, dim=1)
        x = F.silu(self.conv(x))
        xs = cross_scan_2d(x)                                     # [b, 4, inner, H, W]
        projected = torch.einsum("bkd...,kcd->bkc...", xs, self.x_proj)
        dt, B, C = projected.split([self.rank, self.state_size, self.state_size], dim=2)
        dt = torch.einsum("bkr...,kdr->bkd...", dt, self.dt_proj)
        A = -torch.exp(self.A_log)
        y = selective_scan_2d(xs.flatten(1, 2).contiguous(), dt.flatten(1, 2).contiguous(), A,
                              B.contiguous(), C.contiguous(), D=self.D, R=self.R,
                              delta_bias=self.dt_bias.flatten(), delta_softplus=True,
                              backend=self.scan_backend)
        y = cross_merge_2d(y.unflatten(1, (self.directions, self.inner)))
        return self._output(channels_last(y), channels_last(z))

    def _output(self, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """Algorithm 1, lines 10–11, on channel-last ``y`` (the merged scans) and gate ``z``:
        ``out_proj(LN(y) ⊙ SiLU(z))``, or ``out_proj(SiLU(LN(y)) ⊙ SiLU(z))``."""
        y = self.norm(y)
        if self.norm_activation:
            y = F.silu(y)
        return self.out_proj(y * F.silu(z))


# ---------------------------------------------------------------------------------------
# Token mixers of the MNO comparison (Cheng et al., arXiv 2410.02113): the bidirectional S6
# and Cross S6 blocks. Layout ``[batch, tokens, width]``.
# ---------------------------------------------------------------------------------------


class _BidirectionalS6Core(nn.Module):
    r"""Parameters and scan shared by :class:`BidirectionalS6` and :class:`CrossS6`.

    Two directions k ∈ {forward, backward}, each with its own x_proj (Δ rank R = ⌈E/16⌉, B: N,
    C: N), dt_proj (R → E_inner) and Δ bias, A = −exp(A_log) with A_log = log(1..N) (S4D-real),
    D = 1; Δ bias the inverse softplus of a log-uniform draw in [1e-3, 1e-1] (:func:`init_delta`).
    """

    directions = 2

    def __init__(self, width: int, *, state_size: int = 16, expand: int = 2,
                 scan_backend: str = "auto"):
        super().__init__()
        for name, value in (("width", width), ("state_size", state_size), ("expand", expand)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        inner = expand * width
        rank = math.ceil(width / 16)
        k = self.directions
        self.width, self.inner, self.rank, self.state_size = width, inner, rank, state_size
        self.scan_backend = scan_backend
        self.in_proj = nn.Linear(width, 2 * inner, bias=False)
        bound = inner ** -0.5
        self.x_proj = nn.Parameter(
            torch.empty(k, rank + 2 * state_size, inner).uniform_(-bound, bound))
        self.dt_proj, self.dt_bias = init_delta(k, inner, rank)
        a_log = torch.log(torch.arange(1, state_size + 1, dtype=torch.float32))
        self.A_log = nn.Parameter(a_log.repeat(k * inner, 1))
        self.D = nn.Parameter(torch.ones(k * inner))
        self.norm = nn.LayerNorm(inner)
        self.out_proj = nn.Linear(inner, width, bias=False)

    def _branches(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (contiguous, the layout the scan reads without a copy) and the gate z, both
        ``[batch, tokens, inner]``: SiLU on both halves of in_proj (the released block has no
        convolution)."""
        x, z = F.silu(self.in_proj(tokens)).chunk(2, dim=-1)
        return x.contiguous(), z

    def _project(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """Δ's low-rank input, B and C of both directions from one matrix product,
        ``[b, L, inner] -> [b, L, 2, R + 2N]``, in sequence order (they are linear in each
        token, so the backward direction reads the same rows from the far end)."""
        return F.linear(x, weight.reshape(-1, self.inner)).unflatten(-1, (self.directions, -1))

    def _scan(self, x: torch.Tensor, projected: torch.Tensor) -> torch.Tensor:
        """``y = S6_f(x) + flip(S6_b(flip x))`` for ``x [batch, L, inner]``, ``[batch, L,
        inner]``: the backward direction is a reversed scan of the same sequence
        (``reverse=True``), whose outputs land on the positions they came from, so nothing is
        flipped, stacked or copied into another layout."""
        k, inner, rank, n = self.directions, self.inner, self.rank, self.state_size
        A = -torch.exp(self.A_log).unflatten(0, (k, inner))
        D = self.D.unflatten(0, (k, inner))
        y = None
        for direction in range(k):
            dt, B, C = projected[..., direction, :].split([rank, n, n], dim=-1)
            dt = F.linear(dt, self.dt_proj[direction])                    # [b, L, inner]
            out = selective_scan(
                x.transpose(1, 2), dt.transpose(1, 2), A[direction],
                B.transpose(1, 2).contiguous(), C.transpose(1, 2).contiguous(),
                D=D[direction], delta_bias=self.dt_bias[direction], delta_softplus=True,
                reverse=direction == 1, backend=self.scan_backend).transpose(1, 2)
            y = out if y is None else y + out
        return y

    def _output(self, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return self.out_proj(self.norm(y) * z)


class BidirectionalS6(_BidirectionalS6Core):
    r"""The MNO self-mixer: a bidirectional selective scan (S6) over a token sequence.

    The block released with MNO (``SS2D`` in its repository, used in place of every
    self-attention layer):

    .. math::
        (x, z) &= \mathrm{SiLU}(\mathrm{in\_proj}(u)),\qquad
        y = S6_f(x) + \mathrm{flip}\big(S6_b(\mathrm{flip}\,x)\big),\\
        \mathrm{out} &= \mathrm{out\_proj}\big(\mathrm{LN}(y) \odot z\big),

    where each direction's S6 is :math:`h_l = e^{\Delta_l A} h_{l-1} + \Delta_l B_l x_l`,
    :math:`y_l = C_l h_l + D x_l` with :math:`(\Delta_l, B_l, C_l)` linear in :math:`x_l`
    (Δ through a rank-R map, softplus and a bias). in_proj is E → 2·E_inner without bias;
    there is no convolution (the released code declares one and leaves it unused).

    Parameters
    ----------
    width : int
        Token channels E.
    state_size : int
        N (16 in MNO).
    expand : int
        E_inner = expand · E (2 in MNO).
    scan_backend : {"auto", "reference", "cpu", "triton"}
        Passed to :func:`ssmpde.kernels.selective_scan`.

    Shapes
    ------
    ``[batch, tokens, width] -> [batch, tokens, width]``.

    References
    ----------
    C.-W. Cheng, J. Huang, Y. Zhang, G. Yang, C.-B. Schönlieb, A. I. Aviles-Rivero, "Mamba
    neural operator: Who wins? Transformers vs. state-space models for PDEs", arXiv:2410.02113.
    A. Gu and T. Dao, "Mamba: Linear-time sequence modeling with selective state spaces", 2023.

    Examples
    --------
    >>> mixer = BidirectionalS6(8, state_size=4)
    >>> mixer(torch.randn(2, 10, 8)).shape
    torch.Size([2, 10, 8])
    """

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``[batch, tokens, width] -> [batch, tokens, width]``."""
        x, z = self._branches(tokens)
        return self._output(self._scan(x, self._project(x, self.x_proj)), z)


class CrossS6(_BidirectionalS6Core):
    r"""Cross S6 (MNO supplement, Eq. S.3–S.4): the queries are scanned with selection
    parameters that also depend on a context sequence.

    .. math::
        (B, C, \Delta) = \mathrm{Linear}(x),\quad (B', C', \Delta') = \mathrm{Linear}'(x'),\quad
        \tilde B = B + qB',\ \tilde C = C + qC',\ \tilde\Delta = \Delta + q\Delta'

    and x is scanned (both directions, as :class:`BidirectionalS6`) with
    :math:`(\tilde\Delta, \tilde B, \tilde C)`. As in the released ``CrossSS2D``: the context
    passes the x half of the same in_proj and SiLU (:math:`x' = \mathrm{SiLU}(W_x u')`), each
    direction has its own context projection ``context_proj`` (Δ′ at rank R, up-projected by
    the shared dt_proj, so :math:`\tilde\Delta = \Delta + q\Delta'` before the softplus), and
    the gate z comes from the queries alone. The released code adds the two projections
    (q = 1); ``ratio`` is q.

    Context and queries may have different numbers of tokens: the context projections
    :math:`(\Delta', B', C')` of each direction are resampled to the query length by linear
    interpolation along the scan order with aligned end points (``F.interpolate(...,
    mode="linear", align_corners=True)``): the first and last context tokens meet the first and
    last queries, and equal lengths are left untouched (the released token-wise sum). With
    q = 0 the block is exactly :class:`BidirectionalS6` on the queries.

    Parameters
    ----------
    width : int
        Token channels E of queries and context.
    state_size, expand, scan_backend
        As :class:`BidirectionalS6`.
    ratio : float
        q.

    Shapes
    ------
    ``[batch, tokens, width]`` queries and ``[batch, context_tokens, width]`` context ->
    ``[batch, tokens, width]``.

    Examples
    --------
    >>> mixer = CrossS6(8, state_size=4)
    >>> mixer(torch.randn(2, 10, 8), torch.randn(2, 7, 8)).shape
    torch.Size([2, 10, 8])
    """

    def __init__(self, width: int, *, state_size: int = 16, expand: int = 2,
                 ratio: float = 1.0, scan_backend: str = "auto"):
        super().__init__(width, state_size=state_size, expand=expand, scan_backend=scan_backend)
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) \
                or not math.isfinite(ratio):
            raise ValueError(f"ratio must be a finite number, got {ratio!r}")
        self.ratio = float(ratio)
        bound = self.inner ** -0.5
        self.context_proj = nn.Parameter(
            torch.empty(self.directions, self.rank + 2 * state_size, self.inner)
            .uniform_(-bound, bound))

    def forward(self, tokens: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """Queries ``[batch, L, width]`` and context ``[batch, L', width]`` ->
        ``[batch, L, width]``."""
        if context.dim() != 3 or context.shape[0] != tokens.shape[0] \
                or context.shape[2] != tokens.shape[2]:
            raise ValueError(f"context must be [batch={tokens.shape[0]}, tokens, "
                             f"width={tokens.shape[2]}], got {list(context.shape)}")
        x, z = self._branches(tokens)
        context_x = F.silu(F.linear(context, self.in_proj.weight[: self.inner]))
        shift = self._project(context_x, self.context_proj)              # [b, L', 2, R + 2N]
        length = x.shape[1]
        if shift.shape[1] != length:
            # Each direction resampled in its own scan order (the backward one on the
            # reversed context, then put back in sequence order): aligned end points, and a
            # single query meets the first context token of its direction.
            rows = shift.transpose(1, 3)                                  # [b, R + 2N, 2, L']
            shift = torch.stack([
                F.interpolate(rows[:, :, 0], size=length, mode="linear", align_corners=True),
                F.interpolate(rows[:, :, 1].flip(-1), size=length, mode="linear",
                              align_corners=True).flip(-1)], dim=2).transpose(1, 3)
        projected = self._project(x, self.x_proj) + self.ratio * shift
        return self._output(self._scan(x, projected), z)
