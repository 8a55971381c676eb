"""Allen–Cahn on a periodic interval, on the semilinear base: ``docs/numerics/allen_cahn.md``."""

import dataclasses

import numpy as np

from .base import register_solver
from .semilinear import PowerReaction, SemilinearSolver1D, check_config

__all__ = ["AllenCahn", "AllenCahnConfig"]


@dataclasses.dataclass(frozen=True)
class AllenCahnConfig:
    """Configuration of :class:`AllenCahn` (non-dimensional).

    Parameters
    ----------
    resolution : int
        Grid points N of the stored frames (even; every s-th simulation point).
    simulation_resolution : int
        Grid points N of the pseudospectral simulation (even; a multiple of ``resolution``).
    domain_length : float
        Period L; the grid is x_j = L j / N (the right end is excluded).
    diffusivity : float or (float, float)
        ε, the coefficient of u_xx; a pair ``(low, high)`` draws ε ~ U[low, high] per sample.
    final_time : float
        Simulated time T; a whole number of record intervals.
    record_interval : float
        Time between stored frames (one Stepper ``step``); a whole number of time steps.
    time_step : float
        ETDRK4 step h.
    lmax : int
        u0 is LPSDA's sum of ten sines of wavenumbers below lmax (``sine_series``).
    dealias : bool
        Zero −u³ outside the 2/3 band (most, not all, of a cubic's aliases).
    dtype : {"float64", "float32"}
        The arithmetic of the time stepping (stored frames are float64 either way). float32
        runs 1.1–1.2x faster; its error against float64 is in ``docs/numerics/float32.md``.
    """

    resolution: int = 128
    simulation_resolution: int = 256
    domain_length: float = 2 * np.pi
    diffusivity: float | tuple[float, float] = 0.01
    final_time: float = 10.0
    record_interval: float = 0.1
    time_step: float = 0.01
    lmax: int = 8
    dealias: bool = True
    dtype: str = "float64"

    def __post_init__(self) -> None:
        check_config(self, positive=("domain_length",), ranged=("diffusivity",))


@register_solver("allen-cahn")
class AllenCahn(SemilinearSolver1D):
    r"""Allen–Cahn: phase separation into u = ±1 (bistable reaction–diffusion).

    .. math:: u_t = \varepsilon u_{xx} + u - u^3 \quad \text{on } [0, L) \text{, periodic.}

    Field ``u``, the order parameter; ε the ``diffusivity`` (non-dimensional; time in units of
    the reaction time). The scheme of :class:`~ssmpde.solvers.semilinear.SemilinearSolver1D`:
    L = 1 − ε k² exact (every mode, Nyquist's too), N = −u³ explicit. x_j = L j / N does
    **not** include the right end point; states are ``[batch, 1, x]``. u = 0 is unstable,
    u = ±1 stable: fronts tanh(x / √(2ε)) form and slowly annihilate. Good values (measured,
    defaults ε = 0.01, L = 2π, T = 10): N = 256, six points per √(2ε), is 1e-8 off N = 512
    (three points, N = 128: 2e-4); h = 0.01 is 2e-8 off h / 16. Stability: the explicit −u³
    needs h · 3 max|u|² ≲ 2.5 (runs from uniform states blew up from 3 on).

    References
    ----------
    Allen & Cahn, Acta Metall. 27 (1979) 1085; Kassam & Trefethen, SIAM J. Sci. Comput. 26
    (2005) 1214 (ETDRK4 with contour coefficients).
    """

    Config = AllenCahnConfig
    field_units = {"u": ("order parameter", "1")}
    parameter_units = {"diffusivity": ("coefficient of u_xx", "1")}
    nonlinearity = PowerReaction(-1.0, 3)
    title = "Allen-Cahn u_t = epsilon u_xx + u - u^3, periodic"
    references = "Allen & Cahn, Acta Metall. 27 (1979); Kassam & Trefethen, SISC 26 (2005)"
    TINY = dict(resolution=32, simulation_resolution=32, diffusivity=(0.01, 0.02),
                final_time=0.5, record_interval=0.25, time_step=0.05)

    def linear(self, n, parameters):
        """L = 1 − ε k² on the rfft modes, ``[batch, n // 2 + 1]``."""
        epsilon = np.asarray(parameters["diffusivity"], dtype=np.float64)[:, None]
        return 1.0 - epsilon * self.wavenumbers(n, nyquist=True)[None, :] ** 2
