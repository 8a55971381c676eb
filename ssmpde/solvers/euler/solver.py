"""The registered 2D Euler solver, ``get_solver("euler")``: :class:`EulerConfig` and
:class:`Euler2D` (datasets, presets, the Stepper protocol). See ``docs/numerics/euler.md``.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr

from ...core import unknown_name
from ...data import TIME, X, Y, grid_coordinates, time_coordinate
from ..base import (
    Checks,
    ConservativeForm,
    TimeDependentSolver,
    VariableSpec,
    positive_finite,
    register_solver,
    whole_multiple,
)
from ..protocol import stack_fields
from ..random_fields import sample_rng
from .engine import _boundary_pair, _check_numerics, _check_primitive, _Engine, _hint
from .initial import (
    CE_RM_EPSILON,
    RIEMANN_PROBLEMS,
    _riemann_state,
    ce_rm_state,
    gce_rt_state,
    kelvin_helmholtz_state,
)
from .kernels import BOUNDARIES
from .variables import conserved_variables, primitive_variables

#: Initial-condition families (each is also a preset of :class:`Euler2D`).
PROBLEMS = ("ce-rm", "gce-rt", "sod-x", "sod-y", "lax", "toro-123", "kelvin-helmholtz")
#: Field order of primitive states (and of conserved states: ρ, ρu, ρv, E, ρc).
FIELDS = ("density", "velocity_x", "velocity_y", "pressure", "tracer")
#: Largest grid side accepted (one 16384² sample's three state buffers are already 32 GB).
MAX_RESOLUTION = 2 ** 14


@dataclasses.dataclass(frozen=True)
class EulerConfig:
    """Configuration of :class:`Euler2D` (non-dimensional; unit square domain).

    Parameters
    ----------
    resolution : int
        Stored cells per side (the dataset's ``x`` and ``y``); must divide
        ``simulation_resolution``. Stored frames are averages of s × s simulation cells
        (s = simulation_resolution / resolution): finite-volume data are cell averages.
    simulation_resolution : int
        Cells per side N of the simulation grid, Δx = Δy = 1 / N.
    problem : str
        Initial-condition family: ``ce-rm``, ``gce-rt``, ``sod-x``, ``sod-y``, ``lax``,
        ``toro-123``, ``kelvin-helmholtz`` (see :class:`Euler2D`).
    gamma : float
        Ratio of specific heats γ > 1 (1.4 air; GCE-RT uses the γ = 2 polytrope).
    boundary : str
        ``periodic``, ``outflow`` (transmissive) or ``reflective`` (walls), on all sides.
    limiter : str
        Slope limiter of the reconstruction: ``mc`` (monotonised central) or ``minmod``
        (more diffusive, more robust at strong shocks).
    cfl : float
        Courant number C in (0, 1]: Δt = C / max((|u| + a)/Δx, (|v| + a)/Δy). 0.4 is the
        default; the unsplit scheme is stable to 0.6 on diagonal flows.
    final_time : float
        Simulated time T; ``final_time / record_interval + 1`` frames are stored.
    record_interval : float
        Time between stored frames; one Stepper ``step`` advances this much.
    interface_amplitude : float
        ε of the CE-RM interface R(θ) = 0.25 + ε Σ a_j sin(jθ + 2π b_j); below 0.09 the
        interface stays clear of the blast region r < 0.1.
    """

    resolution: int = 128
    simulation_resolution: int = 256
    problem: str = "ce-rm"
    gamma: float = 1.4
    boundary: str = "periodic"
    limiter: str = "mc"
    cfl: float = 0.4
    final_time: float = 2.0
    record_interval: float = 0.1
    interface_amplitude: float = CE_RM_EPSILON

    def __post_init__(self) -> None:
        n, m = self.simulation_resolution, self.resolution
        for name, value in (("simulation_resolution", n), ("resolution", m)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
                    or not 1 <= value <= MAX_RESOLUTION:
                raise ValueError(f"{name} must be an integer in 1..{MAX_RESOLUTION}, got "
                                 f"{value!r}")
        if n % m:
            divisors = [d for d in range(n, 0, -1) if n % d == 0][:8]
            raise ValueError(f"stored resolution {m} must divide the simulation resolution "
                             f"{n} (frames are average-pooled); choose one of {divisors}")
        if self.problem not in PROBLEMS:
            raise ValueError(unknown_name("problem", self.problem, PROBLEMS))
        _check_numerics(self.gamma, self.cfl, self.limiter)
        _boundary_pair(self.boundary)
        if not isinstance(self.boundary, str):
            raise ValueError(f"boundary must be one of {BOUNDARIES} (one kind for all sides), "
                             f"got {self.boundary!r}")
        for name in ("final_time", "record_interval"):
            if not positive_finite(getattr(self, name)):
                raise ValueError(f"{name} must be a positive finite number, got "
                                 f"{getattr(self, name)!r}")
        if not (positive_finite(self.interface_amplitude) or self.interface_amplitude == 0) \
                or self.interface_amplitude >= 0.15:
            raise ValueError(f"interface_amplitude must lie in [0, 0.15) so that the CE-RM "
                             f"interface stays inside the domain, got "
                             f"{self.interface_amplitude!r}")
        whole_multiple(self.final_time, self.record_interval,
                       "final_time must be a whole number of record intervals")

    @property
    def gravity(self) -> bool:
        return self.problem == "gce-rt"


@register_solver("euler")
class Euler2D(TimeDependentSolver):
    r"""2D compressible Euler equations with a passive tracer and optional static gravity.

    .. math:: \partial_t U + \nabla \cdot \mathbf F(U) = S,\quad
              U = (\rho, \rho u, \rho v, E, \rho c),\quad
              S = (0, -\rho \nabla \phi, -\rho\, \mathbf u \cdot \nabla \phi, 0)

    with E = ½ρ|u|² + p/(γ − 1) (ideal gas). Fields (the state, ``[batch, 5, y, x]``):
    ``density`` ρ, ``velocity_x`` u, ``velocity_y`` v, ``pressure`` p, ``tracer`` c. The
    GCE-RT problem adds the per-sample static ``potential`` φ ``[batch, y, x]`` (role
    ``forcing``: a known grid field the surrogate takes as input, and the Stepper's
    parameter). See :class:`EulerConfig` for the parameters.

    Scheme: finite volumes on the cell centres of the unit square (x_i = (i + ½)/N; the
    GCE-RT domain is shifted to [−½, ½]²). Second-order MUSCL-Hancock on the primitive
    variables, unsplit (Toro §14.4.2: limited slopes in x and y, a half-step predictor with
    both directions' derivatives, face states W̄ ± ½Δ), HLLC fluxes with Davis wave speeds
    (Toro §10.4–10.6), Δt = C / max((|u| + a)/Δx, (|v| + a)/Δy) per sample and step, the
    last step of each record interval clipped to land on the record time. A cell whose face
    ρ or p would be non-positive falls back to first order. Gravity: the well-balanced
    reconstruction of Käppeli & Mishra (2014) around the local isentropic equilibrium of
    each cell (see :func:`reference_step`), which keeps an isentropic hydrostatic state (the
    γ = 2 GCE-RT polytrope) at rest to round-off.

    Presets: ``ce-rm`` (Richtmyer–Meshkov, 256² → 128², T = 2, 21 frames),
    ``gce-rt`` (gravitational Rayleigh–Taylor, γ = 2, 256² → 128², T = 5, 11 frames),
    ``sod-x``, ``sod-y``, ``lax``, ``toro-123`` (Riemann problems across x = ½ or y = ½,
    outflow), ``kelvin-helmholtz`` (periodic shear layers). The initial states are point
    values at the simulation cell centres; the formulas are in :func:`ce_rm_state`,
    :func:`gce_rt_state`, :func:`kelvin_helmholtz_state` and :data:`RIEMANN_PROBLEMS`.

    Conventions: the coordinates are the cell centres (unlike the spectral solvers' nodes
    j/N); stored frames are block averages of the simulation grid (``downsampling =
    "pool"``). A state on a coarser grid given to :meth:`step` is spread to the simulation
    grid piecewise constantly (so that pooling it back gives it exactly); a coarser
    potential is interpolated bilinearly.

    Good values: C = 0.4. The unsplit scheme is stable to C = 0.6 on a diagonal flow, its
    worst case (measured: at 0.7 the smooth advected wave grows, at 0.8 it diverges; grid-
    aligned flows tolerate 0.8). MC for smooth and moderate flows, minmod for very strong
    shocks.

    Stability: if ρ or p turns non-positive after the first-order fallback, or the step
    collapses, :class:`SolverDivergedError` names the time and samples.

    References
    ----------
    E. F. Toro, Riemann Solvers and Numerical Methods for Fluid Dynamics, 3rd ed., Springer
    2009 (§10.4–10.6 HLLC, §14.4 MUSCL-Hancock).
    R. Käppeli & S. Mishra, Well-balanced schemes for the Euler equations with gravitation,
    J. Comput. Phys. 259 (2014) 199–219.
    M. Herde et al., Poseidon: efficient foundation models for PDEs, NeurIPS 2024
    (CE-RM, GCE-RT; App. B.2.8–B.2.9).
    C. P. McNally, W. Lyra & J.-C. Passy, ApJS 201 (2012) 18 (Kelvin–Helmholtz set-up).

    Example
    -------
    >>> solver = Euler2D(resolution=16, simulation_resolution=32, final_time=0.02,
    ...                  record_interval=0.01)
    >>> out = solver.solve_batch(solver.sample_inputs(seed=0, indices=[0]))
    >>> out["density"].shape
    (1, 3, 16, 16)
    """

    Config = EulerConfig
    fields = FIELDS
    field_units = {"density": ("density", "1"), "velocity_x": ("x velocity", "1"),
                   "velocity_y": ("y velocity", "1"), "pressure": ("pressure", "1"),
                   "tracer": ("passive tracer (mass fraction)", "1")}
    spatial_ndim = 2
    downsampling = "pool"
    #: Finite volumes: every stored value is the average over its cell.
    field_cell_methods = "y: x: mean"
    vectors = {"velocity": {"x": "velocity_x", "y": "velocity_y"}}
    parameter_names = ("potential",)
    title = "2D compressible Euler equations (MUSCL-Hancock, HLLC)"
    references = ("Toro, Riemann Solvers and Numerical Methods for Fluid Dynamics, 3rd ed. "
                  "2009; Kaeppeli & Mishra, J. Comput. Phys. 259 (2014); Herde et al., "
                  "Poseidon, NeurIPS 2024")
    PRESETS = {
        "ce-rm": dict(problem="ce-rm", resolution=128, simulation_resolution=256, gamma=1.4,
                      boundary="periodic", final_time=2.0, record_interval=0.1),
        "gce-rt": dict(problem="gce-rt", resolution=128, simulation_resolution=256, gamma=2.0,
                       boundary="periodic", final_time=5.0, record_interval=0.5),
        "sod-x": dict(problem="sod-x", resolution=256, simulation_resolution=256, gamma=1.4,
                      boundary="outflow", final_time=0.2, record_interval=0.02),
        "sod-y": dict(problem="sod-y", resolution=256, simulation_resolution=256, gamma=1.4,
                      boundary="outflow", final_time=0.2, record_interval=0.02),
        "lax": dict(problem="lax", resolution=256, simulation_resolution=256, gamma=1.4,
                    boundary="outflow", final_time=0.14, record_interval=0.014),
        "toro-123": dict(problem="toro-123", resolution=256, simulation_resolution=256,
                         gamma=1.4, boundary="outflow", final_time=0.15,
                         record_interval=0.015),
        "kelvin-helmholtz": dict(problem="kelvin-helmholtz", resolution=128,
                                 simulation_resolution=256, gamma=1.4, boundary="periodic",
                                 final_time=2.0, record_interval=0.1),
    }
    TINY = dict(problem="gce-rt", resolution=16, simulation_resolution=16, gamma=2.0,
                boundary="periodic", final_time=0.1, record_interval=0.05)

    # -- configuration-dependent declarations ------------------------------------------------
    @property
    def boundary_conditions(self) -> str:
        """The config's ``boundary``, on all four sides."""
        return self.config.boundary

    @property
    def checks(self) -> Checks:
        """Checks of a proposed frame that fit compressible flow, chosen from the config.

        Density and pressure stay positive. On a periodic domain without gravity the totals of
        mass, x and y momentum and energy E = ½ρ|u|² + p/(γ − 1) are conserved (with gravity
        the mass only: momentum and E exchange with the potential). The mean-square growth
        bound covers density and pressure only: the velocities start from rest.
        """
        cfg = self.config
        totals = {}
        if cfg.boundary == "periodic" and not cfg.gravity:
            def density(k):  # conserved density k of a frame {field: [batch, *grid]}
                return lambda f: conserved_variables(*(f[name] for name in FIELDS), cfg.gamma)[k]

            totals = {"x momentum": density(1), "y momentum": density(2), "energy": density(3)}
        conserved = ("density",) if cfg.boundary == "periodic" else ()
        return Checks(conserved=conserved, positive=("density", "pressure"), totals=totals,
                      bounded=("density", "pressure"))

    def conservative_form(self) -> ConservativeForm:
        """Primitive (ρ, u, v, p, c) ↔ conserved (ρ, ρu, ρv, E, ρc) with
        E = ½ρ(u² + v²) + p/(γ − 1): the densities the scheme updates in flux form."""
        gamma = self.config.gamma

        def to_conserved(w):
            return stack_fields(conserved_variables(*(w[:, k] for k in range(5)), gamma))

        def to_primitive(q):
            return stack_fields(primitive_variables(*(q[:, k] for k in range(5)), gamma))

        periodic = self.config.boundary == "periodic"
        return ConservativeForm(names=("density", "x momentum", "y momentum", "energy",
                                       "tracer mass"),
                                to_conserved=to_conserved, to_primitive=to_primitive,
                                periodic=(periodic, periodic))

    @property
    def origin(self) -> float:
        """Lower-left corner of the domain (−½ for GCE-RT, 0 otherwise), both axes."""
        return -0.5 if self.config.problem == "gce-rt" else 0.0

    def centres(self, n: int) -> np.ndarray:
        """Cell centres of an ``n``-cell axis of the domain."""
        return self.origin + (np.arange(n) + 0.5) / n

    # -- per-sample inputs -----------------------------------------------------------------
    def _draws(self, seed: int, index: int) -> dict[str, Any]:
        """The random numbers of one sample (stream 0, in this order)."""
        rng = sample_rng(seed, index, stream=0)
        problem = self.config.problem
        if problem == "ce-rm":
            return {"amplitudes": rng.uniform(0.0, 1.0, 10), "phases": rng.uniform(0.0, 1.0, 10)}
        if problem == "gce-rt":
            a, b = rng.uniform(-1.0, 1.0), rng.uniform(-np.pi, np.pi)
            c, d, e = rng.uniform(-1.0, 1.0, 3)
            return {"a": a, "b": b, "rho0": 1 + 0.2 * c, "p0": 1 + 0.2 * d,
                    "atwood": 0.05 * (1 + 0.2 * e)}
        if problem == "kelvin-helmholtz":
            return {"amplitudes": rng.uniform(0.0, 1.0, 4), "phases": rng.uniform(0.0, 1.0, 4)}
        return {}

    def _sample_state(self, seed: int, index: int) -> tuple[np.ndarray, np.ndarray | None]:
        cfg = self.config
        n = cfg.simulation_resolution
        x, y = self.centres(n)[None, :], self.centres(n)[:, None]
        draws = self._draws(seed, index)
        if cfg.problem == "ce-rm":
            return ce_rm_state(x, y, draws["amplitudes"], draws["phases"],
                               epsilon=cfg.interface_amplitude), None
        if cfg.problem == "gce-rt":
            return gce_rt_state(x, y, **draws)
        if cfg.problem == "kelvin-helmholtz":
            return kelvin_helmholtz_state(x, y, draws["amplitudes"], draws["phases"]), None
        left, right, axis = RIEMANN_PROBLEMS[cfg.problem]
        coordinate = np.broadcast_to(x if axis == "x" else y, (n, n))
        return _riemann_state((n, n), coordinate, left, right, axis), None

    def initial_condition(self, seed: int, indices: Sequence[int]) -> np.ndarray:
        """Primitive states ``[batch, 5, N, N]`` at the simulation cell centres."""
        return np.stack([self._sample_state(seed, i)[0] for i in indices])

    def parameter_specs(self) -> dict[str, tuple[int, ...]]:
        return {"potential": self.simulation_grid} if self.config.gravity else {}

    def default_parameter(self, name: str) -> Any:
        return None  # the potential is drawn per sample

    def check_parameters(self, parameters: Mapping[str, np.ndarray]) -> None:
        return None  # any finite potential will do (finiteness is checked by the base)

    def sample_parameters(self, seed: int, indices: Sequence[int]) -> dict[str, np.ndarray]:
        """GCE-RT: the potential φ ``[batch, N, N]`` (from the same draws as the state)."""
        if not self.config.gravity:
            return {}
        return {"potential": np.stack([self._sample_state(seed, i)[1] for i in indices])}

    def resolve_parameters(self, batch: int, parameters: Mapping[str, np.ndarray] | None
                           ) -> dict[str, np.ndarray]:
        """As the base, but a potential on a coarser grid (a dataset's) is interpolated
        bilinearly to the simulation grid first."""
        parameters = dict(parameters or {})
        value = parameters.get("potential")
        if self.config.gravity and value is not None:
            value = np.asarray(value, dtype=np.float64)
            n = self.config.simulation_resolution
            if value.ndim >= 2 and value.shape[-1] == value.shape[-2] and value.shape[-1] != n \
                    and n % value.shape[-1] == 0:
                parameters["potential"] = _interpolate(value, n, periodic=(
                    self.config.boundary == "periodic"))
        return super().resolve_parameters(batch, parameters)

    # -- simulation ------------------------------------------------------------------------
    def to_simulation_grid(self, frames: np.ndarray) -> np.ndarray:
        """States on a coarser square grid → the simulation grid, each cell's value repeated
        over the s × s cells it covers (pooling gives the input back exactly)."""
        n = self.config.simulation_resolution
        if frames.shape[-1] != frames.shape[-2] or n % frames.shape[-1]:
            raise ValueError(f"states must be on a square grid dividing the simulation grid "
                             f"{n}x{n}, got {frames.shape[-2:]}")
        factor = n // frames.shape[-1]
        return np.repeat(np.repeat(frames, factor, axis=-1), factor, axis=-2)

    def start(self, initial: np.ndarray, parameters: Mapping[str, np.ndarray]):
        cfg = self.config
        _check_primitive(initial)
        potential = parameters.get("potential") if cfg.gravity else None
        engine = _Engine(initial, (1.0, 1.0), gamma=cfg.gamma, boundary=(cfg.boundary,) * 2,
                         limiter=cfg.limiter, cfl=cfg.cfl, potential=potential)
        return types.SimpleNamespace(engine=engine, steps=0)

    def advance(self, state, time: float) -> None:
        steps = state.engine.evolve(self.config.record_interval, time=time,
                                    hint=self.divergence_hint())
        state.steps += int(steps.max())

    def observe(self, state) -> np.ndarray:
        return state.engine.W.copy()

    def divergence_hint(self) -> str:
        return _hint(self.config.cfl, self.config.limiter)

    # -- dataset ---------------------------------------------------------------------------
    def extra_variables(self) -> dict[str, VariableSpec]:
        if not self.config.gravity:
            return {}
        # φ is sampled at the simulation's cell centres; stored frames average s x s of them.
        pooled = self.config.simulation_resolution != self.config.resolution
        return {"potential": VariableSpec((Y, X), "gravitational potential", "1",
                                          role="forcing",
                                          cell_methods="y: x: mean" if pooled else "y: x: point")}

    def extra_outputs(self, inputs: Mapping[str, np.ndarray],
                      times: np.ndarray) -> dict[str, np.ndarray]:
        if not self.config.gravity:
            return {}
        phi = np.asarray(inputs["potential"], dtype=np.float64)
        return {"potential": self._restrict(phi[:, None], self.grid)[:, 0]}

    def coordinates(self) -> dict[str, xr.DataArray]:
        coords = grid_coordinates(self.config.resolution, ndim=2, placement="cell_centres",
                                  origin=self.origin, bounds=True)
        coords[TIME] = time_coordinate(np.arange(self.num_records + 1) * self.dt)
        return coords

    def stored_bytes_per_sample(self) -> int:
        r = self.config.resolution
        return self._stored_bytes({TIME: self.num_records + 1, Y: r, X: r})


def _interpolate(values: np.ndarray, n: int, *, periodic: bool) -> np.ndarray:
    """Bilinear interpolation of cell-centred ``[..., m, m]`` values to ``n`` cells per side."""
    m = values.shape[-1]
    coarse = (np.arange(m) + 0.5) / m
    fine = (np.arange(n) + 0.5) / n
    if periodic:
        coarse = np.concatenate([[coarse[-1] - 1.0], coarse, [coarse[0] + 1.0]])
        values = np.concatenate([values[..., -1:], values, values[..., :1]], axis=-1)
        values = np.concatenate([values[..., -1:, :], values, values[..., :1, :]], axis=-2)
    out = np.apply_along_axis(lambda row: np.interp(fine, coarse, row), -1, values)
    return np.apply_along_axis(lambda col: np.interp(fine, coarse, col), -2, out)
