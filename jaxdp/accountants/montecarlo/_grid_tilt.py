"""Privacy-loss tilts of one step tabulated on equal cells, with exact densities and O(1) draws by the alias
method: the every-step proposals of the online curve (:mod:`._online`)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxdp.accountants.montecarlo import _proposals as prop_mod
from jaxdp.numerics import argmax

#: equal cells of a tabulated loss tilt, and the fine grid its range and the saddle points are found on
GRID_CELLS = 4096
_FINE = 16384


class GridTilts(NamedTuple):
    """Privacy-loss tilts ``P_t(x) ~ P(x) e^{t L(x)}``, one row per tilt, each tabulated as a piecewise-constant
    density on ``GRID_CELLS`` equal cells of ``[lo, lo + GRID_CELLS dx]`` with exponential tails.  Its density at
    any ``x`` is one look-up (so every path's density under every tilt is cheap, and exact for the tabulated law,
    which is the proposal); it is sampled in O(1) by the alias method over the cells and the two tails."""

    lo: jax.Array  # (G,)
    dx: jax.Array  # (G,)
    log_cell: jax.Array  # (G, N) log probability of each cell
    log_tail: jax.Array  # (G, 2) log probability of the left and right tails
    rate: jax.Array  # (G, 2) their exponential rates
    keep: jax.Array  # (G, N + 2) alias method: probability of keeping outcome j (cells, left tail, right tail)
    alias: jax.Array  # (G, N + 2) and the outcome taken otherwise


def _alias_table(p):
    """Vose's alias method for the probabilities ``p`` (summing to 1): ``(keep, alias)``."""
    m = p.shape[0]
    scaled = p * m
    small = scaled < 1.0
    order = jnp.argsort(~small, stable=True)  # small outcomes first
    n_small = jnp.sum(small)
    # two stacks in one array: smalls at [0, n_small), larges at [n_small, m); pop from the ends
    stack_s = jnp.where(jnp.arange(m) < n_small, order, 0)
    stack_l = jnp.where(jnp.arange(m) >= n_small, order, 0)

    def body(_, state):
        scaled, keep, alias, stack_s, ns, stack_l, nl = state
        active = (ns > 0) & (nl > n_small)
        s = stack_s[jnp.maximum(ns - 1, 0)]
        big = stack_l[jnp.maximum(nl - 1, 0)]
        keep = keep.at[s].set(jnp.where(active, scaled[s], keep[s]))
        alias = alias.at[s].set(jnp.where(active, big, alias[s]))
        rest = scaled[big] + scaled[s] - 1.0
        scaled = scaled.at[big].set(jnp.where(active, rest, scaled[big]))
        ns = jnp.where(active, ns - 1, ns)
        moves = active & (rest < 1.0)  # the large one became small: to the small stack
        stack_s = stack_s.at[ns].set(jnp.where(moves, big, stack_s[ns]))
        ns = jnp.where(moves, ns + 1, ns)
        nl = jnp.where(moves, nl - 1, nl)
        return scaled, keep, alias, stack_s, ns, stack_l, nl

    init = (scaled, jnp.ones(m), jnp.arange(m), stack_s, n_small, stack_l, jnp.asarray(m))
    _, keep, alias, *_ = jax.lax.fori_loop(0, m, body, init)
    return jnp.clip(keep, 0.0, 1.0), alias.astype(jnp.int32)


def _grid_tilt(law, t):
    """One row of :class:`GridTilts` for the loss tilt ``t``."""
    lo0, hi0 = law.loss_tilt_window(t)

    def log_dens(x):
        v = law.log_density(x) + t * law.loss(x)
        return jnp.where(jnp.isfinite(v), v, -jnp.inf)

    fine = lo0 + (hi0 - lo0) * jnp.arange(_FINE + 1) / _FINE
    ld = log_dens(fine)
    keep = ld > jnp.max(ld) - 45.0
    i_lo = argmax(keep.astype(jnp.int32))
    i_hi = _FINE - argmax(keep[::-1].astype(jnp.int32))
    h = (hi0 - lo0) / _FINE
    lo = fine[jnp.maximum(i_lo - 1, 0)]
    hi = fine[jnp.minimum(i_hi + 1, _FINE)]
    dx = (hi - lo) / GRID_CELLS
    mid = lo + dx * (jnp.arange(GRID_CELLS) + 0.5)
    ref = jnp.max(ld)
    at = log_dens(jnp.concatenate([mid, jnp.stack([lo, lo + h, hi - h, hi])]))
    cell = jnp.exp(at[:GRID_CELLS] - ref) * dx
    # tails continue the edge density with the edge's log-slope (at least 1 / width)
    e_lo, e_lo2, e_hi2, e_hi = at[GRID_CELLS], at[GRID_CELLS + 1], at[GRID_CELLS + 2], at[GRID_CELLS + 3]
    floor = 1.0 / (hi - lo)
    rate = jnp.maximum(jnp.nan_to_num(jnp.stack([e_lo2 - e_lo, e_hi2 - e_hi]) / h, nan=floor), floor)
    edge = jnp.exp(jnp.stack([e_lo, e_hi]) - ref)
    tail = jnp.maximum(edge / rate, 1e-300)
    total = jnp.sum(cell) + jnp.sum(tail)
    cell, tail = cell / total, tail / total
    keep_p, alias = _alias_table(jnp.concatenate([cell, tail]))
    return GridTilts(lo, dx, jnp.log(jnp.maximum(cell, 1e-300)), jnp.log(tail), rate, keep_p, alias)


def grid_tilts(law, ts):
    return jax.lax.stop_gradient(jax.vmap(lambda t: _grid_tilt(law, t))(ts))


def _grid_draw(tab, row, key, shape):
    """Outputs from row ``row`` (one per output) of ``tab``: an alias-method draw of the cell (or tail), then a
    uniform place in the cell (an exponential distance in a tail), all from one 53-bit uniform."""
    m = GRID_CELLS + 2
    um = prop_mod.uniform(key, shape) * m
    j = jnp.minimum(jnp.floor(um).astype(jnp.int32), m - 1)
    r = um - j
    flat = row * m + j
    keep = tab.keep.reshape(-1)[flat]
    stay = r < keep
    out = jnp.where(stay, j, tab.alias.reshape(-1)[flat])
    v = jnp.where(stay, r / jnp.maximum(keep, 1e-300), (r - keep) / jnp.maximum(1.0 - keep, 1e-300))
    v = jnp.clip(v, 0.0, 1.0 - 1e-16)
    lo_g, dx = tab.lo[row], tab.dx[row]
    e = -jnp.log1p(-v)
    x_l = lo_g - e / tab.rate[row, 0]
    x_r = lo_g + dx * GRID_CELLS + e / tab.rate[row, 1]
    x_in = lo_g + dx * (jnp.minimum(out, GRID_CELLS - 1) + v)
    return jnp.where(out < GRID_CELLS, x_in, jnp.where(out == GRID_CELLS, x_l, x_r))


def _grid_log_density(tab, x):
    """``(G, n)``: the log density of every row of ``tab`` at each ``x`` (one look-up per row; the tails are linear
    in ``x``)."""
    n_cells = GRID_CELLS
    inv_dx = 1.0 / tab.dx
    cell = tab.log_cell - jnp.log(tab.dx)[:, None]
    # log density in the tails, linear in pos = (x - lo) / dx: a + b pos
    log_rate = jnp.log(tab.rate)
    a_l, b_l = tab.log_tail[:, 0] + log_rate[:, 0], tab.rate[:, 0] * tab.dx
    a_r, b_r = tab.log_tail[:, 1] + log_rate[:, 1] + tab.rate[:, 1] * tab.dx * n_cells, -tab.rate[:, 1] * tab.dx
    rows = []
    for g in range(tab.lo.shape[0]):
        pos = (x - tab.lo[g]) * inv_dx[g]
        inner = cell[g][jnp.clip(pos, 0, n_cells - 1).astype(jnp.int32)]
        left = pos < 0
        tail = jnp.where(left, a_l[g], a_r[g]) + jnp.where(left, b_l[g], b_r[g]) * pos
        rows.append(jnp.where(left | (pos >= n_cells), tail, inner))
    return jnp.stack(rows)
