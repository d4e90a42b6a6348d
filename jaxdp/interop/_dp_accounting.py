"""dp_accounting's ``DpEvent``s as jaxdp mechanisms, and a ``dp_accounting.PrivacyAccountant`` backed by jaxdp.

dp_accounting is optional: it is imported when a function here is first called (``pip install dp-accounting``).
"""

from __future__ import annotations

import math

import numpy as np

from jaxdp.accountants import epsilon_for_delta, log_delta_for_epsilon
from jaxdp.mechanisms import Composition, Gaussian, Laplace, MixtureOfGaussians, PoissonSubsampledGaussian
from jaxdp.numerics import validate as _validate


class UnsupportedEventError(ValueError):
    """A ``DpEvent`` jaxdp has no mechanism for (the message names the sub-event and why)."""


def _dp():
    try:
        import dp_accounting
    except ImportError as e:  # pragma: no cover - exercised only without the optional dependency
        raise ImportError("jaxdp.interop needs dp_accounting: pip install dp-accounting") from e
    return dp_accounting


def _parts(event, count: int, dp):
    """``[(mechanism, count), ...]`` for ``event`` repeated ``count`` times; ``math.inf`` marks a non-private
    event (epsilon = infinity)."""
    ev = dp.dp_event
    if isinstance(event, ev.NoOpDpEvent):
        return []
    if isinstance(event, ev.NonPrivateDpEvent):
        return [(math.inf, count)]
    if isinstance(event, ev.GaussianDpEvent):
        if event.noise_multiplier == 0:
            return [(math.inf, count)]
        return [(Gaussian(float(event.noise_multiplier)), count)]
    if isinstance(event, ev.LaplaceDpEvent):
        if event.noise_multiplier == 0:
            return [(math.inf, count)]
        return [(Laplace(float(event.noise_multiplier)), count)]
    if isinstance(event, ev.MixtureOfGaussiansDpEvent):
        if event.standard_deviation == 0:
            return [(math.inf, count)]
        return [(_mixture(event.standard_deviation, event.sensitivities, event.sampling_probs), count)]
    if isinstance(event, ev.PoissonSampledDpEvent):
        q = float(event.sampling_probability)
        if q == 0:
            return []
        inner = event.event
        if isinstance(inner, ev.GaussianDpEvent):
            if inner.noise_multiplier == 0:
                return [(math.inf, count)]
            return [(PoissonSubsampledGaussian(float(inner.noise_multiplier), q), count)]
        if isinstance(inner, ev.MixtureOfGaussiansDpEvent) and inner.standard_deviation != 0:
            # nobody sampled (sensitivity 0) with probability 1 - q, else the mixture
            c = np.concatenate([[0.0], np.asarray(inner.sensitivities, np.float64)])
            p = np.concatenate([[1.0 - q], q * np.asarray(inner.sampling_probs, np.float64)])
            return [(_mixture(inner.standard_deviation, c, p), count)]
        raise UnsupportedEventError(
            f"Poisson sampling of {type(inner).__name__} is not supported (Gaussian or mixture of Gaussians only)."
        )
    if isinstance(event, ev.SelfComposedDpEvent):
        return _parts(event.event, count * int(event.count), dp)
    if isinstance(event, ev.ComposedDpEvent):
        return [part for e in event.events for part in _parts(e, count, dp)]
    raise UnsupportedEventError(f"{type(event).__name__} is not supported by jaxdp: {event}")


def _mixture(std, sensitivities, probs):
    c = np.abs(np.asarray(sensitivities, np.float64))
    p = np.asarray(probs, np.float64)
    return MixtureOfGaussians(float(std), c, p / p.sum())


def from_dp_event(event, count: int = 1):
    """The jaxdp mechanism (a :class:`~jaxdp.Composition` or a single mechanism) of a dp_accounting ``DpEvent``.

    Supported: ``GaussianDpEvent``, ``LaplaceDpEvent``, ``MixtureOfGaussiansDpEvent``, ``PoissonSampledDpEvent``
    of a Gaussian or a mixture, ``SelfComposedDpEvent``, ``ComposedDpEvent`` and ``NoOpDpEvent``.

    Returns:
      The mechanism, or None for an event that spends nothing (no-ops only).

    Raises:
      UnsupportedEventError (a ``ValueError``): for other events, and for a non-private one (infinite epsilon;
        :class:`JaxdpAccountant` answers it with ``inf``).

    Example:
      >>> import dp_accounting
      >>> from jaxdp.interop import from_dp_event
      >>> ev = dp_accounting.SelfComposedDpEvent(
      ...     dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.1)), 1000)
      >>> c = from_dp_event(ev)
      >>> c.num_steps, type(c.segments()[0][0]).__name__
      (1000, 'PoissonSubsampledGaussian')
    """
    dp = _dp()
    _validate.num_steps("count", count)
    parts = _parts(event, int(count), dp)
    if any(m is math.inf for m, _ in parts):
        raise UnsupportedEventError(f"the event is not private (epsilon = infinity): {event}")
    return _composition(parts)


def _composition(parts):
    parts = [(m, n) for m, n in parts if n > 0]
    if not parts:
        return None
    return Composition.of(*parts)


def make_accountant(*, neighboring_relation=None, method=None):
    """A ``dp_accounting.PrivacyAccountant`` backed by jaxdp: code written for dp_accounting or jax_privacy switches
    accountant in one line (``accountant = make_accountant()`` instead of ``pld.PLDAccountant()``).

    Args:
      neighboring_relation: ``dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE`` (the default, the only one
        jaxdp's mechanisms describe).
      method: the jaxdp accountant (default: the library default, the certified bound).

    Example:
      >>> import dp_accounting
      >>> from jaxdp.interop import make_accountant
      >>> acc = make_accountant(method="rdp")
      >>> _ = acc.compose(dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.0)), 2000)
      >>> round(acc.get_epsilon(1e-5), 2)
      2.87
    """
    dp = _dp()
    return _accountant_class(dp)(neighboring_relation=neighboring_relation, method=method)


_CLASS = {}


def _accountant_class(dp):
    if "cls" in _CLASS:
        return _CLASS["cls"]

    class JaxdpAccountant(dp.PrivacyAccountant):
        """dp_accounting's ``PrivacyAccountant`` interface over jaxdp's accountants (see :func:`make_accountant`)."""

        def __init__(self, neighboring_relation=None, method=None):
            relation = (
                dp.NeighboringRelation.ADD_OR_REMOVE_ONE if neighboring_relation is None else neighboring_relation
            )
            if relation != dp.NeighboringRelation.ADD_OR_REMOVE_ONE:
                raise ValueError(f"neighboring_relation must be ADD_OR_REMOVE_ONE for jaxdp, got {relation}.")
            super().__init__(relation)
            self._method = method
            self._parts: list = []

        def _maybe_compose(self, event, count, do_compose):
            try:
                parts = _parts(event, int(count), dp)  # (a count of 0 still checks the event's support)
            except UnsupportedEventError as e:
                return self.CompositionErrorDetails(invalid_event=event, error_message=str(e))
            if do_compose and count > 0:
                self._parts.extend(parts)
            return None

        def _nonprivate(self):
            return any(m is math.inf for m, _ in self._parts)

        def get_epsilon(self, target_delta: float) -> float:
            _validate.open_unit("target_delta", target_delta)
            if self._nonprivate():
                return math.inf
            comp = _composition(self._parts)
            if comp is None:
                return 0.0
            return float(epsilon_for_delta(comp, delta=target_delta, method=self._method))

        def get_delta(self, target_epsilon: float) -> float:
            _validate.nonnegative("target_epsilon", target_epsilon)
            if self._nonprivate():
                return 1.0
            comp = _composition(self._parts)
            if comp is None:
                return 0.0
            return float(np.exp(log_delta_for_epsilon(comp, epsilon=target_epsilon, method=self._method)))

    _CLASS["cls"] = JaxdpAccountant
    return JaxdpAccountant
