"""1D viscous Burgers equation on the periodic unit interval (pseudospectral, ETDRK4).

See ``docs/numerics/burgers.md``: the FNO paper's ν = 0.1 operator-learning data (u0 → u(1),
8192 → 1024 points) and the FNO repository's ν = 1e-3 trajectories. The scheme is that of
:class:`~ssmpde.solvers.semilinear.SemilinearSolver1D`; this module is its linear operator,
config and presets (the quadratic flux is the base's).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from .base import Checks, register_solver
from .random_fields import PeriodicGRF, sample_rng
from .semilinear import MAX_RESOLUTION, QuadraticFlux, SemilinearSolver1D, check_config

__all__ = ["Burgers1D", "BurgersConfig"]


@dataclasses.dataclass(frozen=True)
class BurgersConfig:
    """Configuration of :class:`Burgers1D` (non-dimensional, periodic [0, 1)).

    Parameters
    ----------
    resolution : int
        Stored grid points (the dataset's ``x``). Must divide ``simulation_resolution``;
        frames are strided (FNO: 8192 -> 1024, 512, 256).
    simulation_resolution : int
        Grid points N of the pseudospectral simulation (even), x_j = j / N.
    viscosity : float or (float, float)
        Viscosity ν; a pair ``(low, high)`` draws ν ~ U[low, high] per sample. Fronts are about
        4ν/Δu wide (Δu the jump across them): resolve them, N ≳ 2 / ν for O(1) data.
    final_time : float
        Simulated time T; ``final_time / record_interval + 1`` frames are stored (u0 first).
    record_interval : float
        Time between stored frames; one Stepper ``step`` advances this much.
    time_step : float
        The fixed ETDRK4 step h; must divide ``record_interval``. Diffusion is integrated
        exactly; the explicit flux needs roughly h · max|u| · k_c ≲ 5 with k_c = min(2πN/3,
        max|u|/ν) (presets: 1e-3 for ``fno``, 2.5e-4 for ``fno-script``, both
        within ~5e-8 of the converged solution).
    dealias : bool
        Zero the flux (u²/2)_x outside the 2/3 band (Orszag's rule).
    dtype : {"float64", "float32"}
        The arithmetic of the time stepping (stored frames are float64 either way). float32
        runs 1.1–1.2x faster; its error against float64 is in ``docs/numerics/float32.md``.
    alpha : float
        Smoothness exponent α of the initial-condition GRF, covariance σ²(−Δ + τ²)^(−α) (FNO
        paper: 2; FNO script: 2.5).
    tau : float
        Inverse length scale τ of that GRF (FNO paper: 5; FNO script: 7).
    sigma : float
        Amplitude σ of that GRF (FNO paper: 25, i.e. 625(−Δ + 25)^(−2); FNO script: 49).
    """

    resolution: int = 1024
    simulation_resolution: int = 8192
    viscosity: float | tuple[float, float] = 0.1
    final_time: float = 1.0
    record_interval: float = 1.0
    time_step: float = 1e-3
    dealias: bool = True
    dtype: str = "float64"
    alpha: float = 2.0
    tau: float = 5.0
    sigma: float = 25.0

    def __post_init__(self) -> None:
        check_config(self, positive=("alpha", "tau", "sigma"), ranged=("viscosity",),
                     maximum=MAX_RESOLUTION)


@register_solver("burgers")
class Burgers1D(SemilinearSolver1D):
    r"""1D viscous Burgers equation, periodic unit interval (pseudospectral, ETDRK4).

    .. math:: \partial_t u + \partial_x (u^2 / 2) = \nu\, \partial_{xx} u
              \quad \text{on } [0, 1) \text{ periodic},\quad x_j = j / N.

    Field: ``u`` (velocity, non-dimensional). Fourier pseudospectral in space with the
    quadratic flux dealiased by the 2/3 rule; in time Cox–Matthews ETDRK4 with Kassam–Trefethen
    contour coefficients (L = −ν k², k = 2π n, integrated exactly; the flux explicitly) at a
    fixed step ``time_step`` dividing ``record_interval`` (the scheme of
    :class:`~ssmpde.solvers.semilinear.SemilinearSolver1D`). The initial condition is a periodic
    GRF, covariance σ²(−Δ + τ²)^(−α) in FNO's convention (see :class:`PeriodicGRF`), mean zero.
    See :class:`BurgersConfig` for parameters.

    Conventions: a grid of ``N`` points does **not** include the right boundary point
    (``x_j = j / N``); states are ``[batch, 1, x]``. Stored frames are every ``s``-th simulation
    node (``s = simulation_resolution / resolution``), as FNO's 8192 → 1024 data were.

    Good values (measured on GRF samples, max relative deviation at the stored points):
    ``fno`` (ν = 0.1, N = 8192, h = 1e-3, max|u0| ≈ 2): 6e-9 from h = 2.5e-4; h = 1e-2 still
    gives 3e-6. ``fno-script`` (ν = 1e-3, N = 4096 → 1024, h = 2.5e-4, max|u0| ≈ 0.8): 4e-8
    from N = 8192, h = 2.5e-5 over T = 1; N = 1024 alone would be off by 1e-5. For other ν
    keep N ≳ 2 max|u| / ν.

    Stability: diffusion is exact, so only the explicit flux limits h, roughly
    h · max|u| · k_c ≲ 5 with k_c = min(2πN/3, max|u|/ν) (the advection-dominated band;
    measured: ``fno-script`` runs at h = 1e-2 and diverges at 2e-2; ``fno`` runs at h = 0.1,
    2e-3 off, and at h = 0.05, 1e-4 off: accuracy, not stability, picks h there). Beyond it
    the run blows up and :class:`SolverDivergedError` names the time and samples. Accuracy is
    fourth order in h. The spatial mean of u is conserved exactly (N̂(0) = 0, L(0) = 0); the
    Cole–Hopf transform gives exact solutions against which the tests check the solver.

    References
    ----------
    Li et al., "Fourier Neural Operator for Parametric PDEs", ICLR 2021 (Burgers data).
    Cox & Matthews, J. Comput. Phys. 176 (2002) 430–455 (ETDRK4).
    Kassam & Trefethen, SIAM J. Sci. Comput. 26 (2005) 1214–1233 (contour coefficients).

    Example
    -------
    >>> solver = Burgers1D(resolution=64, simulation_resolution=256, viscosity=0.05,
    ...                    final_time=0.5, record_interval=0.25, time_step=1e-3)
    >>> out = solver.solve_batch(solver.sample_inputs(seed=0, indices=[0, 1]))
    >>> out["u"].shape
    (2, 3, 64)
    """

    Config = BurgersConfig
    field_units = {"u": ("velocity", "1")}
    parameter_units = {"viscosity": ("viscosity", "1")}
    #: The unit interval: not a config option.
    domain_length = 1.0
    nonlinearity = QuadraticFlux()
    #: The flux is a divergence: the spatial mean of u is conserved.
    checks = Checks(conserved=("u",))
    title = "1D viscous Burgers equation on the periodic unit interval"
    references = ("Li et al., Fourier Neural Operator for Parametric PDEs, ICLR 2021; "
                  "Kassam & Trefethen, SIAM J. Sci. Comput. 26 (2005)")
    PRESETS = {
        "fno": dict(viscosity=0.1, resolution=1024, simulation_resolution=8192, final_time=1.0,
                    record_interval=1.0, time_step=1e-3, alpha=2.0, tau=5.0, sigma=25.0),
        "fno-script": dict(viscosity=1e-3, resolution=1024, simulation_resolution=4096,
                           final_time=1.0, record_interval=5e-3, time_step=2.5e-4, alpha=2.5,
                           tau=7.0, sigma=49.0),
    }
    TINY = dict(resolution=32, simulation_resolution=32, viscosity=(0.05, 0.1),
                final_time=0.1, record_interval=0.05, time_step=0.01)

    def initial_condition(self, seed: int, indices: Sequence[int]) -> np.ndarray:
        """Initial u ``[batch, 1, N]`` at the simulation resolution (stream 0)."""
        cfg = self.config
        grf = PeriodicGRF(cfg.simulation_resolution, ndim=1, alpha=cfg.alpha, tau=cfg.tau,
                          sigma=cfg.sigma)
        return grf.sample_batch([sample_rng(seed, index, stream=0) for index in indices])[:, None]

    def linear(self, n: int, parameters: Mapping[str, np.ndarray]) -> np.ndarray:
        """L = −ν k² on every rfft mode, the Nyquist mode's included: ``[batch, n // 2 + 1]``."""
        viscosity = np.asarray(parameters["viscosity"], dtype=np.float64).reshape(-1, 1)
        return -viscosity * self.wavenumbers(n, nyquist=True)[None, :] ** 2
