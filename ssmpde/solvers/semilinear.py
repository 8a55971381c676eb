r"""Semilinear PDEs on a periodic interval, u_t = L u − b (u²/2)_x: pseudospectral with ETDRK4.

One base, :class:`SemilinearSolver1D`, carries the algorithm every such PDE shares: real
FFTs, the quadratic flux with optional 2/3 dealiasing, Cox–Matthews ETDRK4 with the
Kassam–Trefethen contour coefficients, restarts that keep the last operator, spectral
interpolation from other grids, and the plain NumPy right-hand side. A PDE is then its linear
operator (:meth:`SemilinearSolver1D.linear`, a diagonal on the Fourier modes), the
coefficient b of its flux, its config and its presets, in the spirit of Exponax's steppers
(Koehler, Niedermayr, Westermann & Thuerey, "APEBench: A Benchmark for Autoregressive Neural
Emulators of PDEs", 2024). Kuramoto–Sivashinsky, Burgers and Korteweg–de Vries live on it.

See ``docs/numerics/kuramoto_sivashinsky.md``, ``docs/numerics/burgers.md`` and
``docs/numerics/kdv.md``.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from ..data import TIME, X
from .base import TimeDependentSolver, VariableSpec, positive_finite, whole_multiple
from .random_fields import sample_rng
from .spectral import (ETDRK4, QuadraticFlux1D, dealias_mask, derivative_wavenumbers,
                       spectral_resample)

__all__ = ["MAX_RESOLUTION", "SemilinearSolver1D", "SpectralState", "check_config",
           "check_grid", "sine_series"]

#: Largest simulation grid accepted by default (2**22 points: one batch row of buffers is
#: ~1 GB already).
MAX_RESOLUTION = 2 ** 22


def check_grid(resolution: Any, simulation_resolution: Any, maximum: int = MAX_RESOLUTION
               ) -> None:
    """Even grid sizes, the stored one an even divisor of the simulated one.

    Stored frames are strided from the simulation grid, and a frame on the stored grid is
    interpolated back spectrally, which needs an even grid. Four points at least: on two, the
    only mode besides the mean is the Nyquist mode, which has no derivative.
    """
    def integer(n):
        return isinstance(n, (int, np.integer)) and not isinstance(n, (bool, np.bool_))

    n, r = simulation_resolution, resolution
    if not integer(n) or n < 4 or n % 2 or n > maximum:
        raise ValueError(f"simulation_resolution must be an even integer in 4..{maximum}, got "
                         f"{n!r}")
    if not integer(r) or r < 2 or r % 2 or n % r:
        divisors = [d for d in range(n, 1, -1) if n % d == 0 and d % 2 == 0]
        raise ValueError(f"stored resolution {r!r} must be an even divisor of the simulation "
                         f"resolution {n} (frames are strided, so it must divide the simulation "
                         f"resolution); choose one of {divisors[:8]}")


def check_config(config: Any, *, positive: Sequence[str] = (),
                 maximum: int = MAX_RESOLUTION,
                 initial_conditions: Sequence[str] | None = None) -> None:
    """The checks every semilinear config shares (ValueError naming the field).

    Grids (:func:`check_grid`), ``dealias`` a bool, ``final_time``, ``record_interval``,
    ``time_step`` and the fields named in ``positive`` positive and finite, whole numbers of
    record intervals and of time steps per record. With ``initial_conditions``, the config's
    ``initial_condition`` is one of them and its ``lmax`` (of :func:`sine_series`) an
    integer in 2..N/2 (every drawn wavenumber below the Nyquist wavenumber of the N-point
    simulation grid).
    """
    if initial_conditions is not None:
        if config.initial_condition not in initial_conditions:
            raise ValueError(f"unknown initial_condition {config.initial_condition!r}; choose "
                             f"one of {tuple(initial_conditions)}")
        lmax = config.lmax
        if isinstance(lmax, bool) or not isinstance(lmax, (int, np.integer)) or lmax < 2:
            raise ValueError(f"lmax must be an integer >= 2, got {lmax!r}")
    check_grid(config.resolution, config.simulation_resolution, maximum)
    if initial_conditions is not None:
        # The sines have wavenumbers l < lmax; on N points only l < N / 2 (below the Nyquist
        # wavenumber) is represented, a larger one aliases onto a lower mode.
        nyquist = config.simulation_resolution // 2
        if config.lmax > nyquist:
            raise ValueError(f"lmax {config.lmax} draws sines of wavenumbers up to "
                             f"{config.lmax - 1}, which {config.simulation_resolution} "
                             f"simulation points cannot resolve (they hold wavenumbers below "
                             f"{nyquist}): choose lmax <= {nyquist}, or raise "
                             "simulation_resolution")
    if not isinstance(config.dealias, (bool, np.bool_)):
        raise ValueError(f"dealias must be True or False, got {config.dealias!r}")
    for name in (*positive, "final_time", "record_interval", "time_step"):
        value = getattr(config, name)
        if not positive_finite(value):
            raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    whole_multiple(config.final_time, config.record_interval,
                   "final_time must be a whole number of record intervals")
    whole_multiple(config.record_interval, config.time_step,
                   "record_interval must be a whole number of time steps")


def sine_series(seed: int, indices: Sequence[int], n: int, length: float, lmax: int, *,
                terms: int = 10) -> np.ndarray:
    """Random sums of sines, LPSDA's law for KS and KdV: ``[batch, 1, n]``.

    u0 = Σ_{k=1}^{terms} A_k sin(2π l_k x / L + φ_k) with A ~ U[−½, ½), φ ~ U[0, 2π) and
    l ~ randint(1, lmax), drawn in that order from stream 0 of each sample, on x_j = L j / n
    (Brandstetter, Welling & Worrall, "Lie Point Symmetry Data Augmentation for Neural PDE
    Solvers", 2022).
    """
    x = length * np.arange(n) / n
    out = np.empty((len(indices), 1, n))
    for row, index in enumerate(indices):
        rng = sample_rng(seed, index, stream=0)
        amplitude = rng.uniform(-0.5, 0.5, size=terms)
        phase = rng.uniform(0.0, 2 * np.pi, size=terms)
        wavenumber = rng.integers(1, lmax, size=terms)
        out[row, 0] = np.sum(amplitude[:, None] * np.sin(
            2 * np.pi * wavenumber[:, None] * x[None, :] / length + phase[:, None]), axis=0)
    return out


@dataclasses.dataclass
class SpectralState:
    """A batch in flight: ``v_hat`` (unnormalised rfft of u, ``[batch, n // 2 + 1]``), the
    nonlinear term whose buffers it is transformed with, and the ETDRK4 stepper."""

    v_hat: np.ndarray
    nonlinear: QuadraticFlux1D
    stepper: ETDRK4


class SemilinearSolver1D(TimeDependentSolver):
    r"""Base of the 1D semilinear PDEs :math:`u_t = \mathcal L u - b\,(u^2/2)_x` on [0, L).

    Periodic; real Fourier pseudospectral in space, the flux zeroed outside the 2/3 band
    when the config's ``dealias`` is set (Orszag's rule); in time Cox–Matthews ETDRK4 at the
    fixed step ``time_step`` (the config's), :math:`\mathcal L` integrated exactly and the
    flux explicitly.

    A subclass supplies:

    * :meth:`linear`, the diagonal of :math:`\mathcal L` on the rfft modes (real for
      dissipative PDEs, complex for dispersive ones), per sample where it depends on a
      per-sample parameter;
    * :attr:`convection`, the flux coefficient b (default 1);
    * the config (``resolution``, ``simulation_resolution``, ``final_time``,
      ``record_interval``, ``time_step``, ``dealias`` and, unless :attr:`domain_length` is
      fixed by the class, ``domain_length``; :func:`check_config` validates them), its
      presets and :meth:`initial_condition`;
    * :attr:`parameter_units` (``name -> (long_name, units)``) for its per-sample parameters,
      which are written to datasets with the role ``parameter``.

    Conventions: the grid x_j = L j / N does **not** include the right end point; states are
    ``[batch, 1, x]``; stored frames are every s-th simulation node. The spatial mean of u is
    conserved exactly when L(0) = 0 (the flux has no mean).

    Parameters
    ----------
    fft_backend : {"pyfftw", "numpy"}
        ``"numpy"`` runs the same scheme on ``numpy.fft`` (a reference path for tests).
    **config
        Fields of the subclass's config dataclass.

    References
    ----------
    Cox & Matthews, "Exponential time differencing for stiff systems", J. Comput. Phys. 176
    (2002). Kassam & Trefethen, "Fourth-order time-stepping for stiff PDEs", SIAM J. Sci.
    Comput. 26 (2005).
    """

    fields = ("u",)
    boundary_conditions = "periodic"
    #: Per-sample parameters as dataset variables: name -> (long_name, units).
    parameter_units: ClassVar[Mapping[str, tuple[str, str]]] = {}

    def __init__(self, *, fft_backend: str = "pyfftw", **config: Any) -> None:
        super().__init__(**config)
        self.fft_backend = fft_backend
        self._operator: tuple | None = None

    @property
    def domain_length(self) -> float:
        """The period L (the config's ``domain_length``)."""
        return float(self.config.domain_length)

    @property
    def convection(self) -> float:
        """b, the coefficient of the flux −b (u²/2)_x = −b u u_x."""
        return 1.0

    @abc.abstractmethod
    def linear(self, n: int, parameters: Mapping[str, np.ndarray]) -> np.ndarray:
        """The diagonal of the linear operator on the ``n // 2 + 1`` rfft modes of an
        ``n``-point grid: ``[batch or 1, n // 2 + 1]``, float64 or complex128.

        ``parameters`` are the resolved per-sample parameters (each ``[batch, ...]``).
        """

    # -- simulation ------------------------------------------------------------------------
    def to_simulation_grid(self, frames: np.ndarray) -> np.ndarray:
        """States on any even grid → the simulation grid, by spectral interpolation."""
        return spectral_resample(frames[:, 0], self.config.simulation_resolution,
                                 ndim=1)[:, None]

    def start(self, initial: np.ndarray, parameters: Mapping[str, np.ndarray]) -> SpectralState:
        cfg = self.config
        batch, n = initial.shape[0], cfg.simulation_resolution
        linear = self.linear(n, parameters)
        # A hybrid rollout restarts the solver every step: keep the last operator (its
        # ETDRK4 contour coefficients cost more than a record interval of steps).
        key = (batch, linear.shape, linear.dtype.str, linear.tobytes())
        if self._operator is None or self._operator[0] != key:
            flux = QuadraticFlux1D(n, self.domain_length, batch=batch, dealias=cfg.dealias,
                                   backend=self.fft_backend, coefficient=self.convection)
            self._operator = (key, flux, ETDRK4(linear, cfg.time_step, flux, batch=batch))
        _, flux, stepper = self._operator
        return SpectralState(flux.spectral(initial[:, 0]), flux, stepper)

    def advance(self, state: SpectralState, time: float) -> None:
        steps = whole_multiple(self.config.record_interval, self.config.time_step,
                               "record_interval")
        # A blow-up overflows on its way to inf/NaN; simulate() reports it after the record
        # interval (SolverDivergedError naming the time and the fix), so no warnings here.
        with np.errstate(over="ignore", invalid="ignore"):
            for _ in range(steps):
                state.stepper.step(state.v_hat)

    def observe(self, state: SpectralState) -> np.ndarray:
        return state.nonlinear.physical(state.v_hat)[:, None]

    def tendency(self, frames: np.ndarray, *, time: float = 0.0,
                 parameters: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """u_t = L u − b (u²/2)_x at ``frames`` ``[batch, 1, n]`` (any even n), in plain NumPy.

        The solver's semi-discretisation on the n-point grid: the flux with the Nyquist
        mode's derivative dropped and, with ``dealias``, zeroed outside the 2/3 band (as
        :class:`QuadraticFlux1D`); the linear operator of :meth:`linear` on every mode.
        ``time`` is unused (these PDEs are autonomous).
        """
        frames = np.asarray(frames, dtype=np.float64)
        if frames.ndim != 3 or frames.shape[1] != 1:
            raise ValueError(f"frames must have shape [batch, 1, x], got {frames.shape}")
        batch, n = frames.shape[0], frames.shape[-1]
        resolved = self.resolve_parameters(batch, parameters)
        k = 2 * np.pi / self.domain_length * derivative_wavenumbers(n, real=True)
        flux = (-0.5j * self.convection) * k \
            * (dealias_mask(n, ndim=1) if self.config.dealias else 1.0)
        u = frames[:, 0]
        rhs = flux * np.fft.rfft(u ** 2) + self.linear(n, resolved) * np.fft.rfft(u)
        return np.fft.irfft(rhs, n)[:, None]

    def divergence_hint(self) -> str:
        return (f"time_step {self.config.time_step:g} is too large for the explicit flux: keep "
                "time_step * b * max|u| * 2 pi N / (3 L) (b the flux coefficient) well below "
                "10, about 0.3 for accuracy, or raise the resolution")

    # -- dataset ---------------------------------------------------------------------------
    def extra_variables(self) -> dict[str, VariableSpec]:
        return {name: VariableSpec((), *self.parameter_units[name], role="parameter")
                for name in self.parameter_names}

    def extra_outputs(self, inputs: Mapping[str, np.ndarray],
                      times: np.ndarray) -> dict[str, np.ndarray]:
        return {name: np.asarray(inputs[name], dtype=np.float64)
                for name in self.parameter_names}

    def stored_bytes_per_sample(self) -> int:
        return self._stored_bytes({TIME: self.num_records + 1,
                                   X: self.config.resolution})
