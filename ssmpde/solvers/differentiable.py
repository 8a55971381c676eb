r"""One record interval of a solver in PyTorch, differentiable with respect to the state.

A learned correction of a coarse solver can be trained by unrolling through the coarse step
itself: the loss after a few corrected steps then sees how the solver propagates the model's
corrections. That needs the coarse step as a differentiable tensor function. This module
gives it for the spectral solvers, as the same scheme the NumPy/numba path runs, so the two
agree to round-off in float64:

* every 1D semilinear PDE on :class:`~ssmpde.solvers.semilinear.SemilinearSolver1D`
  (Kuramoto–Sivashinsky, Burgers, Korteweg–de Vries, Allen–Cahn): ETDRK4
  (:func:`~ssmpde.solvers.spectral.etdrk4_step`, the NumPy oracle's stages) with the
  solver's two hooks, its linear operator and its nonlinearity (the same term, factor and
  dealiasing as the fast path), the same contour coefficients
  (:func:`ssmpde.solvers.spectral.etdrk4_coefficients`) and the same number of steps per
  record interval;
* 2D Navier–Stokes (:class:`~ssmpde.solvers.navier_stokes.NavierStokes2D`), both time
  steppings and all three schemes (Euler/Crank–Nicolson, the Spalart–Moser–Rogers RK3/CN and
  ETDRK4), with drag and every forcing, the moving ``torus-vis-force`` one included. In CFL mode the number of
  sub-steps of each sample is computed from the detached state exactly as the solver does;
  it is a step count, so no gradient flows through it.

Torch is imported here and nowhere else in :mod:`ssmpde.solvers`.

See ``docs/numerics/differentiable.md``.

Example
-------
>>> import torch
>>> from ssmpde.solvers import get_solver
>>> from ssmpde.solvers.differentiable import differentiable_step
>>> ks = get_solver("kuramoto-sivashinsky", resolution=32, simulation_resolution=32,
...                 domain_length=22.0, viscosity=1.0, record_interval=0.1, time_step=0.05)
>>> step = differentiable_step(ks)
>>> x = torch.linspace(0, 22, 33, dtype=torch.float64)[:-1]
>>> u0 = torch.cos(2 * torch.pi * x / 22).reshape(1, 1, 32).requires_grad_()
>>> step(u0).square().sum().backward()
>>> u0.grad.shape
torch.Size([1, 1, 32])
"""

from __future__ import annotations

import abc
import collections
from collections.abc import Mapping

import numpy as np
import torch

from .base import TimeDependentSolver, whole_multiple
from .navier_stokes import FORCING_PHASE_SPEED, NavierStokes2D, etdrk4_operator, forcing_field
from .navier_stokes_engine import IMEX_STAGES
from .semilinear import SemilinearSolver1D
from .spectral import (VorticityWavenumbers, advection, dealias_mask, etdrk4_coefficients,
                       etdrk4_step, velocity_spectra, vorticity_wavenumbers)

__all__ = ["SUPPORTED", "DifferentiableStep", "differentiable_step"]

#: What :func:`differentiable_step` accepts, in words (the error message names them).
SUPPORTED = ("Kuramoto-Sivashinsky, Burgers, KdV, Allen-Cahn (any SemilinearSolver1D) and "
             "Navier-Stokes (NavierStokes2D)")
#: Bytes of ETDRK4 coefficient rows kept per step object: per-sample viscosities repeat from
#: batch to batch in training, and a contour evaluation costs more than the step itself.
_COEFFICIENT_CACHE_BYTES = 64 * 2 ** 20
_COMPLEX = {torch.float32: torch.complex64, torch.float64: torch.complex128}


def differentiable_step(solver: TimeDependentSolver) -> DifferentiableStep:
    """A differentiable PyTorch version of ``solver``'s record interval.

    Parameters
    ----------
    solver : SemilinearSolver1D or NavierStokes2D
        The solver to mirror (typically a coarse one, ``solver.coarsened(space=, time=)``).

    Returns
    -------
    DifferentiableStep
        Call it as ``step(frame, time=..., parameters=...)``.

    Raises
    ------
    ValueError
        For a solver without a PyTorch version (Darcy, Euler, ...).
    """
    if isinstance(solver, SemilinearSolver1D):
        return _SemilinearStep(solver)
    if isinstance(solver, NavierStokes2D):
        return _NavierStokesStep(solver)
    name = getattr(solver, "name", "") or type(solver).__name__
    raise ValueError(f"no differentiable step for {name!r}: supported are {SUPPORTED}")


class DifferentiableStep(abc.ABC):
    """One record interval (``solver.dt``) of a solver as a differentiable tensor function.

    Built by :func:`differentiable_step`. Calling it advances ``frame`` exactly as
    ``solver.step(frame[:, None], time=time, parameters=parameters)`` does, in the dtype and
    on the device of ``frame`` (float64 agrees with the solver to round-off; float32 is for
    training), and autograd differentiates the result with respect to ``frame``.

    Per-solver constants (wavenumbers, masks, flux factors, ETDRK4 coefficients per
    operator) are built once and kept on the object, per dtype and device.

    Attributes
    ----------
    solver : TimeDependentSolver
        The solver it mirrors.
    fields : tuple of str
        The state fields (the ``field`` axis of frames).
    dt : float
        The physical time one call advances: the solver's record interval.
    simulation_grid : tuple of int
        The grid frames must be on.

    Notes
    -----
    Parameters (viscosity, forcing amplitudes) may be NumPy arrays or tensors; they are read
    as float64 values and enter the scheme as constants, so no gradient flows to them. The
    solver's divergence check is not repeated: a step that blows up returns non-finite
    values instead of raising :class:`~ssmpde.solvers.base.SolverDivergedError`.
    """

    def __init__(self, solver: TimeDependentSolver) -> None:
        self.solver = solver
        self.fields = tuple(solver.fields)
        self.dt = float(solver.dt)
        self.simulation_grid = tuple(int(n) for n in solver.simulation_grid)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.solver!r})"

    def __call__(self, frame: torch.Tensor, *, time: float = 0.0,
                 parameters: Mapping[str, torch.Tensor | np.ndarray] | None = None,
                 source: torch.Tensor | None = None) -> torch.Tensor:
        """Advance ``frame`` by one record interval.

        Parameters
        ----------
        frame : torch.Tensor, shape ``[batch, field, *simulation_grid]``
            float32 or float64, on any device.
        time : float
            Physical time of ``frame`` (the moving forcing of Navier–Stokes reads it).
        parameters : mapping, optional
            Per-sample parameters, as for ``solver.step`` (names of
            ``solver.parameter_names``, arrays or tensors ``[batch, ...]``).
        source : torch.Tensor, optional
            ``frame``'s shape: a term added to the right-hand side over the interval, as
            ``solver.step(..., source=)`` adds it (the correction inside the step);
            differentiable too.

        Returns
        -------
        torch.Tensor, ``frame``'s shape, dtype and device: the state ``solver.dt`` later.
        """
        if not isinstance(frame, torch.Tensor):
            raise TypeError(f"frame must be a torch.Tensor, got {type(frame).__name__}")
        if frame.dtype not in _COMPLEX:
            raise ValueError(f"frame must be float32 or float64, got {frame.dtype}")
        expected = (len(self.fields), *self.simulation_grid)
        if frame.ndim != 2 + len(self.simulation_grid) or tuple(frame.shape[1:]) != expected:
            raise ValueError(f"frame must have shape [batch, {', '.join(map(str, expected))}] "
                             f"(fields {', '.join(self.fields)} on the simulation grid "
                             f"{self.simulation_grid}), got {tuple(frame.shape)}")
        resolved = self.solver.resolve_parameters(frame.shape[0], _as_numpy(parameters))
        source_hat = None
        if source is not None:
            if not isinstance(source, torch.Tensor) or source.shape != frame.shape:
                raise ValueError(f"source must be a tensor of frame's shape "
                                 f"{tuple(frame.shape)}, got {getattr(source, 'shape', source)}")
            if getattr(self.solver.config, "forcing", None) == "torus-vis-force":
                raise ValueError("a source term with the moving torus-vis-force forcing is not "
                                 "supported: use another forcing, or correct after the step")
            transform = torch.fft.rfft2 if len(self.simulation_grid) == 2 else torch.fft.rfft
            source_hat = transform(source[:, 0].to(frame.dtype))
        return self._advance(frame, float(time), resolved, source_hat)

    @abc.abstractmethod
    def _advance(self, frame: torch.Tensor, time: float, parameters: Mapping[str, np.ndarray],
                 source_hat: torch.Tensor | None) -> torch.Tensor:
        """The scheme: ``frame`` (validated) one record interval on, with the resolved
        per-sample ``parameters`` and the unnormalised spectrum of a source, if any."""


def _as_numpy(parameters: Mapping[str, torch.Tensor | np.ndarray] | None
              ) -> dict[str, np.ndarray] | None:
    """Tensors among ``parameters`` as float64 NumPy values (detached: they are constants)."""
    if parameters is None:
        return None
    return {name: value.detach().to("cpu", torch.float64).numpy()
            if isinstance(value, torch.Tensor) else value for name, value in parameters.items()}


class _SemilinearStep(DifferentiableStep):
    r"""ETDRK4 for :math:`\hat v' = L \hat v + N(\hat v)` on the rfft modes, as
    :class:`~ssmpde.solvers.spectral.ETDRK4` runs it (Cox & Matthews 2002; Kassam & Trefethen
    2005), ``steps`` steps of ``time_step`` per record interval."""

    def __init__(self, solver: SemilinearSolver1D) -> None:
        super().__init__(solver)
        cfg = solver.config
        self._n = int(cfg.simulation_resolution)
        self._h = float(cfg.time_step)
        self._steps = whole_multiple(cfg.record_interval, cfg.time_step, "record_interval")
        # The fast path's factor g · mask (/ n^p for a term of degree p, which is then fed the
        # unnormalised inverse transform, as here).
        self._nonlinearity = solver.nonlinearity
        self._factor = solver.nonlinear_factor(self._n, scaled=True)[None, :]
        self._rows: collections.OrderedDict[bytes, dict[str, np.ndarray]] = \
            collections.OrderedDict()
        row_bytes = 6 * (self._n // 2 + 1) * 16
        self._max_rows = max(1, _COEFFICIENT_CACHE_BYTES // row_bytes)
        self._factors: dict[tuple, torch.Tensor] = {}
        self._operator: tuple | None = None

    def _coefficients(self, linear: np.ndarray) -> dict[str, np.ndarray]:
        """E, E2, Q, f1, f2, f3 per operator row ``[rows, m]`` (complex128), computed row by
        row as :class:`~ssmpde.solvers.spectral.ETDRK4` does (so sample i does not depend
        on its batch), each distinct row once."""
        rows = []
        for row in linear:
            key = row.dtype.str.encode() + row.tobytes()
            if key in self._rows:
                self._rows.move_to_end(key)
            else:
                with np.errstate(under="ignore"):  # e^{hL} of the stiffest modes underflows
                    each = etdrk4_coefficients(row[None], self._h)
                self._rows[key] = {k: np.asarray(v, dtype=np.complex128) for k, v in each.items()}
                if len(self._rows) > self._max_rows:
                    self._rows.popitem(last=False)
            rows.append(self._rows[key])
        return {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}

    def _constants(self, parameters: Mapping[str, np.ndarray], dtype: torch.dtype,
                   device: torch.device) -> dict[str, torch.Tensor]:
        linear = np.atleast_2d(np.asarray(self.solver.linear(self._n, parameters)))
        linear = linear.astype(np.complex128 if np.iscomplexobj(linear) else np.float64)
        key = (linear.dtype.str, linear.shape, linear.tobytes(), dtype, device)
        if self._operator is None or self._operator[0] != key:
            complex_dtype = _COMPLEX[dtype]
            tensors = {k: torch.as_tensor(v, device=device).to(complex_dtype)
                       for k, v in self._coefficients(linear).items()}
            if (complex_dtype, device) not in self._factors:
                self._factors[complex_dtype, device] = torch.as_tensor(
                    self._factor, device=device).to(complex_dtype)
            tensors["factor"] = self._factors[complex_dtype, device]
            self._operator = (key, tensors)
        return self._operator[1]

    def _advance(self, frame, time, parameters, source_hat):
        c = self._constants(parameters, frame.dtype, frame.device)
        n, factor, term = self._n, c["factor"], self._nonlinearity.term
        # "forward": the unnormalised inverse transform, as the solver's FFTW one
        norm = "backward" if self._nonlinearity.degree is None else "forward"

        def nonlinear(v_hat):
            out = factor * torch.fft.rfft(term(torch.fft.irfft(v_hat, n, norm=norm)))
            return out if source_hat is None else out + source_hat

        v = torch.fft.rfft(frame[:, 0])
        for _ in range(self._steps):
            v = etdrk4_step(v, c, nonlinear)
        return torch.fft.irfft(v, n)[:, None]


class _NavierStokesStep(DifferentiableStep):
    r"""The vorticity scheme of :class:`~ssmpde.solvers.navier_stokes.NavierStokes2D`: per
    stage E = f̂(t) − mask · FFT(u ω_x + v ω_y), then
    ω̂ ← [(1 − a) ω̂ + Δt (γ E + ζ E_prev)] / (1 + a), a = α Δt (ν λ + μ) (Euler–CN: one
    stage α = ½, γ = 1, ζ = 0; RK3/CN: Spalart, Moser & Rogers 1991), each sample with its
    own Δt and number of sub-steps; or ETDRK4 (:func:`~ssmpde.solvers.spectral.etdrk4_step`
    with N = E, L = −νλ − μ, the solver's coefficients)."""

    def __init__(self, solver: NavierStokes2D) -> None:
        super().__init__(solver)
        cfg = solver.config
        self._n = int(cfg.simulation_resolution)
        self._exponential = cfg.effective_scheme == "etdrk4"
        self._operators: dict[tuple, dict[str, torch.Tensor]] = {}
        self._stages = IMEX_STAGES.get(cfg.effective_scheme)  # (alpha, gamma, zeta, node)
        self._moving = cfg.forcing == "torus-vis-force"
        self._tensors: dict[tuple, dict[str, torch.Tensor]] = {}
        self._forcing: tuple | None = None

    def _constants(self, dtype: torch.dtype, device: torch.device) -> dict[str, torch.Tensor]:
        key = (dtype, device)
        if key not in self._tensors:
            k = vorticity_wavenumbers(self._n)
            values = {"lap": k.laplacian, "mask": dealias_mask(self._n).astype(np.float64)}
            tensors = {name: torch.as_tensor(v, device=device).to(dtype)
                       for name, v in values.items()}
            tensors["k"] = VorticityWavenumbers(*(torch.as_tensor(v, device=device).to(dtype)
                                                  for v in k))
            self._tensors[key] = tensors
        return self._tensors[key]

    def _forcing_spectra(self, amplitudes: np.ndarray | None, dtype: torch.dtype,
                         device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
        """f̂ and, for the moving phase, the forcing at φ = π/2 (f̂(t) = cos φ F̂ + sin φ Ĝ),
        as the solver's unnormalised transforms ``[1 or batch, n, n // 2 + 1]``."""
        kind = self.solver.config.forcing
        key = (None if amplitudes is None else amplitudes.tobytes(), dtype, device)
        if self._forcing is None or self._forcing[0] != key:
            fields = [forcing_field(kind, self._n, amplitudes, phase=0.0)]
            if self._moving:
                fields.append(forcing_field(kind, self._n, amplitudes, phase=np.pi / 2))
            spectra = [torch.fft.rfft2(torch.as_tensor(f, device=device).to(dtype))
                       for f in fields]
            self._forcing = (key, (spectra[0], spectra[1] if self._moving else None))
        return self._forcing[1]

    def _etd_operator(self, viscosity: np.ndarray, dtype: torch.dtype, device: torch.device
                      ) -> dict[str, torch.Tensor]:
        """The solver's ETDRK4 coefficients per sample ``[batch, n, m]``, as tensors."""
        cfg = self.solver.config
        key = (np.asarray(viscosity, dtype=np.float64).tobytes(), dtype, device)
        if key not in self._operators:
            rows = [etdrk4_operator(self._n, float(nu), float(cfg.drag),
                                    cfg.effective_time_step) for nu in viscosity]
            self._operators.clear()  # one batch's operator at a time
            self._operators[key] = {
                k: torch.as_tensor(np.stack([r[k] for r in rows]), device=device).to(dtype)
                for k in rows[0]}
        return self._operators[key]

    def _steps(self, frame: torch.Tensor) -> np.ndarray:
        """Sub-steps of each sample in this record interval, as the solver counts them."""
        cfg = self.solver.config
        batch, interval = frame.shape[0], cfg.record_interval
        if cfg.time_stepping == "faithful":
            return np.full(batch, whole_multiple(interval, cfg.effective_time_step, "interval"))
        # The solver's max |u| + |v| in float64, from the values of the state alone.
        c = self._constants(torch.float64, frame.device)
        w_hat = torch.fft.rfft2(frame.detach()[:, 0].to(torch.float64))
        velocity = torch.fft.irfft2(torch.stack(velocity_spectra(w_hat, c["k"])[:2], 1),
                                    s=(self._n, self._n))
        speed = velocity.abs().sum(1).amax(dim=(-2, -1)).cpu().numpy()
        with np.errstate(divide="ignore"):
            limit = np.minimum(cfg.cfl / (self._n * speed), cfg.effective_time_step)
        return np.maximum(1, np.ceil(interval / limit - 1e-9)).astype(np.int64)

    def _advance(self, frame, time, parameters, source_hat):
        n, dtype, device = self._n, frame.dtype, frame.device
        c = self._constants(dtype, device)
        forcing, shift = self._forcing_spectra(parameters.get("forcing_amplitude"), dtype,
                                               device)
        steps = self._steps(frame)
        dt = self.solver.config.record_interval / steps

        def as_tensor(values):
            return torch.as_tensor(values, device=device).to(dtype)

        def advection_hat(w_hat):
            fields = torch.fft.irfft2(torch.stack(velocity_spectra(w_hat, c["k"]), 1), s=(n, n))
            return torch.fft.rfft2(advection(*fields.unbind(1)))

        if source_hat is not None:
            forcing = forcing + source_hat

        def forcing_at(times):
            if not self._moving:
                return forcing
            phase = FORCING_PHASE_SPEED * times
            return as_tensor(np.cos(phase))[:, None, None] * forcing \
                + as_tensor(np.sin(phase))[:, None, None] * shift

        w_hat = torch.fft.rfft2(frame[:, 0])
        if self._exponential:
            # faithful stepping: every sample takes the same steps of the same dt
            e = self._etd_operator(parameters["viscosity"], dtype, device)
            for sub in range(int(steps[0])):
                def explicit(w, node, sub=sub):
                    return forcing_at(time + (sub + node) * dt) - c["mask"] * advection_hat(w)

                w_hat = etdrk4_step(w_hat, e, explicit, nodes=True)
            return torch.fft.irfft2(w_hat, s=(n, n))[:, None]
        dt_t = as_tensor(dt)[:, None, None]
        viscous = dt_t * as_tensor(parameters["viscosity"])[:, None, None] * c["lap"]
        damping = dt_t * float(self.solver.config.drag)
        steps_t = torch.as_tensor(steps, device=device)[:, None, None]
        previous = None
        for sub in range(int(steps.max())):
            everyone = bool((steps > sub).all())
            for alpha, gamma, zeta, node in self._stages:
                explicit = forcing_at(time + (sub + node) * dt) - c["mask"] * advection_hat(w_hat)
                increment = gamma * explicit if zeta == 0.0 else \
                    gamma * explicit + zeta * previous
                a = alpha * viscous + alpha * damping
                updated = ((1.0 - a) * w_hat + dt_t * increment) / (1.0 + a)
                # Samples that have finished their sub-steps keep their state (the solver's
                # "active" rows).
                w_hat = updated if everyone else torch.where(steps_t > sub, updated, w_hat)
                previous = explicit
        return torch.fft.irfft2(w_hat, s=(n, n))[:, None]
