"""Steady Darcy flow −∇·(a∇u) = f on the unit square, u = 0 on the boundary (finite differences).

See ``shared/specs/solvers.md``, section "Darcy flow": FNO's ``solve_gwf`` discretisation, the
thresholded Neumann-GRF coefficient, and the strided benchmark resolutions.
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

from .. import data
from .base import Solver, VariableSpec, register_solver
from .random_fields import NeumannGRF, sample_rng
from .spectral import default_threads

__all__ = ["Darcy", "DarcyConfig", "reference_matrix"]

LINEAR_SOLVERS = ("direct", "pcg")
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
        Stored nodes per side, boundary included (the dataset's ``x`` and ``y``). ``(K - 1)``
        must be a multiple of ``resolution - 1``: 421 -> 211, 141, 106, 85, 71, 61, 43, 29.
    simulation_resolution : int
        K, the nodes per side of the finite-difference solve, boundary included (FNO: 421).
    coefficient_high : float
        Value of a where the GRF is >= 0 (FNO: 12).
    coefficient_low : float
        Value of a where the GRF is < 0 (paper: 3; FNO's original script: 4).
    forcing : float
        Constant source f (FNO: 1). :meth:`Darcy.solve` also takes a field.
    alpha : float
        Smoothness of the coefficient's Neumann GRF, covariance ∝ (−Δ + τ²I)^(−α) (FNO: 2).
    tau : float
        Inverse length scale τ of the coefficient's GRF (FNO: 3).
    linear_solver : {"direct", "pcg"}
        How datasets are solved: ``direct`` (SuperLU factorisation, the default) or ``pcg``
        (preconditioned CG to a recurrence residual of 1e-12, i.e. to round-off; about 4x
        faster at K = 421).
    """

    resolution: int = 85
    simulation_resolution: int = 421
    coefficient_high: float = 12.0
    coefficient_low: float = 3.0
    forcing: float = 1.0
    alpha: float = 2.0
    tau: float = 3.0
    linear_solver: str = "direct"

    def __post_init__(self) -> None:
        if self.linear_solver not in LINEAR_SOLVERS:
            raise ValueError(f"unknown linear_solver {self.linear_solver!r}; choose one of "
                             f"{LINEAR_SOLVERS}")
        k = self.simulation_resolution
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 3 <= k <= 2 ** 16:
            raise ValueError(f"simulation_resolution must be an integer in 3..65536 (a "
                             f"larger sparse solve does not fit in memory), got {k!r}")
        r = self.resolution
        if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or r < 2 \
                or (k - 1) % (r - 1):
            valid = [s for s in range(k, 1, -1) if (k - 1) % (s - 1) == 0]
            raise ValueError(
                f"stored resolution {r!r} does not fit the solve resolution K = {k}: K - 1 = "
                f"{k - 1} must be a multiple of resolution - 1 (frames are strided). Choose one "
                f"of {valid[:10]}")
        for name in ("coefficient_high", "coefficient_low", "alpha", "tau"):
            _positive_finite(name, getattr(self, name))
        if not (isinstance(self.forcing, (int, float)) and math.isfinite(self.forcing)):
            raise ValueError(f"forcing must be a finite number, got {self.forcing!r}")

    @property
    def stride(self) -> int:
        return (self.simulation_resolution - 1) // (self.resolution - 1)


def _face_coefficients(a: np.ndarray):
    """Arithmetic means of ``a`` on the four faces of every interior node, each ``(n, n)``."""
    across_x = 0.5 * (a[1:-1, :-1] + a[1:-1, 1:])  # between columns c and c+1, interior rows
    across_y = 0.5 * (a[:-1, 1:-1] + a[1:, 1:-1])  # between rows r and r+1, interior columns
    return across_x[:, :-1], across_x[:, 1:], across_y[:-1, :], across_y[1:, :]


def _matrix(a: np.ndarray) -> sparse.csc_matrix:
    """The 5-point operator on the interior nodes, row-major, vectorised (see :class:`Darcy`)."""
    k = a.shape[-1]
    n = k - 2
    west, east, south, north = _face_coefficients(a)
    diagonal = (west + east + south + north).ravel()
    along_x = -east.copy()
    along_x[:, -1] = 0.0  # the last interior column has no interior east neighbour
    along_x = along_x.ravel()[:-1]
    along_y = -north[:-1, :].ravel()
    if n == 1:  # a single unknown: the ±1 and ±n diagonals do not exist
        return sparse.csc_matrix(diagonal[:, None] * float((k - 1) ** 2))
    matrix = sparse.diags([diagonal, along_x, along_x, along_y, along_y], [0, 1, -1, n, -n],
                          shape=(n * n, n * n), format="csc")
    return matrix * float((k - 1) ** 2)


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

    def __init__(self, k: int, scale: float) -> None:
        n = k - 2
        p = np.arange(1, n + 1)
        eig_1d = 4.0 * np.sin(p * np.pi / (2 * (n + 1))) ** 2 * (k - 1) ** 2
        self._inverse_eigenvalues = 1.0 / (scale * (eig_1d[:, None] + eig_1d[None, :]))
        self._n = n
        super().__init__(dtype=np.float64, shape=(n * n, n * n))

    def _matvec(self, r):
        r = np.reshape(r, (self._n, self._n))
        modes = scipy.fft.dstn(r, type=1, norm="ortho")  # orthonormal DST-I is its own inverse
        return scipy.fft.dstn(modes * self._inverse_eigenvalues, type=1, norm="ortho").ravel()


@register_solver("darcy")
class Darcy(Solver):
    r"""Steady Darcy flow with a piecewise-constant coefficient (FNO's benchmark).

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

    References
    ----------
    Li et al., "Fourier Neural Operator for Parametric PDEs", ICLR 2021.

    Example
    -------
    >>> darcy = Darcy(resolution=11, simulation_resolution=21)
    >>> a = darcy.coefficient(seed=0, indices=[0, 1])
    >>> darcy.solve(a).shape
    (2, 21, 21)
    """

    Config = DarcyConfig
    fields = ("u",)
    title = "Darcy flow -div(a grad u) = f on the unit square, u = 0 on the boundary"
    references = "Li et al., Fourier Neural Operator for Parametric PDEs, ICLR 2021"
    PRESETS = {
        "fno": dict(resolution=85, simulation_resolution=421, coefficient_low=3.0),
        "fno-original": dict(resolution=85, simulation_resolution=421, coefficient_low=4.0),
    }
    TINY = dict(resolution=9, simulation_resolution=17)

    def __init__(self, *, threads: int | None = None, **config: Any) -> None:
        super().__init__(**config)
        self.threads = default_threads() if threads is None else max(1, int(threads))
        self._grf: NeumannGRF | None = None

    # -- inputs ------------------------------------------------------------------------------
    def coefficient(self, seed: int, indices: Sequence[int]) -> np.ndarray:
        """Thresholded GRF coefficients ``[batch, K, K]``, sample i from stream 0 of its seed."""
        cfg = self.config
        if self._grf is None:
            self._grf = NeumannGRF(cfg.simulation_resolution, alpha=cfg.alpha, tau=cfg.tau)
        field = self._grf.sample_batch([sample_rng(seed, index, stream=0) for index in indices])
        return np.where(field >= 0, cfg.coefficient_high, cfg.coefficient_low)

    def _check_coefficient(self, a: np.ndarray) -> np.ndarray:
        k = self.config.simulation_resolution
        a = np.asarray(a, dtype=np.float64)
        if a.ndim != 3 or a.shape[1:] != (k, k):
            raise ValueError(f"coefficient must have shape [batch, {k}, {k}] (K = "
                             f"simulation_resolution nodes per side, boundary included), got "
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
        return f[:, 1:-1, 1:-1].reshape(batch, -1)

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
        """The SPD finite-difference matrix for one coefficient ``a[K, K]`` (interior nodes)."""
        return _matrix(self._check_coefficient(np.asarray(a)[None])[0])

    def solve(self, a: np.ndarray, f: float | np.ndarray | None = None, *,
              progress: Callable[[float], None] | None = None) -> np.ndarray:
        """Direct solve for a batch of coefficients.

        Parameters
        ----------
        a : array, shape ``[batch, K, K]``
            Positive coefficient at every node, boundary included.
        f : float or array ``[K, K]`` or ``[batch, K, K]``, optional
            Source; default the config's constant ``forcing``. Boundary values are unused.

        Returns
        -------
        numpy.ndarray, shape ``[batch, K, K]``: u, zero on the boundary nodes.
        """
        a = self._check_coefficient(a)
        rhs = self._right_hand_sides(f, a.shape[0])
        k = a.shape[-1]
        u = np.zeros_like(a)

        def one(index: int) -> None:
            factor = sparse_linalg.splu(_matrix(a[index]), permc_spec="MMD_AT_PLUS_A")
            u[index, 1:-1, 1:-1] = factor.solve(rhs[index]).reshape(k - 2, k - 2)
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
        u = np.zeros_like(a)
        iterations = np.zeros(batch, dtype=np.int64)
        residual = np.zeros(batch)
        converged = np.zeros(batch, dtype=bool)
        limit = 10 * k if maxiter is None else int(maxiter)

        def one(index: int) -> None:
            matrix = _matrix(a[index])
            count = [0]

            def tick(_):
                count[0] += 1

            start = None if x0 is None else x0[index, 1:-1, 1:-1].ravel()
            solution, status = sparse_linalg.cg(
                matrix, rhs[index], x0=start, rtol=rtol, atol=0.0, maxiter=limit,
                M=_LaplacianPreconditioner(k, float(a[index].mean())), callback=tick)
            u[index, 1:-1, 1:-1] = solution.reshape(k - 2, k - 2)
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
        space = (data.Y, data.X)
        # The coefficient is a known grid field (the operator's input); u is the solution.
        return {"a": VariableSpec(space, "diffusion coefficient", "1", role="forcing"),
                "u": VariableSpec(space, "solution (pressure)", "1", role="state")}

    def coordinates(self) -> dict[str, xr.DataArray]:
        return data.grid_coordinates(self.config.resolution, ndim=2, endpoint=True)

    # -- memory estimate ---------------------------------------------------------------------
    def stored_bytes_per_sample(self) -> int:
        r = self.config.resolution
        return self._stored_bytes({data.Y: r, data.X: r})

    def bytes_per_sample(self) -> int:
        """Stored output plus the solve of one sample on the K x K grid: the coefficient, its
        GRF, u, the right-hand side and the matrix (about 16 float64 a node), and the sparse
        LU factor of the direct solver (SuperLU, MMD ordering: measured 85, 83, 92 and 107
        float64 a node at K = 129, 211, 421 and 841, estimated as 12 log2(K)) or the CG
        work vectors and preconditioner of ``pcg``."""
        k = self.config.simulation_resolution
        nodes = k * k
        work = 16 * nodes * 8
        if self.config.linear_solver == "direct":
            work += math.ceil(12 * math.log2(k)) * nodes * 8
        else:
            work += 16 * nodes * 8
        return self.stored_bytes_per_sample() + work
