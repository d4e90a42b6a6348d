"""The few-steps path: at one to ``FEW_STEPS`` steps of a one-bump mixture, log delta summed over the nodes directly
(the count sum's Edgeworth terms are least accurate there)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdp.accountants._split_saddle._shape import (
    _one_bump_traced,
    _present_sensitivities,
    _single_part,
    _tilted_nodes,
    _TiltedNodes,
)
from jaxdp.accountants._staging import FEW_STEPS, assumed
from jaxdp.mechanisms import (
    MixtureMechanism,
    is_add,
)
from jaxdp.numerics import (
    implicit_root,
    log1mexp,
    log_ndtr,
    log_sub_exp,
    safeguarded_newton,
    sparse_cond,
)

#: the step counts :func:`_few_log_delta` takes, with its ``three`` flag: one or two steps, three
_FEW_CASES = (((1, 2), False), ((3, FEW_STEPS), True))
#: a sum over the nodes runs over ``FEW_BLOCKS`` blocks of ``FEW_BLOCK`` consecutive nodes: those whose
#: neighbourhood holds the largest summands (blocks wherever the summands are large, not windows around the two
#: largest: the inner sum of three steps can have two bumps of its own, which such windows miss)
FEW_BLOCK = 16
FEW_BLOCKS = 20
#: the few-step epsilon solve stops where log delta is this close to its target
FEW_LOG_DELTA_TOL = 1e-10
FEW_MAX_ITERATIONS = 30
#: ... or where a Newton step is this small relative to epsilon (it is taken: the error after it is about its square)
FEW_XTOL = 1e-7


def _one_step_logs(log_p0, log_p1, c, sigma, y):
    """``[log delta(y), log(-d delta / dy)]`` (last axis) of one step of the mixture ``p0 N(0, sigma^2) + p1 N(c,
    sigma^2)`` against ``N(0, sigma^2)`` ("remove"; ``c > 0``, ``p0`` possibly 0), exact: the loss is increasing
    in the output, above ``y`` from ``x* = sigma^2 / c log((e^y - p0) / p1) + c / 2`` on (everywhere where ``e^y
    <= p0``).  ``delta(y) = P(L > y) - e^y Q(L > y)`` and ``-d delta / dy = e^y Q(L > y)``."""
    above = y > log_p0
    y_s = jnp.where(above, y, log_p0 + 1.0)  # (a harmless stand-in: no NaN reaches the gradient)
    xs = sigma * sigma / c * (log_sub_exp(y_s, log_p0) - log_p1) + 0.5 * c
    lq = y_s + log_ndtr(-xs / sigma)
    lp = jnp.logaddexp(log_p0 + log_ndtr(-xs / sigma), log_p1 + log_ndtr((c - xs) / sigma))
    below = log1mexp(jnp.where(above, -1.0, jnp.minimum(y, -1e-300)))  # delta = 1 - e^y
    return jnp.stack([jnp.where(above, log_sub_exp(lp, lq), below), jnp.where(above, lq, y)], axis=-1)


def _blocks_logsumexp(a, ell, f):
    """``logsumexp_i (a_i + f(ell)_i)`` over the nodes (``f``: losses ``(m,)`` to ``(m, 2)``, the sum taken per
    column) over the ``FEW_BLOCKS`` blocks of ``FEW_BLOCK`` consecutive nodes (the losses increase along them)
    whose first column's summand, at the block's centre or its neighbours' centres, is largest: the summand has
    one bump along the nodes, or several (no jump in the step summed over, one, two)."""
    size = a.shape[0]
    if size <= FEW_BLOCK * FEW_BLOCKS or size % FEW_BLOCK:
        return jax.nn.logsumexp(a[:, None] + f(ell), axis=0)
    mid = slice(FEW_BLOCK // 2, None, FEW_BLOCK)
    coarse = jax.lax.stop_gradient(a[mid] + f(ell[mid])[:, 0])
    edge = jnp.full((1,), -jnp.inf)
    padded = jnp.concatenate([edge, coarse, edge])
    score = jnp.maximum(jnp.maximum(padded[:-2], padded[1:-1]), padded[2:])
    _, top = jax.lax.top_k(score, FEW_BLOCKS)
    idx = (top[:, None] * FEW_BLOCK + jnp.arange(FEW_BLOCK)[None, :]).reshape(-1)
    return jax.nn.logsumexp(a[idx][:, None] + f(ell[idx]), axis=0)


def _few_log_delta(mech, nodes: _TiltedNodes, n, t, eps, three: bool):
    """``[log delta(eps), log(-d delta / d eps)]`` of ``n`` steps of a mixture of ``N(0, sigma^2)`` and ``N(c,
    sigma^2)`` (the Poisson-subsampled Gaussian), "remove", without the split's approximations: ``n`` = 1 or 2
    (``three=False``), or 3 (``three=True``).

    The last step is exact (:func:`_one_step_logs`, smooth in its threshold); the others are summed over their
    tilted quadrature nodes (``E_P[f(L)] = M(t) E_t[e^{-t L} f(L)]``, exact for every ``t``), each sum over the
    blocks of nodes that hold its largest summands (:func:`_blocks_logsumexp`).  At two steps the split
    estimate's bulk is one step (at three, two steps), which no Edgeworth expansion describes: the split
    estimate is percent-level low in epsilon there."""
    log_p, c, sigma = mech.mixture()
    zero = c == 0.0
    _, _, _, c_max = _present_sensitivities(mech)
    log_p0 = jax.nn.logsumexp(jnp.where(zero, log_p, -jnp.inf))
    log_p1 = jax.nn.logsumexp(jnp.where(zero, -jnp.inf, log_p))
    c_s = jnp.where(c_max > 0.0, c_max, 1.0)

    def last(y):
        return _one_step_logs(log_p0, log_p1, c_s, sigma, y)

    a, ell, log_m = nodes.log_w - t * nodes.ell, nodes.ell, nodes.log_m

    def two(y):  # two steps at y, (2,)
        return log_m + _blocks_logsumexp(a, ell, lambda e: last(y - e))

    if three:
        return log_m + _blocks_logsumexp(a, ell, lambda e: jax.vmap(two)(eps - e))
    return jnp.where(n <= 1, last(eps), two(eps))


def _few_possible(mech) -> bool:
    """(static) whether :func:`_few_log_delta` may apply: a mixture of two components, or of more, which may be
    a two-point law padded with zero-weight components (:func:`_few_usable` decides, traced)."""
    return isinstance(mech, MixtureMechanism)


def _few_usable(mech, n, few_steps):
    """Whether :func:`_few_log_delta` applies: one mixture of a zero- and one positive-sensitivity part (the
    components of weight zero aside)."""
    return _one_bump_traced(mech) & (_present_sensitivities(mech)[3] > 0.0) & (n >= few_steps[0]) & (n <= few_steps[1])


def _few_epsilon(ops, three: bool):
    """epsilon with :func:`_few_log_delta`'s ``delta(eps) = delta``: Newton in ``eps`` from ``eps0`` (the split
    estimate's, within a few per cent) on the nodes at the split's tilt ``t`` (fixed: the sums are exact for
    every tilt, and a fixed one keeps the function smooth); its derivative by the implicit function theorem,
    through the tilt too."""
    mech, n, log_delta, eps0, t_d = ops
    t = jax.lax.stop_gradient(t_d)

    def h(e, _, params):  # (everything it needs in params: a custom_jvp rule must not close over tracers)
        m, ld, n_, t_ = params
        return _few_log_delta(m, _tilted_nodes(m, "remove", t_), n_, t_, e, three)[0] - ld

    mech_c, ld_c = jax.lax.stop_gradient((mech, log_delta))
    nodes = _tilted_nodes(mech_c, "remove", t)

    def vsa(e):
        v = _few_log_delta(mech_c, nodes, n, t, e, three)
        return v[0] - ld_c, -jnp.exp(v[1] - v[0]), jnp.zeros(())

    eps0 = jax.lax.stop_gradient(eps0)
    hi = 4.0 * eps0 + 10.0
    e, _, last = safeguarded_newton(
        vsa, jnp.zeros(()), hi, jnp.clip(eps0, 1e-12, hi), FEW_LOG_DELTA_TOL, FEW_XTOL * eps0, FEW_MAX_ITERATIONS
    )
    # delta(0) below the target (the bisection then closes in on 0, delta still below it): epsilon is 0
    at_zero = (last[1] < -1e-6) & (e < 1e-6)
    e = jnp.where(jnp.isfinite(e), e, eps0)
    return jnp.where(at_zero, 0.0, implicit_root(h, None, e, (mech, log_delta, jax.lax.stop_gradient(n), t_d)))


def _with_few_steps_epsilon(comp, direction, log_delta, eps, u):
    """``eps`` (the split estimate's) with :func:`_few_epsilon`'s in its place for one to three steps of a
    single two-point mixture: :func:`~jaxdp.numerics.sparse_cond`, so that under ``vmap`` only the
    configurations with that few steps pay for it."""
    single = _single_part(comp)
    if single is None or not _few_possible(single[0]) or assumed().no_few_steps:
        return eps
    mech, n = single
    # (the tilt keeps its derivative: the block sums are exact for every tilt only to quadrature accuracy, the
    # blocks kept move with it, and the split's tilt moves with the parameters; a tilt held fixed would leave
    # that motion out of d eps / d sigma)
    t = jnp.exp(u)
    for few_steps, three in _FEW_CASES:
        eps = sparse_cond(
            jax.lax.stop_gradient(_few_usable(mech, n, few_steps) & jnp.logical_not(is_add(direction))),
            lambda o, three=three: _few_epsilon(o[:5], three),
            lambda o: o[3],
            (mech, n, log_delta, eps, t),
        )
    return eps


def _with_few_steps_terms(comp, direction, t, eps, terms):
    """``terms`` (the split's ``(first, second)``) with :func:`_few_log_delta` in place of both for one to three
    steps of a single two-point mixture, and whether it was (``sparse_cond``: see above)."""
    single = _single_part(comp)
    if single is None or not _few_possible(single[0]) or assumed().no_few_steps:
        return terms, jnp.asarray(False)
    mech, n = single
    used = jnp.asarray(False)
    for few_steps, three in _FEW_CASES:
        ok = jax.lax.stop_gradient(_few_usable(mech, n, few_steps) & jnp.logical_not(is_add(direction)))

        def few(o, three=three):
            m, n_, t_, e_, (first, _) = o
            v = _few_log_delta(m, _tilted_nodes(m, "remove", t_), n_, t_, e_, three)[0]
            v = jnp.where(jnp.isfinite(v), v, first)
            return v, v

        terms = sparse_cond(ok, few, lambda o: o[4], (mech, n, jnp.asarray(t, jnp.float64), eps, terms))
        used = used | ok
    return terms, used
