"""2D incompressible Navier–Stokes in vorticity form on the unit torus (pseudospectral).

The FNO scheme, faithfully, with its benchmark settings (FNO's ν = 1e-3, 1e-4, 1e-5 sets;
Li et al., Fourier Neural Operator for Parametric Partial Differential Equations, ICLR 2021),
and the TorusVis/TorusVisForce variants (Tran et al., Factorized Fourier Neural Operators,
ICLR 2023). See ``docs/numerics/navier_stokes.md``.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr

from ..data import TIME, X, Y
from .base import (Checks, SolverDivergedError, TimeDependentSolver, VariableSpec, check_ranged,
                   check_strided_grid, positive_finite, register_solver, whole_multiple)
from .navier_stokes_engine import IMEX_STAGES, Engine
from .random_fields import PeriodicGRF, sample_rng
from .solver import check_dtype
from .spectral import (RealFFT, advection, dealias_mask, etdrk4_coefficients, etdrk4_step,
                       spectral_resample, velocity_spectra, vorticity_wavenumbers)

__all__ = ["NavierStokes2D", "NavierStokesConfig", "SolverDivergedError", "etdrk4_operator",
           "forcing_field", "reference_advection", "reference_etdrk4_step", "reference_step"]

DOWNSAMPLINGS = ("stride", "spectral")
FORCINGS = ("fno", "torus-vis", "torus-vis-force", "kolmogorov", "none")
#: Kolmogorov flow's forcing wavenumber (Kochkov et al. 2021: sin(4y) on [0, 2π)²).
KOLMOGOROV_WAVENUMBER = 4
#: Largest grid side accepted (one 65536² complex field alone is 34 GB).
MAX_RESOLUTION = 2 ** 16
TIME_STEPPINGS = ("faithful", "cfl")
SCHEMES = ("euler-cn", "rk3-cn", "etdrk4")
#: Phase speed of the TorusVisForce forcing: phi = 0.2 t (F-FNO, Tran et al. 2023).
FORCING_PHASE_SPEED = 0.2
#: F-FNO forcing terms, in the order of the amplitudes alpha_1..alpha_6 (p = 1, 2 for each).
FORCING_TERMS = ("sin(2 pi p x + phi)", "cos(2 pi p x + phi)", "sin(2 pi p y + phi)",
                 "cos(2 pi p y + phi)", "sin(2 pi p (x+y) + phi)", "cos(2 pi p (x+y) + phi)")

#: What the Kolmogorov presets share: Kochkov's time unit (that of [0, 2π)², unchanged by the
#: rescaling to the unit torus), strong initial vorticity (pointwise std ≈ 10, his filtered
#: velocity field of maximum 7 at wavenumber 4), spun up before recording, ETDRK4.
KOLMOGOROV = dict(simulation_resolution=256, resolution=64, final_time=10.0,
                  record_interval=0.1, spin_up=50.0, scheme="etdrk4", time_step=1e-3,
                  alpha=2.5, tau=7.0, sigma=40 * 7.0 ** 1.5)
# time_step: the initial field's max(|u| + |v|) ≈ 3.2 makes 2e-3 a Courant number of 1.6 at
# 256², where ETDRK4 diverges (measured from 1.5; benchmarks/bench_kolmogorov_resolution.py);
# spin_up: the vorticity decays until t ≈ 20 and is statistically steady from t ≈ 45.


@dataclasses.dataclass(frozen=True)
class NavierStokesConfig:
    """Configuration of :class:`NavierStokes2D` (all quantities non-dimensional, unit torus).

    Parameters
    ----------
    resolution : int
        Stored grid points per side (the dataset's ``x`` and ``y``). Must divide
        ``simulation_resolution``; see ``downsampling``.
    simulation_resolution : int
        Grid points per side of the pseudospectral simulation (even).
    viscosity : float or (float, float)
        Kinematic viscosity ν; a pair ``(low, high)`` draws ν ~ U[low, high] per sample.
    forcing : {"fno", "torus-vis", "torus-vis-force", "kolmogorov", "none"}
        ``fno``: f = 0.1 (sin 2π(x+y) + cos 2π(x+y)). ``torus-vis``: F-FNO random forcing,
        amplitudes α ~ U[0, 1] per sample, phase 0. ``torus-vis-force``: the same with phase
        φ = 0.2 t (the forcing is stored at every recorded time). ``kolmogorov``: the curl of
        the body force sin(4Y) in x on Kochkov's [0, 2π)², f = −4 cos(8π y) on the unit
        torus (``docs/numerics/navier_stokes.md``, Kolmogorov flow).
    final_time : float
        Simulated time span T. ``final_time / record_interval + 1`` frames are stored (the
        initial one included).
    record_interval : float
        Time between stored frames; one Stepper ``step`` advances this much.
    time_stepping : {"faithful", "cfl"}
        ``faithful``: FNO's fixed step. ``cfl``: per sample and per record interval,
        Δt = min(cfl · Δx / max|u| + |v|, time_step), snapped to divide the interval.
    time_step : float, optional
        Faithful mode: the fixed Δt (default 1e-4, FNO). CFL mode: the largest Δt allowed
        (default 1e-2).
    cfl : float
        Courant number of the CFL mode (the RK3 scheme is stable to about 0.8).
    scheme : {"euler-cn", "rk3-cn", "etdrk4"}, optional
        Time integrator. Default: ``euler-cn`` (FNO: Crank–Nicolson diffusion, explicit Euler
        advection and forcing; first order in time) for faithful, ``rk3-cn`` (Spalart–Moser–
        Rogers RK3 with Crank–Nicolson; second order) for CFL. ``etdrk4``: Cox–Matthews
        exponential RK4, the linear part −νλ − drag integrated exactly, advection and forcing
        explicitly (fourth order; faithful time stepping only, its coefficients belong to
        one step size).
    dtype : {"float64", "float32"}
        The arithmetic of the time stepping (stored frames are float64 either way); float32
        for users who train in float32 anyway (its error against float64:
        ``docs/numerics/float32.md``).
    drag : float
        Linear drag (Rayleigh friction) μ ≥ 0: the equation gains −μ ω (Kolmogorov flow,
        Kochkov et al. 2021: 0.1). Implicit with the diffusion in every scheme.
    spin_up : float
        Time simulated from the random initial vorticity before the first stored frame (not
        stored): a forced turbulent flow forgets its initial field and reaches its
        statistically steady state (Kochkov et al.: several large-eddy times). A whole
        number of time steps in faithful mode; not with the moving ``torus-vis-force``.
    spin_up_resolution : int, optional
        Grid of the spin-up (default: the simulation grid), an even size: the spin-up runs
        there at the same scheme and step, and its end state is resampled spectrally onto the
        simulation grid (a coarsened solver keeps its data's spin-up). A cheap road to a
        spun-up fine-grid state (the bench's Kolmogorov reference spins up on 128² too); the
        first record intervals on the finer grid then carry its adjustment.
    downsampling : {"stride", "spectral"}
        How frames go from the simulation grid to the stored grid. ``stride``: every s-th
        node, as FNO's 256 -> 64 data were (aliased: what the coarse grid cannot hold folds
        onto what it can). ``spectral``: the Fourier modes the stored grid holds, the state a
        pseudospectral solver on that grid would carry (the data a learned correction of the
        coarse solver should be trained on).
    alpha : float
        Smoothness exponent of the initial-vorticity GRF, covariance ∝ (−Δ + τ²)^(−α).
    tau : float
        Inverse length scale τ of the initial-vorticity GRF.
    sigma : float, optional
        Amplitude of the initial-vorticity GRF; default ``tau ** (alpha - 1)`` (7^1.5, FNO).
    """

    resolution: int = 64
    simulation_resolution: int = 256
    viscosity: float | tuple[float, float] = 1e-5
    forcing: str = "fno"
    final_time: float = 20.0
    record_interval: float = 1.0
    time_stepping: str = "faithful"
    time_step: float | None = None
    cfl: float = 0.5
    scheme: str | None = None
    drag: float = 0.0
    spin_up: float = 0.0
    spin_up_resolution: int | None = None
    downsampling: str = "stride"
    dtype: str = "float64"
    alpha: float = 2.5
    tau: float = 7.0
    sigma: float | None = None

    def __post_init__(self) -> None:
        check_strided_grid(self.resolution, self.simulation_resolution, MAX_RESOLUTION)
        check_ranged("viscosity", self.viscosity)
        if self.forcing not in FORCINGS:
            raise ValueError(f"unknown forcing {self.forcing!r}; choose one of {FORCINGS}")
        if self.time_stepping not in TIME_STEPPINGS:
            raise ValueError(f"unknown time_stepping {self.time_stepping!r}; "
                             f"choose one of {TIME_STEPPINGS}")
        if self.scheme is not None and self.scheme not in SCHEMES:
            raise ValueError(f"unknown scheme {self.scheme!r}; choose one of {SCHEMES}")
        for name in ("final_time", "record_interval", "cfl", "alpha", "tau"):
            value = getattr(self, name)
            if not positive_finite(value):
                raise ValueError(f"{name} must be a positive finite number, got {value!r}")
        for name in ("time_step", "sigma"):
            value = getattr(self, name)
            if value is not None and not positive_finite(value):
                raise ValueError(f"{name} must be a positive finite number, got {value!r}")
        if isinstance(self.drag, bool) or not (self.drag == 0 or positive_finite(self.drag)):
            raise ValueError(f"drag must be a finite number >= 0, got {self.drag!r}")
        check_dtype(self.dtype)
        if isinstance(self.spin_up, bool) or not (self.spin_up == 0
                                                  or positive_finite(self.spin_up)):
            raise ValueError(f"spin_up must be a finite time >= 0, got {self.spin_up!r}")
        if self.spin_up_resolution is not None:
            n = self.spin_up_resolution
            if (isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2 or n % 2
                    or n > MAX_RESOLUTION):
                raise ValueError(f"spin_up_resolution must be an even grid size in "
                                 f"2..{MAX_RESOLUTION}, got {n!r}")
        if self.downsampling not in DOWNSAMPLINGS:
            raise ValueError(f"unknown downsampling {self.downsampling!r}; choose one of "
                             f"{DOWNSAMPLINGS}")
        if self.spin_up and self.forcing == "torus-vis-force":
            raise ValueError("spin_up with the moving torus-vis-force forcing would shift its "
                             "phase: use forcing='torus-vis' or spin_up=0")
        if self.spin_up and self.time_stepping == "faithful":
            whole_multiple(self.spin_up, self.effective_time_step,
                           "spin_up must be a whole number of time steps")
        if self.scheme == "etdrk4" and self.time_stepping != "faithful":
            raise ValueError("scheme 'etdrk4' needs a fixed step (its coefficients belong to "
                             "one step size): use time_stepping='faithful' with time_step=, "
                             "or scheme='rk3-cn' for CFL steps")
        whole_multiple(self.final_time, self.record_interval,
                     "final_time must be a whole number of record intervals")
        if self.time_stepping == "faithful":
            whole_multiple(self.record_interval, self.effective_time_step,
                         "record_interval must be a whole number of time steps")

    @property
    def effective_scheme(self) -> str:
        if self.scheme is not None:
            return self.scheme
        return "euler-cn" if self.time_stepping == "faithful" else "rk3-cn"

    @property
    def effective_time_step(self) -> float:
        if self.time_step is not None:
            return float(self.time_step)
        return 1e-4 if self.time_stepping == "faithful" else 1e-2

    @property
    def num_records(self) -> int:
        return whole_multiple(self.final_time, self.record_interval, "final_time")

    @property
    def random_viscosity(self) -> bool:
        return isinstance(self.viscosity, tuple)


def forcing_field(kind: str, n: int, amplitudes: np.ndarray | None = None,
                  phase: float = 0.0) -> np.ndarray:
    """Forcing on the ``n``-point grid of the unit torus, ``x_j = j / n``.

    Parameters
    ----------
    kind : {"fno", "torus-vis", "torus-vis-force", "kolmogorov", "none"}
    n : int
    amplitudes : array, shape ``(batch, 2, 6)``
        F-FNO amplitudes α[p - 1, term] (terms as :data:`FORCING_TERMS`); torus kinds only.
    phase : float
        φ of the F-FNO forcing (``0.2 t`` for ``torus-vis-force``).

    Returns
    -------
    numpy.ndarray, shape ``(batch, n, n)`` (``batch = 1`` but for the torus kinds),
    ``[.., y, x]``.
    """
    coord = np.arange(n) / n
    y, x = coord[:, None], coord[None, :]
    if kind == "none":
        return np.zeros((1, n, n))
    if kind == "fno":
        return (0.1 * (np.sin(2 * np.pi * (x + y)) + np.cos(2 * np.pi * (x + y))))[None]
    if kind == "kolmogorov":
        k = KOLMOGOROV_WAVENUMBER
        return (-k * np.cos(2 * np.pi * k * y) + 0 * x)[None]
    if kind not in ("torus-vis", "torus-vis-force"):
        raise ValueError(f"unknown forcing {kind!r}; choose one of {FORCINGS}")
    amplitudes = np.asarray(amplitudes, dtype=np.float64)
    if amplitudes.ndim != 3 or amplitudes.shape[1:] != (2, 6):
        raise ValueError(f"forcing amplitudes must have shape (batch, 2, 6), got "
                         f"{amplitudes.shape}")
    out = np.zeros((amplitudes.shape[0], n, n))
    for p in (1, 2):
        arguments = (2 * np.pi * p * x + phase, 2 * np.pi * p * y + phase,
                     2 * np.pi * p * (x + y) + phase)
        basis = []
        for arg in arguments:
            basis += [np.sin(arg), np.cos(arg)]
        for term, field in enumerate(basis):
            out += amplitudes[:, p - 1, term, None, None] * np.broadcast_to(field, (n, n))
    return 0.1 * out


# ---------------------------------------------------------------------------------------
# Plain NumPy reference (the test oracle and the benchmark's baseline; py-pde's habit).
# ---------------------------------------------------------------------------------------
def reference_advection(w_hat: np.ndarray) -> np.ndarray:
    """mask · rfft2(u ω_x + v ω_y) from ω̂ (unnormalised ``numpy.fft.rfft2``), in plain NumPy:
    u = ∂yψ, v = −∂xψ, −Δψ = ω (:func:`~ssmpde.solvers.spectral.velocity_spectra`), spectral
    derivatives, the square 2/3 mask."""
    n = w_hat.shape[-2]
    u, v, w_x, w_y = np.fft.irfft2(np.stack(velocity_spectra(w_hat, vorticity_wavenumbers(n))),
                                   s=(n, n))
    return dealias_mask(n) * np.fft.rfft2(advection(u, v, w_x, w_y))


def reference_step(w_hat: np.ndarray, f_hat: np.ndarray, viscosity: float | np.ndarray,
                   time_step: float, drag: float = 0.0) -> np.ndarray:
    """One faithful step (FNO's ``navier_stokes_2d`` loop body) in plain NumPy.

    ``ω̂ ← [(1 − a) ω̂ − Δt N̂ + Δt f̂] / (1 + a)``, a = ½Δt (ν λ + μ), with λ = 4π²|k|², μ the
    drag, the nonlinear term N = u ω_x + v ω_y (u = ∂yψ, v = −∂xψ, −Δψ = ω) computed in
    physical space and dealiased with the square 2/3 mask.

    Parameters
    ----------
    w_hat, f_hat : complex arrays, shape ``(batch, n, n // 2 + 1)``
        Unnormalised ``numpy.fft.rfft2`` of vorticity and forcing (``f_hat`` may have batch 1).
    viscosity : float or array of shape ``(batch,)``
    time_step : float
    drag : float

    Returns
    -------
    complex array, shape ``(batch, n, n // 2 + 1)``: ω̂ after one step.
    """
    lap = vorticity_wavenumbers(w_hat.shape[-2]).laplacian
    nonlinear_hat = reference_advection(w_hat)
    a = 0.5 * time_step * np.reshape(viscosity, (-1, 1, 1)) * lap + 0.5 * time_step * drag
    return ((1 - a) * w_hat - time_step * nonlinear_hat + time_step * f_hat) / (1 + a)


def etdrk4_operator(n: int, viscosity: float, drag: float, time_step: float
                    ) -> dict[str, np.ndarray]:
    """ETDRK4 coefficients ``E, E2, Q, f1, f2, f3`` ``[n, n // 2 + 1]`` (float64) of
    L = −ν λ − μ on the rfft2 modes, by Kassam & Trefethen's contour integrals.

    λ takes few distinct values (|k|² repeats across the modes): each is evaluated once, in
    an array whose size depends on n alone, so the bits depend on (n, ν, μ, Δt) only.
    """
    lap = vorticity_wavenumbers(n).laplacian
    values, inverse = np.unique(lap, return_inverse=True)
    linear = -viscosity * values - drag
    with np.errstate(under="ignore"):  # e^{hL} of the stiffest modes underflows to 0
        c = etdrk4_coefficients(linear, time_step)
    return {k: np.ascontiguousarray(v[inverse].reshape(lap.shape)) for k, v in c.items()}


def reference_etdrk4_step(w_hat: np.ndarray, forcing: Callable[[float], np.ndarray],
                          viscosity: float, time_step: float, drag: float = 0.0
                          ) -> np.ndarray:
    """One ETDRK4 step of the vorticity equation in plain NumPy: the oracle of the fast path.

    N(ω̂, t) = f̂(t) − mask · rfft2(u·∇ω) (:func:`reference_advection`), L = −νλ − μ
    (:func:`etdrk4_operator`); ``forcing(node)`` gives f̂ at the stage's time, ``node`` in
    units of the step (0, ½, 1). Kassam & Trefethen (2005), eq. (2.5).
    """
    c = etdrk4_operator(w_hat.shape[-2], viscosity, drag, time_step)
    return etdrk4_step(w_hat, c, lambda w, node: forcing(node) - reference_advection(w),
                       nodes=True)


@register_solver("navier-stokes")
class NavierStokes2D(TimeDependentSolver):
    r"""2D incompressible Navier–Stokes, vorticity form, periodic unit square.

    .. math:: \partial_t \omega + u \cdot \nabla \omega = \nu \Delta \omega + f,\quad
              u = (\partial_y \psi, -\partial_x \psi),\quad -\Delta \psi = \omega
              \quad \text{on } [0, 1)^2.

    Fields: ``vorticity`` (non-dimensional). Pseudospectral in space with 2/3 dealiasing of
    the nonlinear term; in time the faithful FNO scheme (Crank–Nicolson diffusion, explicit
    Euler advection and forcing, Δt = 1e-4) or, opt-in, a CFL-controlled low-storage RK3 /
    Crank–Nicolson scheme (second order). See :class:`NavierStokesConfig` for parameters.

    Conventions: a grid of ``n`` points does **not** include the right boundary point
    (``x_j = j / n``); arrays are ``[..., y, x]``; states are ``[batch, field, y, x]`` with the
    single field ``vorticity``.

    Good values: ν ∈ [1e-5, 1e-3] at 256² (FNO); at ν = 1e-5 the flow is under-resolved below
    about 128². The faithful Δt = 1e-4 is over-resolved in time (F-FNO: 0.04 % change against
    1e-5); the CFL mode at cfl = 0.5 takes steps about 20–40 times longer.

    Stability: explicit advection limits Δt by the CFL condition; a run whose solution becomes
    non-finite raises :class:`SolverDivergedError` naming the time and samples.

    Notes
    -----
    The mean of ω is conserved exactly: the diffusion factor uses λ(0) = 0. (FNO's code set
    λ(0) = 1, which damps a non-zero mean by (1 − ½Δtν)/(1 + ½Δtν) per step; its initial
    conditions and forcing have zero mean, so its data are unaffected.)

    References
    ----------
    Li et al., "Fourier Neural Operator for Parametric PDEs", ICLR 2021 (scheme, ν sets).
    Tran et al., "Factorized Fourier Neural Operators", ICLR 2023 (TorusVis, TorusVisForce).
    Spalart, Moser & Rogers, J. Comput. Phys. 96 (1991) 297–324 (RK3/CN).

    Example
    -------
    >>> solver = NavierStokes2D(resolution=32, simulation_resolution=64, viscosity=1e-3,
    ...                         final_time=1.0, time_step=1e-3)
    >>> inputs = solver.sample_inputs(seed=0, indices=[0, 1])
    >>> out = solver.solve_batch(inputs)
    >>> out["vorticity"].shape
    (2, 2, 32, 32)
    """

    Config = NavierStokesConfig
    fields = ("vorticity",)
    field_units = {"vorticity": ("vorticity", "1")}
    spatial_ndim = 2
    boundary_conditions = "periodic"
    #: Every per-sample input :meth:`step` takes; ``forcing_amplitude`` only for the torus
    #: forcings (see :meth:`parameter_specs`).
    parameter_names = ("viscosity", "forcing_amplitude")
    #: The forcings have zero mean, so the mean vorticity is conserved exactly.
    checks = Checks(conserved=("vorticity",))
    title = "2D incompressible Navier-Stokes (vorticity form) on the unit torus"
    references = ("Li et al., Fourier Neural Operator for Parametric PDEs, ICLR 2021; "
                  "Tran et al., Factorized Fourier Neural Operators, ICLR 2023")
    PRESETS = {
        "fno-nu1e-3": dict(viscosity=1e-3, final_time=50.0, record_interval=1.0, forcing="fno"),
        "fno-nu1e-4": dict(viscosity=1e-4, final_time=30.0, record_interval=1.0, forcing="fno"),
        "fno-nu1e-5": dict(viscosity=1e-5, final_time=20.0, record_interval=1.0, forcing="fno"),
        "torus-vis": dict(viscosity=(1e-5, 1e-4), final_time=20.0, record_interval=0.1,
                          forcing="torus-vis"),
        "torus-vis-force": dict(viscosity=(1e-5, 1e-4), final_time=20.0, record_interval=0.1,
                                forcing="torus-vis-force"),
        # Kochkov et al. (2021): Re = 1000 on [0, 2π)² (ν = 1e-3), drag 0.1, forcing sin(4y)
        # in x; on the unit torus ν / (2π)² (docs/numerics/navier_stokes.md)
        "kolmogorov-re1000": dict(viscosity=1e-3 / (4 * np.pi ** 2), drag=0.1,
                                  forcing="kolmogorov", **KOLMOGOROV),
    }
    TINY = dict(resolution=16, simulation_resolution=16, viscosity=(1e-3, 2e-3),
                forcing="torus-vis-force", final_time=0.2, record_interval=0.1, time_step=0.01)

    def __init__(self, *, fft_backend: str = "pyfftw", threads: int | None = None,
                 **config: Any) -> None:
        super().__init__(**config)
        self.fft_backend = fft_backend
        self.threads = threads
        self._engines: dict[tuple[int, int], Engine] = {}
        self._etd: tuple[bytes, np.ndarray] | None = None
        self._grf = None

    # -- per-sample inputs -----------------------------------------------------------------
    def parameter_specs(self) -> dict[str, tuple[int, ...]]:
        specs = {"viscosity": ()}
        if self.config.forcing.startswith("torus"):
            specs["forcing_amplitude"] = (2, 6)
        return specs

    def default_parameter(self, name: str) -> Any:
        cfg = self.config
        if name == "viscosity" and not cfg.random_viscosity:
            return float(cfg.viscosity)
        return None  # a viscosity range, or the torus amplitudes: drawn per sample

    def check_parameters(self, parameters: Mapping[str, np.ndarray]) -> None:
        viscosity = parameters["viscosity"]
        if not np.all(viscosity > 0):
            raise ValueError(f"viscosity must be positive and finite, got {viscosity}")

    def sample_parameters(self, seed: int, indices: Sequence[int]) -> dict[str, np.ndarray]:
        """Per-sample physical parameters, drawn from stream 1 of each sample's generator.

        Draw order (the reproducibility contract): ν ~ U[low, high] if a range was given,
        then the 2 × 6 forcing amplitudes α ~ U[0, 1] for the torus forcings.
        """
        cfg = self.config
        viscosity = np.empty(len(indices))
        amplitudes = np.empty((len(indices), 2, 6))
        for row, index in enumerate(indices):
            rng = sample_rng(seed, index, stream=1)
            viscosity[row] = rng.uniform(*cfg.viscosity) if cfg.random_viscosity \
                else cfg.viscosity
            if cfg.forcing.startswith("torus"):
                amplitudes[row] = rng.uniform(0.0, 1.0, size=(2, 6))
        out = {"viscosity": viscosity}
        if cfg.forcing.startswith("torus"):
            out["forcing_amplitude"] = amplitudes
        return out

    def initial_condition(self, seed: int, indices: Sequence[int]) -> np.ndarray:
        """Initial vorticity ``[batch, 1, N, N]`` at the simulation resolution (stream 0)."""
        cfg = self.config
        if self._grf is None:
            self._grf = PeriodicGRF(cfg.simulation_resolution, ndim=2, alpha=cfg.alpha,
                                    tau=cfg.tau, sigma=cfg.sigma)
        rngs = [sample_rng(seed, index, stream=0) for index in indices]
        return self._grf.sample_batch(rngs)[:, None]

    def sample_inputs(self, seed: int, indices: Sequence[int]) -> dict[str, np.ndarray]:
        """Initial vorticity and parameters; with ``spin_up``, the initial vorticity is the
        random field advanced ``spin_up`` time units by this solver (same scheme and step),
        on ``spin_up_resolution`` if set (the random field restricted spectrally to it, the
        end state interpolated spectrally back)."""
        inputs = super().sample_inputs(seed, indices)
        spin_up = float(self.config.spin_up)
        if spin_up:
            fields = dataclasses.asdict(self.config)
            grid = self.config.spin_up_resolution or self.config.simulation_resolution
            fields.update(final_time=spin_up, record_interval=spin_up, spin_up=0.0,
                          spin_up_resolution=None, simulation_resolution=grid,
                          resolution=grid)
            warm = type(self)(fft_backend=self.fft_backend, threads=self.threads, **fields)
            parameters = {k: v for k, v in inputs.items() if k != "initial"}
            start = warm.to_simulation_grid(inputs["initial"])
            end = warm.simulate(start, 1, parameters=parameters)[:, -1]
            inputs["initial"] = self.to_simulation_grid(end)
        return inputs

    # -- simulation ------------------------------------------------------------------------
    def _engine(self, batch: int) -> Engine:
        key = (self.config.simulation_resolution, batch)
        if key not in self._engines:
            self._engines[key] = Engine(
                key[0], batch, backend=self.fft_backend, threads=self.threads,
                exponential=self.config.effective_scheme == "etdrk4",
                dtype=np.dtype(self.config.dtype))
        return self._engines[key]

    def _etd_coefficients(self, viscosity: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """ETDRK4 coefficients ``[distinct ν, 6, n, m]`` (E, E2, Q, f1, f2, f3) and each
        sample's row of them; a contour evaluation per ν, kept for restarts."""
        cfg = self.config
        distinct, which = np.unique(np.asarray(viscosity, dtype=np.float64),
                                    return_inverse=True)
        key = distinct.tobytes()
        if self._etd is None or self._etd[0] != key:
            rows = [etdrk4_operator(cfg.simulation_resolution, float(nu), float(cfg.drag),
                                    cfg.effective_time_step) for nu in distinct]
            stacked = np.stack([np.stack([r[k] for k in ("E", "E2", "Q", "f1", "f2", "f3")])
                                for r in rows])
            self._etd = (key, stacked.astype(cfg.dtype))
        return self._etd[1], which.reshape(-1).astype(np.int64)

    def to_simulation_grid(self, frames: np.ndarray) -> np.ndarray:
        """Vorticity on any even square grid → the simulation grid, by spectral interpolation."""
        if frames.shape[-1] != frames.shape[-2]:
            raise ValueError(f"vorticity must be on a square grid [batch, 1, n, n], got "
                             f"{frames.shape}")
        return spectral_resample(frames[:, 0], self.config.simulation_resolution)[:, None]

    def start(self, initial: np.ndarray, parameters: Mapping[str, np.ndarray]):
        engine = self._engine(initial.shape[0])
        engine.load(initial[:, 0])
        forcing_hat, shift_hat = self._forcing_spectra(engine,
                                                       parameters.get("forcing_amplitude"))
        return types.SimpleNamespace(engine=engine, viscosity=parameters["viscosity"],
                                     forcing_hat=forcing_hat, shift_hat=shift_hat)

    def advance(self, state, time: float) -> None:
        self._advance_interval(state.engine, time, state.viscosity, state.forcing_hat,
                               state.shift_hat)

    def observe(self, state) -> np.ndarray:
        return state.engine.physical()[:, None]

    takes_source = True

    def add_source(self, state, source: np.ndarray) -> None:
        """Ŝ joins the forcing f̂ of every stage (the forcing's per-sample spectra)."""
        if self.config.forcing == "torus-vis-force":
            raise ValueError("a source term with the moving torus-vis-force forcing is not "
                             "supported: use another forcing, or correct after the step")
        record = state.engine.record
        record.real[...] = source[:, 0]
        source_hat = record.forward().copy()
        state.forcing_hat = state.forcing_hat + source_hat
        state.shift_hat = state.forcing_hat  # unused without the moving phase

    def divergence_hint(self) -> str:
        cfg = self.config
        return (f"scheme {cfg.effective_scheme}, time_step {cfg.effective_time_step:g}, cfl "
                f"{cfg.cfl:g}: reduce the time step (faithful mode) or the cfl number, or raise "
                "the resolution")

    def tendency(self, frames: np.ndarray, *, time: float = 0.0,
                 parameters: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """ω_t = −u·∇ω + ν Δω − μ ω + f(time) at ``frames`` ``[batch, 1, n, n]`` (any even n).

        The solver's semi-discretisation on the n² grid of the unit torus: spectral
        derivatives (the Nyquist mode's first derivatives dropped), u = (∂yψ, −∂xψ) with
        −Δψ = ω, the advection zeroed outside the square 2/3 band, the forcing of
        :func:`forcing_field` (phase 0.2 ``time`` for ``torus-vis-force``).
        """
        frames = np.asarray(frames, dtype=np.float64)
        if frames.ndim != 4 or frames.shape[1] != 1 or frames.shape[2] != frames.shape[3]:
            raise ValueError(f"frames must have shape [batch, 1, n, n], got {frames.shape}")
        cfg, (batch, _, n, _) = self.config, frames.shape
        resolved = self.resolve_parameters(batch, parameters)
        lap = vorticity_wavenumbers(n).laplacian
        w_hat = np.fft.rfft2(frames[:, 0])
        advection_hat = reference_advection(w_hat)
        viscosity = resolved["viscosity"][:, None, None]
        phase = FORCING_PHASE_SPEED * time if cfg.forcing == "torus-vis-force" else 0.0
        forcing = forcing_field(cfg.forcing, n, resolved.get("forcing_amplitude"), phase)
        rhs = np.fft.irfft2(-advection_hat - viscosity * lap * w_hat, s=(n, n)) + forcing
        if cfg.drag:
            rhs = rhs - cfg.drag * frames[:, 0]
        return rhs[:, None]

    def coarser_time_step(self, factor: int) -> dict[str, Any]:
        """Faithful mode: the fixed step ``factor`` times longer (it must still divide the
        record interval). CFL mode: the Courant number and the step cap both ``factor``
        times larger."""
        cfg = self.config
        step = cfg.effective_time_step * factor
        if cfg.time_stepping == "cfl":
            return {"cfl": cfg.cfl * factor, "time_step": step}
        steps = whole_multiple(cfg.record_interval, cfg.effective_time_step, "record_interval")
        if steps % factor:
            raise ValueError(f"time_step {cfg.effective_time_step:g} coarsened {factor}x does "
                             f"not divide the record interval {cfg.record_interval:g} ({steps} "
                             f"steps): choose a time factor that divides {steps}")
        return {"time_step": step}

    def _forcing_spectra(self, engine: Engine, amplitudes):
        """f̂ and, for the moving phase, its quarter-period shift: f̂(t) = cos φ F̂ + sin φ Ĝ."""
        cfg, n = self.config, engine.n
        plan = RealFFT((1 if amplitudes is None else amplitudes.shape[0],), n,
                       backend=self.fft_backend, threads=self.threads, dtype=engine.dtype)
        plan.real[...] = forcing_field(cfg.forcing, n, amplitudes, phase=0.0)
        forcing_hat = plan.forward().copy()
        if cfg.forcing != "torus-vis-force":
            return forcing_hat, forcing_hat  # shift unused (has_shift = False)
        # sin(θ + φ) = cos φ sin θ + sin φ cos θ: the sin φ part is the forcing at φ = π/2.
        plan.real[...] = forcing_field(cfg.forcing, n, amplitudes, phase=np.pi / 2)
        return forcing_hat, plan.forward().copy()

    def _advance_interval(self, engine: Engine, start: float, viscosity: np.ndarray,
                          forcing_hat: np.ndarray, shift_hat: np.ndarray) -> None:
        """Advance ``engine.w_hat`` by one record interval, sub-stepping per sample."""
        cfg = self.config
        interval = cfg.record_interval
        if cfg.time_stepping == "faithful":
            steps = np.full(engine.batch, whole_multiple(interval, cfg.effective_time_step,
                                                         "interval"))
        else:
            speed = engine.max_speed()
            with np.errstate(divide="ignore"):
                limit = np.minimum(cfg.cfl / (engine.n * speed), cfg.effective_time_step)
            steps = np.maximum(1, np.ceil(interval / limit - 1e-9)).astype(np.int64)
        dt = interval / steps
        phase_speed = FORCING_PHASE_SPEED if cfg.forcing == "torus-vis-force" else None
        if cfg.effective_scheme == "etdrk4":
            coefficients, which = self._etd_coefficients(viscosity)
            engine.advance_etdrk4(int(steps[0]), float(dt[0]), start, coefficients, which,
                                  forcing_hat, shift_hat, phase_speed)
        else:
            engine.advance_imex(IMEX_STAGES[cfg.effective_scheme], steps, dt, start, viscosity,
                                float(cfg.drag), forcing_hat, shift_hat, phase_speed)

    # -- dataset generation ----------------------------------------------------------------
    def extra_outputs(self, inputs: Mapping[str, np.ndarray],
                      times: np.ndarray) -> dict[str, np.ndarray]:
        cfg, r = self.config, self.config.resolution
        out = {"viscosity": np.asarray(inputs["viscosity"])}
        amplitudes = inputs.get("forcing_amplitude")
        if cfg.forcing == "torus-vis-force":
            out["forcing"] = np.stack(
                [forcing_field(cfg.forcing, r, amplitudes, phase=FORCING_PHASE_SPEED * t)
                 for t in times], axis=1)
        else:
            field = forcing_field(cfg.forcing, r, amplitudes)
            out["forcing"] = np.broadcast_to(field, (len(out["viscosity"]), r, r)).copy()
        if cfg.forcing.startswith("torus"):
            out["forcing_amplitude"] = np.asarray(amplitudes)
        return out

    def extra_variables(self) -> dict[str, VariableSpec]:
        cfg = self.config
        space = (Y, X)
        out = {
            "viscosity": VariableSpec((), "kinematic viscosity", "1", role="parameter"),
            "forcing": VariableSpec(
                ((TIME,) if cfg.forcing == "torus-vis-force" else ()) + space,
                "vorticity forcing", "1", role="forcing"),
        }
        if cfg.forcing.startswith("torus"):
            # The amplitudes reach a model as the forcing field they generate.
            out["forcing_amplitude"] = VariableSpec(
                ("forcing_wavenumber", "forcing_term"), "F-FNO forcing amplitude", "1",
                role="parameter", encoded_by="forcing")
        return out

    def stored_bytes_per_sample(self) -> int:
        # The sizes are known without building the coordinates (a long time axis is costly).
        r = self.config.resolution
        return self._stored_bytes({TIME: self.num_records + 1, Y: r, X: r,
                                   "forcing_wavenumber": 2, "forcing_term": 6})

    def coordinates(self) -> dict[str, xr.DataArray]:
        coords = super().coordinates()
        if self.config.forcing.startswith("torus"):
            coords["forcing_wavenumber"] = xr.DataArray(
                np.array([1, 2]), dims="forcing_wavenumber",
                attrs={"long_name": "forcing wavenumber p", "units": "1"})
            coords["forcing_term"] = xr.DataArray(
                np.arange(6), dims="forcing_term",
                attrs={"long_name": "forcing term: " + "; ".join(FORCING_TERMS), "units": "1"})
        return coords
