"""Each step's tilted law split into a bulk and a jump part (a sigmoid in the loss), the parts' cumulants from
the mechanism's quadrature rule, and the composed shape: a Binomial mixture over the number of jumps."""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxdp.mechanisms import MixtureMechanism, by_direction
from jaxdp.mechanisms.internal import is_stacked, mixture_rule, rule_log_moment, scan_parts
from jaxdp.numerics import (
    log1p,
)

#: width (in the privacy loss) of the sigmoid that splits a step's tilted law into bulk and jumps
SPLIT_WIDTH = 0.02
#: nodes per window of the quadrature rule of the split moments (the sigmoid must be resolved)
SPLIT_NODES = 256
#: counts of jumps visited by the mixture sum
NUM_COUNTS = 64
#: reach of the visited counts around the tilted mean number of jumps, in standard deviations
COUNT_REACH = 12.0
_LOG_ZERO = -1e30


class SplitShape(NamedTuple):
    """Cumulants of the composed tilted loss at ``t`` split by the number of jumps (all float64)."""

    k0: jax.Array  # K(t)
    steps: jax.Array  # the count of jumps' number of trials: T, less for heterogeneous steps (see _trials)
    jumps: jax.Array  # T p_J, the tilted mean number of jumps
    bulk: jax.Array  # (4,) cumulants with no jump
    swap: jax.Array  # (4,) change of the cumulants per jump
    #: (NUM_COUNTS,) log P(K = k), k = 0, 1, ..., of the count of jumps over heterogeneous steps (their
    #: Poisson-binomial law, exact), or None where every step has the same jump probability (a binomial)
    count_log_pmf: jax.Array | None = None


def _node_cumulants(log_w, ell):
    """``(log mass, k1..k4)`` of the sub-probability with log weights ``log_w`` at losses ``ell``."""
    log_mass = jax.nn.logsumexp(log_w)
    p = jnp.exp(log_w - jnp.where(jnp.isfinite(log_mass), log_mass, 0.0))
    k1 = jnp.sum(p * ell)
    c = ell - k1
    m2, m3, m4 = jnp.sum(p * c * c), jnp.sum(p * c**3), jnp.sum(p * c**4)
    return log_mass, jnp.stack([k1, m2, m3, m4 - 3.0 * m2 * m2])


def _step_cumulants(mech, direction, t):
    """``(K(t), k1..k4)`` of one step's tilted loss (the mechanism's :meth:`cgf_cumulants`)."""
    k = mech.cgf_cumulants(t, direction, order=4)
    return k[0], jnp.stack(k[1:])


#: the split point's constants ``(a, c)``: ``min(log(a p_0), c eps)`` (:func:`split_point`)
SPLIT = (2.0, 0.5)
#: other choices of the split point, equally valid: the estimate's change between them is part of its error
#: indicator (:func:`split_terms`)
SPLIT_VARIANTS = ((4.0, 0.5), (2.0, 0.25), (2.0, 0.75))


def split_point(p0, eps, split=SPLIT, floor=-jnp.inf):
    """Where a step's loss counts as a jump: ``min(log(2 p_0), max(eps / 2, floor))`` (``split = (2, 1/2)``).

    Above ``log(2 p_0)`` the sensitivity terms of ``R`` dominate (the linear regime); the cap at
    ``eps / 2`` keeps the loss values between ``eps / 2`` and ``log(2 p_0)`` out of the bulk: with few
    steps and a small ``q`` the target epsilon lies there, far out in the bulk's tail and far below the
    jump mode, where no cumulant expansion of either part is accurate (the one-jump term is exact
    instead, :func:`_one_jump_terms`).

    ``floor`` (:func:`_bulk_floor`: about where one of the steps' bulk would cross into the jumps) keeps the cap
    above the bulk: near ``eps = 0`` the cap alone would put half of every step's bulk into the jumps, the
    estimate of ``log delta`` there would be units too low, and the epsilon solve would stop at 0 where the
    answer is positive."""
    log_a = jnp.log(jnp.asarray(split[0], jnp.float64)) + jnp.log(jnp.where(p0 > 0, p0, 1.0))  # (split: maybe traced)
    return jnp.minimum(log_a, jnp.maximum(split[1] * jnp.maximum(eps, 0.0), floor))


class _TiltedNodes(NamedTuple):
    """One step's quadrature nodes under the tilt ``e^{t L}`` (no split yet)."""

    has_jumps: jax.Array  # a zero-sensitivity component under "remove"
    p0: jax.Array  # its probability
    ell: jax.Array  # the privacy loss at the nodes
    log_w: jax.Array  # normalised log tilted weights
    log_m: jax.Array  # log E[e^{t L}] of the step, K(t) / T


def _tilted_nodes(mech, direction, t, nodes_per_window: int = SPLIT_NODES) -> _TiltedNodes:
    log_p, c, sigma = mech.mixture()
    lam, sign = by_direction(direction, (1.0 + t, 1.0), (-t, -1.0))
    rule = mixture_rule(jnp.real(lam), log_p, c / sigma, nodes_per_window=nodes_per_window, moving_nodes=True)
    ell = sign * rule.log_r
    log_w = lam * rule.log_r + rule.log_w
    log_w = log_w - jax.nn.logsumexp(log_w)
    p0 = jnp.sum(jnp.where(c == 0, jnp.exp(log_p), 0.0))
    # jumps exist under "remove" with a zero-sensitivity component (else every step is bulk); the stand-ins
    # below keep every branch finite (a NaN in an unused branch would still reach the gradient)
    has_jumps = by_direction(direction, p0 > 0, jnp.asarray(False))
    return _TiltedNodes(has_jumps, p0, ell, log_w, rule_log_moment(lam, rule))


def _bulk_floor(nodes: _TiltedNodes, steps):
    """The mean of the tilted law below ``log(2 p_0)`` plus ``z`` of its standard deviations, ``z`` the normal
    quantile at ``1 - 1/steps`` (at least 0): a cap below it would put about one of the ``steps`` bulk steps (or
    more) into the jumps (no derivative: where the split point lies changes the estimate at second order
    only)."""
    ell, log_w = jax.lax.stop_gradient((nodes.ell, nodes.log_w))
    below = ell < math.log(2.0) + jnp.log(jnp.where(nodes.p0 > 0, jax.lax.stop_gradient(nodes.p0), 1.0))
    _, kappa = _node_cumulants(jnp.where(below, log_w, -jnp.inf), ell)
    steps = jax.lax.stop_gradient(jnp.maximum(jnp.asarray(steps, jnp.float64), 1.0))
    z = jnp.maximum(jax.scipy.special.ndtri(1.0 - 1.0 / jnp.maximum(steps, 2.0)), 0.0)
    return kappa[0] + z * jnp.sqrt(jnp.maximum(kappa[1], 0.0))


def _split_point_of(nodes: _TiltedNodes, eps, split=SPLIT, steps=1.0):
    return split_point(nodes.p0, eps, split, _bulk_floor(nodes, steps))


def _split_logs(nodes: _TiltedNodes, eps, split=SPLIT, point=None, steps=1.0):
    """``(log sigmoid jump, log sigmoid bulk)`` at the nodes: the split at :func:`split_point` (``point``: that
    point, where the caller has it from the nodes at another tilt: every term of one estimate must split the
    loss at the same point)."""
    # the sigmoid is sharp: SPLIT_NODES nodes per window resolve it and its derivative (fewer, such as the
    # default rule's, leave the gradient off)
    split = _split_point_of(nodes, eps, split, steps) if point is None else point
    # narrower below a capped split point, so that the bulk (losses near 0) stays out of the jumps
    width = jnp.where(split > 0, jnp.clip(split / 32.0, 1e-6, SPLIT_WIDTH), SPLIT_WIDTH)
    x = (nodes.ell - split) / width
    log_s = jnp.where(nodes.has_jumps, jax.nn.log_sigmoid(x), -1e4)
    log_b = jnp.where(nodes.has_jumps, jax.nn.log_sigmoid(-x), 0.0)
    return log_s, log_b


def _step_nodes(mech, direction, t, eps, split=SPLIT, steps=1.0):
    """``(has_jumps, losses, log tilted weights, log sigmoid jump, log sigmoid bulk)`` of one step."""
    nodes = _tilted_nodes(mech, direction, t)
    log_s, log_b = _split_logs(nodes, eps, split, steps=steps)
    return nodes.has_jumps, nodes.ell, nodes.log_w, log_s, log_b


def _split_cumulants(has_jumps, ell, log_w, log_s, log_b):
    """``(p_J, bulk k1..k4, jump k1..k4)`` from one step's split nodes."""
    log_pj, jump = _node_cumulants(log_w + log_s, ell)
    _, bulk = _node_cumulants(log_w + log_b, ell)
    pj = jnp.where(has_jumps, jnp.exp(jnp.minimum(log_pj, 0.0)), 0.0)
    return pj, bulk, jnp.where(pj > 0, jump, bulk)


def step_split(mech, direction, t, eps, split=SPLIT, steps=1.0):
    """``(p_J, bulk k1..k4, jump k1..k4)`` of one step's law tilted by ``e^{t L}`` (see the module)."""
    if not isinstance(mech, MixtureMechanism):
        _, k = _step_cumulants(mech, direction, t)
        return jnp.zeros(()), k, k
    return _split_cumulants(*_step_nodes(mech, direction, t, eps, split, steps))


def split_shape(comp, direction, t, eps, split=SPLIT) -> SplitShape:
    """Count-weighted sums of :func:`step_split` over the parts of ``comp`` (a stack segment by segment).

    Heterogeneous parts pool their jumps: the count of jumps is taken Binomial with the total mean, and
    each jump swaps the average (jump-weighted) bulk step for the average jump."""
    t = jnp.asarray(t, jnp.float64)
    zero4 = jnp.zeros(4)

    def body(acc, m, n):
        steps, lam, lam2, a, sw, pmf = acc
        pj, b, j = step_split(m, direction, t, eps, split, n)
        sw = sw + n * pj * _raw_moments(j - b)
        return steps + n, lam + n * pj, lam2 + n * pj * pj, a + n * b, sw, _convolve(pmf, _binomial_log_pmf(n, pj))

    pmf0 = jnp.full(NUM_COUNTS, _LOG_ZERO).at[0].set(0.0)
    init = (jnp.zeros(()), jnp.zeros(()), jnp.zeros(()), zero4, zero4, pmf0)
    steps, lam, lam2, a, sw, pmf = scan_parts(comp, body, init)
    safe = jnp.where(lam > 0, lam, 1.0)
    swap = jnp.where(lam > 0, _cumulants(sw / safe), 0.0)
    return SplitShape(comp.cgf(t, direction), _trials(steps, lam, lam2), lam, a, swap, pmf)


def _binomial_log_pmf_at(k, n, p):
    """``log P(K = k)`` of ``K ~ Binomial(n, p)`` (``-inf`` where ``k`` cannot occur)."""
    log_p = jnp.log(jnp.where(p > 0, p, 1.0))
    log_q = log1p(-jnp.where(p < 1, p, 0.0))
    out = (
        jax.lax.lgamma(n + 1.0)
        - jax.lax.lgamma(k + 1.0)
        - jax.lax.lgamma(jnp.maximum(n - k, 0.0) + 1.0)
        + jnp.where(k > 0, k * log_p, 0.0)
        + jnp.where(n - k > 0, (n - k) * log_q, 0.0)
    )
    ok = (k <= n) & ~((p == 0) & (k > 0)) & ~((p == 1) & (k < n))
    return jnp.where(ok, out, -jnp.inf)


def _binomial_log_pmf(n, p):
    """``log P(K = k)``, ``k = 0 .. NUM_COUNTS - 1``, of ``K ~ Binomial(n, p)`` (``_LOG_ZERO`` for none)."""
    out = _binomial_log_pmf_at(jnp.arange(NUM_COUNTS, dtype=jnp.float64), n, p)
    return jnp.where(out > -jnp.inf, out, _LOG_ZERO)


def _convolve(a, b):
    """The log pmf of the sum of two independent counts, from theirs (first NUM_COUNTS values)."""
    i = jnp.arange(NUM_COUNTS)
    lag = i[:, None] - i[None, :]
    shifted = jnp.where(lag >= 0, b[jnp.clip(lag, 0, NUM_COUNTS - 1)], _LOG_ZERO)
    return jnp.maximum(jax.nn.logsumexp(a[None, :] + shifted, axis=1), _LOG_ZERO)


def _trials(steps, lam, lam2):
    """The number of trials of the binomial law of the count of jumps: the integer nearest ``lam^2 / lam2``
    (``lam2 = sum_i p_J,i^2`` over the steps), so that the binomial has the mean and about the variance of the
    true Poisson-binomial count (Ehm 1991); ``steps`` where every step has the same jump probability."""
    steps, lam, lam2 = (jax.lax.stop_gradient(v) for v in (steps, lam, lam2))
    ratio = jnp.where(lam2 > 0, lam * lam / jnp.where(lam2 > 0, lam2, 1.0), steps)
    return jnp.clip(jnp.round(ratio), jnp.minimum(jnp.ceil(lam), steps), steps)


def _raw_moments(k):
    """The "moments" ``m1..m4`` of the cumulants ``k1..k4`` (of ``e^{K(s)}``'s expansion)."""
    k1, k2, k3, k4 = k[0], k[1], k[2], k[3]
    return jnp.stack(
        [
            k1,
            k2 + k1 * k1,
            k3 + 3.0 * k1 * k2 + k1**3,
            k4 + 4.0 * k1 * k3 + 3.0 * k2 * k2 + 6.0 * k1 * k1 * k2 + k1**4,
        ]
    )


def _cumulants(m):
    """Inverse of :func:`_raw_moments`."""
    m1, m2, m3, m4 = m[0], m[1], m[2], m[3]
    return jnp.stack(
        [
            m1,
            m2 - m1 * m1,
            m3 - 3.0 * m1 * m2 + 2.0 * m1**3,
            m4 - 4.0 * m1 * m3 - 3.0 * m2 * m2 + 12.0 * m1 * m1 * m2 - 6.0 * m1**4,
        ]
    )


def _one_bump(mech) -> bool:
    """(static) whether ``mech`` has one non-zero sensitivity, so one bump in the one-jump summand (see
    :func:`_one_jump_part`), by its shape (two components).  A larger mixture may have one too where the other
    components weigh zero (padding, such as :func:`~jaxdp.group_curve`'s): :func:`_one_bump_traced`."""
    return mech.mixture()[1].shape[0] <= 2


def _present_sensitivities(mech):
    """``(log_p, c, present, c_max)``: the components of positive weight and their largest sensitivity (0 if
    none is positive).  A component of weight zero is no part of the law: reductions over the components skip
    it."""
    log_p, c, _ = mech.mixture()
    present = log_p > -jnp.inf
    return log_p, c, present, jnp.max(jnp.where(present, c, 0.0))


def _one_bump_traced(mech):
    """Whether the components of positive weight have at most one non-zero sensitivity (traced): the law is then
    a mixture of ``N(0, s^2)`` and ``N(c, s^2)`` whatever the zero-weight padding."""
    _, c, present, c_max = _present_sensitivities(mech)
    return jnp.all(~present | (c == 0.0) | (c == c_max))


def _counts(shape):
    """The visited jump counts and their log weights (Binomial pmf times the stride; for heterogeneous steps
    the exact Poisson-binomial pmf at every count ``0..NUM_COUNTS - 1`` where those cover the count's reach)."""
    steps, lam = shape.steps, shape.jumps
    p = jnp.clip(lam / jnp.maximum(steps, 1.0), 0.0, 1.0)
    # the visited counts are discrete: no derivative flows through where they are
    steps_c, lam_c, p_c = (jax.lax.stop_gradient(v) for v in (steps, lam, p))
    sd = jnp.sqrt(lam_c * (1.0 - p_c))
    lo = jnp.maximum(0.0, jnp.floor(lam_c - COUNT_REACH * sd - 4.0))
    hi = jnp.minimum(steps_c, jnp.ceil(lam_c + COUNT_REACH * sd + 8.0))
    stride = jnp.maximum(1.0, jnp.ceil((hi - lo) / (NUM_COUNTS - 1)))
    n = lo + stride * jnp.arange(NUM_COUNTS)
    ok = n <= hi
    n = jnp.where(ok, n, lo)
    out = jnp.where(ok, _binomial_log_pmf_at(n, steps, p) + jnp.log(stride), -jnp.inf)
    if shape.count_log_pmf is not None:
        # not capped at the binomial's number of trials (an approximation of the spread): the exact law reaches
        # up to T jumps, and its pmf is 0 past T
        exact = jnp.ceil(lam_c + COUNT_REACH * sd + 8.0) < NUM_COUNTS
        pmf = shape.count_log_pmf
        n = jnp.where(exact, jnp.arange(NUM_COUNTS, dtype=n.dtype), n)
        out = jnp.where(exact, jnp.where(pmf > 0.5 * _LOG_ZERO, pmf, -jnp.inf), out)
    return n, out


def _step_bulk(mech, direction, tau, eps, split=SPLIT, at=None, point=None, steps=1.0):
    """``(log mass, k1..k4)`` of one step's bulk (the law below the split point, sigmoid-weighted) tilted by
    ``e^{tau L}``: its mass un-normalised (``log E[e^{tau L} b(L)]``), its cumulants normalised."""
    if not isinstance(mech, MixtureMechanism):
        return _step_cumulants(mech, direction, tau)
    nd = _tilted_nodes(mech, direction, tau)
    if point is None and at is not None:
        point = _split_point_of(_tilted_nodes(mech, direction, at), eps, split, steps)
    _, log_b = _split_logs(nd, eps, split, point)
    log_mass, kappa = _node_cumulants(nd.log_w + log_b, nd.ell)
    return nd.log_m + log_mass, kappa


def bulk_shape(comp, direction, tau, eps, split=SPLIT, at=None):
    """``(log mass, k1..k4)`` of the composed bulk at tilt ``tau`` (count-weighted sums of :func:`_step_bulk`)."""
    tau = jnp.asarray(tau, jnp.float64)

    def body(acc, m, n):
        log_mass, kappa = _step_bulk(m, direction, tau, eps, split, at, steps=n)
        return acc[0] + n * log_mass, acc[1] + n * kappa

    return scan_parts(comp, body, (jnp.zeros(()), jnp.zeros(4)))


def _single_part(comp):
    """``(mechanism, count)`` of a composition of one mixture part that is not a stack, else ``None``."""
    if len(comp.mechanisms) == 1 and isinstance(comp.mechanisms[0], MixtureMechanism):
        if not is_stacked(comp.counts[0]):
            return comp.mechanisms[0], jnp.asarray(comp.counts[0], jnp.float64)
    return None


def _nodes_eps(nd: _TiltedNodes, n, t):
    """The saddle-point curve's ``eps(t) = K'(t) - 1/t - 1/(1+t)`` for ``n`` steps, from one step's nodes."""
    return n * jnp.sum(jnp.exp(nd.log_w) * nd.ell) - 1.0 / t - 1.0 / (1.0 + t)
