"""One query answered as a privacy engineer signs it off: the number, whether it is proven, a certified upper bound
beside an estimate, the trivial answer of a bound that could not be verified, and the estimate's own warning."""

from __future__ import annotations

import dataclasses
import math

import jax

from jaxdp.accountants._api import (
    default_method,
    delta_for_epsilon,
    epsilon_for_delta,
    method_info,
    saddlepoint_terms,
)

#: the saddle-point error indicator above which a report warns (``SplitTerms.error_indicator``: the estimate's
#: sensitivity to its second-order terms and its split point, relative to epsilon)
SADDLEPOINT_WARN = 0.01
#: the saddle-point estimates whose error indicator a report gives
SADDLEPOINT_METHODS = ("saddlepoint", "delta2")

VACUOUS_NOTE = (
    "vacuous: no bound could be verified at these settings (the lattice window, the saddle-point "
    "bound and the Renyi-DP bound all failed their checks, e.g. a noise multiplier this small), so "
    "the proven answer is the trivial one; see docs/soundness.md"
)


@dataclasses.dataclass(frozen=True)
class PrivacyReport:
    """An ``(epsilon, delta)`` with what it is.

    Attributes:
      epsilon, delta: the answer (one of them the query's target); ``epsilon`` is ``inf`` where ``vacuous``.
      method: the accountant that gave it; ``certified``: whether it is a proven upper bound.
      certified_upper, certified_upper_method: for an estimate, the same quantity from its certified companion,
        the mechanism's :func:`default_method` (``"certified"`` where it covers the mechanism); ``None`` for a
        certified method.
      vacuous: a certified method that could verify no bound answered with the trivial one (``epsilon = inf``, or
        ``delta = 1``); ``note`` then says so.
      error_indicator: for the saddle-point estimates, how far to trust them (relative, in epsilon; for
        ``"delta2"`` its distance to the split estimate); ``warning`` is set above :data:`SADDLEPOINT_WARN`.
    """

    epsilon: float
    delta: float
    method: str
    certified: bool
    certified_upper: float | None = None
    certified_upper_method: str | None = None
    vacuous: bool = False
    note: str | None = None
    error_indicator: float | None = None
    warning: str | None = None


def privacy_report(mechanism, *, num_steps=1, delta=None, epsilon=None, method: str | None = None) -> PrivacyReport:
    """epsilon for ``delta`` (or delta for ``epsilon``), with its guarantee, its certified companion and warnings.

    For concrete inputs (it reads the numbers on the host): the command line's ``jaxdp epsilon`` and ``jaxdp
    delta`` print this.  Give exactly one of ``delta`` and ``epsilon``.

    Args:
      mechanism: a mechanism or :class:`~jaxdp.Composition`.
      num_steps: number of repetitions (a whole number ``>= 1``).
      delta: target delta in ``(0, 1)`` (the answer is epsilon), or
      epsilon: target epsilon ``>= 0`` (the answer is delta).
      method: accountant (:func:`available_methods`); default :func:`default_method`.

    Returns:
      A :class:`PrivacyReport`.

    Raises:
      ValueError: both or neither of ``delta`` and ``epsilon``, an argument out of range, a traced argument (under
        a user's ``jax.jit``, ``vmap`` or ``grad``: use :func:`epsilon_for_delta` / :func:`delta_for_epsilon`,
        which trace), or an accountant that returned a non-finite value other than the trivial bound.

    Example:
      >>> import jaxdp
      >>> r = jaxdp.privacy_report(jaxdp.PoissonSubsampledGaussian(1.1, 0.01), num_steps=1000, delta=1e-5,
      ...                          method="saddlepoint")
      >>> r.certified, r.certified_upper_method, round(r.epsilon, 2), r.certified_upper >= r.epsilon
      (False, 'certified', 1.51, True)
    """
    if (delta is None) == (epsilon is None):
        raise ValueError("give exactly one of delta (the answer is epsilon) and epsilon (the answer is delta).")
    # (a report reads its numbers on the host: a traced one would fail deep inside with JAX's concretization error)
    for name, value in (("mechanism", mechanism), ("num_steps", num_steps), ("delta", delta), ("epsilon", epsilon)):
        if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(value)):
            raise ValueError(
                f"privacy_report reads its numbers on the host, and {name} is traced (inside jax.jit, vmap or grad); "
                "there, use epsilon_for_delta or delta_for_epsilon, which trace."
            )
    if method is None:
        method = default_method(mechanism, num_steps)
    info = method_info(method)

    def answer(name):
        if delta is not None:
            return float(epsilon_for_delta(mechanism, delta=delta, num_steps=num_steps, method=name))
        return float(delta_for_epsilon(mechanism, epsilon=epsilon, num_steps=num_steps, method=name))

    value = answer(info.name)
    eps, dlt = (value, float(delta)) if delta is not None else (float(epsilon), value)
    # a certified method that cannot verify any bound answers with the trivial one (epsilon = inf, delta = 1)
    vacuous = bool(info.certified) and (eps == math.inf or (delta is None and dlt >= 1.0))
    if not vacuous and not (math.isfinite(eps) and math.isfinite(dlt)):
        raise ValueError("the accountant returned a non-finite value; check the arguments.")
    upper = companion = None
    if not info.certified:  # an estimate is reported beside the proven bound a query without a method would give
        companion = default_method(mechanism, num_steps)
        upper = answer(companion)
    indicator = warning = None
    if info.name in SADDLEPOINT_METHODS and math.isfinite(eps) and eps > 0:
        terms = saddlepoint_terms(mechanism, epsilon=eps, num_steps=num_steps)
        if info.name == "delta2":  # delta_2's distance to the split estimate, in epsilon
            gap = abs(float(terms.log_delta_plain) - float(terms.log_delta))
            indicator = gap / max(float(terms.saddle_point) * eps, 1e-300)
        else:
            indicator = float(terms.error_indicator)
        if indicator > SADDLEPOINT_WARN:
            better = '"saddlepoint", ' if info.name == "delta2" else ""
            warning = (
                f"the saddle-point estimate's error indicator is {indicator:.1%} of epsilon (over "
                f'{SADDLEPOINT_WARN:.0%}): prefer the method {better}"characteristic" or the certified bound for '
                "this setting"
            )
    return PrivacyReport(
        epsilon=eps,
        delta=dlt,
        method=info.name,
        certified=bool(info.certified),
        certified_upper=upper,
        certified_upper_method=companion,
        vacuous=vacuous,
        note=VACUOUS_NOTE if vacuous else None,
        error_indicator=indicator,
        warning=warning,
    )
