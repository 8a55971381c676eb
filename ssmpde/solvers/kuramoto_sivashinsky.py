r"""Kuramoto–Sivashinsky on a periodic interval, pseudospectral with ETDRK4.

See ``docs/numerics/kuramoto_sivashinsky.md``: the Kassam–Trefethen classic and the MemNO/SS-NO
benchmark law (LPSDA's generator). The scheme is that of
:class:`~ssmpde.solvers.semilinear.SemilinearSolver1D`; this module is its linear operator,
config and presets (the quadratic flux is the base's).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from .base import Checks, register_solver
from .semilinear import QuadraticFlux, SemilinearSolver1D, check_config

__all__ = ["KuramotoSivashinsky", "KuramotoSivashinskyConfig"]

INITIAL_CONDITIONS = ("lpsda", "kassam-trefethen")
#: The three viscosities of the MemNO / SS-NO benchmark (secondary summary of the paper).
SSNO_VISCOSITIES = (0.075, 0.1, 0.125)
#: Largest simulation grid accepted.
MAX_RESOLUTION = 2 ** 20
#: The MemNO / SS-NO benchmark's settings (LPSDA's generator).
LPSDA = dict(domain_length=64.0, simulation_resolution=512, resolution=128, viscosity=0.1,
             time_step=0.01, record_interval=0.1, final_time=5.0, initial_condition="lpsda",
             lmax=8)


@dataclasses.dataclass(frozen=True)
class KuramotoSivashinskyConfig:
    """Configuration of :class:`KuramotoSivashinsky` (non-dimensional).

    Parameters
    ----------
    resolution : int
        Stored grid points (the dataset's ``x``); an even divisor of ``simulation_resolution``
        (frames are strided, as the benchmark's 512 → 128, 64, 32 downsamples are).
    simulation_resolution : int
        Grid points N of the pseudospectral simulation (even, at most 2**20).
    domain_length : float
        Period L of the domain; the grid is x_j = L j / N (the right end is excluded).
    viscosity : float or (float, float)
        ν, the coefficient of u_xxxx; a pair ``(low, high)`` draws ν ~ U[low, high] per sample.
    final_time : float
        Simulated time T; ``final_time / record_interval + 1`` frames are stored.
    record_interval : float
        Time between stored frames; one Stepper ``step`` advances this much.
    time_step : float
        ETDRK4 step h; must divide ``record_interval``.
    initial_condition : {"lpsda", "kassam-trefethen"}
        ``lpsda``: u0 = Σ_{k=1}^{10} A_k sin(2π l_k x / L + φ_k), A ~ U[−½, ½), φ ~ U[0, 2π),
        l ~ randint(1, lmax) (MemNO/SS-NO). ``kassam-trefethen``: u0 = cos(x/16)(1 + sin(x/16))
        (the same for every sample).
    lmax : int
        Exclusive upper bound of the random wavenumbers l of the ``lpsda`` law; at most
        ``simulation_resolution // 2`` (the grid resolves wavenumbers below N / 2).
    dealias : bool
        Apply the 2/3 rule to the nonlinear term.
    dtype : {"float64", "float32"}
        The arithmetic of the time stepping (stored frames are float64 either way). float32
        runs 1.1–1.2x faster; its error against float64 is in ``docs/numerics/float32.md``.
    """

    resolution: int = 128
    simulation_resolution: int = 512
    domain_length: float = 64.0
    viscosity: float | tuple[float, float] = 0.1
    final_time: float = 5.0
    record_interval: float = 0.1
    time_step: float = 0.01
    initial_condition: str = "lpsda"
    lmax: int = 8
    dealias: bool = True
    dtype: str = "float64"

    def __post_init__(self) -> None:
        check_config(self, positive=("domain_length",), ranged=("viscosity",),
                     maximum=MAX_RESOLUTION, initial_conditions=INITIAL_CONDITIONS)


@register_solver("kuramoto-sivashinsky")
class KuramotoSivashinsky(SemilinearSolver1D):
    r"""Kuramoto–Sivashinsky: chaotic, stiff, fourth order.

    .. math:: u_t + u u_x + u_{xx} + \nu u_{xxxx} = 0 \quad \text{on } [0, L) \text{, periodic.}

    Fields: ``u`` (non-dimensional). Pseudospectral in space (real FFTs, optional 2/3
    dealiasing of u u_x = (u²/2)_x); ETDRK4 in time (Cox & Matthews) with the Kassam–Trefethen
    contour-integral coefficients (:func:`ssmpde.solvers.spectral.etdrk4_coefficients`): the
    scheme of :class:`~ssmpde.solvers.semilinear.SemilinearSolver1D`, with L = k² − ν k⁴.
    See ``docs/numerics/kuramoto_sivashinsky.md``.

    Conventions: the grid x_j = L j / N does **not** include the right end point; states are
    ``[batch, 1, x]``. The linear part L = k² − ν k⁴ is integrated exactly, so the step is
    limited by accuracy, not stability of the stiff part: h = 1/4 is the classic choice at
    N = 128, L = 32π; the benchmark presets use h = 0.01 at N = 512, L = 64.

    Good values: ν ∈ [0.075, 0.125] with L = 64 (MemNO/SS-NO), ν = 1 with L = 32π (Kassam &
    Trefethen). The spatial mean of u is conserved exactly (the k = 0 mode is untouched).
    KS is chaotic: trajectories from nearby states separate, so compare runs only up to
    t ≈ 60 at ν = 1, L = 32π.

    References
    ----------
    Kassam & Trefethen, SIAM J. Sci. Comput. 26 (2005) 1214–1233.
    Buitrago Ruiz et al., MemNO (2024); Koren & Lanthaler, SS-NO (2025): the benchmark law.

    Example
    -------
    >>> ks = KuramotoSivashinsky(resolution=64, simulation_resolution=128, final_time=0.2)
    >>> ks.solve_batch(ks.sample_inputs(seed=0, indices=[0]))["u"].shape
    (1, 3, 64)
    """

    Config = KuramotoSivashinskyConfig
    field_units = {"u": ("u", "1")}
    parameter_units = {"viscosity": ("coefficient of u_xxxx", "1")}
    nonlinearity = QuadraticFlux()
    checks = Checks(conserved=("u",), growth_bound=4.0)
    title = "Kuramoto-Sivashinsky u_t + u u_x + u_xx + nu u_xxxx = 0, periodic"
    references = ("Kassam & Trefethen, SIAM J. Sci. Comput. 26 (2005); MemNO and SS-NO KS "
                  "benchmark (LPSDA generator)")
    PRESETS = {
        "kassam-trefethen": dict(domain_length=32 * np.pi, simulation_resolution=128,
                                 resolution=128, viscosity=1.0, time_step=0.25,
                                 record_interval=1.0, final_time=150.0,
                                 initial_condition="kassam-trefethen", dealias=False),
        "lpsda": LPSDA,
        **{f"lpsda-nu{nu:g}": {**LPSDA, "viscosity": nu} for nu in SSNO_VISCOSITIES},
    }
    TINY = dict(resolution=32, simulation_resolution=32, domain_length=22.0,
                viscosity=(0.9, 1.1), final_time=0.5, record_interval=0.25, time_step=0.05)

    # -- parameters and initial states ---------------------------------------------------------
    def initial_condition(self, seed: int, indices: Sequence[int]) -> np.ndarray:
        """u0 ``[batch, 1, N]`` (stream 0 of each sample: A_k, φ_k, l_k in that order)."""
        cfg = self.config
        n, length = cfg.simulation_resolution, cfg.domain_length
        if cfg.initial_condition == "kassam-trefethen":
            x = length * np.arange(n) / n
            u0 = np.cos(x / 16) * (1 + np.sin(x / 16))
            return np.broadcast_to(u0, (len(indices), 1, n)).copy()
        return super().initial_condition(seed, indices)

    # -- simulation ------------------------------------------------------------------------
    def linear(self, n: int, parameters: Mapping[str, np.ndarray]) -> np.ndarray:
        """L = k² − ν k⁴ on the rfft modes (Nyquist: k = 0), ``[batch, n // 2 + 1]``."""
        k = self.wavenumbers(n)[None, :]
        return k ** 2 - np.asarray(parameters["viscosity"], dtype=np.float64)[:, None] * k ** 4
