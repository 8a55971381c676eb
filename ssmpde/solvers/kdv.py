r"""Korteweg–de Vries on a periodic interval, pseudospectral with ETDRK4 (the semilinear base).

See ``docs/numerics/kdv.md``: the scheme, the soliton validation and the presets.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from .base import Checks, register_solver
from .semilinear import QuadraticFlux, SemilinearSolver1D, check_config

__all__ = ["KdV", "KdVConfig"]

INITIAL_CONDITIONS = ("lpsda", "cosine")


@dataclasses.dataclass(frozen=True)
class KdVConfig:
    """Configuration of :class:`KdV` (non-dimensional; the defaults are LPSDA's benchmark).

    Parameters
    ----------
    resolution : int
        Stored grid points (the dataset's ``x``); an even divisor of ``simulation_resolution``.
    simulation_resolution : int
        Grid points N of the pseudospectral simulation (even).
    domain_length : float
        Period L of the domain; the grid is x_j = L j / N (the right end is excluded).
    convection : float
        b, the coefficient of u u_x (LPSDA and Zabusky–Kruskal: 1; the textbook scaling: 6).
    dispersion : float
        δ, the coefficient of u_xxx (Zabusky–Kruskal: 0.022²).
    final_time : float
        Simulated time T.
    record_interval : float
        Time between stored frames (one Stepper ``step``); it divides ``final_time``.
    time_step : float
        ETDRK4 step h; it divides ``record_interval``.
    initial_condition : {"lpsda", "cosine"}
        ``lpsda``: u0 = Σ_{k=1}^{10} A_k sin(2π l_k x / L + φ_k), A ~ U[−½, ½), φ ~ U[0, 2π),
        l ~ randint(1, lmax). ``cosine``: u0 = cos(2πx / L) for every sample (Zabusky–Kruskal).
    lmax : int
        Exclusive upper bound of the random wavenumbers l of the ``lpsda`` law; at most
        ``simulation_resolution // 2`` (the grid resolves wavenumbers below N / 2).
    dealias : bool
        Zero the flux outside the 2/3 band (Orszag's rule).
    dtype : {"float64", "float32"}
        The arithmetic of the time stepping (stored frames are float64 either way). float32
        runs 1.1–1.2x faster; its error against float64 is in ``docs/numerics/float32.md``.
    """

    resolution: int = 256
    simulation_resolution: int = 512
    domain_length: float = 128.0
    convection: float = 1.0
    dispersion: float = 1.0
    final_time: float = 100.0
    record_interval: float = 0.4
    time_step: float = 0.01
    initial_condition: str = "lpsda"
    lmax: int = 3
    dealias: bool = True
    dtype: str = "float64"

    def __post_init__(self) -> None:
        check_config(self, positive=("domain_length", "convection", "dispersion"),
                     initial_conditions=INITIAL_CONDITIONS)


@register_solver("kdv")
class KdV(SemilinearSolver1D):
    r"""Korteweg–de Vries: solitons; dispersive, third order.

    .. math:: u_t + b\, u u_x + \delta\, u_{xxx} = 0 \quad \text{on } [0, L) \text{, periodic.}

    Fields: ``u``. The scheme of :class:`~ssmpde.solvers.semilinear.SemilinearSolver1D` with
    L = i δ k³ (integrated exactly: the dispersion does not limit the step) and the flux
    −b (u²/2)_x explicit. Conventions: x_j = L j / N does **not** include the right end point;
    states are ``[batch, 1, x]``; the Nyquist mode has no derivative. Good values: a soliton
    of speed c, u = (3c/b) sech²(½√(c/δ)(x − ct)), is resolved to ~5e-8 by N ≈ 3 L √(c/δ);
    h · b · max|u| · 2πN/(3L) ≈ 0.3 gives ~3e-6 over the ``lpsda`` run, and runs blow up
    between 14 and 28. The mean of u is conserved exactly, ∫u² and ∫(b u³/6 − δ u_x²/2) to
    the fourth-order truncation error. See ``docs/numerics/kdv.md``.

    References
    ----------
    Zabusky & Kruskal, Phys. Rev. Lett. 15 (1965); Kassam & Trefethen, SIAM J. Sci. Comput. 26
    (2005); Brandstetter, Welling & Worrall, "Lie Point Symmetry Data Augmentation for Neural
    PDE Solvers", ICML 2022 (the ``lpsda`` law).

    Example
    -------
    >>> kdv = KdV(resolution=64, simulation_resolution=64, domain_length=32.0, final_time=0.8)
    >>> kdv.solve_batch(kdv.sample_inputs(seed=0, indices=[0]))["u"].shape
    (1, 3, 64)
    """

    Config = KdVConfig
    field_units = {"u": ("u", "1")}
    #: ∫u² is invariant too (the cheapest of KdV's infinitely many invariants to check).
    checks = Checks(conserved=("u",), totals={"u squared": lambda frame: frame["u"] ** 2})
    title = "Korteweg-de Vries u_t + b u u_x + delta u_xxx = 0, periodic"
    references = ("Zabusky & Kruskal, Phys. Rev. Lett. 15 (1965); Kassam & Trefethen, SIAM J. "
                  "Sci. Comput. 26 (2005); LPSDA KdV benchmark (Brandstetter et al., 2022)")
    PRESETS = {
        "lpsda": dict(domain_length=128.0, simulation_resolution=512, resolution=256,
                      convection=1.0, dispersion=1.0, final_time=100.0, record_interval=0.4,
                      time_step=0.01, initial_condition="lpsda", lmax=3),
        "zabusky-kruskal": dict(domain_length=2.0, simulation_resolution=256, resolution=256,
                                convection=1.0, dispersion=0.022 ** 2, final_time=1.2,
                                record_interval=0.01, time_step=2e-4,
                                initial_condition="cosine"),
    }
    TINY = dict(resolution=32, simulation_resolution=32, domain_length=32.0, final_time=0.8,
                record_interval=0.4, time_step=0.05)

    @property
    def nonlinearity(self) -> QuadraticFlux:
        """The flux −b (u²/2)_x, b the config's ``convection``."""
        return QuadraticFlux(self.config.convection)

    def initial_condition(self, seed: int, indices: Sequence[int]) -> np.ndarray:
        """u0 ``[batch, 1, N]`` (``lpsda``: stream 0 of each sample, A_k, φ_k, l_k)."""
        cfg = self.config
        n = cfg.simulation_resolution
        if cfg.initial_condition == "cosine":
            u0 = np.cos(2 * np.pi * np.arange(n) / n)
            return np.broadcast_to(u0, (len(indices), 1, n)).copy()
        return super().initial_condition(seed, indices)

    def linear(self, n: int, parameters: Mapping[str, np.ndarray]) -> np.ndarray:
        """L = −δ (ik)³ = i δ k³ on the rfft modes (Nyquist: k = 0), ``[1, n // 2 + 1]``."""
        return (1j * self.config.dispersion * self.wavenumbers(n) ** 3)[None, :]
