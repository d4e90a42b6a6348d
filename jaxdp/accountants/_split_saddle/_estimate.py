"""log delta of the split estimate: the sum over counts of jumps, the bulk's own saddle point where the
Edgeworth term is far from it, the fused single-part evaluation, the no-jump path, and the error indicator
(:func:`split_terms`)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxdp.accountants._bounds import pure_dp_log_delta
from jaxdp.accountants._cgf import curve_slope, saddle_point
from jaxdp.accountants._split_saddle._edgeworth import _log_terms
from jaxdp.accountants._split_saddle._few import _with_few_steps_terms
from jaxdp.accountants._split_saddle._jumps import (
    GRID_COUNTS,
    _many_jump_part,
    _one_jump_finish,
    _one_jump_rows,
    _one_jump_terms,
    _Rows,
    _rows_log_terms,
)
from jaxdp.accountants._split_saddle._shape import (
    _LOG_ZERO,
    SPLIT,
    SPLIT_VARIANTS,
    SplitShape,
    _counts,
    _node_cumulants,
    _nodes_eps,
    _one_bump,
    _one_bump_traced,
    _single_part,
    _split_cumulants,
    _split_logs,
    _split_point_of,
    _step_bulk,
    _step_cumulants,
    _tilted_nodes,
    bulk_shape,
    split_shape,
)
from jaxdp.mechanisms import MixtureMechanism, is_add
from jaxdp.mechanisms.internal import scan_parts
from jaxdp.numerics import traced_once, zeros_of

#: the exact one-jump term is skipped where a bound on it is this far (in log) below the other counts' sum
ONE_JUMP_SKIP = 25.0
#: Newton steps (in log t) toward the bulk's own saddle point (:func:`_bulk_saddle_rows`)
BULK_NEWTON_STEPS = 3
#: the count-0 term is re-evaluated at the bulk's saddle point where, at the curve's tilt, its second-order
#: Edgeworth terms move its log by more than this, or the bulk's mean is more than ``BULK_Z_MIN`` standard
#: deviations from that saddle point's equation (and the term matters).  The thresholds separate the rows whose
#: expansion at the curve's tilt is already close (a re-evaluation there would double the bulk's cost for a change
#: within the estimate's error) from those whose term there is several times low (gaps of order one, z far above).
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
    and eps is small, the bulk needs a several times larger tilt to reach eps, and its expansion at ``t``
    underestimates the term by up to an order of magnitude.  A few safeguarded Newton steps in ``log tau`` from
    ``t`` (the term is stationary in ``tau`` there, so they need not converge tightly)."""
    lo = jnp.log(t) - 3.0
    hi = jnp.maximum(jnp.log(t), jnp.log(BULK_TILT_CAP / jnp.maximum(eps, 1e-300)))

    # BULK_NEWTON_STEPS + 1 evaluations in one loop body (the bulk's node set traced once, not twice): the last
    # one's step is not taken, its (log mass, cumulants) are those at the final tilt
    def step(i, carry):
        u, _, _ = carry
        tau = jnp.exp(u)
        log_mass, kappa = bulk_term(tau)
        g = kappa[0] - eps - 1.0 / tau - 1.0 / (1.0 + tau)
        dg = curve_slope(tau, kappa[1])  # (the saddle-point Newton step of _cgf.solve_saddle_point, fused here)
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
    within ``e^{ONE_JUMP_SKIP}`` of the others (the re-evaluation moves it by far less than that margin)."""
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
    # (traced once: the branch not taken needs its shapes)
    one_rows_once, proto = traced_once(one_rows_fn)
    one_rows, one_aux = jax.lax.cond(
        one_needed,
        one_rows_once,
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


def _log_delta_at(comp, direction, t, eps, split=SPLIT):
    shape = split_shape(comp, direction, t, eps, split)
    # (several parts: each part's one-jump rows are summed inside a scan over the parts, so the terms come back
    # evaluated, with no rows of their own)
    one_jump = (
        lambda: (_Rows.stand_in(0), _one_jump_terms(comp, direction, shape, t, eps, split)),
        lambda aux, first, second: aux,
    )
    return shape, log_delta_split(shape, t, eps, one_jump, lambda tau: bulk_shape(comp, direction, tau, eps, split, t))


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
            k0m, km = _step_cumulants(m, direction, t)
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
    # every split point through one traced copy of the estimate (a copy per point would compile each)
    splits = jnp.asarray((SPLIT, *SPLIT_VARIANTS), jnp.float64)
    jumps, terms = jax.lax.map(lambda v: _split_terms_at(comp, direction, t, eps, (v[0], v[1]), nodes), splits)
    others = terms[0][1:]
    jumps, terms = jumps[0], jax.tree.map(lambda x: x[0], terms)
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
