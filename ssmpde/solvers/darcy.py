"""Steady Darcy flow −∇·(a∇u) = f on the unit square, u = 0 on the boundary (finite differences).

FNO's ``solve_gwf`` discretisation, the thresholded Neumann-GRF coefficient and the strided
benchmark resolutions (Li et al., Fourier Neural Operator for Parametric Partial Differential
Equations, ICLR 2021); and the PDEBench variant (the ``pdebench-like`` preset: Gaussian-bump
coefficient, forcing β, 128² cell centres; Takamoto et al., PDEBench: An Extensive Benchmark
for Scientific Machine Learning, NeurIPS 2022). See ``docs/numerics/darcy.md``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import scipy.fft
import scipy.sparse as sparse
import scipy.sparse.linalg as sparse_linalg
import xarray as xr

from ..data import X, Y, grid_coordinates, spatial_coordinate
from .base import Solver, VariableSpec, register_solver
from .random_fields import NeumannGRF, sample_rng
from .spectral import solver_threads

__all__ = ["Darcy", "DarcyConfig", "reference_matrix"]

LINEAR_SOLVERS = ("direct", "pcg")
#: ``nodes``: K nodes per side including the boundary (FNO); ``cells``: N cell centres per side,
#: u = 0 on ghost nodes half a cell outside the square (PDEBench's 2D Darcy code).
GRIDS = ("nodes", "cells")
#: ``grf``: thresholded Neumann GRF (FNO); ``bumps``: thresholded sum of Gaussian bumps
#: (PDEBench).
COEFFICIENTS = ("grf", "bumps")
#: Gaussian bumps in a PDEBench coefficient.
PDEBENCH_BUMPS = 5
#: CG tolerance of the ``pcg`` dataset path: past the round-off floor of the true residual
#: (about 1e-11 at K = 421), so the result is as exact as the direct solve.
PCG_DATASET_RTOL = 1e-12


def _positive_finite(name: str, value: Any) -> None:
    if not (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")


@dataclasses.dataclass(frozen=True)
class DarcyConfig:
    """Configuration of :class:`Darcy` (non-dimensional, unit square).

    Parameters
    ----------
    resolution : int
        Stored points per side (the dataset's ``x`` and ``y``), strided from the solve. With
        ``grid="nodes"``, nodes with the boundary included and ``(K - 1)`` a multiple of
        ``resolution - 1``: 421 -> 211, 141, 106, 85, 71, 61, 43, 29. With ``grid="cells"``,
        cell centres and N a multiple of ``resolution``: 128 -> 128, 64, 32.
    simulation_resolution : int
        Points per side of the finite-difference solve: K nodes, boundary included (FNO: 421),
        or N cell centres (``grid="cells"``; PDEBench: 128).
    coefficient_high : float
        Value of a where the GRF is >= 0 (FNO: 12), or where the bump field exceeds its mean
        (``coefficient="bumps"``; PDEBench: 1).
    coefficient_low : float
        Value of a elsewhere (paper: 3; FNO's original script: 4; PDEBench: 0.1).
    forcing : float
        Constant source f (FNO: 1), PDEBench's β (0.01, 0.1, 1, 10 or 100; MNO: 1), which
        must be positive with ``coefficient="bumps"``. :meth:`Darcy.solve` also takes a field.
    alpha : float
        Smoothness of the coefficient's Neumann GRF, covariance ∝ (−Δ + τ²I)^(−α) (FNO: 2).
        Unused with ``coefficient="bumps"``.
    tau : float
        Inverse length scale τ of the coefficient's GRF (FNO: 3). Unused with
        ``coefficient="bumps"``.
    linear_solver : {"direct", "pcg"}
        How datasets are solved: ``direct`` (SuperLU factorisation, the default) or ``pcg``
        (preconditioned CG to a recurrence residual of 1e-12, i.e. to round-off; about 4x
        faster at K = 421).
    grid : {"nodes", "cells"}
        ``nodes`` (FNO): K nodes per side including the boundary, h = 1/(K−1). ``cells``
        (PDEBench): N cell centres x_i = (i + ½)/N, h = 1/N, u = 0 on ghost nodes at −h/2 and
        1 + h/2 (see :class:`Darcy`).
    coefficient : {"grf", "bumps"}
        ``grf`` (FNO): thresholded Neumann GRF. ``bumps`` (PDEBench): 5 Gaussian bumps
        thresholded at the sample's own mean (see :meth:`Darcy.bumps`).
    """

    resolution: int = 85
    simulation_resolution: int = 421
    coefficient_high: float = 12.0
    coefficient_low: float = 3.0
    forcing: float = 1.0
    alpha: float = 2.0
    tau: float = 3.0
    linear_solver: str = "direct"
    grid: str = "nodes"
    coefficient: str = "grf"

    def __post_init__(self) -> None:
        if self.linear_solver not in LINEAR_SOLVERS:
            raise ValueError(f"unknown linear_solver {self.linear_solver!r}; choose one of "
                             f"{LINEAR_SOLVERS}")
        if self.grid not in GRIDS:
            raise ValueError(f"unknown grid {self.grid!r}; choose one of {GRIDS}")
        if self.coefficient not in COEFFICIENTS:
            raise ValueError(f"unknown coefficient {self.coefficient!r}; choose one of "
                             f"{COEFFICIENTS}")
        cells = self.grid == "cells"
        k = self.simulation_resolution
        lowest = 1 if cells else 3
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) \
                or not lowest <= k <= 2 ** 16:
            raise ValueError(f"simulation_resolution must be an integer in {lowest}..65536 (a "
                             f"larger sparse solve does not fit in memory), got {k!r}")
        r = self.resolution
        integer = not isinstance(r, bool) and isinstance(r, (int, np.integer))
        if cells and not (integer and r >= 1 and k % r == 0):
            valid = [s for s in range(k, 0, -1) if k % s == 0]
            raise ValueError(
                f"stored resolution {r!r} does not fit the solve resolution N = {k} cells: N "
                f"must be a multiple of resolution (cell centres are strided). Choose one of "
                f"{valid[:10]}")
        if not cells and not (integer and r >= 2 and (k - 1) % (r - 1) == 0):
            valid = [s for s in range(k, 1, -1) if (k - 1) % (s - 1) == 0]
            raise ValueError(
                f"stored resolution {r!r} does not fit the solve resolution K = {k}: K - 1 = "
                f"{k - 1} must be a multiple of resolution - 1 (frames are strided). Choose one "
                f"of {valid[:10]}")
        for name in ("coefficient_high", "coefficient_low", "alpha", "tau"):
            _positive_finite(name, getattr(self, name))
        if not (isinstance(self.forcing, (int, float)) and math.isfinite(self.forcing)):
            raise ValueError(f"forcing must be a finite number, got {self.forcing!r}")
        if self.coefficient == "bumps" and not self.forcing > 0:
            raise ValueError(f"forcing (PDEBench's β) must be a positive finite number with "
                             f"coefficient='bumps' (PDEBench: 0.01, 0.1, 1, 10, 100), got "
                             f"{self.forcing!r}")

    @property
    def stride(self) -> int:
        if self.grid == "cells":
            return self.simulation_resolution // self.resolution
        return (self.simulation_resolution - 1) // (self.resolution - 1)

    @property
    def nodes(self) -> int:
        """Nodes per side of the finite-difference grid, the Dirichlet nodes included: K, or
        N + 2 with ``grid="cells"`` (the ghost nodes)."""
        k = self.simulation_resolution
        return k + 2 if self.grid == "cells" else k

    @property
    def inverse_h2(self) -> int:
        """1/h²: (K − 1)², or N² with ``grid="cells"``."""
        k = self.simulation_resolution
        return k ** 2 if self.grid == "cells" else (k - 1) ** 2


def _face_coefficients(a: np.ndarray):
    """Arithmetic means of ``a`` on the four faces of every interior node, each ``(n, n)``."""
    across_x = 0.5 * (a[1:-1, :-1] + a[1:-1, 1:])  # between columns c and c+1, interior rows
    across_y = 0.5 * (a[:-1, 1:-1] + a[1:, 1:-1])  # between rows r and r+1, interior columns
    return across_x[:, :-1], across_x[:, 1:], across_y[:-1, :], across_y[1:, :]


def _matrix(a: np.ndarray, inverse_h2: float | None = None) -> sparse.csc_matrix:
    """The 5-point operator on the interior nodes, row-major, vectorised (see :class:`Darcy`).

    ``a`` holds every node, the Dirichlet ones included; ``inverse_h2`` is 1/h², default
    (K − 1)² (nodes spanning the unit square).
    """
    k = a.shape[-1]
    n = k - 2
    scale = float((k - 1) ** 2 if inverse_h2 is None else inverse_h2)
    west, east, south, north = _face_coefficients(a)
    diagonal = (west + east + south + north).ravel()
    along_x = -east.copy()
    along_x[:, -1] = 0.0  # the last interior column has no interior east neighbour
    along_x = along_x.ravel()[:-1]
    along_y = -north[:-1, :].ravel()
    if n == 1:  # a single unknown: the ±1 and ±n diagonals do not exist
        return sparse.csc_matrix(diagonal[:, None] * scale)
    matrix = sparse.diags([diagonal, along_x, along_x, along_y, along_y], [0, 1, -1, n, -n],
                          shape=(n * n, n * n), format="csc")
    return matrix * scale


def reference_matrix(a: np.ndarray) -> sparse.csr_matrix:
    """The same operator assembled node by node with Python loops (test oracle, benchmark).

    For interior node (i, j) with h = 1/(K−1) and face values a_{i±½,j} = (a_{i,j} + a_{i±1,j})/2:
    (Σ_faces a_face u_{ij} − Σ_neighbours a_face u_nb) / h² = f_{ij}; boundary neighbours are 0.
    """
    k = a.shape[-1]
    n = k - 2
    rows, cols, values = [], [], []
    for i in range(1, k - 1):
        for j in range(1, k - 1):
            row = (i - 1) * n + (j - 1)
            centre = 0.0
            for di, dj in ((0, -1), (0, 1), (-1, 0), (1, 0)):
                face = 0.5 * (a[i, j] + a[i + di, j + dj])
                centre += face
                ii, jj = i + di, j + dj
                if 1 <= ii <= k - 2 and 1 <= jj <= k - 2:
                    rows.append(row)
                    cols.append((ii - 1) * n + (jj - 1))
                    values.append(-face * (k - 1) ** 2)
            rows.append(row)
            cols.append(row)
            values.append(centre * (k - 1) ** 2)
    return sparse.csr_matrix((values, (rows, cols)), shape=(n * n, n * n))


class _LaplacianPreconditioner(sparse_linalg.LinearOperator):
    """Inverse of c·L, L the constant-coefficient 5-point Dirichlet Laplacian, by DST-I.

    Since xᵀAx = Σ_faces a_f (Dx)_f² and xᵀLx = Σ_faces (Dx)_f², the preconditioned matrix has
    condition number ≤ max(a) / min(a) (4 for the FNO coefficient) at every resolution.
    """

    def __init__(self, k: int, scale: float, inverse_h2: int | None = None) -> None:
        n = k - 2
        p = np.arange(1, n + 1)
        eig_1d = 4.0 * np.sin(p * np.pi / (2 * (n + 1))) ** 2 \
            * ((k - 1) ** 2 if inverse_h2 is None else inverse_h2)
        self._inverse_eigenvalues = 1.0 / (scale * (eig_1d[:, None] + eig_1d[None, :]))
        self._n = n
        super().__init__(dtype=np.float64, shape=(n * n, n * n))

    def _matvec(self, r):
        r = np.reshape(r, (self._n, self._n))
        modes = scipy.fft.dstn(r, type=1, norm="ortho")  # orthonormal DST-I is its own inverse
        return scipy.fft.dstn(modes * self._inverse_eigenvalues, type=1, norm="ortho").ravel()


@register_solver("darcy")
class Darcy(Solver):
    r"""Steady Darcy flow with a piecewise-constant coefficient (FNO's and PDEBench's benchmarks).

    .. math:: -\nabla\cdot(a(x)\,\nabla u(x)) = f(x) \text{ on } (0,1)^2,\qquad u = 0 \text{ on } \partial(0,1)^2.

    Discretisation (FNO's ``solve_gwf``): K nodes per side **including** the boundary nodes,
    h = 1/(K−1); the 5-point stencil on the (K−2)² interior nodes with face coefficients the
    arithmetic mean of the two nodes they join; Dirichlet 0. The matrix is symmetric positive
    definite; :meth:`solve` factorises it (SuperLU, minimum-degree ordering on AᵀA+A),
    :meth:`solve_iterative` runs preconditioned CG from a given initial guess.

    Coefficient: the Neumann GRF (α = 2, τ = 3, covariance ∝ (−Δ + 9I)^−2) sampled directly at
    the K×K nodes and thresholded: ``a = coefficient_high`` where it is >= 0, else
    ``coefficient_low``. (FNO sampled a cell-centred field and interpolated it to the nodes
    with splines; sampling at the nodes is equivalent in law up to that interpolation.)

    Conventions: arrays are ``[..., y, x]`` over all K nodes, boundary included; the solution
    is 0 on the boundary nodes. Stored frames are strided from the K grid (421 -> 85 takes
    every 5th node), never solved on the coarse grid: with a discontinuous coefficient the
    scheme is only about first-order accurate, so benchmark data come from the fine solve.

    Good values: K = 421 (FNO), stored at 85 (GeoMaNO, LaMO), 141, 211 or 29.

    **PDEBench variant** (preset ``pdebench-like``; the 2D Darcy data of PDEBench, used by MNO
    with β = 1): −∇·(a∇u) = β, N = 128 cells per side, a = 1 where the sum of 5 Gaussian bumps
    g(x) = Σᵢ exp(−|x − mᵢ|²/sᵢ) exceeds its mean and a = 0.1 elsewhere, with centres
    mᵢ ~ U[0,1]² and widths sᵢ = 0.5·U (divided by sᵢ, not sᵢ², as in PDEBench's code); see
    :meth:`bumps`. β is ``forcing`` (PDEBench: 0.01, 0.1, 1, 10, 100).

    Grid ``cells`` (PDEBench's code): the unknowns sit at the N×N cell centres
    x_i = (i + ½)/N, h = 1/N; the arrays of :meth:`coefficient`, :meth:`solve` and the dataset
    hold those cells only. The same 5-point operator as above runs on N + 2 nodes per side:
    u = 0 on ghost nodes at −h/2 and 1 + h/2 (PDEBench sets its ghost cells to 0, which puts
    the Dirichlet condition half a cell outside the square, an O(h) shift), and a on a ghost
    node copies its neighbour, so a boundary face has the coefficient of its cell. This is
    exactly the discrete operator whose steady state PDEBench time-steps towards. Stored
    points are strided cell centres, x = (r·i + ½)/N for stride r: ``resolution=64`` from
    N = 128 takes every other cell, as PDEBench's loaders do with ``reduced_resolution=2``
    (the "64² from 128²" comparisons); ``a`` stays two-valued and u is the fine solve.
    Average pooling onto the coarse cell centres would blur ``a`` and is not offered.

    Departures from PDEBench, hence "-like": (1) PDEBench thresholds at the mean of g over a
    whole run of 200 samples; here each sample is thresholded at its own mean, so sample i
    does not depend on its batch, and the fraction with a = 1 varies from sample to sample
    about its average. (2) PDEBench reaches the "steady state" by explicit time stepping to
    t = 2 from a random initial state; here the steady equations are solved directly (to
    round-off), so u has no remaining transient.

    References
    ----------
    Li et al., "Fourier Neural Operator for Parametric PDEs", ICLR 2021.
    Takamoto et al., "PDEBench: An Extensive Benchmark for Scientific Machine Learning",
    NeurIPS 2022 Datasets and Benchmarks.
    Cheng et al., "Mamba Neural Operator: Who Wins? Transformers vs. State-Space Models for
    PDEs", arXiv:2410.02113.

    Example
    -------
    >>> darcy = Darcy(resolution=11, simulation_resolution=21)
    >>> a = darcy.coefficient(seed=0, indices=[0, 1])
    >>> darcy.solve(a).shape
    (2, 21, 21)
    >>> pdebench = Darcy.from_preset("pdebench-like", resolution=8, simulation_resolution=16)
    >>> a = pdebench.coefficient(seed=0, indices=[0])
    >>> sorted(set(a.ravel().tolist()))
    [0.1, 1.0]
    """

    Config = DarcyConfig
    fields = ("u",)
    #: u = 0 on the whole boundary (with ``grid="cells"``, on ghost nodes half a cell outside).
    boundary_conditions = "dirichlet"
    title = "Darcy flow -div(a grad u) = f on the unit square, u = 0 on the boundary"
    references = "Li et al., Fourier Neural Operator for Parametric PDEs, ICLR 2021"
    PRESETS = {
        "fno": dict(resolution=85, simulation_resolution=421, coefficient_low=3.0),
        "fno-original": dict(resolution=85, simulation_resolution=421, coefficient_low=4.0),
        "pdebench-like": dict(resolution=128, simulation_resolution=128, grid="cells",
                              coefficient="bumps", coefficient_high=1.0, coefficient_low=0.1,
                              forcing=1.0),
    }
    TINY = dict(resolution=9, simulation_resolution=17)

    def __init__(self, *, threads: int | None = None, **config: Any) -> None:
        super().__init__(**config)
        self.threads = solver_threads() if threads is None else max(1, int(threads))
        self._grf: NeumannGRF | None = None
        if self.config.coefficient == "bumps":
            self.references = (f"{type(self).references}; Takamoto et al., PDEBench: An "
                               "Extensive Benchmark for Scientific Machine Learning, NeurIPS "
                               "2022 Datasets and Benchmarks; Cheng et al., Mamba Neural "
                               "Operator, arXiv:2410.02113")

    # -- grid --------------------------------------------------------------------------------
    def points(self) -> np.ndarray:
        """Coordinates of the solve's points along either axis: the K nodes ``linspace(0, 1,
        K)``, or the N cell centres ``(i + 0.5) / N`` (``grid="cells"``)."""
        k = self.config.simulation_resolution
        if self.config.grid == "cells":
            return (np.arange(k) + 0.5) / k
        return np.linspace(0.0, 1.0, k)

    def _interior(self) -> tuple[slice, slice]:
        """Where the unknowns sit in a ``[K, K]`` (or ``[N, N]``) array."""
        inner = slice(None) if self.config.grid == "cells" else slice(1, -1)
        return inner, inner

    def _with_ghosts(self, a: np.ndarray) -> np.ndarray:
        """``a[K, K]`` on every node of the operator: cells get ghost nodes copying their
        neighbours (a boundary face then has the coefficient of its cell)."""
        return np.pad(a, 1, mode="edge") if self.config.grid == "cells" else a

    def _sample_matrix(self, a: np.ndarray) -> sparse.csc_matrix:
        return _matrix(self._with_ghosts(a), self.config.inverse_h2)

    # -- inputs ------------------------------------------------------------------------------
    def bumps(self, seed: int, indices: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """Centres and widths of the Gaussian bumps of ``coefficient="bumps"`` (PDEBench).

        Sample i draws, from stream 0 of its seed, the 5 x-coordinates, then the 5
        y-coordinates of the centres (each U[0, 1)), then the widths s = 0.5 (1 − U),
        U ~ U[0, 1): PDEBench's law s ~ 0.5·U[0, 1], never 0.

        Returns
        -------
        centres : numpy.ndarray ``[batch, 5, 2]``
            ``(x, y)`` of each bump.
        widths : numpy.ndarray ``[batch, 5]``
        """
        centres = np.empty((len(indices), PDEBENCH_BUMPS, 2))
        widths = np.empty((len(indices), PDEBENCH_BUMPS))
        for row, index in enumerate(indices):
            rng = sample_rng(seed, index, stream=0)
            centres[row, :, 0] = rng.uniform(0.0, 1.0, PDEBENCH_BUMPS)
            centres[row, :, 1] = rng.uniform(0.0, 1.0, PDEBENCH_BUMPS)
            widths[row] = 0.5 * (1.0 - rng.random(PDEBENCH_BUMPS))
        return centres, widths

    def coefficient(self, seed: int, indices: Sequence[int]) -> np.ndarray:
        """Thresholded coefficients ``[batch, K, K]``, sample i from stream 0 of its seed.

        ``coefficient="grf"``: the Neumann GRF, ``coefficient_high`` where it is >= 0.
        ``coefficient="bumps"``: g(x) = Σᵢ exp(−|x − mᵢ|²/sᵢ) at the solve's points (see
        :meth:`bumps`), ``coefficient_high`` where g is above the sample's own mean of g.
        Elsewhere ``coefficient_low``.
        """
        cfg = self.config
        if cfg.coefficient == "bumps":
            centres, widths = self.bumps(seed, indices)
            x = self.points()
            g = np.zeros((len(indices), x.size, x.size))
            with np.errstate(under="ignore"):  # narrow bumps vanish far from their centre
                for b in range(PDEBENCH_BUMPS):
                    across = (x[None, :] - centres[:, b, 0, None]) ** 2  # [batch, x]
                    along = (x[None, :] - centres[:, b, 1, None]) ** 2  # [batch, y]
                    g += np.exp(-(along[:, :, None] + across[:, None, :])
                                / widths[:, b, None, None])
            above = g > g.mean(axis=(1, 2), keepdims=True)
            return np.where(above, cfg.coefficient_high, cfg.coefficient_low)
        if self._grf is None:
            self._grf = NeumannGRF(cfg.simulation_resolution, alpha=cfg.alpha, tau=cfg.tau)
        field = self._grf.sample_batch([sample_rng(seed, index, stream=0) for index in indices])
        return np.where(field >= 0, cfg.coefficient_high, cfg.coefficient_low)

    def _check_coefficient(self, a: np.ndarray) -> np.ndarray:
        k = self.config.simulation_resolution
        a = np.asarray(a, dtype=np.float64)
        if a.ndim != 3 or a.shape[1:] != (k, k):
            points = ("N = simulation_resolution cell centres per side" if
                      self.config.grid == "cells" else
                      "K = simulation_resolution nodes per side, boundary included")
            raise ValueError(f"coefficient must have shape [batch, {k}, {k}] ({points}), got "
                             f"{a.shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"coefficient contains {np.count_nonzero(~np.isfinite(a))} NaN or "
                             "infinite values")
        if np.any(a <= 0):
            raise ValueError(f"coefficient must be positive everywhere (the operator is then "
                             f"elliptic); found {np.count_nonzero(a <= 0)} values <= 0, "
                             f"minimum {a.min():g}")
        return a

    def _right_hand_sides(self, f, batch: int) -> np.ndarray:
        k = self.config.simulation_resolution
        f = np.asarray(self.config.forcing if f is None else f, dtype=np.float64)
        if f.ndim == 0:
            f = np.full((k, k), float(f))
        if f.shape not in ((k, k), (batch, k, k)):
            raise ValueError(f"forcing must be a number or have shape [{k}, {k}] or "
                             f"[{batch}, {k}, {k}], got {f.shape}")
        if not np.all(np.isfinite(f)):
            raise ValueError("forcing contains NaN or infinite values")
        f = np.broadcast_to(f, (batch, k, k))
        return f[(slice(None), *self._interior())].reshape(batch, -1)

    def _map(self, function: Callable[[int], None], count: int) -> None:
        # SuperLU and the FFTs release the GIL: independent samples run side by side.
        if self.threads == 1 or count == 1:
            for index in range(count):
                function(index)
            return
        with ThreadPoolExecutor(min(self.threads, count)) as pool:
            for future in [pool.submit(function, index) for index in range(count)]:
                future.result()

    # -- solvers -----------------------------------------------------------------------------
    def matrix(self, a: np.ndarray) -> sparse.csc_matrix:
        """The SPD finite-difference matrix for one coefficient ``a[K, K]`` (interior nodes;
        with ``grid="cells"``, ``a[N, N]`` and every cell)."""
        return self._sample_matrix(self._check_coefficient(np.asarray(a)[None])[0])

    def solve(self, a: np.ndarray, f: float | np.ndarray | None = None, *,
              progress: Callable[[float], None] | None = None) -> np.ndarray:
        """Direct solve for a batch of coefficients.

        Parameters
        ----------
        a : array, shape ``[batch, K, K]``
            Positive coefficient at every node, boundary included (``grid="cells"``: at
            every cell centre).
        f : float or array ``[K, K]`` or ``[batch, K, K]``, optional
            Source; default the config's constant ``forcing``. Boundary values are unused
            (``grid="cells"``: every cell is an unknown).

        Returns
        -------
        numpy.ndarray, shape ``[batch, K, K]``: u, zero on the boundary nodes (``grid="cells"``:
        u at every cell; its zeros are on the ghost nodes, outside the array).
        """
        a = self._check_coefficient(a)
        rhs = self._right_hand_sides(f, a.shape[0])
        n = self.config.nodes - 2
        inner = self._interior()
        u = np.zeros_like(a)

        def one(index: int) -> None:
            factor = sparse_linalg.splu(self._sample_matrix(a[index]),
                                        permc_spec="MMD_AT_PLUS_A")
            u[(index, *inner)] = factor.solve(rhs[index]).reshape(n, n)
            if progress is not None:
                progress(1.0 / a.shape[0])

        self._map(one, a.shape[0])
        return u

    def solve_iterative(self, a: np.ndarray, f: float | np.ndarray | None = None, *,
                        x0: np.ndarray | None = None, rtol: float = 1e-10,
                        maxiter: int | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Preconditioned conjugate gradients from an initial guess (warm starts).

        The preconditioner is the constant-coefficient Laplacian scaled by mean(a), inverted by
        a fast sine transform; it bounds the condition number by max(a)/min(a), so the
        iteration count does not grow with K.

        Parameters
        ----------
        a, f
            As :meth:`solve`.
        x0 : array ``[batch, K, K]``, optional
            Initial guess (boundary values ignored); default zero.
        rtol : float
            Stop when ||f − A u|| <= rtol ||f|| (2-norms over the interior nodes).
        maxiter : int, optional
            Iteration cap per sample (default 10·K).

        Returns
        -------
        u : numpy.ndarray ``[batch, K, K]``
        info : dict
            ``iterations`` (int ``[batch]``); ``converged`` (bool ``[batch]``: CG's recurrence
            residual reached ``rtol``); ``residual`` (the true relative residual
            ||f − A u|| / ||f||, recomputed: it floors at round-off, about 1e-11 at K = 421).
        """
        if not (isinstance(rtol, (int, float)) and 0 < rtol < 1):
            raise ValueError(f"rtol must be in (0, 1), got {rtol!r}")
        a = self._check_coefficient(a)
        batch, k = a.shape[0], a.shape[-1]
        rhs = self._right_hand_sides(f, batch)
        if x0 is not None:
            x0 = np.asarray(x0, dtype=np.float64)
            if x0.shape != a.shape or not np.all(np.isfinite(x0)):
                raise ValueError(f"x0 must be a finite array of shape {a.shape}, got "
                                 f"{x0.shape}")
        nodes, n, inner = self.config.nodes, self.config.nodes - 2, self._interior()
        u = np.zeros_like(a)
        iterations = np.zeros(batch, dtype=np.int64)
        residual = np.zeros(batch)
        converged = np.zeros(batch, dtype=bool)
        limit = 10 * k if maxiter is None else int(maxiter)

        def one(index: int) -> None:
            matrix = self._sample_matrix(a[index])
            count = [0]

            def tick(_):
                count[0] += 1

            start = None if x0 is None else x0[(index, *inner)].ravel()
            preconditioner = _LaplacianPreconditioner(nodes, float(a[index].mean()),
                                                      self.config.inverse_h2)
            solution, status = sparse_linalg.cg(
                matrix, rhs[index], x0=start, rtol=rtol, atol=0.0, maxiter=limit,
                M=preconditioner, callback=tick)
            u[(index, *inner)] = solution.reshape(n, n)
            iterations[index] = count[0]
            converged[index] = status == 0
            norm = np.linalg.norm(rhs[index])
            residual[index] = np.linalg.norm(rhs[index] - matrix @ solution) / (norm or 1.0)

        self._map(one, batch)
        return u, {"iterations": iterations, "residual": residual, "converged": converged}

    # -- dataset generation ------------------------------------------------------------------
    def sample_inputs(self, seed: int, indices: Sequence[int]) -> dict[str, np.ndarray]:
        return {"a": self.coefficient(seed, indices)}

    def solve_batch(self, inputs: Mapping[str, np.ndarray], *,
                    progress: Callable[[float], None] | None = None) -> dict[str, np.ndarray]:
        a = inputs["a"]
        if self.config.linear_solver == "direct":
            u = self.solve(a, progress=progress)
        else:
            u, info = self.solve_iterative(a, rtol=PCG_DATASET_RTOL)
            if not np.all(info["converged"]):
                raise RuntimeError(f"PCG did not converge for batch rows "
                                   f"{np.flatnonzero(~info['converged']).tolist()}: use "
                                   "linear_solver='direct'")
            if progress is not None:
                progress(1.0)
        r = self.config.stride
        return {"a": a[:, ::r, ::r], "u": u[:, ::r, ::r]}

    def variables(self) -> dict[str, VariableSpec]:
        space = (Y, X)
        # The coefficient is a known grid field (the operator's input); u is the solution.
        return {"a": VariableSpec(space, "diffusion coefficient", "1", role="forcing"),
                "u": VariableSpec(space, "solution (pressure)", "1", role="state")}

    def coordinates(self) -> dict[str, xr.DataArray]:
        cfg = self.config
        if cfg.grid == "nodes":
            return grid_coordinates(cfg.resolution, ndim=2, endpoint=True)
        values = self.points()[::cfg.stride]
        # Point values of the finite-difference unknowns at (strided) cell centres, not cell
        # averages: no cell_methods.
        return {dim: spatial_coordinate(
            dim, values, placement="cell_centres",
            long_name=f"{dim} coordinate (cell centres (i + 1/2)/{cfg.simulation_resolution}"
                      f", every {cfg.stride})") for dim in (Y, X)}

    # -- memory estimate ---------------------------------------------------------------------
    def stored_bytes_per_sample(self) -> int:
        r = self.config.resolution
        return self._stored_bytes({Y: r, X: r})

    def bytes_per_sample(self) -> int:
        """Stored output plus the solve of one sample on the K x K grid: the coefficient, its
        GRF, u, the right-hand side and the matrix (about 16 float64 a node), and the sparse
        LU factor of the direct solver (SuperLU, MMD ordering: measured 85, 83, 92 and 107
        float64 a node at K = 129, 211, 421 and 841, estimated as 12 log2(K)) or the CG
        work vectors and preconditioner of ``pcg``."""
        k = self.config.nodes
        nodes = k * k
        work = 16 * nodes * 8
        if self.config.linear_solver == "direct":
            work += math.ceil(12 * math.log2(k)) * nodes * 8
        else:
            work += 16 * nodes * 8
        return self.stored_bytes_per_sample() + work
