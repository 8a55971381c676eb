"""Gaussian random fields for initial conditions and coefficients, seeded per sample.

Two spectral samplers follow the Fourier Neural Operator data generators (Li et al., 2021):

* :class:`PeriodicGRF` -- a stationary field on the torus ``[0, 1)^d`` (``d = 1, 2``), used for the
  Navier--Stokes initial vorticity and the Burgers / Kuramoto--Sivashinsky initial data;
* :class:`NeumannGRF` -- a field on the square ``[0, 1]^2`` built from the cosine eigenfunctions of
  the Neumann Laplacian, used for the Darcy-flow coefficient.

Every sample draws from its own generator, :func:`sample_rng`, so that sample ``i`` of a run is the
same whatever the batch size or number of workers that produced it.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np
import scipy.fft

__all__ = ["sample_rng", "PeriodicGRF", "NeumannGRF"]


def _check_count(value: object, name: str, *, minimum: int) -> int:
    """Return ``value`` as an ``int`` if it is an integer ``>= minimum``; raise ``ValueError`` otherwise."""
    # bool is an Integral, but ``True`` as a seed or size is always a slip, never intent.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _check_real(value: object, name: str, *, positive: bool) -> float:
    """Return ``value`` as a finite ``float`` (strictly positive if asked); raise ``ValueError`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if positive and value <= 0.0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return value


def _check_generator(rng: object) -> np.random.Generator:
    # A legacy RandomState also has standard_normal, but it yields a different stream for the
    # same seed, which would silently break the reproducibility contract.
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator (see sample_rng), got {type(rng).__name__}")
    return rng


def sample_rng(seed: int, index: int, *, stream: int = 0) -> np.random.Generator:
    r"""Return the random generator of one sample of a seeded run.

    .. math::

        \mathrm{rng}(\mathrm{seed}, i, j) =
        \mathtt{default\_rng}(\mathtt{SeedSequence}(\mathrm{seed},\ \mathtt{spawn\_key}=(i, j)))

    Parameters
    ----------
    seed : int
        Master seed of the run, ``>= 0``.
    index : int
        Index of the sample within the run, ``>= 0``.
    stream : int, optional
        Independent use within one sample, ``>= 0``: by convention 0 for the initial condition or
        coefficient field, 1 for random physical parameters, further values for anything else.

    Returns
    -------
    numpy.random.Generator
        A fresh PCG64 generator whose output is a pure function of ``(seed, index, stream)``.

    Raises
    ------
    ValueError
        If ``seed``, ``index`` or ``stream`` is not a non-negative integer.

    Notes
    -----
    The generator is what ``numpy.random.SeedSequence(seed).spawn(n)[index].spawn(m)[stream]``
    would give (for any ``n > index``, ``m > stream``), built directly from its spawn key so that no
    sample depends on how many others were spawned before it. Hence sample ``index`` is the same
    whether a run is produced in one batch, in chunks, or by several workers. SeedSequence hashes
    the whole key, so neighbouring indices or streams give statistically independent streams.

    Note that the key has two entries even for ``stream=0``: the generator differs from
    ``SeedSequence(seed).spawn(n)[index]`` itself (spawn key ``(index,)``).

    References
    ----------
    .. [1] NumPy documentation, "Parallel random number generation",
       https://numpy.org/doc/stable/reference/random/parallel.html

    Examples
    --------
    >>> a = sample_rng(1234, 3).standard_normal(2)
    >>> b = sample_rng(1234, 3).standard_normal(2)
    >>> bool((a == b).all())
    True
    """
    seed = _check_count(seed, "seed", minimum=0)
    index = _check_count(index, "index", minimum=0)
    stream = _check_count(stream, "stream", minimum=0)
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(index, stream)))


class _RandomField:
    """Sampling shared by the fields below: ``synthesize(sample_modes(rng))``, per sample."""

    shape: tuple[int, ...]

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """Draw one field, shape ``self.shape`` (float64), from ``rng`` alone.

        Examples
        --------
        >>> u = PeriodicGRF(16, ndim=1).sample(sample_rng(7, 0))
        >>> bool(abs(u.mean()) < 1e-12)
        True
        """
        return self.synthesize(self.sample_modes(rng))

    def sample_batch(self, rngs: Sequence[np.random.Generator]) -> np.ndarray:
        """Draw one field per generator: shape ``(batch, *self.shape)``, float64.

        ``out[i]`` equals ``self.sample(rngs[i])`` bit for bit: one transform per sample
        rather than one batched transform, since batched FFT kernels may group lines
        differently from the single-sample call. The FFT is negligible next to any solver.

        Examples
        --------
        >>> PeriodicGRF(8).sample_batch([sample_rng(0, i) for i in range(3)]).shape
        (3, 8, 8)
        """
        out = np.empty((len(rngs), *self.shape))
        for i, rng in enumerate(rngs):
            out[i] = self.sample(rng)
        return out


class PeriodicGRF(_RandomField):
    r"""Periodic Gaussian random field on ``[0, 1)^d``, the FNO (2020) convention.

    A sample is the real part of an inverse FFT of independently drawn complex Fourier coefficients,

    .. math::

        u(x_n) = \operatorname{Re} \frac{1}{s^d} \sum_{k} a_k\, \xi_k\, e^{2\pi i k\cdot n / s},
        \qquad
        a_k = s^d \sqrt{2}\, \sigma \left(4\pi^2 |k|^2 + \tau^2\right)^{-\alpha/2},\quad a_0 = 0,

    with :math:`\xi_k = \xi^{re}_k + i\,\xi^{im}_k`, both parts i.i.d. :math:`N(0, 1)`, grid points
    :math:`x_n = n/s`, ``n = 0..s-1`` along each axis, and ``k`` on the FFT grid
    ``0..s/2-1, -s/2..-1`` along each axis. On the grid the covariance operator is exactly
    :math:`2\sigma^2 (-\Delta + \tau^2 I)^{-\alpha}` restricted to mean-zero functions
    (the eigenvalue of the covariance kernel on :math:`e^{2\pi i k\cdot x}` is
    :math:`a_k^2 / s^{2d}`, see :meth:`pointwise_variance`).

    Parameters
    ----------
    resolution : int
        Points per axis ``s``; even, ``>= 2``. The grid does **not** include the right end point
        ``x = 1`` (it coincides with ``x = 0``).
    ndim : int, optional
        Spatial dimension ``d``, 1 or 2.
    alpha : float, optional
        Smoothness exponent (``gamma`` in the FNO scripts). Finite pointwise variance in the
        continuum needs ``alpha > d/2``; on a finite grid any real value is accepted.
    tau : float, optional
        Inverse length scale, ``> 0``: the spectrum is flat below ``|k| ~ tau / (2 pi)``.
    sigma : float or None, optional
        Amplitude, ``> 0``. ``None`` gives ``tau ** (0.5 * (2 * alpha - d))``, the FNO choice
        (``7 ** 1.5`` for the 2-D defaults, ``49`` for the 1-D Burgers setting ``alpha=2.5, tau=7``).

    Attributes
    ----------
    sqrt_eigenvalues : numpy.ndarray, shape ``(s,) * d``, read-only
        :math:`a_k` in full complex-FFT layout; ``sqrt_eigenvalues[(0,) * d] == 0``.
    shape : tuple of int
        ``(s,) * d``, the shape of one sample.

    Raises
    ------
    ValueError
        If a parameter is out of range (the message names it).

    Notes
    -----
    *Good values.* Navier--Stokes initial vorticity: ``ndim=2, alpha=2.5, tau=7`` with the default
    sigma, pointwise standard deviation about 0.26 at ``s = 256``. Burgers (FNO script):
    ``ndim=1, alpha=2.5, tau=7, sigma=49`` (the default sigma). Burgers (FNO paper, covariance
    ``625 (-Delta + 25 I)^-2``): ``ndim=1, alpha=2, tau=5, sigma=25``, reading 625 as sigma^2 the
    way the FNO code does; sigma must be passed here, the default would be ``5 ** 1.5``.

    *Draw order* (part of the reproducibility contract): :meth:`sample` makes exactly one call,
    ``rng.standard_normal((2, *shape))``. Its first ``s^d`` numbers, in C order over the FFT layout,
    are the real parts :math:`\xi^{re}_k`, the next ``s^d`` the imaginary parts. The draw at
    ``k = 0`` is consumed and multiplied by ``a_0 = 0``.

    Because only the real part is kept, the modes ``k`` and ``-k`` are drawn independently and then
    mixed: the DFT of a sample is :math:`\hat u_k = (c_k + \overline{c_{-k}})/2` with
    :math:`c_k = a_k \xi_k`, so :math:`E|\hat u_k|^2 = (a_k^2 + a_{-k}^2)/2 = a_k^2`. A 2022
    rewrite of the FNO generator halved this variance by accident; this class keeps the 2020 one.

    References
    ----------
    .. [1] Z. Li, N. Kovachki, K. Azizzadenesheli, B. Liu, K. Bhattacharya, A. Stuart,
       A. Anandkumar, "Fourier Neural Operator for Parametric Partial Differential Equations",
       ICLR 2021, arXiv:2010.08895 (data generators ``random_fields.py``, ``ns_2d.py``).
    .. [2] G. J. Lord, C. E. Powell, T. Shardlow, "An Introduction to Computational Stochastic
       PDEs", Cambridge University Press, 2014, ch. 7 (spectral sampling of stationary fields).

    Examples
    --------
    >>> grf = PeriodicGRF(64)
    >>> w0 = grf.sample(sample_rng(0, 0))
    >>> w0.shape, w0.dtype
    ((64, 64), dtype('float64'))
    """

    def __init__(self, resolution: int, *, ndim: int = 2, alpha: float = 2.5, tau: float = 7.0,
                 sigma: float | None = None) -> None:
        resolution = _check_count(resolution, "resolution", minimum=2)
        # An odd grid has no Nyquist mode, so the FFT layout quoted in the docstring (and relied
        # on by callers that build spectral operators on the same grid) would not hold.
        if resolution % 2:
            raise ValueError(f"resolution must be even for PeriodicGRF, got {resolution}")
        if isinstance(ndim, bool) or not isinstance(ndim, numbers.Integral) or ndim not in (1, 2):
            raise ValueError(f"ndim must be 1 or 2, got {ndim!r}")
        self.resolution = resolution
        self.ndim = int(ndim)
        self.alpha = _check_real(alpha, "alpha", positive=False)
        self.tau = _check_real(tau, "tau", positive=True)
        if sigma is None:
            # numpy power returns inf on overflow where Python's float power would raise.
            with np.errstate(over="ignore", under="ignore"):
                sigma = float(np.float64(self.tau) ** (0.5 * (2.0 * self.alpha - self.ndim)))
            if not math.isfinite(sigma) or sigma <= 0.0:
                raise ValueError(f"default sigma = tau**(alpha - ndim/2) is not a positive finite "
                                 f"number ({sigma}) for alpha={self.alpha}, tau={self.tau}; "
                                 f"pass sigma explicitly or change alpha/tau")
        self.sigma = _check_real(sigma, "sigma", positive=True)
        self.shape = (resolution,) * self.ndim

        k = np.fft.fftfreq(resolution, d=1.0 / resolution)
        k_squared = np.zeros(self.shape)
        for axis in range(self.ndim):
            k_squared = k_squared + np.expand_dims(k**2, tuple(a for a in range(self.ndim) if a != axis))
        # Far-out modes of a smooth field underflow to zero harmlessly; overflow (alpha very
        # negative) cannot be sampled and is reported below.
        with np.errstate(over="ignore", under="ignore"):
            sqrt_eig = (resolution**self.ndim * math.sqrt(2.0) * self.sigma
                        * (4.0 * math.pi**2 * k_squared + self.tau**2) ** (-self.alpha / 2.0))
        if not np.all(np.isfinite(sqrt_eig)) or not np.any(sqrt_eig.ravel()[1:] > 0.0):
            raise ValueError(f"alpha={self.alpha}, tau={self.tau}, sigma={self.sigma} give non-finite "
                             f"or vanishing spectral amplitudes at resolution {resolution}")
        # The mean mode is dropped so that every sample has zero spatial mean (the NS vorticity
        # on the torus must integrate to zero).
        sqrt_eig[(0,) * self.ndim] = 0.0
        sqrt_eig.flags.writeable = False
        self.sqrt_eigenvalues = sqrt_eig

    def __repr__(self) -> str:
        return (f"PeriodicGRF(resolution={self.resolution}, ndim={self.ndim}, alpha={self.alpha}, "
                f"tau={self.tau}, sigma={self.sigma})")

    def sample_modes(self, rng: np.random.Generator) -> np.ndarray:
        r"""Draw the complex Fourier coefficients :math:`c_k = a_k \xi_k` of one sample.

        Parameters
        ----------
        rng : numpy.random.Generator
            The sample's generator (see :func:`sample_rng`); one ``standard_normal((2, *shape))``
            call is made on it.

        Returns
        -------
        numpy.ndarray, shape ``(s,) * d``, complex128
            Coefficients in full complex-FFT layout, zero at ``k = 0``.

        Examples
        --------
        >>> c = PeriodicGRF(8, ndim=1).sample_modes(sample_rng(0, 0))
        >>> c.shape, complex(c[0])
        ((8,), 0j)
        """
        xi = _check_generator(rng).standard_normal((2, *self.shape))
        return self.sqrt_eigenvalues * (xi[0] + 1j * xi[1])

    def synthesize(self, modes: np.ndarray) -> np.ndarray:
        r"""Map Fourier coefficients to a real field, :math:`u = \operatorname{Re}\,\mathrm{ifftn}(c)`.

        Parameters
        ----------
        modes : numpy.ndarray, shape ``(s,) * d``
            Complex coefficients in full FFT layout (unnormalised forward convention, so the
            inverse carries the ``1/s^d``).

        Returns
        -------
        numpy.ndarray, shape ``(s,) * d``, float64
            The field on the grid ``x_n = n / s``.

        Examples
        --------
        >>> grf = PeriodicGRF(4, ndim=1)
        >>> grf.synthesize(np.array([4.0, 0, 0, 0]))
        array([1., 1., 1., 1.])
        """
        modes = np.asarray(modes)
        if modes.shape != self.shape:
            raise ValueError(f"modes must have shape {self.shape}, got {modes.shape}")
        return np.ascontiguousarray(scipy.fft.ifftn(modes.astype(np.complex128, copy=False)).real)

    def pointwise_variance(self) -> float:
        r"""Exact variance of the field at any grid point.

        .. math::

            \operatorname{Var} u(x) = \frac{1}{s^{2d}} \sum_k a_k^2
            = 2\sigma^2 \sum_{k \neq 0} \left(4\pi^2 |k|^2 + \tau^2\right)^{-\alpha}.

        Returns
        -------
        float
            The variance, the same at every grid point (the field is stationary).

        Notes
        -----
        Write :math:`c_k = a_k \xi_k` and :math:`\theta_k = 2\pi k\cdot n/s`. Each term of the sum
        contributes
        :math:`\operatorname{Re}(a_k \xi_k e^{i\theta_k}) = a_k(\xi^{re}_k\cos\theta_k - \xi^{im}_k\sin\theta_k)`,
        whose variance is :math:`a_k^2(\cos^2\theta_k + \sin^2\theta_k) = a_k^2`, independently of
        :math:`\theta_k`. The draws for different ``k`` are independent, so the variances add, and
        the ``1/s^d`` of the inverse FFT squares to ``1/s^{2d}``.

        Examples
        --------
        >>> round(PeriodicGRF(256).pointwise_variance() ** 0.5, 2)
        0.26
        """
        return float(np.sum(self.sqrt_eigenvalues**2) / float(self.resolution) ** (2 * self.ndim))


class NeumannGRF(_RandomField):
    r"""Gaussian random field on ``[0, 1]^2`` with Neumann (cosine) eigenfunctions, the FNO Darcy coefficient.

    .. math::

        g(x_{n_1}, x_{n_2}) = \sum_{k_1, k_2 = 0}^{s-1} L_{k_1 k_2}\,
        \varphi_{k_1}(n_1)\, \varphi_{k_2}(n_2),
        \qquad L_k = s\, c_k\, \xi_k,\quad L_{00} = 0,

    .. math::

        c_k = \tau^{\alpha - 1} \left(\pi^2 (k_1^2 + k_2^2) + \tau^2\right)^{-\alpha/2},
        \qquad
        \varphi_k(n) = \sqrt{\tfrac{2 - \delta_{k0}}{s}} \cos\!\left(\frac{\pi k (2n + 1)}{2s}\right),

    with :math:`\xi_k` i.i.d. :math:`N(0, 1)`. The map :math:`L \mapsto g` is the orthonormal
    inverse DCT-II, and :math:`\cos(\pi k x)` are the eigenfunctions of the Neumann Laplacian on
    ``[0, 1]`` (eigenvalue :math:`-\pi^2 k^2`), so the covariance is proportional to
    :math:`\tau^{2\alpha-2}(-\Delta + \tau^2 I)^{-\alpha}` restricted to mean-zero functions.

    Parameters
    ----------
    resolution : int
        Points per axis ``s``, ``>= 2``. The grid is **cell-centred**: ``x_n = (n + 1/2) / s``,
        so neither boundary ``x = 0`` nor ``x = 1`` is a grid point.
    alpha : float, optional
        Smoothness exponent.
    tau : float, optional
        Inverse length scale, ``> 0``.

    Attributes
    ----------
    coefficients : numpy.ndarray, shape ``(s, s)``, read-only
        :math:`c_{k_1 k_2}`, axis ``j`` carrying ``k_j = 0..s-1`` (the ``(0, 0)`` entry is kept; the
        sampler zeroes ``L[0, 0]`` instead).
    shape : tuple of int
        ``(s, s)``.

    Raises
    ------
    ValueError
        If a parameter is out of range (the message names it).

    Notes
    -----
    *Good values.* ``alpha=2, tau=3`` (the defaults) give covariance proportional to
    ``(-Delta + 9 I)^-2``, the FNO Darcy setting; the Darcy solver thresholds the field at zero, so
    its overall scale is irrelevant there.

    *Draw order* (part of the reproducibility contract): :meth:`sample` makes exactly one call,
    ``rng.standard_normal((s, s))``, read in C order as :math:`\xi_{k_1 k_2}`; the draw at
    ``(0, 0)`` is consumed and discarded.

    The field is not stationary: near the boundary the cosines are in phase, so the variance at the
    edges (and most at the corners) exceeds the interior one; :meth:`pointwise_variance` gives it
    exactly. Sampling directly on the cell centres replaces the spline interpolation of the
    original FNO script.

    References
    ----------
    .. [1] Z. Li et al., "Fourier Neural Operator for Parametric Partial Differential Equations",
       ICLR 2021, arXiv:2010.08895 (Darcy data generator ``GRF.m``).
    .. [2] G. Strang, "The Discrete Cosine Transform", SIAM Review 41(1), 135--147, 1999
       (DCT-II vectors are the eigenvectors of the second difference with Neumann conditions at the
       half-points).

    Examples
    --------
    >>> grf = NeumannGRF(32)
    >>> g = grf.sample(sample_rng(0, 0))
    >>> g.shape, bool(abs(g.mean()) < 1e-12)
    ((32, 32), True)
    """

    def __init__(self, resolution: int, *, alpha: float = 2.0, tau: float = 3.0) -> None:
        self.resolution = _check_count(resolution, "resolution", minimum=2)
        self.alpha = _check_real(alpha, "alpha", positive=False)
        self.tau = _check_real(tau, "tau", positive=True)
        self.shape = (self.resolution, self.resolution)
        k = np.arange(self.resolution, dtype=np.float64)
        k_squared = k[:, None] ** 2 + k[None, :] ** 2
        # inf * 0 is the overflow this check reports, not a warning on stderr.
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            coef = (np.float64(self.tau) ** (self.alpha - 1.0)
                    * (math.pi**2 * k_squared + self.tau**2) ** (-self.alpha / 2.0))
        # coef[0, 0] is never used by the sampler, so it is the other modes that must be usable.
        if not np.all(np.isfinite(coef)) or not np.any(coef.ravel()[1:] > 0.0):
            raise ValueError(f"alpha={self.alpha}, tau={self.tau} give non-finite or vanishing "
                             f"coefficients at resolution {self.resolution}: choose alpha and "
                             "tau of order one (the FNO Darcy law uses alpha=2, tau=3)")
        coef.flags.writeable = False
        self.coefficients = coef

    def __repr__(self) -> str:
        return f"NeumannGRF(resolution={self.resolution}, alpha={self.alpha}, tau={self.tau})"

    def sample_modes(self, rng: np.random.Generator) -> np.ndarray:
        r"""Draw the cosine coefficients :math:`L = s\, c\, \xi` of one sample, with ``L[0, 0] = 0``.

        Parameters
        ----------
        rng : numpy.random.Generator
            The sample's generator; one ``standard_normal((s, s))`` call is made on it.

        Returns
        -------
        numpy.ndarray, shape ``(s, s)``, float64

        Examples
        --------
        >>> float(NeumannGRF(4).sample_modes(sample_rng(0, 0))[0, 0])
        0.0
        """
        xi = _check_generator(rng).standard_normal(self.shape)
        modes = self.resolution * self.coefficients * xi
        # The constant mode is removed so that the field has zero mean and thresholding at 0 splits
        # the domain into two phases of comparable size.
        modes[0, 0] = 0.0
        return modes

    def synthesize(self, modes: np.ndarray) -> np.ndarray:
        r"""Map cosine coefficients to the field, the orthonormal inverse 2-D DCT-II.

        Parameters
        ----------
        modes : numpy.ndarray, shape ``(s, s)``
            :math:`L_{k_1 k_2}`.

        Returns
        -------
        numpy.ndarray, shape ``(s, s)``, float64
            :math:`\sum_k L_k \varphi_{k_1}(n_1) \varphi_{k_2}(n_2)` on the cell centres.

        Examples
        --------
        >>> modes = np.zeros((2, 2)); modes[0, 0] = 2.0
        >>> NeumannGRF(2).synthesize(modes)
        array([[1., 1.],
               [1., 1.]])
        """
        modes = np.asarray(modes, dtype=np.float64)
        if modes.shape != self.shape:
            raise ValueError(f"modes must have shape {self.shape}, got {modes.shape}")
        return scipy.fft.idctn(modes, type=2, norm="ortho")

    def basis(self) -> np.ndarray:
        r"""The orthonormal DCT-II basis vectors :math:`\varphi_k`, as rows.

        Returns
        -------
        numpy.ndarray, shape ``(s, s)``
            ``basis()[k, n]`` is :math:`\varphi_k(n)`, the inverse DCT-II of the unit vector
            :math:`e_k`.

        Examples
        --------
        >>> phi = NeumannGRF(4).basis()
        >>> np.allclose(phi @ phi.T, np.eye(4))
        True
        """
        return scipy.fft.idct(np.eye(self.resolution), type=2, norm="ortho", axis=1)

    def pointwise_variance(self) -> np.ndarray:
        r"""Exact variance of the field at every grid point.

        .. math::

            \operatorname{Var} g(n_1, n_2) = s^2 \sum_{(k_1, k_2) \neq (0, 0)}
            c_{k_1 k_2}^2\, \varphi_{k_1}(n_1)^2\, \varphi_{k_2}(n_2)^2
            = \left(P^\top W P\right)_{n_1 n_2},

        with :math:`P_{kn} = \varphi_k(n)^2` and :math:`W = s^2 c^2` zeroed at ``(0, 0)``.

        Returns
        -------
        numpy.ndarray, shape ``(s, s)``
            The variance at each cell centre.

        Notes
        -----
        The field is a linear combination of the independent :math:`N(0, 1)` draws
        :math:`\xi_k` with weights :math:`s\,c_k\varphi_{k_1}(n_1)\varphi_{k_2}(n_2)`; its variance
        is the sum of the squared weights.

        Examples
        --------
        >>> var = NeumannGRF(16).pointwise_variance()
        >>> bool(var[0, 0] > var[8, 8])
        True
        """
        weights = float(self.resolution) ** 2 * self.coefficients**2
        weights[0, 0] = 0.0
        squared_basis = self.basis() ** 2
        return squared_basis.T @ weights @ squared_basis
