"""The solver base classes: :class:`Solver` (steady problems) and :class:`TimeDependentSolver`.

Every PDE lives in its own module and subclasses one of them; the checks its config runs
(:func:`positive_finite`, :func:`check_ranged`, :func:`check_strided_grid`,
:func:`whole_multiple`, ...) are here too. Re-exported by :mod:`ssmpde.solvers.base`, which
also holds the registry.
"""

from __future__ import annotations

import abc
import dataclasses
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import xarray as xr

from ..core import unknown_name
from ..data import (SAMPLE, SPATIAL_DIMS, TIME, build_dataset, grid_coordinates,
                    sample_coordinate, time_coordinate)
from .protocol import Checks, ConservativeForm, SolverDivergedError, VariableSpec
from .spectral import spectral_resample

__all__ = ["DTYPES", "Solver", "TimeDependentSolver", "block_average", "check_dtype",
           "check_ranged", "check_strided_grid", "parse_coarsening", "positive_finite",
           "whole_multiple"]


def positive_finite(value: Any) -> bool:
    """A real number (not a bool) that is finite and > 0."""
    return isinstance(value, (int, float, np.integer, np.floating)) \
        and not isinstance(value, (bool, np.bool_)) and math.isfinite(value) and value > 0


def check_ranged(name: str, value: Any) -> None:
    """A config value that is a positive number or a ``(low, high)`` range drawn per sample."""
    values = value if isinstance(value, tuple) else (value,)
    if len(values) not in (1, 2) or not all(positive_finite(v) for v in values):
        raise ValueError(f"{name} must be a positive finite number or a (low, high) pair of "
                         f"them, got {value!r}")
    if len(values) == 2 and values[0] > values[1]:
        raise ValueError(f"{name} range must be (low, high), got {value!r}")


def check_strided_grid(resolution: Any, simulation_resolution: Any, maximum: int) -> None:
    """Even grid sizes, the stored one an even divisor of the simulated one (frames strided)."""
    def even(n):
        return isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 2 \
            and n % 2 == 0

    if not even(simulation_resolution) or simulation_resolution > maximum:
        raise ValueError(f"simulation_resolution must be an even integer in 2..{maximum}, got "
                         f"{simulation_resolution!r}")
    if not even(resolution) or simulation_resolution % resolution:
        divisors = [d for d in range(simulation_resolution, 1, -1)
                    if simulation_resolution % d == 0 and d % 2 == 0]
        raise ValueError(f"stored resolution {resolution!r} must be an even divisor of the "
                         f"simulation resolution {simulation_resolution} (frames are strided); "
                         f"choose one of {divisors[:8]}")


def parse_coarsening(text: str) -> tuple[int, int]:
    """``"2x1"`` → (2, 1): the simulation grid 2x coarser per axis, the same time step (see
    :meth:`TimeDependentSolver.coarsened`)."""
    space, sep, time = str(text).lower().partition("x")
    if not sep or not space.isdigit() or not time.isdigit() or int(space) < 1 \
            or int(time) < 1 or (int(space), int(time)) == (1, 1):
        raise ValueError(f"bad coarsening {text!r}: use SPACExTIME with integer factors, e.g. "
                         "'2x1' (grid 2x coarser) or '1x4' (time step 4x longer)")
    return int(space), int(time)


def whole_multiple(numerator: float, denominator: float, what: str) -> int:
    """``numerator / denominator`` when it is a whole number >= 1 (to 1e-9 relative);
    ValueError starting with ``what`` otherwise (record intervals and time steps)."""
    ratio = numerator / denominator
    count = round(ratio)
    if count < 1 or abs(ratio - count) > 1e-9 * max(1.0, ratio):
        raise ValueError(f"{what}: {numerator!r} is not a whole multiple of {denominator!r}")
    return int(count)


#: The arithmetic a spectral solver may run in (the config's ``dtype``): float64, the
#: default, or float32 (1.1–1.2x faster; its error against float64 is in the docs).
DTYPES = ("float64", "float32")


def check_dtype(dtype: Any) -> None:
    """``dtype`` one of :data:`DTYPES` (ValueError naming them)."""
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {DTYPES} (float32 runs 1.1–1.2x "
                         "faster, at float32's round-off)")


def _to_json_value(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (tuple, list)):
        return [_to_json_value(v) for v in value]
    return value


def block_average(values: np.ndarray, grid: Sequence[int]) -> np.ndarray:
    """Cell averages ``[..., *fine]`` averaged over blocks onto ``grid`` (the last
    ``len(grid)`` axes; each fine size a multiple of its coarse one): the exact restriction of
    finite-volume data, and the ``"pool"`` down-sampling of stored frames."""
    ndim = len(grid)
    fine = values.shape[values.ndim - ndim:]
    if any(m < 1 or n % m for n, m in zip(fine, grid)):
        raise ValueError(f"a {list(fine)} grid does not average onto {list(grid)} cells: "
                         "each coarse size must divide the fine one")
    shape = list(values.shape[:values.ndim - ndim])
    for n, m in zip(fine, grid):
        shape += [m, n // m]
    lead = values.ndim - ndim
    return values.reshape(shape).mean(axis=tuple(range(lead + 1, lead + 2 * ndim, 2)))


class Solver(abc.ABC):
    """Base class of the built-in PDE solvers.

    A subclass sets the class attributes below and implements the three generation hooks;
    :func:`ssmpde.generation.generate` does batching, seeding, files and progress.

    Class attributes
    ----------------
    name : str
        Registry name (set by :func:`~ssmpde.solvers.base.register_solver`).
    Config : type
        Frozen dataclass of the scientific configuration. Its ``__post_init__`` validates.
    PRESETS : dict
        Named configurations (benchmark datasets of the literature).
    TINY : dict
        A configuration that generates a sample in well under a second: the registry smoke
        test runs every solver with it (so a new PDE is tested the day it is registered).
        Store frames at the simulation resolution, so that the stored trajectory replays
        through :meth:`TimeDependentSolver.step`.
    title, references : str
        Dataset attributes.
    boundary_conditions : str or mapping
        The domain's boundary conditions, written on every variable with a grid (see
        :func:`ssmpde.data.build_dataset`): one kind of :data:`ssmpde.data.BOUNDARY_KINDS` for
        all sides, or per spatial dimension a kind or a (lower, upper) pair. A solver whose
        conditions depend on its config makes this a property. None (the base default) writes
        none; every built-in solver declares its own.
    vectors : mapping
        Vector name → spatial dimension → variable, e.g. ``{"velocity": {"x": "velocity_x",
        "y": "velocity_y"}}`` (see :func:`ssmpde.data.vectors_of`).
    """

    name: ClassVar[str] = ""
    Config: ClassVar[type]
    PRESETS: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    TINY: ClassVar[Mapping[str, Any]] = {}
    title: ClassVar[str] = ""
    references: ClassVar[str] = ""
    boundary_conditions: ClassVar[str | Mapping[str, Any] | None] = None
    vectors: ClassVar[Mapping[str, Mapping[str, str]]] = {}

    def __init__(self, **config: Any) -> None:
        self.config = self.make_config(**config)

    # -- configuration ---------------------------------------------------------------------
    @classmethod
    def make_config(cls, **config: Any):
        """Build and validate the config dataclass; unknown keys get a clear TypeError."""
        names = [f.name for f in dataclasses.fields(cls.Config)]
        for key in config:
            if key not in names:
                raise TypeError(unknown_name(f"{cls.name or cls.__name__} option", key, names))
        normalised = {k: tuple(v) if isinstance(v, list) else v for k, v in config.items()}
        return cls.Config(**normalised)

    @classmethod
    def from_preset(cls, preset: str, **overrides: Any) -> Solver:
        """The solver configured as the named benchmark, with ``overrides`` applied."""
        if preset not in cls.PRESETS:
            raise ValueError(unknown_name(f"{cls.name} preset", preset, list(cls.PRESETS)))
        return cls(**{**cls.PRESETS[preset], **overrides})

    def config_dict(self) -> dict[str, Any]:
        """The config as plain JSON-able values (stored as the ``ssmpde_config`` attribute)."""
        return {k: _to_json_value(v) for k, v in dataclasses.asdict(self.config).items()}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({json.dumps(self.config_dict())[1:-1]})"

    # -- dataset generation hooks ----------------------------------------------------------
    @abc.abstractmethod
    def sample_inputs(self, seed: int, indices: Sequence[int]) -> dict[str, np.ndarray]:
        """Random inputs of the given samples (initial conditions, per-sample parameters).

        Sample ``indices[i]`` must depend on ``(seed, indices[i])`` alone, so that a dataset
        is the same whatever the batch size (use :func:`ssmpde.solvers.random_fields.sample_rng`).
        """

    @abc.abstractmethod
    def solve_batch(self, inputs: Mapping[str, np.ndarray], *,
                    progress: Callable[[float], None] | None = None) -> dict[str, np.ndarray]:
        """Run a batch; return arrays ``[batch, ...]`` named as in :meth:`variables`.

        ``progress(fraction)`` is called with the fraction of the batch's work just finished.
        """

    @abc.abstractmethod
    def variables(self) -> dict[str, VariableSpec]:
        """Dataset variables this solver writes, in order."""

    @abc.abstractmethod
    def coordinates(self) -> dict[str, xr.DataArray]:
        """Coordinates of the non-sample dimensions (``time``, ``y``, ``x``, ...)."""

    # -- memory estimate (checked by generate() before it allocates anything) ---------------
    def stored_bytes_per_sample(self) -> int:
        """Bytes one sample occupies in the dataset: every variable of :meth:`variables`, its
        dimensions sized by :meth:`coordinates`, at 8 bytes a value.

        A solver whose coordinates are costly to build for a huge configuration (a long time
        axis) overrides this with the sizes it knows, so the estimate itself stays cheap.
        """
        sizes = {dim: int(size) for coord in self.coordinates().values()
                 for dim, size in zip(coord.dims, coord.shape)}
        return self._stored_bytes(sizes)

    def bytes_per_sample(self) -> int:
        """Peak memory one sample of a batch needs, in bytes: its stored output plus the
        solver's working memory.

        Default: :meth:`stored_bytes_per_sample` plus, for a time-dependent solver (one with
        ``simulation_grid`` and ``fields``), 16 grid-sized float64 arrays per field on the
        simulation grid (state, FFT buffers, stage work arrays). Steady solvers override it
        (e.g. Darcy adds its sparse LU factor).
        """
        work = 0
        grid = getattr(self, "simulation_grid", None)
        fields = getattr(self, "fields", ())
        if grid is not None and fields:
            work = 16 * len(fields) * math.prod(int(n) for n in grid) * 8
        return self.stored_bytes_per_sample() + work

    def _stored_bytes(self, sizes: Mapping[str, int]) -> int:
        """8 bytes per value of every variable of one sample, dimension sizes from ``sizes``."""
        total = 0
        for name, spec in self.variables().items():
            missing = [dim for dim in spec.dims if dim not in sizes]
            if missing:
                raise RuntimeError(f"{self.name}: variable {name!r} has dimensions {missing} "
                                   "without a size (override stored_bytes_per_sample)")
            total += 8 * math.prod(int(sizes[dim]) for dim in spec.dims)
        return total

    def to_dataset(self, outputs: Mapping[str, np.ndarray], indices: Sequence[int], *,
                   config: Mapping[str, Any], history: str | None = None) -> xr.Dataset:
        """Wrap :meth:`solve_batch` outputs as a schema-valid dataset (see :mod:`ssmpde.data`)."""
        coords = dict(self.coordinates())
        coords[SAMPLE] = sample_coordinate(np.asarray(indices, dtype=np.int64))
        data_vars = {}
        for name, spec in self.variables().items():
            values = np.asarray(outputs[name])
            dims = (SAMPLE, *spec.dims)
            if values.ndim != len(dims):
                raise RuntimeError(f"{self.name}: output {name!r} has shape {values.shape}, "
                                   f"expected dims {dims}")
            data_vars[name] = xr.DataArray(values, dims=dims, attrs=spec.attrs())
        return build_dataset(
            data_vars, coords=coords, equation=self.name, config=config, title=self.title,
            references=self.references, solver=type(self).__name__, history=history,
            boundary_conditions=self.boundary_conditions, vectors=self.vectors)


class TimeDependentSolver(Solver):
    """Base of the evolution problems: one record interval per :meth:`step`, datasets of
    trajectories, per-sample parameters, divergence checks and down-sampling, written once.

    A PDE supplies its state and its physics through these hooks:

    * :attr:`fields` and :attr:`field_units` (``name -> (long_name, units)``);
    * :attr:`grid` (the stored grid) and :attr:`simulation_grid` (the solver's own);
    * :meth:`initial_condition` ``(seed, indices) -> [batch, field, *simulation_grid]``;
    * :meth:`parameter_specs` (per-sample parameters: name → shape of one sample's value) with
      :meth:`default_parameter`, :meth:`sample_parameters` and :meth:`check_parameters`;
    * :meth:`start` ``(initial, parameters) -> state``, :meth:`advance` ``(state, time)`` one
      record interval in place, :meth:`observe` ``(state) -> [batch, field, *simulation_grid]``;
    * optionally :meth:`to_simulation_grid` (e.g. spectral interpolation), :meth:`divergence_hint`,
      :meth:`extra_variables` / :meth:`extra_outputs` (forcing fields, parameters in datasets),
      :attr:`checks` (conserved quantities, positivity) and :attr:`domain_length`.

    The config dataclass must have ``final_time`` and ``record_interval``.

    Conventions: frames are NumPy float64 ``[batch, field, *grid]``; down-sampling from the
    simulation grid to a stored grid takes every ``s``-th node (``downsampling = "stride"``),
    the mean of ``s``-node blocks (``"pool"``), ``s`` the ratio of the two grids per axis, or
    the Fourier modes the stored grid can hold (``"spectral"``); a config field
    ``downsampling`` overrides the class's choice.
    """

    fields: ClassVar[tuple[str, ...]] = ()
    field_units: ClassVar[Mapping[str, tuple[str, str]]] = {}
    window: ClassVar[int] = 1
    #: Every per-sample input :meth:`step` may be given (the Stepper protocol).
    parameter_names: ClassVar[tuple[str, ...]] = ()
    checks: ClassVar[Checks] = Checks()
    downsampling: ClassVar[str] = "stride"
    domain_length: ClassVar[float | tuple[float, ...]] = 1.0
    #: Whether the grid includes the right boundary point (False: periodic).
    endpoint: ClassVar[bool] = False
    #: The default grid (``endpoint = False``) is periodic, and so are its conditions; a PDE
    #: with walls or inflow declares its own (see :class:`Solver`).
    boundary_conditions: ClassVar[str | Mapping[str, Any] | None] = "periodic"
    #: CF ``cell_methods`` of the stored fields: None for point values at the nodes,
    #: ``"y: x: mean"`` for finite-volume cell averages.
    field_cell_methods: ClassVar[str | None] = None

    #: Spatial dimensions; with the config's ``resolution`` and ``simulation_resolution``
    #: (points per axis) it gives the default grids below.
    spatial_ndim: ClassVar[int] = 1

    # -- hooks ------------------------------------------------------------------------------
    @property
    def grid(self) -> tuple[int, ...]:
        """The stored grid (the dataset's ``(y, x)`` or ``(x,)`` sizes)."""
        return (self.config.resolution,) * self.spatial_ndim

    @property
    def simulation_grid(self) -> tuple[int, ...]:
        """The grid the solver integrates on."""
        return (self.config.simulation_resolution,) * self.spatial_ndim

    @abc.abstractmethod
    def initial_condition(self, seed: int, indices: Sequence[int]) -> np.ndarray:
        """Random initial states ``[batch, field, *simulation_grid]`` (stream 0 of each sample)."""

    @abc.abstractmethod
    def start(self, initial: np.ndarray, parameters: Mapping[str, np.ndarray]) -> Any:
        """The solver's state for ``initial`` ``[batch, field, *simulation_grid]``."""

    @abc.abstractmethod
    def advance(self, state: Any, time: float) -> None:
        """Advance ``state`` in place by one record interval starting at ``time``."""

    @abc.abstractmethod
    def observe(self, state: Any) -> np.ndarray:
        """The physical fields of ``state``: a new array ``[batch, field, *simulation_grid]``."""

    #: Positive scalar parameters whose config field is a number or a ``(low, high)`` range
    #: drawn per sample (``viscosity``); the default hooks below handle them.
    ranged_parameters: ClassVar[tuple[str, ...]] = ()

    def parameter_specs(self) -> dict[str, tuple[int, ...]]:
        """Per-sample parameters of this configuration: name → shape of one sample's value."""
        return {name: () for name in self.ranged_parameters}

    def default_parameter(self, name: str) -> Any:
        """The value of ``name`` when none is given, or None if it is drawn per sample."""
        value = getattr(self.config, name, None)
        return None if value is None or isinstance(value, tuple) else float(value)

    def sample_parameters(self, seed: int, indices: Sequence[int]) -> dict[str, np.ndarray]:
        """Per-sample parameters ``[batch, ...]``: the ranged ones drawn U[low, high] from
        stream 1 of each sample's generator, in the order of :attr:`ranged_parameters`."""
        from .random_fields import sample_rng

        out = {name: np.empty(len(indices)) for name in self.ranged_parameters}
        for row, index in enumerate(indices):
            rng = sample_rng(seed, index, stream=1)
            for name in self.ranged_parameters:
                value = getattr(self.config, name)
                out[name][row] = rng.uniform(*value) if isinstance(value, tuple) else value
        return out

    def check_parameters(self, parameters: Mapping[str, np.ndarray]) -> None:
        """Raise ValueError for physically invalid resolved parameters (e.g. ν <= 0)."""
        for name in self.ranged_parameters:
            if not np.all(parameters[name] > 0):
                raise ValueError(f"{name} must be positive and finite, got {parameters[name]}")

    def to_simulation_grid(self, frames: np.ndarray) -> np.ndarray:
        """``[batch, field, *grid]`` on another grid → the simulation grid (default: refuse)."""
        raise ValueError(f"states must be on the simulation grid {self.simulation_grid}, got "
                         f"{frames.shape[2:]}")

    def divergence_hint(self) -> str:
        """What to change when the solution blows up."""
        return "reduce the time step or raise the resolution"

    def tendency(self, frames: np.ndarray, *, time: float = 0.0,
                 parameters: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """The equation's right-hand side ∂u/∂t at ``frames`` ``[batch, field, *grid]``.

        On the grid of ``frames`` (any grid the solver's spatial discretisation can evaluate
        on, e.g. the stored grid), with the per-sample ``parameters`` of :meth:`step` and
        time-dependent forcing at ``time``. Hybrid rollouts use it for the PDE-residual error
        indicator of a surrogate's proposed step. Solvers that cannot evaluate it cheaply
        (finite-volume Euler) leave this default, which says what to use instead.
        """
        raise ValueError(f"{self.name} does not evaluate its equation's right-hand side, so "
                         "the 'residual' error indicator is not available for it: use "
                         "indicator='coarse'")

    def coarser_time_step(self, factor: int) -> dict[str, Any]:
        """Config changes that make the time step ``factor`` times longer (see
        :meth:`coarsened`). Default: a fixed ``time_step``."""
        step = getattr(self.config, "time_step", None)
        if step is None:
            raise ValueError(f"{self.name} has no fixed time step to coarsen in this "
                             "configuration: coarsen it in space only")
        return {"time_step": float(step) * factor}

    def coarsened(self, *, space: int = 1, time: int = 1) -> TimeDependentSolver:
        """The same solver at reduced cost: the honest baseline of a surrogate.

        ``space``: the simulation grid ``space`` times coarser per axis (the stored grid must
        still divide it, so the coarse solver steps the same states); ``time``: the time step
        ``time`` times longer (:meth:`coarser_time_step`; the CFL number in CFL mode). The
        record interval, and so :attr:`dt`, is unchanged.
        """
        for name, value in (("space", space), ("time", time)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"coarsening factor {name} must be an integer >= 1, "
                                 f"got {value!r}")
        changes: dict[str, Any] = {}
        if space > 1:
            fine, stored = self.simulation_grid, self.grid
            coarse = tuple(n // space for n in fine)
            if any(n % space or c % m for n, c, m in zip(fine, coarse, stored)):
                raise ValueError(f"the simulation grid {fine} coarsened {space}x is "
                                 f"{coarse}, which the stored grid {stored} does not divide: "
                                 "choose a smaller space factor")
            changes["simulation_resolution"] = coarse[0] if len(set(coarse)) == 1 else coarse
        if time > 1:
            changes.update(self.coarser_time_step(time))
        if not changes:
            return self
        config = {**dataclasses.asdict(self.config), **changes}
        return type(self)(**config)

    def extra_variables(self) -> dict[str, VariableSpec]:
        """Dataset variables besides the fields (parameters, forcing), in order."""
        return {}

    def extra_outputs(self, inputs: Mapping[str, np.ndarray],
                      times: np.ndarray) -> dict[str, np.ndarray]:
        """Values of :meth:`extra_variables` for a batch of inputs, at the stored ``times``."""
        return {}

    # -- Stepper protocol -------------------------------------------------------------------
    @property
    def dt(self) -> float:
        """Physical time of one :meth:`step`: the record interval."""
        return float(self.config.record_interval)

    @property
    def num_records(self) -> int:
        """Record intervals in a stored trajectory (``final_time / record_interval``)."""
        return int(round(self.config.final_time / self.config.record_interval))

    #: Whether :meth:`step` takes a ``source`` (a term added to the right-hand side over the
    #: interval: the learned correction inside the step). Solvers that do implement
    #: :meth:`add_source`.
    takes_source: ClassVar[bool] = False

    def step(self, history: np.ndarray, *, time: float = 0.0,
             parameters: Mapping[str, np.ndarray] | None = None,
             source: np.ndarray | None = None) -> np.ndarray:
        """Advance one record interval: ``[batch, window, field, *grid] -> [batch, field, *grid]``.

        States may be on the simulation grid or any grid :meth:`to_simulation_grid` accepts;
        the output is on the input's grid. ``time`` is the time of the last frame;
        ``parameters`` holds the per-sample values (see :meth:`parameter_specs`).
        ``source`` ``[batch, field, *grid]`` (the state's grid), where :attr:`takes_source`:
        S added to the right-hand side, u_t = F(u) + S, constant over the interval, so that
        the scheme's own implicit or exact linear part and dealiasing act on it (INC's
        "indirect" correction, Wei et al. 2025). ``source=None`` and a zero source give the
        same result.
        """
        history = np.asarray(history)
        ndim = len(self.simulation_grid)
        if history.ndim != 3 + ndim or history.shape[2] != len(self.fields):
            raise ValueError(f"history must have shape [batch, window, {len(self.fields)}, "
                             f"*grid] with a {ndim}D grid (field axis: "
                             f"{', '.join(self.fields)}), got {history.shape}")
        if source is not None:
            source = self._checked_source(source, history[:, -1].shape)
        return self.simulate(history[:, -1], 1, time=time, parameters=parameters,
                             source=source)[:, -1]

    def _checked_source(self, source: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """``source`` as float64 on the simulation grid (ValueError naming the problem)."""
        if not self.takes_source:
            raise ValueError(f"{self.name} takes no source term: a correction inside its step "
                             "is for the spectral solvers; correct after the step instead")
        source = np.asarray(source, dtype=np.float64)
        if source.shape != tuple(shape):
            raise ValueError(f"source must have the state's shape {tuple(shape)} "
                             f"[batch, field, *grid], got {source.shape}")
        if not np.all(np.isfinite(source)):
            raise ValueError("source contains NaN or inf")
        on_grid = tuple(shape[2:]) == tuple(self.simulation_grid)
        return source if on_grid else self.to_simulation_grid(source)

    def conservative_form(self) -> ConservativeForm | None:
        """The map between the stored fields and the conserved densities of a finite-volume
        scheme (a flux-form learned correction needs it); None for solvers without one."""
        return None

    def add_source(self, state: Any, source: np.ndarray) -> None:
        """Add ``source`` ``[batch, field, *simulation_grid]`` to the right-hand side of
        ``state``'s following intervals (solvers with :attr:`takes_source`)."""
        raise TypeError(f"{self.name} takes no source term")

    # -- parameters -------------------------------------------------------------------------
    def resolve_parameters(self, batch: int, parameters: Mapping[str, np.ndarray] | None
                           ) -> dict[str, np.ndarray]:
        """Per-sample parameters ``[batch, ...]`` from ``parameters`` and the config defaults."""
        parameters = dict(parameters or {})
        unknown = sorted(set(parameters) - set(self.parameter_names))
        if unknown:
            raise ValueError(f"unknown parameters {unknown}; {self.name} takes "
                             f"{list(self.parameter_names) or 'none'}")
        resolved = {}
        for name, shape in self.parameter_specs().items():
            if name in parameters:
                value = np.asarray(parameters[name], dtype=np.float64)
                if value.shape not in ((batch, *shape), shape):
                    raise ValueError(f"parameter {name!r} must have shape "
                                     f"{(batch, *shape)} (batch, ...), got {value.shape}")
            else:
                value = self.default_parameter(name)
                if value is None:
                    raise ValueError(
                        f"this configuration draws {name!r} per sample: pass "
                        f"parameters={{'{name}': array {(batch, *shape)}}} "
                        "(see sample_parameters, or the dataset's variable)")
                value = np.asarray(value, dtype=np.float64)
            value = np.broadcast_to(value, (batch, *shape)).copy()
            if not np.all(np.isfinite(value)):
                raise ValueError(f"parameter {name!r} contains NaN or inf")
            resolved[name] = value
        self.check_parameters(resolved)
        return resolved

    # -- simulation -------------------------------------------------------------------------
    def _restrict(self, frames: np.ndarray, grid: tuple[int, ...]) -> np.ndarray:
        """Simulation-grid frames ``[batch, field, *simulation_grid]`` → ``grid``."""
        factors = [n // m for n, m in zip(self.simulation_grid, grid)]
        if all(f == 1 for f in factors):
            return frames
        how = getattr(self.config, "downsampling", None) or self.downsampling
        if how == "stride":
            return frames[(..., *(slice(None, None, f) for f in factors))]
        if how == "spectral":
            if len(set(grid)) != 1 or len(set(self.simulation_grid)) != 1:
                raise ValueError(f"spectral down-sampling needs equal sizes per axis, got "
                                 f"{self.simulation_grid} -> {grid}")
            return spectral_resample(frames, grid[0], ndim=len(grid))
        return block_average(frames, grid)

    def _output_grid(self, initial_grid: tuple[int, ...], output_resolution) -> tuple[int, ...]:
        if output_resolution is None:
            grid = initial_grid
        elif isinstance(output_resolution, (tuple, list)):
            grid = tuple(int(n) for n in output_resolution)
        else:
            grid = (int(output_resolution),) * len(self.simulation_grid)
        if len(grid) != len(self.simulation_grid) or any(
                m < 1 or n % m for n, m in zip(self.simulation_grid, grid)):
            raise ValueError(f"output resolution {grid} must divide the simulation "
                             f"resolution {self.simulation_grid}")
        return grid

    def simulate(self, initial: np.ndarray, num_steps: int, *, time: float = 0.0,
                 parameters: Mapping[str, np.ndarray] | None = None,
                 output_resolution: int | tuple[int, ...] | None = None,
                 progress: Callable[[float], None] | None = None,
                 source: np.ndarray | None = None) -> np.ndarray:
        """Integrate ``num_steps`` record intervals from ``initial``.

        Parameters
        ----------
        initial : array, shape ``[batch, field, *grid]``
            On the simulation grid or any grid :meth:`to_simulation_grid` accepts.
        num_steps : int
            Record intervals to advance.
        time : float
            Physical time of ``initial``.
        parameters : mapping, optional
            Per-sample parameters (see :meth:`parameter_specs`).
        output_resolution : int or tuple of int, optional
            Grid of the returned frames (down-sampled from the simulation grid); default:
            that of ``initial``.
        progress : callable, optional
            Called with ``1 / num_steps`` after each recorded frame.
        source : array ``[batch, field, *simulation_grid]``, optional
            A constant term added to the right-hand side (see :meth:`step`).

        Returns
        -------
        numpy.ndarray, shape ``[batch, num_steps + 1, field, *output grid]``: the frames,
        initial included.

        Raises
        ------
        SolverDivergedError
            If the solution becomes non-finite; the message names the time and samples.
        """
        initial = np.asarray(initial, dtype=np.float64)
        ndim = len(self.simulation_grid)
        if initial.ndim != 2 + ndim or initial.shape[1] != len(self.fields):
            raise ValueError(f"initial state must have shape [batch, {len(self.fields)}, *grid] "
                             f"with a {ndim}D grid (fields {', '.join(self.fields)}), got "
                             f"{initial.shape}")
        if not np.all(np.isfinite(initial)):
            raise ValueError("initial state contains NaN or inf")
        if isinstance(num_steps, bool) or int(num_steps) != num_steps or num_steps < 0:
            raise ValueError(f"num_steps must be a non-negative integer, got {num_steps!r}")
        num_steps = int(num_steps)
        batch, given = initial.shape[0], tuple(initial.shape[2:])
        out_grid = self._output_grid(given, output_resolution)
        resolved = self.resolve_parameters(batch, parameters)
        on_grid = given == tuple(self.simulation_grid)
        state = self.start(initial if on_grid else self.to_simulation_grid(initial), resolved)
        if source is not None:
            self.add_source(state, self._checked_source(source, (batch, initial.shape[1],
                                                                 *self.simulation_grid)))

        frames = np.empty((batch, num_steps + 1, len(self.fields), *out_grid))
        if on_grid:  # keep the given frame bit for bit
            frames[:, 0] = self._restrict(initial, out_grid)
        elif given == out_grid:
            frames[:, 0] = initial
        else:
            frames[:, 0] = self._restrict(self.observe(state), out_grid)
        for record in range(num_steps):
            start = time + record * self.dt
            self.advance(state, start)
            field = self.observe(state)
            finite = np.isfinite(field).reshape(batch, -1).all(axis=1)
            if not finite.all():
                raise SolverDivergedError(
                    f"{self.name} solution became non-finite by t = {start + self.dt:g} in "
                    f"batch rows {np.flatnonzero(~finite).tolist()}: {self.divergence_hint()}")
            frames[:, record + 1] = self._restrict(field, out_grid)
            if progress is not None:
                progress(1.0 / num_steps)
        return frames

    # -- dataset generation -----------------------------------------------------------------
    def sample_inputs(self, seed: int, indices: Sequence[int]) -> dict[str, np.ndarray]:
        return {"initial": self.initial_condition(seed, indices),
                **self.sample_parameters(seed, indices)}

    def solve_batch(self, inputs: Mapping[str, np.ndarray], *,
                    progress: Callable[[float], None] | None = None) -> dict[str, np.ndarray]:
        parameters = {k: v for k, v in inputs.items() if k != "initial"}
        frames = self.simulate(inputs["initial"], self.num_records, parameters=parameters,
                               output_resolution=self.grid, progress=progress)
        out = {name: frames[:, :, f] for f, name in enumerate(self.fields)}
        times = np.arange(self.num_records + 1) * self.dt
        out.update(self.extra_outputs(inputs, times))
        return out

    def variables(self) -> dict[str, VariableSpec]:
        space = SPATIAL_DIMS[len(self.grid)]
        out = {name: VariableSpec((TIME, *space), *self.field_units[name], role="state",
                                  cell_methods=self.field_cell_methods)
               for name in self.fields}
        out.update(self.extra_variables())
        return out

    def coordinates(self) -> dict[str, xr.DataArray]:
        coords = grid_coordinates(self.grid, length=self.domain_length,
                                  endpoint=self.endpoint)
        coords[TIME] = time_coordinate(np.arange(self.num_records + 1) * self.dt)
        return coords
