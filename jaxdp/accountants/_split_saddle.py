"""The bulk/jump-split saddle-point estimate: ``method="saddlepoint"`` (``delta_2`` alone is ``"saddlepoint-delta2"``).

At small sampling rates the tilted step law ``P(x) e^{t* L(x)} / M(t*)`` at the saddle point ``t*`` has
a heavy right shoulder or a second mode: the outputs where the privacy loss is in its linear regime
(the sensitivity terms of ``R(x) = P/Q`` outweigh the zero-sensitivity term ``p_0``).  Under the tilt only
a fraction ``p_J`` of the steps land there ("jumps", each adding a loss of several units) and
``T p_J`` is of order 0.01-1, so the composed tilted law is a Binomial mixture over the number of jumps,
not one Gaussian: the one-Gaussian formula ``delta_2`` reads ``K''(t*)`` inflated by the rare jumps and
was 20-200 % off in epsilon (8-60x in delta) at ``q`` of 1e-4 to 1e-3.

Here each step's tilted law is split (a sigmoid of width :data:`SPLIT_WIDTH` in the loss, at
``L = log(2 p_0)``, where the zero-sensitivity term of ``R`` stops dominating) into a bulk and a jump part,
each described by its first four cumulants from the mechanism's quadrature rule.  Given ``n`` jumps
the composed tilted loss has cumulants ``A + n D`` (bulk totals plus ``n`` swaps of a bulk step for a
jump), and

    delta(eps) ~ e^{K(t) - t eps} sum_n Bin(n; T, p_J) E_n[e^{-t (L - eps)} (1 - e^{eps - L})_+]

with ``E_n`` under a first-order Edgeworth density (Gaussian plus skewness) of those cumulants, in closed
form (Mills ratio and a Hermite recurrence; Gauss-Laguerre where the recurrence would cancel).  The sum
visits at most :data:`NUM_COUNTS` counts (a stride above one where the Binomial is wide: the summand is
smooth on the scale of its standard deviation), so the cost does not depend on the number of steps.
Without a zero-sensitivity component (the Gaussian mechanism, the add direction, Laplace) there are no
jumps and the estimate is ``delta_2`` plus the skewness term, which vanishes for Gaussians.

Two counts are not expanded: one jump is summed over the jump law's quadrature nodes (exact in the jump,
:func:`_one_jump_terms`); for mixtures with several non-zero sensitivities (group privacy), whose tilted jump
law has one bump per component spread over tens of units of loss, two to :data:`GRID_COUNTS` jumps are
summed over a grid of the jumps' convolution powers (:func:`_many_jump_part`).

The second-order Edgeworth terms (kurtosis and squared skewness) are computed too; their effect on
epsilon is the error indicator (:func:`split_terms`).  Exploration and measurements:
``benchmarks/explore_saddlepoint_split.py``, ``benchmarks/bench_saddlepoint_accuracy.py``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.accountants._cgf import (
    CURVE_MAX_ITERATIONS,
    CURVE_PREDICTED_TOL,
    LOG_DELTA_TOL,
    curve_slope,
    eps_on_curve,
    guess_log_t_for_delta,
    iterate_on_curve,
    log_delta2_on_curve,
    log_deltas,
    log_t_bracket,
    saddle_point,
)
from jaxdp.accountants._staging import FEW_STEPS, assumed
from jaxdp.mechanisms import (
    MixtureMechanism,
    by_direction,
    is_add,
    is_stacked,
    mixture_rule,
    rule_log_moment,
    scan_parts,
)
from jaxdp.numerics import (
    argmax,
    implicit_root,
    log1mexp,
    log1p,
    log_ndtr,
    log_sub_exp,
    root_and_value_found_elsewhere,
    safeguarded_newton,
    sparse_cond,
    zeros_of,
)

#: width (in the privacy loss) of the sigmoid that splits a step's tilted law into bulk and jumps
SPLIT_WIDTH = 0.02
#: nodes per window of the quadrature rule of the split moments (the sigmoid must be resolved)
SPLIT_NODES = 256
#: counts of jumps visited by the mixture sum
NUM_COUNTS = 64
#: reach of the visited counts around the tilted mean number of jumps, in standard deviations
COUNT_REACH = 12.0
#: floor of the variance of the other steps' bulk in the exact one-jump term (a smoothing far below
#: the spacing of the jump's quadrature nodes; keeps the closed form finite for a single step)
JUMP_BULK_VAR_FLOOR = 1e-10
#: the Edgeworth factor is kept above this (its first-order form can turn negative far in a tail)
MIN_FACTOR = 0.05
#: above this Mills-ratio argument the Hermite recurrence cancels: Gauss-Laguerre instead
# the one-jump term's Edgeworth corrections are evaluated on this many of the jump law's nodes
JUMP_TOP = 96
#: the one-jump term sums over 1 / JUMP_WINDOW of the rule's nodes, around the summand's peak
JUMP_WINDOW = 3
_LAGUERRE_FROM = 8.0
_LOG_ZERO = -1e30
_GL_X, _GL_W = np.polynomial.laguerre.laggauss(24)


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


def _jvp_cumulants(mech, direction, t):
    """``k1..k4`` of one step's tilted loss by nested forward-mode derivatives of its CGF."""

    def d(f):
        return lambda s: jax.jvp(f, (s,), (jnp.ones_like(s),))[1]

    f1 = d(lambda s: mech.cgf(s, direction))
    f2 = d(f1)
    f3 = d(f2)
    f4 = d(f3)
    return jnp.stack([f1(t), f2(t), f3(t), f4(t)])


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
    above the bulk: near ``eps = 0`` the cap put half of every step's
    bulk into the jumps, and the estimate of ``log delta`` was 2.8 low at ``eps = 0`` (group 4, sigma 3.42,
    q 2.6e-3, 90 steps: -7.25 against -4.45), which stopped the epsilon solve at 0 (the answer was
    0.0457)."""
    log_a = math.log(split[0]) + jnp.log(jnp.where(p0 > 0, p0, 1.0))
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
    # the sigmoid is sharp: SPLIT_NODES nodes per window resolve it (and its derivative: with the default 48
    # the gradient was 2.6e-2 off finite differences, with 256 within 2.3e-6)
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
        k = _jvp_cumulants(mech, direction, t)
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


class _Rows(NamedTuple):
    """The inputs of :func:`_log_terms`, one Edgeworth component per row: ``k0`` ``(R,)``, ``kappa`` ``(R, 4)``,
    ``t`` ``(R,)``, ``eps`` ``(R,)``.  The terms an estimate needs beyond its visited counts (the bulk at its
    own saddle point, the one-jump rows) are gathered as rows and evaluated with the counts' in ONE call: the
    closed form (``log Phi``, the ratios' recurrence and Gauss-Laguerre) is then traced once per program."""

    k0: jax.Array
    kappa: jax.Array
    t: jax.Array
    eps: jax.Array

    @staticmethod
    def stand_in(rows: int) -> _Rows:
        """``rows`` rows of a standard normal at tilt 1 and eps 0: finite terms and derivatives, never used
        (an unevaluated ``lax.cond`` branch's rows)."""
        kappa = jnp.broadcast_to(jnp.array([0.0, 1.0, 0.0, 0.0]), (rows, 4))
        return _Rows(jnp.zeros(rows), kappa, jnp.ones(rows), jnp.zeros(rows))

    @staticmethod
    def concat(*parts: _Rows) -> _Rows:
        return _Rows(*(jnp.concatenate([jnp.asarray(p[i], jnp.float64) for p in parts]) for i in range(4)))


def _rows_log_terms(rows: _Rows):
    return _log_terms(rows.k0, rows.kappa, rows.t, rows.eps)


def _one_jump_part(step_nodes, shape, ts, es, n, use, window=False):
    """One part's contribution to :func:`_one_jump_terms` (first and second order, ``_LOG_ZERO`` unless
    ``use``), from its split nodes at tilt ``ts`` and epsilon ``es``."""
    rows, aux = _one_jump_rows(step_nodes, shape, ts, es, n, use, window)
    return _one_jump_finish(aux, *_rows_log_terms(rows))


def _one_jump_rows(step_nodes, shape, ts, es, n, use, window=False):
    """``(rows, aux)``: the ``JUMP_TOP`` rows of :func:`_one_jump_part`'s Edgeworth terms, and what
    :func:`_one_jump_finish` sums them with."""
    has_jumps, ell, log_w, log_s, log_b = step_nodes
    log_wj = jnp.where(has_jumps, log_w + log_s, log_w)
    # the other steps' bulk: a Gaussian floor (1e-5 in loss) keeps the closed form finite for T = 1
    _, b = _node_cumulants(log_w + log_b, ell)
    rest = jnp.where(use, shape.bulk - b, jnp.array([0.0, 1.0, 0.0, 0.0]))
    rest = rest.at[1].set(jnp.maximum(rest[1], JUMP_BULK_VAR_FLOOR))
    k0 = jnp.where(use, shape.k0, 0.0)
    # ``window`` (a mixture with one non-zero sensitivity, the Poisson-subsampled Gaussian): the summand is (up
    # to constants) log_wj + f(y), y = eps - jump - E[rest], f the log of the Gaussian part, t y + t^2 v / 2
    # below y = -t v and -y^2 / (2 v) above it (v = Var rest): one log-concave bump in the node index (the
    # loss increases along the nodes).  Only the window of 1 / JUMP_WINDOW of the nodes around its peak is
    # summed: the nodes are evenly spaced over windows of the quadrature's half-width (20), so a third of them
    # spans >= 2 * 20 / 3 >= 13 standard deviations of the jump's Gaussian, and the nodes left out carry
    # < 1e-9 of the sum.  Mixtures with several non-zero sensitivities (group privacy) have one bump per
    # component, possibly farther apart than the window: they sum every node.
    size = ell.shape[0]
    keep = max(JUMP_TOP, -(-size // JUMP_WINDOW))
    if window and keep < size:
        y, v = es - ell - rest[0], rest[1]
        score = log_wj + jnp.where(y < -ts * v, ts * y + 0.5 * ts * ts * v, -0.5 * y * y / v)
        first_kept = jnp.clip(argmax(jax.lax.stop_gradient(score)) - keep // 2, 0, size - keep)
        ell, log_wj = (jax.lax.dynamic_slice_in_dim(v, first_kept, keep) for v in (ell, log_wj))
    # the Edgeworth terms on the JUMP_TOP nodes that carry most of the sum (ranked by the Gaussian part,
    # cheap); the Gaussian part alone on the others (each under ~1e-3 of the sum there)
    gauss = log_wj + _log_gauss_term(k0, rest, ts, es - ell) - ts * ell
    top = jax.lax.top_k(jax.lax.stop_gradient(gauss), JUMP_TOP)[1]
    rows = _Rows(
        jnp.broadcast_to(k0, (JUMP_TOP,)),
        jnp.broadcast_to(rest, (JUMP_TOP, 4)),
        jnp.broadcast_to(ts, (JUMP_TOP,)),
        es - ell[top],
    )
    others = jax.nn.logsumexp(gauss.at[top].set(_LOG_ZERO))
    log_n = jnp.log(jnp.where(n > 0, n, 1.0))
    return rows, (log_wj[top] - ts * ell[top], others, log_n, use)


def _one_jump_finish(aux, first, second):
    """:func:`_one_jump_part`'s value from its rows' terms ``first``, ``second`` (``(JUMP_TOP,)`` each)."""
    weights, others, log_n, use = aux
    out = []
    for v in (first, second):
        val = jnp.logaddexp(jax.nn.logsumexp(weights + v), others) + log_n
        out.append(jnp.where(use & jnp.isfinite(val), val, _LOG_ZERO))
    return tuple(out)


#: counts of jumps whose summand is a grid convolution of the jump law for mixtures with several non-zero
#: sensitivities (:func:`_many_jump_part`)
GRID_COUNTS = 16
#: cells of that grid
GRID_SIZE = 256
#: the grid reaches this far (over the tilt) above epsilon: a sum of jumps beyond weighs ``< e^{-GRID_REACH}``
GRID_REACH = 40.0
#: cells of each count's row with the Edgeworth terms (the others: the Gaussian part)
GRID_TOP = 32
#: cells this many standard deviations of the other steps' bulk above its mean are dropped
GRID_Z_MAX = 40.0


def _many_jump_part(step_nodes, shape, ts, es):
    """``(first, second)``, each ``(GRID_COUNTS - 1,)``: the summands ``log E_n[...]`` for ``n = 2 ..
    GRID_COUNTS`` jumps of one mixture with several non-zero sensitivities, the sum of the ``n`` jumps on a
    grid (its law the ``n``-fold convolution of one jump's, by FFT), the other steps' bulk Edgeworth.

    A group mixture's tilted jump law has one bump per component, spread over tens of units of loss (group 16
    at sigma 0.84: a mean of 24 and a standard deviation of 75 for a target epsilon of 13): the Edgeworth
    expansion of ``n`` jumps from their cumulants ``n D`` was off by several units in ``log delta``.  Each
    jump's loss is at least the split point's sigmoid (positive: the grid is used where the split point is,
    :func:`_fused_at`), so the sums only grow and truncating the grid at its top drops exactly the sums
    above it.  The jumps are placed on the grid by linear interpolation (the mean of each preserved)."""
    has_jumps, ell, log_w, log_s, log_b = step_nodes
    log_wj = log_w + log_s
    log_pj = jax.nn.logsumexp(log_wj)
    _, b = _node_cumulants(log_w + log_b, ell)
    # the spacing is differentiated through (the binned sum depends on it; held fixed, the derivative in sigma
    # was 3e-4 off central differences, now within 5e-6)
    reach = es + jnp.minimum(GRID_REACH / ts, 4.0 * GRID_REACH)
    dx = reach / (GRID_SIZE - 1)
    pos = jnp.maximum(ell, 0.0) / dx
    i0 = jnp.floor(jax.lax.stop_gradient(pos))
    frac = pos - i0
    inside = i0 < GRID_SIZE - 1
    w = jnp.where(inside, jnp.exp(log_wj - log_pj), 0.0)
    i0 = jnp.where(inside, i0, 0).astype(jnp.int32)
    law = jnp.zeros(GRID_SIZE).at[i0].add(w * (1.0 - frac)).at[i0 + 1].add(w * frac)
    # the n-fold convolutions at once: powers of the law's transform (|f| <= 1), one batched inverse
    n = jnp.arange(2, GRID_COUNTS + 1, dtype=jnp.float64)
    powers = [jnp.fft.rfft(law, 2 * GRID_SIZE)]
    for _ in range(GRID_COUNTS - 1):
        powers.append(powers[-1] * powers[0])
    laws = jnp.fft.irfft(jnp.stack(powers[1:]), 2 * GRID_SIZE)[:, :GRID_SIZE]
    # FFT rounding leaves ~1e-16 of the peak (either sign) in the empty cells
    floor = jnp.maximum(1e-15 * jnp.max(laws, axis=1, keepdims=True), 1e-300)
    log_laws = jnp.where(laws > floor, jnp.log(jnp.maximum(laws, floor)), _LOG_ZERO)
    grid = dx * jnp.arange(GRID_SIZE, dtype=jnp.float64)
    # counts beyond the number of steps (never visited) get the full bulk as a harmless stand-in
    valid = jax.lax.stop_gradient(n <= shape.steps)
    rest = shape.bulk[None, :] - jnp.where(valid, n, 0.0)[:, None] * b[None, :]
    rest = rest.at[:, 1].set(jnp.maximum(rest[:, 1], JUMP_BULK_VAR_FLOOR))
    kappa = jnp.broadcast_to(rest[:, None, :], (GRID_COUNTS - 1, GRID_SIZE, 4))
    y = es - grid[None, :]
    # a cell whose y lies GRID_Z_MAX standard deviations above the rest's mean has the rest's loss above y with
    # odds < e^{-GRID_Z_MAX^2 / 2}: it is dropped, and evaluated at the rest's mean as a stand-in (there the
    # closed form's two J's can cancel to rounding, its derivatives infinite)
    z0 = (y - rest[:, None, 0]) / jnp.sqrt(rest[:, None, 1])
    keep = valid[:, None] & (log_laws > 0.5 * _LOG_ZERO) & (z0 < GRID_Z_MAX)
    y_safe = jnp.where(keep, y, rest[:, None, 0])
    base = log_laws - ts * grid[None, :]
    gauss = base + _log_gauss_term(shape.k0, kappa, ts, y_safe)
    keep = keep & jnp.isfinite(gauss)
    # the Edgeworth terms on the GRID_TOP cells of each count that carry most of its sum (by the Gaussian
    # part), the Gaussian part alone on the others (as the one-jump term does, :func:`_one_jump_part`)
    top = jax.lax.top_k(jax.lax.stop_gradient(jnp.where(keep, gauss, -jnp.inf)), GRID_TOP)[1]
    rows = jnp.arange(GRID_COUNTS - 1)[:, None]
    in_top = jnp.zeros(keep.shape, bool).at[rows, top].set(True)
    others = jax.nn.logsumexp(jnp.where(keep & ~in_top, gauss, _LOG_ZERO), axis=1)
    first, second = _log_terms(shape.k0, kappa[:, :GRID_TOP], ts, y_safe[rows, top])
    out = []
    for v in (first, second):
        val = jax.nn.logsumexp(jnp.where(keep[rows, top], base[rows, top] + v, _LOG_ZERO), axis=1)
        val = jnp.logaddexp(val, others)
        out.append(jnp.where(has_jumps & valid & jnp.isfinite(val), val, _LOG_ZERO))
    return tuple(out)


#: the step counts :func:`_few_log_delta` takes, with its ``three`` flag: one or two steps, three
_FEW_CASES = (((1, 2), False), ((3, FEW_STEPS), True))
#: a sum over the nodes runs over ``FEW_BLOCKS`` blocks of ``FEW_BLOCK`` consecutive nodes: those whose
#: neighbourhood holds the largest summands (measured against the sums over all 1,024 nodes, three steps, 78
#: random cells: within 3.5e-7 in log delta; two windows around the two largest, of 192 nodes outside and 384
#: inside, missed 1.7e-2 where the inner sum has two bumps too, sigma 0.68, q 0.013, delta 3e-10)
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
    estimate's bulk is one step, which no Edgeworth expansion describes (sigma 2, q 0.01, delta 1e-6 was 1.3 %
    low in epsilon), at three two steps (-1.2 % there, -2.9 % at sigma 5, q 1e-4, delta 1e-10)."""
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
    # blocks kept move with it, and the split's tilt moves with the parameters; without it d eps / d sigma was
    # 5e-4 off at sigma 0.7, q 0.1, with the earlier windowed sums)
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


def _one_jump_terms(comp, direction, shape, t, eps, split=SPLIT):
    """The one-jump summand ``log E_1[...]`` (first and second order) with the jump law exact.

    Given one jump, the loss is the jump (read off the quadrature nodes of its step, weighted by
    ``n_i p_J,i`` over the parts) plus the bulk of the other ``T - 1`` steps (Edgeworth, its cumulants
    the bulk totals less the jumping step's bulk): a sum over nodes of the closed-form bulk term at
    ``eps - jump``.  Exact in the jump, this is what carries the few-step, tiny-q corner, where the
    target epsilon lies between the bulk and the jump mode."""
    t = jnp.asarray(t, jnp.float64)
    if isinstance(direction, str) and is_add(direction):  # no jumps under "add" (see _step_nodes)
        return jnp.full((), _LOG_ZERO), jnp.full((), _LOG_ZERO)
    # a finite "log 0" throughout: an all -inf logsumexp / logaddexp has a NaN derivative, which would reach
    # the gradient even through an unused branch (the directions and parts without jumps)
    neg = jnp.full((), _LOG_ZERO)

    def body(acc, m, n):
        if not isinstance(m, MixtureMechanism):
            return acc
        log_p, c, _ = m.mixture()
        p0 = jnp.sum(jnp.where(c == 0, jnp.exp(log_p), 0.0))
        use = by_direction(direction, p0 > 0, jnp.asarray(False)) & (n > 0)
        # without jumps (a traced "add", or no zero-sensitivity part) the term is evaluated at harmless
        # stand-ins and dropped: the real tilt there can sit at the bracket's edge, with NaN derivatives
        ts, es = jnp.where(use, t, 1.0), jnp.where(use, eps, 1.0)
        nodes = _step_nodes(m, direction, ts, es, split, n)
        # given one jump among the steps, it is this part's with odds n p_J / (1 - p_J)
        log_pj = jnp.minimum(jax.nn.logsumexp(nodes[2] + nodes[3]), 0.0)
        log_odds = jnp.where(use, log_pj - log1mexp(jnp.minimum(log_pj, -1e-12)), 0.0)
        vals = _one_jump_part(nodes, shape, ts, es, n, use, _one_bump(m))
        log_n = jnp.log(jnp.where(n > 0, n, 1.0))
        norm = jnp.logaddexp(acc[2], jnp.where(use, log_n + log_odds, _LOG_ZERO))
        return (*(jnp.logaddexp(a_, v - log_pj + log_odds) for a_, v in zip(acc[:2], vals)), norm)

    first, second, log_norm = scan_parts(comp, body, (neg, neg, neg))
    return first - log_norm, second - log_norm


_HERMITE = (
    lambda z: 1.0,
    lambda z: z,
    lambda z: z * z - 1.0,
    lambda z: z**3 - 3.0 * z,
    lambda z: z**4 - 6.0 * z * z + 3.0,
    lambda z: z**5 - 10.0 * z**3 + 15.0 * z,
)


def _hermite(k, z):
    """``He_k(z)`` (only the one asked for is traced)."""
    return _HERMITE[k](z)


def _log_j0(u):
    """``log J_0(u) = log int_0^inf e^{-u y - y^2/2} dy`` (``= log(sqrt(2 pi) e^{u^2/2} Phi(-u))``).

    Below ``_LAGUERRE_FROM`` from ``log Phi``; above, by 24-point Gauss-Laguerre in ``x = u y`` (within 7e-16
    of mpmath for every ``u >= 8``).  ``log Phi(-u) + u^2/2`` cancels: its error grows as ``u^2`` (3e-11 at
    ``u = 1e3``, 1e-4 at ``u = 1e6``), and the difference ``log J_0(u) - log J_0(u + s)`` of two nearby
    arguments (the Gaussian part of :func:`_log_terms`) then drowned in it; it came out with the wrong sign
    and the term as NaN (sigma 4.38, q 2.1e-4, 70 steps, tilt 326: ``z0 ~ 1e6``)."""
    big = u >= _LAGUERRE_FROM
    small = log_ndtr(-jnp.where(big, 0.0, u)) + 0.5 * u * u + 0.5 * math.log(2.0 * math.pi)
    uu = jnp.maximum(u, _LAGUERRE_FROM)
    y = _GL_X / uu[..., None]
    laguerre = jnp.log(jnp.sum(_GL_W * jnp.exp(-0.5 * y * y), axis=-1)) - jnp.log(uu)
    return jnp.where(big, laguerre, small)


def _ratios(z0, a):
    """``(log J_0, [J_3, J_4, J_6] / J_0)``, ``J_k = int_0^inf e^{-u y - y^2/2} He_k(z0 + y) dy``, ``u = z0 + a``."""
    u = z0 + a
    log_j0 = _log_j0(u)
    big = u >= _LAGUERRE_FROM
    # recurrence r_k = J_k / J_0 = He_{k-1}(z0) / J_0 - a r_{k-1}, where it does not cancel (u < 8; the
    # other branch gets harmless stand-ins so that neither branch overflows)
    a_r, z_r = jnp.where(big, 0.0, a), jnp.where(big, 0.0, z0)
    inv_r = jnp.exp(-jnp.where(big, 0.0, log_j0))
    r = [jnp.ones_like(u)]
    for k in range(1, 7):
        r.append(_hermite(k - 1, z_r) * inv_r - a_r * r[-1])
    # Gauss-Laguerre for large u
    uu = jnp.maximum(u, _LAGUERRE_FROM)
    z_g = jnp.where(big, z0, 0.0)
    inv_g = jnp.exp(-jnp.where(big, log_j0, 0.0))
    y = _GL_X / uu[..., None]
    base = _GL_W * jnp.exp(-0.5 * y * y) / uu[..., None]
    zy = z_g[..., None] + y
    he = {3: zy**3 - 3.0 * zy, 4: zy**4 - 6.0 * zy**2 + 3.0, 6: zy**6 - 15.0 * zy**4 + 45.0 * zy**2 - 15.0}
    out = [jnp.where(big, jnp.sum(base * he[k], axis=-1) * inv_g, r[k]) for k in (3, 4, 6)]
    return log_j0, out


def _standardised(kappa, eps):
    k1, k2 = kappa[..., 0], kappa[..., 1]
    # a floor keeping |z0| <= 1e12 (z0^2 finite): a degenerate law (a direction past its largest loss,
    # tilted to the bracket's edge) then gives a huge negative log delta instead of NaN
    k2 = jnp.maximum(k2, 1e-24 * (1.0 + (eps - k1) ** 2))
    s = jnp.sqrt(k2)
    return k2, s, (eps - k1) / s


def _log_gauss_term(k0, kappa, t, eps):
    """The Gaussian (zeroth-order) part of :func:`_log_terms`, without the correction ratios (cheap)."""
    _, s, z0 = _standardised(kappa, eps)
    # both tilts in one call (one traced ``log Phi``, not two)
    lj_t, lj_u = _log_j0(jnp.stack(jnp.broadcast_arrays(z0 + t * s, z0 + (t + 1.0) * s)))
    return k0 - t * eps - 0.5 * z0 * z0 - 0.5 * math.log(2.0 * math.pi) + log_sub_exp(lj_t, lj_u)


def _log_terms(k0, kappa, t, eps):
    """``(log delta with the skewness term, log delta with the second-order terms too)`` for one Edgeworth
    component with cumulants ``kappa = (k1, k2, k3, k4)``, at tilt ``t``."""
    k3, k4 = kappa[..., 2], kappa[..., 3]
    k2, s, z0 = _standardised(kappa, eps)
    g1, g2 = k3 / (s * k2), k4 / (k2 * k2)
    # both tilts in one call (the ratios and their ``log Phi`` traced once)
    z_b, a_t, a_u = jnp.broadcast_arrays(z0, t * s, (t + 1.0) * s)
    log_j0, ratios = _ratios(jnp.stack([z_b, z_b]), jnp.stack([a_t, a_u]))
    lj_t, lj_u = log_j0
    rt, ru = [r[0] for r in ratios], [r[1] for r in ratios]
    # Gaussian part: phi(z0) (J0(t) - J0(t + 1)), then the correction ratios relative to it
    log_gauss = -0.5 * z0 * z0 - 0.5 * math.log(2.0 * math.pi) + log_sub_exp(lj_t, lj_u)
    w = jnp.exp(lj_u - lj_t)  # J0(t + 1) / J0(t) < 1
    den = jnp.maximum(-jnp.expm1(lj_u - lj_t), 1e-300)
    rel = [(a - w * b) / den for a, b in zip(rt, ru)]  # (J_k(t) - J_k(t+1)) / (J_0(t) - J_0(t+1))
    first = 1.0 + g1 / 6.0 * rel[0]
    second = first + g2 / 24.0 * rel[1] + g1 * g1 / 72.0 * rel[2]
    base = k0 - t * eps + log_gauss
    # (no Gaussian mass, e.g. J_0(t) = J_0(t + 1) to rounding at a huge z0: no term, whatever the ratios)
    gone = base == -jnp.inf
    return tuple(
        jnp.where(gone, -jnp.inf, base + jnp.log(jnp.maximum(jnp.where(gone, 1.0, f), MIN_FACTOR)))
        for f in (first, second)
    )


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


#: the exact one-jump term is skipped where a bound on it is this far (in log) below the other counts' sum
ONE_JUMP_SKIP = 25.0
#: Newton steps (in log t) toward the bulk's own saddle point (:func:`_bulk_saddle_rows`)
BULK_NEWTON_STEPS = 3
#: the count-0 term is re-evaluated at the bulk's saddle point where, at the curve's tilt, its second-order
#: Edgeworth terms move its log by more than this, or the bulk's mean is more than ``BULK_Z_MIN`` standard
#: deviations from that saddle point's equation (and the term matters).  Measured at the curve's tilt: 0.01-0.04
#: and z 2.6-3.8 on the issue's rows (where the re-evaluation changed the term by 0.004-0.04 and cost 2x),
#: 0.58-2.8 and z 6-13 where the term was 2-15x low.
BULK_EDGEWORTH_GAP = 0.1
BULK_Z_MIN = 5.0
#: the bulk's tilt stays below this over eps (the sigmoid's width below a capped split point is eps / 64: much
#: beyond ``64 / eps`` the tilt outgrows the sigmoid's decay and the far jumps leak into the "bulk")
BULK_TILT_CAP = 48.0


def _bulk_saddle_rows(bulk_term, t, eps) -> _Rows:
    """The one row of :func:`_log_terms` giving ``(first, second)``: the count-0 term (all steps in the bulk;
    its log weight included) at the bulk's own saddle point ``tau``: ``A'(tau) = eps + 1/tau + 1/(1+tau)`` for
    the composed bulk's tilted mean ``A'``.

    The count-0 term is the same at every tilt in exact arithmetic (it is ``E_P[prod_i b(L_i) (1 - e^{eps -
    L})_+]``, ``b`` the bulk's sigmoid), but its Edgeworth expansion is accurate only near its own saddle
    point.  The curve's tilt ``t`` is the whole law's, held down by the rare jumps; where few steps jump
    and eps is small, the bulk needs a tilt 5-10x larger to reach eps, and at ``t`` its term was 2-15x low
    (sigma 3.13, q 5.4e-3, 66 steps, eps 0.098: log term -27.72 at t = 101, -26.85 at tau ~ 300, truth by a
    tilted FFT -26.87).  A few safeguarded Newton steps in ``log tau`` from ``t`` (the term is stationary in
    ``tau`` there, so they need not converge tightly)."""
    lo = jnp.log(t) - 3.0
    hi = jnp.maximum(jnp.log(t), jnp.log(BULK_TILT_CAP / jnp.maximum(eps, 1e-300)))

    # BULK_NEWTON_STEPS + 1 evaluations in one loop body (the bulk's node set traced once, not twice): the last
    # one's step is not taken, its (log mass, cumulants) are those at the final tilt
    def step(i, carry):
        u, _, _ = carry
        tau = jnp.exp(u)
        log_mass, kappa = bulk_term(tau)
        g = kappa[0] - eps - 1.0 / tau - 1.0 / (1.0 + tau)
        dg = tau * kappa[1] + 1.0 / tau + tau / ((1.0 + tau) * (1.0 + tau))
        du = jnp.clip(-g / jnp.maximum(dg, 1e-300), -1.0, 1.0)
        u_new = jnp.clip(jnp.where(jnp.isfinite(du), u + du, u), lo, hi)
        return jnp.where(i < BULK_NEWTON_STEPS, u_new, u), log_mass, kappa

    u0 = jnp.log(t)
    init = (u0, jnp.zeros_like(u0), jnp.zeros((*jnp.shape(u0), 4), jnp.result_type(u0)))
    u, log_mass, kappa = jax.lax.fori_loop(0, BULK_NEWTON_STEPS + 1, step, init)
    return _Rows(log_mass[None], kappa[None], jnp.exp(u)[None], jnp.broadcast_to(eps, (1,)))


def _bulk_saddle_needed(shape, t, eps, n, log_w, first, second):
    """Whether the count-0 term is taken from :func:`_bulk_saddle_rows`: the count 0 is visited on its own, its
    expansion at the curve's tilt is off (``BULK_EDGEWORTH_GAP``, ``BULK_Z_MIN``), and the term at ``t`` is
    within ``e^{ONE_JUMP_SKIP}`` of the others (it was at most 15x low)."""
    # (a decision: its inputs without their derivatives, so that none is traced for it)
    shape, t, eps, log_w, first, second = jax.lax.stop_gradient((shape, t, eps, log_w, first, second))
    # (no jumps: the bulk is the whole law, whose saddle point is the curve's tilt already)
    zero = (n[0] == 0) & (n[1] == 1) & jnp.isfinite(log_w[0]) & (shape.jumps > 0)
    a1, a2 = shape.bulk[0], shape.bulk[1]
    z = (eps + 1.0 / t + 1.0 / (1.0 + t) - a1) / jnp.sqrt(jnp.maximum(a2, 1e-300))
    rest = jax.nn.logsumexp(jnp.where(jnp.arange(n.shape[0]) == 0, -jnp.inf, log_w + first))
    matters = log_w[0] + first[0] > rest - ONE_JUMP_SKIP
    off = (jnp.abs(second[0] - first[0]) > BULK_EDGEWORTH_GAP) | (jnp.abs(z) > BULK_Z_MIN)
    return zero & off & matters


def log_delta_split(shape: SplitShape, t, eps, one_jump, bulk_term, many_jumps=None):
    """``(log delta estimate, log delta with the second-order terms)`` from the split cumulants at tilt ``t``.

    ``one_jump``: ``(rows, finish)``, the exact one-jump summands (:func:`_one_jump_terms`) as ``finish(aux,
    first, second)`` of the terms of the rows ``rows()`` returns with ``aux``, used where the count 1 is
    visited on its own (stride 1).  The rows are not built (``lax.cond``; under ``vmap`` both branches run)
    where they cannot matter: given one jump, the summand is at most ``B(t) = max_x e^{-t x} (1 - e^{-x})
    <= (t / (1 + t))^t / (1 + t)`` (pointwise), so with the count's weight it is bounded (its Gaussian part; the
    skewness factor, uncapped above, would have to exceed ~1e10 to use up the margin); where that bound and
    the Edgeworth summand it replaces are both ``e^{-ONE_JUMP_SKIP}`` below the other counts' sum, either
    moves ``log delta`` by less than 3e-11.

    ``bulk_term``: a function of the tilt returning ``(log mass, k1..k4)`` of the composed bulk (no jump), for
    the count 0 at the bulk's own saddle point (:func:`_bulk_saddle_rows`; not solved where it is not needed).

    The counts' terms decide which extra rows are needed; those rows (or stand-ins) are then evaluated in one
    :func:`_log_terms` call.  The one-jump decision reads the count-0 term before its bulk re-evaluation, which
    moves it by a factor of at most ~15 (``e^{2.7}``), inside the decision's ``e^{ONE_JUMP_SKIP}`` margin.

    ``many_jumps``: ``(flag, function)``, the function returning the summands for 2 .. ``GRID_COUNTS`` jumps
    (:func:`_many_jump_part`), used where ``flag`` holds and the counts are visited one by one (stride 1); not
    evaluated elsewhere (``lax.cond``)."""
    n, log_w = _counts(shape)
    kappa = shape.bulk[None, :] + n[:, None] * shape.swap[None, :]
    k0_n, t_n, eps_n = (jnp.broadcast_to(v, n.shape) for v in (shape.k0, t, eps))
    count_rows = _Rows(k0_n, kappa, t_n, eps_n)
    # the decisions read the counts' terms without their derivatives (a primal of the closed form); the terms
    # themselves come from the one call on all the rows, the only one differentiated
    first, second = _rows_log_terms(jax.lax.stop_gradient(count_rows))
    bulk_needed = _bulk_saddle_needed(shape, t, eps, n, log_w, first, second)
    bulk_rows = jax.lax.cond(bulk_needed, lambda: _bulk_saddle_rows(bulk_term, t, eps), lambda: _Rows.stand_in(1))
    one_rows_fn, one_finish = one_jump
    single = (n == 1) & (jnp.abs(n[1] - n[0]) == 1) & (shape.jumps > 0)
    # (a decision, from values without their derivatives)
    t_c, k0_c, eps_c, log_w_c = jax.lax.stop_gradient((t, shape.k0, eps, log_w))
    tc = jnp.maximum(t_c, 1e-300)
    log_b = tc * (jnp.log(tc) - jnp.log1p(tc)) - jnp.log1p(tc)
    w1 = jnp.where(single, log_w_c, -jnp.inf)
    reach = jnp.max(jnp.maximum(w1 + k0_c - t_c * eps_c + log_b, w1 + first))
    rest = jax.nn.logsumexp(jnp.where(single, -jnp.inf, log_w_c + first))
    one_needed = jnp.any(single) & ~(reach < rest - ONE_JUMP_SKIP)
    proto = jax.eval_shape(one_rows_fn)
    one_rows, one_aux = jax.lax.cond(
        one_needed,
        one_rows_fn,
        lambda: (
            _Rows.stand_in(proto[0].k0.shape[0]),
            zeros_of(proto[1]),
        ),
    )
    size = n.shape[0]
    terms = _rows_log_terms(_Rows.concat(count_rows, bulk_rows, one_rows))
    first, second = terms[0][:size], terms[1][:size]
    w0 = jnp.where(jnp.isfinite(log_w[0]), log_w[0], 0.0)
    first = first.at[0].set(jnp.where(bulk_needed, terms[0][size] - w0, first[0]))
    second = second.at[0].set(jnp.where(bulk_needed, terms[1][size] - w0, second[0]))
    one = one_finish(one_aux, terms[0][size + 1 :], terms[1][size + 1 :])
    neg = jnp.full((), _LOG_ZERO, jnp.result_type(first))
    one = tuple(jnp.where(one_needed, v, neg) for v in one)
    first = jnp.where(single, one[0], first)
    second = jnp.where(single, one[1], second)
    if many_jumps is not None:
        flag, many_fn = many_jumps
        needed = jax.lax.stop_gradient(flag & (jnp.abs(n[1] - n[0]) == 1) & (shape.jumps > 0))
        neg = jnp.full((GRID_COUNTS - 1,), _LOG_ZERO, jnp.result_type(first))
        many = jax.lax.cond(needed, many_fn, lambda: (neg, neg))
        grid = needed & (n >= 2) & (n <= GRID_COUNTS)
        idx = jnp.clip(n - 2, 0, GRID_COUNTS - 2).astype(jnp.int32)
        first = jnp.where(grid, many[0][idx], first)
        second = jnp.where(grid, many[1][idx], second)
    out = [jnp.minimum(jax.nn.logsumexp(log_w + v), 0.0) for v in (first, second)]
    return out[0], out[1]


def _step_bulk(mech, direction, tau, eps, split=SPLIT, at=None, point=None, steps=1.0):
    """``(log mass, k1..k4)`` of one step's bulk (the law below the split point, sigmoid-weighted) tilted by
    ``e^{tau L}``: its mass un-normalised (``log E[e^{tau L} b(L)]``), its cumulants normalised."""
    if not isinstance(mech, MixtureMechanism):
        return mech.cgf(tau, direction), _jvp_cumulants(mech, direction, tau)
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


def _log_delta_at(comp, direction, t, eps, split=SPLIT):
    shape = split_shape(comp, direction, t, eps, split)
    # (several parts: each part's one-jump rows are summed inside a scan over the parts, so the terms come back
    # evaluated, with no rows of their own)
    one_jump = (
        lambda: (_Rows.stand_in(0), _one_jump_terms(comp, direction, shape, t, eps, split)),
        lambda aux, first, second: aux,
    )
    return shape, log_delta_split(shape, t, eps, one_jump, lambda tau: bulk_shape(comp, direction, tau, eps, split, t))


def _single_part(comp):
    """``(mechanism, count)`` of a composition of one mixture part that is not a stack, else ``None``."""
    if len(comp.mechanisms) == 1 and isinstance(comp.mechanisms[0], MixtureMechanism):
        if not is_stacked(comp.counts[0]):
            return comp.mechanisms[0], jnp.asarray(comp.counts[0], jnp.float64)
    return None


def _nodes_eps(nd: _TiltedNodes, n, t):
    """The saddle-point curve's ``eps(t) = K'(t) - 1/t - 1/(1+t)`` for ``n`` steps, from one step's nodes."""
    return n * jnp.sum(jnp.exp(nd.log_w) * nd.ell) - 1.0 / t - 1.0 / (1.0 + t)


def _fused_at(mech, n, direction, t, eps=None, split=SPLIT, nodes=None):
    """``(eps, shape, (first, second))`` of ``n`` steps of one mixture at tilt ``t`` from ONE node set: the
    composed ``K(t)``, ``K'(t)`` (for ``eps = None``, the point ``eps(t) = K'(t) - 1/t - 1/(1+t)`` of the
    saddle-point curve), the split cumulants and the one-jump term (:func:`_log_delta_at` builds the
    node set three times: the split, the one-jump term, and ``K``)."""
    t = jnp.asarray(t, jnp.float64)
    nd = _tilted_nodes(mech, direction, t) if nodes is None else nodes
    if eps is None:
        eps = _nodes_eps(nd, n, t)
    point = _split_point_of(nd, eps, split, n)
    step = (nd.has_jumps, nd.ell, nd.log_w, *_split_logs(nd, eps, split, point))
    pj, bulk, jump = _split_cumulants(*step)
    lam = n * pj
    shape = SplitShape(n * nd.log_m, n, lam, n * bulk, jnp.where(lam > 0, jump - bulk, 0.0))
    use = nd.has_jumps & (n > 0)

    def one_jump_finish(aux, first, second):
        one = _one_jump_finish(aux, first, second)
        log_lam = jnp.log(jnp.where(lam > 0, lam, 1.0))
        return one[0] - log_lam, one[1] - log_lam

    one_jump = (lambda: _one_jump_rows(step, shape, t, eps, n, use, _one_bump(mech)), one_jump_finish)

    def bulk_term(tau):
        log_mass, kappa = _step_bulk(mech, direction, tau, eps, split, point=point)
        return n * log_mass, n * kappa

    many_jumps = None
    if not _one_bump(mech):
        # (the grid starts at 0: used where the split point is positive, the jumps' sigmoid e^{-32} below 0;
        # not for a law with one non-zero sensitivity padded with zero-weight components: its one bump is
        # the Edgeworth expansion's, as without the padding)
        flag = use & (point > 0) & ~jax.lax.stop_gradient(_one_bump_traced(mech))
        many_jumps = (flag, lambda: _many_jump_part(step, shape, t, eps))

    terms = log_delta_split(shape, t, eps, one_jump, bulk_term, many_jumps)
    return eps, shape, terms


#: nodes per window of the rule of the cumulants where no step can jump (no sigmoid to resolve)
NOJUMP_NODES = 64


def _nojump_cumulants(comp, direction, t):
    """``(K(t), k1..k4)`` of the composed tilted loss where no step can jump (no split)."""
    t = jnp.asarray(t, jnp.float64)

    def body(acc, m, n):
        k0, kap = acc
        if isinstance(m, MixtureMechanism):
            nd = _tilted_nodes(m, direction, t, NOJUMP_NODES)
            k0m, (_, km) = nd.log_m, _node_cumulants(nd.log_w, nd.ell)
        else:
            k0m, km = m.cgf(t, direction), _jvp_cumulants(m, direction, t)
        return k0 + n * k0m, kap + n * km

    return scan_parts(comp, body, (jnp.zeros(()), jnp.zeros(4)))


def _nojump_terms(k0, kappa, t, eps):
    first, second = _log_terms(k0, kappa, t, eps)
    return jnp.minimum(first, 0.0), jnp.minimum(second, 0.0)


def _by_jumps(comp, direction, split_fn, nojump_fn, *args):
    """``split_fn(comp, direction, *args)`` where steps can jump, ``nojump_fn(comp, direction, *args)`` where
    none can (no mixture part, or the static direction ``"add"``).

    A traced direction (the entry points' scan over the two directions) takes the split for both: under
    ``"add"`` no step jumps, the split's jump terms are masked and its bulk is the whole law, so its terms are
    the no-jump path's (on a finer rule).  A ``lax.cond`` between the two would compile both paths into every
    program and its gradient, for a small saving on add-direction queries (docs/accountants/saddlepoint.md)."""
    if not any(isinstance(m, MixtureMechanism) for m in comp.mechanisms):
        return nojump_fn(comp, direction, *args)
    flag = is_add(direction)
    if isinstance(flag, bool) and flag:
        return nojump_fn(comp, "add", *args)
    return split_fn(comp, direction, *args)


class SplitTerms(NamedTuple):
    """The saddle-point estimate at one epsilon, one direction (float64; deltas in log space).

    Attributes:
      saddle_point: ``t*``.
      log_delta: the estimate (bulk/jump mixture with the skewness term).
      log_delta_plain: the one-Gaussian ``delta_2`` of Alghamdi et al.
      expected_jumps: ``T p_J``, the tilted mean number of steps in the jump regime.
      error_indicator: the larger of the second-order Edgeworth terms' effect and the effect of moving the
        split point, on epsilon, relative (``|Delta log delta| / (t* eps)``); above 0.01 the estimate is not
        to be trusted.
    """

    saddle_point: jax.Array
    log_delta: jax.Array
    log_delta_plain: jax.Array
    expected_jumps: jax.Array
    error_indicator: jax.Array


def _split_terms_at(comp, direction, t, eps, split=SPLIT, nodes=None):
    """``(expected jumps, (first, second))`` at tilt ``t`` and ``eps`` (``nodes``: the node set of a single
    part, when the caller has it)."""
    single = _single_part(comp)
    if single is not None:
        _, shape, terms = _fused_at(*single, direction, t, eps, split, nodes=nodes)
    else:
        shape, terms = _log_delta_at(comp, direction, t, eps, split)
    return shape.jumps, terms


def _nojump_terms_at(comp, direction, t, eps):
    return jnp.zeros(()), _nojump_terms(*_nojump_cumulants(comp, direction, t), t, eps)


def _split_terms_and_spread(comp, direction, t, eps):
    """:func:`_split_terms_at` and the largest change of its ``log delta`` under the other split points
    (:data:`SPLIT_VARIANTS`)."""
    single = _single_part(comp)
    # a single part: one node set for all the split points (it does not depend on them)
    nodes = None if single is None else _tilted_nodes(single[0], direction, jnp.asarray(t, jnp.float64))
    jumps, terms = _split_terms_at(comp, direction, t, eps, nodes=nodes)
    others = jnp.stack([_split_terms_at(comp, direction, t, eps, v, nodes)[1][0] for v in SPLIT_VARIANTS])
    spread = jnp.max(jnp.abs(others - terms[0]))
    # one to three steps of one mixture: exact (both orders the same value, and no split point to move)
    terms, few = _with_few_steps_terms(comp, direction, t, eps, terms)
    return jumps, terms, jnp.where(few, 0.0, spread)


def _nojump_terms_and_spread(comp, direction, t, eps):
    return (*_nojump_terms_at(comp, direction, t, eps), jnp.zeros(()))


def split_terms(comp, direction, epsilon, log_delta_plain) -> SplitTerms:
    """The estimate at ``epsilon`` and its error indicator: the larger of the second-order Edgeworth terms'
    effect and the effect of moving the split point (to any of :data:`SPLIT_VARIANTS`: the construction
    does not single one out, so an estimate that depends on it is not to be trusted), on epsilon,
    relative."""
    t = saddle_point(comp, direction, epsilon)
    jumps, (first, second), spread = _by_jumps(
        comp, direction, _split_terms_and_spread, _nojump_terms_and_spread, t, epsilon
    )
    ind = jnp.maximum(jnp.abs(second - first), spread) / jnp.maximum(t * jnp.abs(epsilon), 1e-300)
    ind = jnp.where(jnp.isnan(ind), jnp.inf, ind)
    return SplitTerms(t, first, log_delta_plain(comp, direction, epsilon), jumps, ind)


def log_delta_estimate(comp, direction, epsilon):
    """``log delta(eps)`` (estimate)."""
    from jaxdp.accountants._saddlepoint import pure_dp_log_delta  # (that module registers this one)

    # delta is exactly 0 from the largest loss on (a loss bounded above: add, with a zero-sensitivity part);
    # there the estimate is evaluated at a harmless stand-in (halfway to L_max), so that no NaN reaches the
    # gradient through the unused branch
    beyond = jax.lax.stop_gradient(pure_dp_log_delta(comp, direction, epsilon) == -jnp.inf)
    l_max = jax.lax.stop_gradient(comp.max_privacy_loss(direction))
    eps = jnp.where(beyond, 0.5 * jnp.where(jnp.isfinite(l_max), l_max, 1.0), epsilon)
    t = saddle_point(comp, direction, eps)

    def split(c, d, t_, e):
        jumps, terms = _split_terms_at(c, d, t_, e)
        return jumps, _with_few_steps_terms(c, d, t_, e, terms)[0]

    out = _by_jumps(comp, direction, split, _nojump_terms_at, t, eps)[1][0]
    return jnp.where(beyond, -jnp.inf, out)


#: the phases of the estimate's solve, one traced iteration (a ``lax.scan`` over them): ``delta_2``'s root (cheap;
#: it starts the next), the estimate's root, and one evaluation of ``eps`` at that root
START, ESTIMATE, ANSWER = 0, 1, 2
#: per phase: the iteration's tolerance in log delta, that of a last step taken unevaluated, and the number of
#: evaluations (the start is solved tightly, though only a start: a loose one, reached by a path that rounding in a
#: batched evaluation can change, moved the estimate's answer within its own tolerance, 1e-8, under ``vmap``)
PHASE_TOL = (1e-11, LOG_DELTA_TOL, LOG_DELTA_TOL)
PHASE_PREDICTED_TOL = (1e-11, CURVE_PREDICTED_TOL, CURVE_PREDICTED_TOL)
PHASE_EVALUATIONS = (CURVE_MAX_ITERATIONS, CURVE_MAX_ITERATIONS, 1)


def _by_phase(phase, estimate, other):
    """``estimate()`` in the phase :data:`ESTIMATE`, else ``other()``: a ``lax.cond`` on a traced phase, the one
    branch on a Python one (the derivatives' rules: ``lax.cond`` would trace, and differentiate, both)."""
    if isinstance(phase, int):
        return estimate() if phase == ESTIMATE else other()
    return jax.lax.cond(phase == ESTIMATE, estimate, other)


def _start_level(k0, k1, k2, k3, t):
    """``(d eps / d log t, log delta_2, d log delta_2 / d log t)`` at the saddle-point curve's point of tilt ``t``
    from the composed cumulant generating function and its first three derivatives at ``t``."""
    eps = k1 - 1.0 / t - 1.0 / (1.0 + t)
    deps = curve_slope(t, k2)
    log_d2, d_log_d2 = jax.jvp(lambda *a: log_deltas(*a)[0], (k0, k1, k2, t, eps), (t * k1, t * k2, t * k3, t, deps))
    return deps, log_d2, d_log_d2


def _split_phase_point(comp, direction, t, phase):
    """``(eps(t), d eps / d log t, log delta, d log delta / d log t)`` at the saddle-point curve's point of tilt
    ``t``: in the phases other than :data:`ESTIMATE`, ``delta_2`` (and its slope, for Newton's step), in that one
    the split estimate (its slope NaN: secant steps); a ``lax.cond`` on the phase, unbatched under a user's
    ``vmap``, one node set for both."""
    nan = jnp.full_like(jnp.asarray(t, jnp.float64), jnp.nan)
    single = _single_part(comp)
    if single is None:
        eps, deps = jax.jvp(lambda u: eps_on_curve(comp, direction, jnp.exp(u)), (jnp.log(t),), (jnp.ones_like(t),))

        def start():
            u = jnp.log(t)
            return jax.jvp(lambda v: log_delta2_on_curve(comp, direction, jnp.exp(v)), (u,), (jnp.ones_like(u),))

        level, d_level = _by_phase(phase, lambda: (_log_delta_at(comp, direction, t, eps)[1][0], nan), start)
        return eps, deps, level, d_level
    mech, n = single
    t = jnp.asarray(t, jnp.float64)
    nd = _tilted_nodes(mech, direction, t)
    w = jnp.exp(nd.log_w)
    k1 = jnp.sum(w * nd.ell)
    eps = n * k1 - 1.0 / t - 1.0 / (1.0 + t)

    def start():
        centred = nd.ell - k1
        k2, k3 = jnp.sum(w * centred**2), jnp.sum(w * centred**3)
        return _start_level(n * nd.log_m, n * k1, n * k2, n * k3, t)

    def estimate():
        _, shape, terms = _fused_at(mech, n, direction, t, eps, nodes=nd)
        k2s = shape.bulk[1] + shape.jumps * shape.swap[1]  # (not the composed K'': only a step size depends on it)
        k2s = k2s + shape.jumps * (1.0 - shape.jumps / shape.steps) * shape.swap[0] ** 2
        return curve_slope(t, k2s), terms[0], nan

    deps, level, d_level = _by_phase(phase, estimate, start)
    return eps, deps, level, d_level


def _nojump_phase_point(comp, direction, t, phase):
    """:func:`_split_phase_point` where no step can jump (no split)."""
    k0, kappa = _nojump_cumulants(comp, direction, t)
    eps = kappa[0] - 1.0 / t - 1.0 / (1.0 + t)
    deps, level, d_level = _by_phase(
        phase,
        lambda: (curve_slope(t, kappa[1]), _nojump_terms(k0, kappa, t, eps)[0], jnp.full_like(eps, jnp.nan)),
        lambda: _start_level(k0, kappa[0], kappa[1], kappa[2], t),
    )
    return eps, deps, level, d_level


def _epsilon_on_curve(comp, direction, log_delta, point):
    """epsilon with ``point``'s estimated ``delta(eps) = delta`` along the saddle-point curve ``eps(t) = K'(t) - 1/t -
    1/(1+t)`` (``t`` is the saddle point of ``eps(t)``, so no inner solve is needed), and ``log t`` there.

    One iteration (:func:`~jaxdp.accountants._cgf.iterate_on_curve`), traced once, runs the three phases (a
    ``lax.scan``): ``delta_2``'s root (cheap) starts the estimate's, and one more evaluation gives ``eps`` at the
    estimate's root.  The derivatives (implicit function theorem at the root, the curve's ``eps`` there) are traced
    only where one is asked for.
    """
    comp_c, log_delta_c = jax.lax.stop_gradient((comp, log_delta))
    u0 = guess_log_t_for_delta(comp_c, log_delta_c)
    lo, hi = log_t_bracket(u0)

    # a traced direction (the entry points' scan over the two) is an operand, not a closure: the iteration's
    # evaluations are a ``sparse_cond``, whose batching rule must see every tracer it depends on
    direction_op = None if isinstance(direction, str) else direction

    def at(ops, t):
        c, d, phase = ops
        return (*point(c, direction if d is None else d, t, phase), None)

    def phase_step(u, xs):
        phase, tol, predicted_tol, evaluations = xs
        u_new, _, (eps, _) = iterate_on_curve(
            at,
            (comp_c, direction_op, phase),
            log_delta_c,
            lo,
            hi,
            u,
            max_jump=2.0,
            tol=tol,
            max_iterations=evaluations,
            predicted_tol=predicted_tol,
        )
        # (the start's root, where it failed, is the Gaussian guess; the answer's phase only evaluates)
        u_new = jnp.where(phase == START, jnp.where(jnp.isfinite(u_new), u_new, u0), u_new)
        return jnp.where(phase == ANSWER, u, u_new), eps

    phases = (jnp.arange(3), *map(jnp.asarray, (PHASE_TOL, PHASE_PREDICTED_TOL, PHASE_EVALUATIONS)))
    u, eps = jax.lax.scan(phase_step, u0, phases)

    def g(v):  # decreasing in v = log t (far past the root delta can underflow to 0: a finite stand-in), and the
        # curve's eps there (every phase's, ANSWER's too): one evaluation, linearised once where a derivative is asked
        eps_v, _, level, _ = point(comp, direction, jnp.exp(v), ESTIMATE)
        return jnp.maximum(level, -1e8) - log_delta, eps_v

    u, eps = root_and_value_found_elsewhere(g, jnp.where(jnp.isfinite(u), u, u0), eps[ANSWER], lo, hi)
    return jnp.maximum(eps, 0.0), u


def epsilon_estimate(comp, direction, log_delta):
    """epsilon with estimated ``delta(eps) = delta`` (see :func:`_epsilon_on_curve`)."""

    def split(c, d, ld):
        eps, u = _epsilon_on_curve(c, d, ld, _split_phase_point)
        return _with_few_steps_epsilon(c, d, ld, eps, u)

    return _by_jumps(
        comp,
        direction,
        split,
        lambda c, d, ld: _epsilon_on_curve(c, d, ld, _nojump_phase_point)[0],
        log_delta,
    )
