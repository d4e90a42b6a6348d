"""The jump terms: one jump summed exactly over the jump law's quadrature nodes, and two to ``GRID_COUNTS`` jumps
of a mixture with several sensitivities (group privacy) summed over a grid of the jumps' convolution powers."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxdp.accountants._split_saddle._edgeworth import _log_gauss_term, _log_terms
from jaxdp.accountants._split_saddle._shape import _LOG_ZERO, SPLIT, _node_cumulants, _one_bump, _step_nodes
from jaxdp.mechanisms import MixtureMechanism, by_direction, is_add
from jaxdp.mechanisms.internal import scan_parts
from jaxdp.numerics import (
    argmax,
    log1mexp,
)

#: floor of the variance of the other steps' bulk in the exact one-jump term (a smoothing far below
#: the spacing of the jump's quadrature nodes; keeps the closed form finite for a single step)
JUMP_BULK_VAR_FLOOR = 1e-10
# the one-jump term's Edgeworth corrections are evaluated on this many of the jump law's nodes
JUMP_TOP = 96
#: the one-jump term sums over 1 / JUMP_WINDOW of the rule's nodes, around the summand's peak
JUMP_WINDOW = 3


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

    A group mixture's tilted jump law has one bump per component, spread over tens of units of loss (for large
    groups its standard deviation exceeds its mean and the target epsilon): an Edgeworth expansion of ``n``
    jumps from their cumulants ``n D`` is off by several units in ``log delta`` there.  Each
    jump's loss is at least the split point's sigmoid (positive: the grid is used where the split point is,
    :func:`_fused_at`), so the sums only grow and truncating the grid at its top drops exactly the sums
    above it.  The jumps are placed on the grid by linear interpolation (the mean of each preserved)."""
    has_jumps, ell, log_w, log_s, log_b = step_nodes
    log_wj = log_w + log_s
    log_pj = jax.nn.logsumexp(log_wj)
    _, b = _node_cumulants(log_w + log_b, ell)
    # the spacing is differentiated through (the binned sum depends on it: held fixed, it would leave that
    # dependence out of the derivative in sigma)
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
