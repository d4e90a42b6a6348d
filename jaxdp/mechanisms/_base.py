"""Dominating pairs as immutable pytrees.

Every mechanism describes a *dominating pair* ``(P, Q)`` of output
distributions for each adjacency direction, and offers what the accountants
need: the privacy loss ``L(x) = log P(x)/Q(x)``, samplers of the output and of
the privacy-loss random variable under ``P`` or ``Q``, the cumulant generating
function ``K(t) = log E_P[exp(t L)]`` for real or complex ``t`` and the Rényi
divergence ``D_alpha(P || Q) = K(alpha - 1) / (alpha - 1)``.

Conventions (the same as ``dp_accounting``):

* ``"remove"``: the neighbouring dataset is the dataset with one record
  removed. ``P`` is the output distribution on the larger dataset,
  ``P = sum_j p_j N(c_j, sigma^2)`` for a mixture of Gaussians, and
  ``Q = N(0, sigma^2)``.
* ``"add"``: the pair is swapped, ``P = N(0, sigma^2)``, ``Q = sum_j p_j
  N(c_j, sigma^2)``.  Its CGF is ``K_add(t) = K_remove(-1 - t)``.
* ``"add_or_remove"`` (the default): both directions; the accountants report
  the larger delta (equivalently the larger epsilon) of the two.

The Gaussian and Laplace mechanisms are symmetric (both directions give the same
privacy loss distribution), so they are evaluated once.
"""

from __future__ import annotations

import enum
import inspect
from typing import ClassVar

import jax
import jax.numpy as jnp

from jaxdp.mechanisms._quadrature import (
    CheckedMoments,
)
from jaxdp.numerics import float64_scope, nan_to
from jaxdp.numerics import validate as _validate


class Adjacency(str, enum.Enum):
    """Neighbouring relation between datasets."""

    REMOVE = "remove"
    ADD = "add"
    ADD_OR_REMOVE = "add_or_remove"


class Direction(str, enum.Enum):
    """One direction of a dominating pair (a ``str``: ``Direction.REMOVE == "remove"``).

    ``REMOVE``: ``P`` is the output on the larger dataset; ``ADD``: the pair is swapped.
    """

    REMOVE = "remove"
    ADD = "add"


_DIRECTIONS = {
    Adjacency.REMOVE: (Direction.REMOVE,),
    Adjacency.ADD: (Direction.ADD,),
    Adjacency.ADD_OR_REMOVE: (Direction.REMOVE, Direction.ADD),
}


def _adjacency(value) -> Adjacency:
    try:
        return Adjacency(value)
    except ValueError:
        allowed = ", ".join(repr(a.value) for a in Adjacency)
        raise ValueError(f"adjacency must be one of {allowed}, got {value!r}.") from None


def _check_direction(direction):
    if isinstance(direction, str):
        if direction not in ("remove", "add"):
            raise ValueError(f"direction must be 'remove' or 'add', got {direction!r}.")
        return
    if not (hasattr(direction, "dtype") and jnp.shape(direction) == () and direction.dtype == jnp.bool_):
        raise ValueError(f"direction must be 'remove', 'add' or a boolean scalar (True: add), got {direction!r}.")


def _check_static_direction(direction, what="output_law"):
    _check_direction(direction)
    if not isinstance(direction, str):
        raise ValueError(f"{what} needs direction 'remove' or 'add' (a string), not a traced flag.")


def is_add(direction):
    """``direction`` as a flag: a Python bool for ``"remove"``/``"add"``, else the boolean scalar as given
    (possibly traced; True is add).  A traced flag lets one traced copy of an accountant serve both
    directions (the entry points scan over ``[False, True]``)."""
    _check_direction(direction)
    return direction == "add" if isinstance(direction, str) else direction


def by_direction(direction, remove, add):
    """``remove`` or ``add`` (pytrees of one structure): chosen in Python for a string direction, by
    ``jnp.where`` for a boolean array."""
    flag = is_add(direction)
    if isinstance(flag, bool):
        return add if flag else remove
    return jax.tree.map(lambda r, a: jnp.where(flag, a, r), remove, add)


def is_static_direction(direction) -> bool:
    return isinstance(direction, str)


def _check_under(under):
    if under not in ("P", "Q"):
        raise ValueError(f"under must be 'P' or 'Q', got {under!r}.")


def _f64(x):
    return jnp.asarray(x, dtype=jnp.float64)


class AbstractMechanism:
    """Base class of all mechanisms (a dominating pair per direction).

    Every numerical method runs in float64 (see :func:`jaxdp.numerics.float64_scope`),
    whatever the global ``jax_enable_x64`` setting.
    """

    symmetric: ClassVar[bool] = False
    #: its methods accept ``direction`` as a boolean scalar too (True: add; possibly traced), so the
    #: accountants may run both directions through one traced copy (see ``MethodInfo.direction_as_data``)
    direction_as_data: ClassVar[bool] = False
    adjacency: Adjacency

    def __init_subclass__(cls, **kwargs):
        # every public method a subclass defines runs in float64 (a third party's mechanism too)
        super().__init_subclass__(**kwargs)
        for name, fn in list(cls.__dict__.items()):
            if name.startswith("_") or not inspect.isfunction(fn) or getattr(fn, "_float64_scoped", False):
                continue
            wrapped = float64_scope(fn)
            wrapped._float64_scoped = True
            setattr(cls, name, wrapped)

    @property
    def directions(self) -> tuple[str, ...]:
        """The directions an accountant must evaluate (the larger delta wins)."""
        if self.symmetric:
            return ("remove",)
        return _DIRECTIONS[self.adjacency]

    # -- to be provided by subclasses -------------------------------------
    def cgf(self, t, direction: str = "remove"):
        """Cumulant generating function ``K(t) = log E_P[exp(t L)]``."""
        raise NotImplementedError

    def cgf_derivatives(self, t, direction: str = "remove"):
        """``(K(t), K'(t), K''(t))`` at real ``t``.

        By default :meth:`cgf_cumulants` to order 2 (forward-mode differentiation of :meth:`cgf`); a mechanism
        whose ``K`` is a quadrature gives all three from one rule (the tilted mean and variance of the loss on its
        nodes), so that an accountant traces the rule once, not once per derivative.
        """
        return self.cgf_cumulants(t, direction, order=2)

    def cgf_cumulants(self, t, direction: str = "remove", *, order: int = 4):
        """``(K(t), K'(t), ..., K^(order)(t))`` at real ``t``: ``K`` and the first ``order`` cumulants of the loss
        tilted by ``e^{t L}``, by nested forward-mode differentiation of :meth:`cgf`.

        One nest of ``order`` jvps carries every lower derivative along (each level returns its primal
        outputs and the newest tangent), so :meth:`cgf` is traced once, not once per order.
        """

        def jet(n):
            if n == 0:
                return lambda s: (self.cgf(s, direction),)
            lower = jet(n - 1)

            def f(s):
                primal, tangent = jax.jvp(lower, (s,), (jnp.ones_like(s),))
                return (*primal, tangent[-1])

            return f

        return jet(order)(t)

    def privacy_loss(self, x, direction: str = "remove"):
        """Privacy loss ``log P(x) / Q(x)`` at output ``x``."""
        raise NotImplementedError

    def gaussian_mu2(self):
        """``K_remove(1) = log E_Q[(P/Q)^2]`` in closed form.

        For the Gaussian mechanism this is ``mu^2``; for every mechanism it is the
        ``mu^2`` of the Gaussian pair with the same ``K(1)``, which the accountants
        use only to start their root searches.
        """
        return self.cgf(1.0, "remove")

    def tilted_abs_moment(self, t, direction: str = "remove"):
        """``E|L_t - E L_t|^3`` of the privacy loss tilted by ``exp(t L)`` (real ``t``).

        This is the per-step term of the saddle-point error bound.
        """
        raise NotImplementedError

    def sample_output(self, key, shape=(), *, direction: str = "remove", under: str = "P"):
        """Samples of the mechanism output under ``P`` or ``Q``."""
        raise NotImplementedError

    def checked_moments(self, t, direction: str = "remove") -> CheckedMoments:
        """``K, K', K''`` and the tilted third absolute central moment at real ``t``, with a check.

        What the certified saddle-point bound needs.  ``resolved`` is False where
        the values cannot be trusted (non-finite, a non-positive variance, or for
        quadrature-based mechanisms a rule that does not resolve the integrand);
        a certified accountant then returns a vacuous bound.  The default takes
        ``K'`` and ``K''`` from :meth:`cgf_derivatives`.
        """
        t = _f64(t)
        k0, k1, k2 = self.cgf_derivatives(t, direction)
        abs3 = self.tilted_abs_moment(t, direction)
        ok = jnp.isfinite(k0) & jnp.isfinite(k1) & jnp.isfinite(k2) & jnp.isfinite(abs3) & (k2 > 0)
        return CheckedMoments(k0, k1, k2, abs3, jnp.zeros_like(k0), ok)

    def cgf_upper(self, t, direction: str = "remove"):
        """An upper bound on the real ``K(t)`` for certified use: ``+inf`` where it cannot be trusted."""
        k = self.cgf(t, direction)
        return nan_to(k, jnp.inf)

    def output_law(self, direction: str = "remove"):
        """One step's output law under ``P`` and its privacy loss, for samplers: a
        :class:`~jaxdp.mechanisms.GaussianMixtureLaw` or :class:`~jaxdp.mechanisms.LaplaceLaw` (``direction`` a
        string).  The loss has this direction's distribution (its :meth:`cgf`); a symmetric mechanism answers
        ``"add"`` with the mirrored pair (``x -> 1 - x``, ``P = N(0, s^2)`` for the Gaussian), so there the values
        at ``x`` are not :meth:`privacy_loss`'s.  A mechanism without one cannot be sampled by the Monte Carlo
        accountants."""
        raise NotImplementedError(f"{type(self).__name__} has no output law (GaussianMixtureLaw or LaplaceLaw).")

    @float64_scope
    def max_privacy_loss(self, direction: str = "remove"):
        """The largest value of the privacy loss under ``P`` (``+inf`` if unbounded): an ``eps`` with delta 0."""
        return jnp.asarray(jnp.inf, jnp.float64)

    def valid(self):
        """Traced boolean: do the parameters lie in their allowed ranges?"""
        raise NotImplementedError

    # -- shared -----------------------------------------------------------
    @float64_scope
    def sample_privacy_loss(self, key, shape=(), *, direction: str = "remove", under: str = "P"):
        """Samples of the privacy-loss random variable ``L(X)``, ``X ~ P`` or ``Q``."""
        x = self.sample_output(key, shape, direction=direction, under=under)
        return self.privacy_loss(x, direction)

    @float64_scope
    def renyi_divergence(self, alpha, direction: str = "remove"):
        """Rényi divergence ``D_alpha(P || Q)`` of real order ``alpha > 1``."""
        alpha = _f64(alpha)
        return self.cgf(alpha - 1.0, direction) / (alpha - 1.0)


def _concrete_scalar_checks(**checks):
    for name, (kind, value) in checks.items():
        getattr(_validate, kind)(name, value)
