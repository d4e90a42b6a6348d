"""Online accounting: epsilon(delta) after every step ``k = 1..K`` from one sample set, in one jitted call.

Each of ``num_samples`` sample paths draws its ``K`` steps from a proposal and keeps its running loss
``L_k`` and what its importance weight needs; the prefix of a path is a valid importance sample of the
``k``-step composition, so one set of paths gives the whole curve.

One tilt cannot serve every step: tilting every step at the saddle point of step ``K`` leaves the events
that make up an early step's delta out of reach, and the estimate there is far too small with a far too
small standard error; and where delta comes
from one large step (the Poisson-subsampled Gaussian at small ``q``) no every-step tilt is right at
all (the saddle point itself is then far off).  ``"tilted"`` therefore samples from a *mixture* of
proposals and weights every path by the mixture's density at every step (multiple importance sampling,
balance heuristic; each component gets a fixed share of the paths)::

    1 / w_k = a_0 [(1 - Pi_k) + sum_{i <= k} pi_i e^{theta_i x_i} / M(theta_i)]
              + sum_g a_g prod_{i <= k} g_g(x_i) / p(x_i)

* component 0, one step tilted (Wang et al. 2023, Def. 16, made online): the tilted step ``J`` is drawn
  with probability ``pi_J ~ 1/J`` (every scale of ``k`` gets a like share) and drawn from its exponential
  tilt in the output whose mean loss is one step's epsilon at ``delta / J`` (delta made of one large
  step); the other steps from ``P``;
* components ``g = 1..G``, every step tilted: every step drawn from the privacy-loss tilt ``g_g ~ p e^{t L}``
  at the saddle point of ``b_g`` steps, ``b_g = K, ..., 10, 1`` at most a factor ``ANCHOR_RATIO`` apart
  (delta made of many small steps), tabulated on equal cells (``_grid_tilt.GridTilts``) so that every path's
  density under every tilt is one look-up.

Every path counts at every step, and its weight is at most ``1 / a_c`` times any one component's, so a
step's estimate is about as good as the best component's alone with its share of the paths.  After each
step epsilon is the root of the estimated ``log delta(eps)`` (bracketed Newton from the previous step's
epsilon, to convergence); its standard error is delta's (stratified by component) over the slope of
delta at the root (the delta method), and the interval inverts delta's normal interval with
``log delta`` linear in epsilon.  A step whose estimate rests on fewer than ``MIN_EFFECTIVE`` effective
paths beyond epsilon (``(sum f)^2 / sum f^2``) is refused: NaN, with ``refused`` set.
"""

from __future__ import annotations

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.accountants import _cgf
from jaxdp.accountants.montecarlo import _engine
from jaxdp.accountants.montecarlo import _proposals as prop_mod
from jaxdp.accountants.montecarlo._estimate import _check_common, _z, parts_of
from jaxdp.accountants.montecarlo._grid_tilt import (
    _FINE,
    _grid_draw,
    _grid_log_density,
    grid_tilts,
)
from jaxdp.mechanisms import LaplaceLaw
from jaxdp.numerics import bracketed_log_newton, float64_entry, logsumexp, pytree_dataclass
from jaxdp.numerics import validate as _validate

__all__ = ["OnlineCurve", "online_epsilon"]

MAX_SOLVE = 60
#: the largest ratio between neighbouring anchors of the every-step tilts (step counts ``K, ..., 1``)
ANCHOR_RATIO = 10
#: share of the paths of the one-step-tilted component (the rest shared by the every-step tilts)
ONE_SHARE = 1.0 / 3.0
#: fewer effective paths than this beyond epsilon (``(sum f)^2 / sum f^2``) and the step is refused
MIN_EFFECTIVE = 20.0
#: x grid and epsilon grid of the single-step delta curve (the one-step tilts' targets)
_X_GRID = 8192
_EPS_GRID = 256


@pytree_dataclass(data=("steps", "epsilon", "stderr", "ci_low", "ci_high", "refused"), static=("confidence",))
class OnlineCurve:
    """epsilon(delta) after each step, Monte Carlo estimates (not bounds) with standard errors.

    Attributes:
      steps: ``1..K``.
      epsilon: the estimate after each step (NaN where refused).
      stderr: its standard error (delta's, over the slope of delta(eps): the delta method).
      ci_low, ci_high: the ``confidence`` interval (delta's normal interval, inverted on log delta).
      refused: True where the samples cannot vouch for an estimate (fewer than ``MIN_EFFECTIVE`` effective
        paths beyond epsilon, or no root; for ``add_or_remove``, in either direction unless that direction's
        losses are bounded below the other's interval): those steps are NaN, not a number that may be far
        too small.
      confidence: the interval's level.
    """

    steps: jax.Array
    epsilon: jax.Array
    stderr: jax.Array
    ci_low: jax.Array
    ci_high: jax.Array
    refused: jax.Array
    confidence: float = 0.95


def anchors(max_steps: int) -> tuple[int, ...]:
    """The step counts the every-step tilts are tuned for: from ``K`` down to 1, evenly spaced in ``log k`` at most
    a factor ``ANCHOR_RATIO`` apart (``1000, 100, 10, 1``)."""
    k = int(max_steps)
    if k == 1:
        return (1,)
    g = math.ceil(math.log(k) / math.log(ANCHOR_RATIO) - 1e-9)
    out = [round(k ** (1.0 - i / g)) for i in range(g + 1)]
    return tuple(sorted(set(out), reverse=True))


# -- the tilts ------------------------------------------------------------------------------------
def _jump_epsilons(law, log_delta, ks):
    """``eps_1(delta / k)`` at the step counts ``ks``: epsilon of one step at ``delta / k``, the composition's
    epsilon where delta comes from one large step (a union bound over the steps).  ``log delta_1(eps)`` by a
    Riemann sum over a fine grid of outputs on a log-spaced epsilon grid: a guide for the tilts, not an
    estimate."""
    lo, hi = law.guide_window()
    dx = (hi - lo) / _X_GRID
    x = lo + dx * (jnp.arange(_X_GRID) + 0.5)
    log_p = law.log_density(x) + jnp.log(dx)
    ell = law.loss(x)
    top = jnp.clip(jnp.max(ell), 1e-3, 100.0)
    grid = jnp.concatenate([jnp.zeros(1), top * jnp.geomspace(1e-5, 1.0, _EPS_GRID - 1)])
    ld = jax.vmap(lambda e: logsumexp(log_p + _engine.log_h(ell, e)))(grid)
    ld = jnp.maximum(ld, -1e4) - 1e-9 * jnp.arange(_EPS_GRID)  # strictly decreasing for interp
    return jnp.interp(log_delta - jnp.log(ks), ld[::-1], grid[::-1])


def _loss_cgf(law, t):
    """``(K, K', K'')`` of one step's privacy loss at ``t`` by a Riemann sum over outputs (no quadrature rule to
    compile: a guide for the tilts)."""
    lo, hi = law.loss_tilt_window(t)
    dx = (hi - lo) / _FINE
    x = lo + dx * (jnp.arange(_FINE) + 0.5)
    ell = law.loss(x)
    a = law.log_density(x) + t * ell + jnp.log(dx)
    a = jnp.where(jnp.isfinite(a), a, -jnp.inf)
    k0 = logsumexp(a)
    w = jnp.exp(a - k0)
    k1 = jnp.sum(w * ell)
    return k0, k1, jnp.sum(w * (ell - k1) ** 2)


def _saddle_tilts(law, log_delta, steps):
    """The loss tilts ``t*`` of the saddle-point approximation of ``delta = e^{log_delta}`` after ``steps`` steps
    (:func:`~jaxdp.accountants._cgf.tilt_for_log_delta` on ``steps`` times one step's grid-sum ``K``, within
    ``[1e-4, 1e3]``)."""

    def one(b):
        def k012_at(t):
            k0, k1, k2 = _loss_cgf(law, t)
            return b * k0, b * k1, b * k2

        return _cgf.tilt_for_log_delta(k012_at, log_delta, math.log(1e-4), math.log(1e3), 50)

    return jnp.nan_to_num(jax.vmap(one)(steps), nan=1.0)


def _plan(mech, direction, log_delta, max_steps, estimator):
    """The mixture: ``(theta_one (K,), log_m_one (K,), log_pi (K,), tables (GridTilts, G rows), log_a (1 + G,))``."""
    law = mech.output_law(direction)
    k = max_steps
    js = np.arange(1, k + 1, dtype=np.float64)
    log_pi = jnp.asarray(-np.log(js) - np.log(np.sum(1.0 / js)))
    if estimator == "simple":
        z = jnp.zeros(k)
        return z, z, log_pi, None, jnp.zeros(1)
    # one-step tilts: solved on ~64 log-spaced step counts, interpolated in log k
    knots = np.unique(np.round(np.geomspace(1, k, 64)))
    thetas = jax.vmap(lambda t: prop_mod.solve_theta(law, t))(_jump_epsilons(law, log_delta, jnp.asarray(knots)))
    theta_one = jnp.interp(jnp.log(jnp.asarray(js)), jnp.log(jnp.asarray(knots)), thetas)
    log_m_one = jax.vmap(lambda t: law.log_mgf(t))(theta_one)
    steps = anchors(k)
    tables = grid_tilts(law, _saddle_tilts(law, log_delta, jnp.asarray(steps, jnp.float64)))
    g = len(steps)
    log_a = jnp.asarray([math.log(ONE_SHARE)] + [math.log((1.0 - ONE_SHARE) / g)] * g)
    return jax.lax.stop_gradient(theta_one), jax.lax.stop_gradient(log_m_one), log_pi, tables, log_a


def _counts(num_samples, num_components):
    """Paths per component (deterministic: a stratified mixture): the one-step component ``ONE_SHARE``."""
    if num_components == 1:
        return (num_samples,)
    n0 = round(ONE_SHARE * num_samples)
    rest = num_samples - n0
    g = num_components - 1
    return (n0, *(rest // g + (1 if i < rest % g else 0) for i in range(g)))


def _draw_x_tilt(law, theta, key, shape):
    """Outputs from the exponential tilt ``e^{theta x} P(x) / M(theta)``, ``theta`` one per output."""
    k_choice, k_cont = jax.random.split(key)
    if isinstance(law, LaplaceLaw):
        b = law.b
        right = prop_mod.uniform(k_choice, shape) < 0.5 * (1.0 + b * theta)
        rate = jnp.where(right, 1.0 / b - theta, 1.0 / b + theta)
        return 1.0 + jnp.where(right, 1.0, -1.0) * prop_mod.exponential(k_cont, shape) / rate
    z = prop_mod.normal(k_cont, shape)
    s2 = law.s * law.s
    j = law.c.shape[0]
    if j == 1:
        mean = law.c[0]
    elif j == 2:
        logit = law.log_p[1] - law.log_p[0] + theta * (law.c[1] - law.c[0])
        mean = jnp.where(prop_mod.uniform(k_choice, shape) < jax.nn.sigmoid(logit), law.c[1], law.c[0])
    else:
        logits = law.log_p + theta[..., None] * law.c
        cum = jnp.cumsum(jax.nn.softmax(logits, axis=-1), axis=-1)
        u = prop_mod.uniform(k_choice, shape)
        mean = law.c[jnp.minimum(jnp.sum(cum <= u[..., None], axis=-1), j - 1)]
    return mean + theta * s2 + law.s * z


# -- the estimate at one step ----------------------------------------------------------------------
def _stats(loss, w, v, eps, n):
    """``(S, S', f)`` of ``f = (1 - e^{eps - L})_+ w`` at ``eps >= 0`` (``S`` the mean, ``S'`` its eps-derivative),
    from ``w`` and ``v = w e^{-L}`` (zero where ``L <= 0``): no exponential per sample."""
    above = loss > eps
    e = jnp.where(above, jnp.exp(eps) * v, 0.0)
    f = jnp.where(above, w, 0.0) - e
    return jnp.sum(f) / n, -jnp.sum(e) / n, f


def _solve(loss, w, v, log_delta, start, hi, n):
    """epsilon with ``log S(eps) = log_delta`` on ``[0, hi]`` from ``start`` (``S`` and its slope from one pass over
    the samples)."""
    return bracketed_log_newton(
        lambda x: _stats(loss, w, v, x, n)[:2], log_delta, jnp.zeros(()), hi, start, max_iterations=MAX_SOLVE
    )


def _direction_curve(mech, direction, key, log_delta, z, *, max_steps, estimator, num_samples):
    """``(K, 5)``: epsilon, stderr, ci_low, ci_high, refused (1.0) after each step, one direction."""
    law = mech.output_law(direction)
    theta_one, log_m_one, log_pi, tables, _ = _plan(mech, direction, log_delta, max_steps, estimator)
    simple = tables is None
    g = 0 if simple else tables.lo.shape[0]
    counts = _counts(num_samples, 1 + g)
    n = num_samples
    # the mixture's weights are the components' exact shares of the paths (the deterministic-mixture estimator is
    # unbiased only then; ONE_SHARE and an even split are what the counts round)
    log_a = jnp.log(jnp.asarray(counts, jnp.float64) / n)
    comp_np = np.repeat(np.arange(len(counts)), counts)
    comp = jnp.asarray(comp_np, jnp.int32)
    row = jnp.asarray(np.maximum(comp_np - 1, 0), jnp.int32)
    starts = np.concatenate([[0], np.cumsum(counts)]).tolist()
    n0 = counts[0]
    # one-step component: the tilted step J ~ pi (inverse CDF); other components: J = K (never)
    cdf = jnp.cumsum(jnp.exp(log_pi))
    u = prop_mod.uniform(jax.random.fold_in(key, 1_000_003), (n,))
    pick = jnp.minimum(jnp.searchsorted(cdf, u * cdf[-1], side="right"), max_steps - 1)
    pick = jnp.where(comp == 0, pick, max_steps)
    log_rest = jnp.log(jnp.maximum(1.0 - cdf / cdf[-1], 0.0))  # log (1 - Pi_k)

    def step(carry, k):
        loss, acc, log_s, prev = carry
        kk = jax.random.fold_in(key, k)
        if simple:
            x = _draw_x_tilt(law, jnp.zeros(n), kk, (n,))
            ell = law.loss(x)
            log_w = jnp.zeros(n)
        else:
            k1, k2 = jax.random.split(kk)
            theta = jnp.where(pick[:n0] == k, theta_one[k], 0.0)
            x = jnp.concatenate([_draw_x_tilt(law, theta, k1, (n0,)), _grid_draw(tables, row[n0:], k2, (n - n0,))])
            ell, log_p = law.loss_and_log_density(x)
            acc = acc + _grid_log_density(tables, x) - log_p[None, :]
            log_s = jnp.logaddexp(log_s, log_pi[k] + theta_one[k] * x - log_m_one[k])
            terms = [jnp.logaddexp(log_rest[k], log_s) + log_a[0]] + [acc[i] + log_a[i + 1] for i in range(g)]
            top = functools.reduce(jnp.maximum, terms)
            log_w = -(top + jnp.log(sum(jnp.exp(t_ - top) for t_ in terms)))
        loss = loss + ell
        w = jnp.exp(log_w)
        v = jnp.where(loss > 0, jnp.exp(jnp.where(loss > 0, log_w - loss, 0.0)), 0.0)
        eps = _solve(loss, w, v, log_delta, prev, jnp.maximum(jnp.max(loss), 0.0), n)  # S = 0 beyond max L
        s, ds, f = _stats(loss, w, v, eps, n)
        # stratified variance of the mean: sum_c (n_c / n)^2 var_c / n_c (components are contiguous blocks)
        var_sum, f2_sum = 0.0, 0.0
        for c0, c1 in itertools.pairwise(starts):
            fc = f[c0:c1]
            m1, m2 = jnp.sum(fc), jnp.sum(fc * fc)
            var_sum = var_sum + jnp.maximum(m2 - m1 * m1 / (c1 - c0), 0.0) * (c1 - c0) / max(c1 - c0 - 1, 1)
            f2_sum = f2_sum + m2
        se_s = jnp.sqrt(var_sum) / n
        ess = (s * n) ** 2 / jnp.maximum(f2_sum, 1e-300)
        good = (s > 0) & (ds < 0) & (ess >= MIN_EFFECTIVE) & jnp.isfinite(eps)
        se = se_s / jnp.abs(ds)
        slope = jnp.abs(ds / s)  # of log delta at the root
        r = z * se_s / s
        lo = eps - jnp.log1p(r) / slope
        hi = jnp.where(r < 1.0, eps - jnp.log1p(-jnp.minimum(r, 0.999999)) / slope, jnp.inf)
        out = jnp.stack([eps, se, jnp.maximum(lo, 0.0), hi, 0.0 * eps])
        out = jnp.where(good, out, jnp.asarray([jnp.nan, jnp.nan, jnp.nan, jnp.nan, 1.0]))
        return (loss, acc, log_s, jnp.where(good, eps, prev)), out

    init = (jnp.zeros(n), jnp.zeros((g, n)), jnp.full(n, -jnp.inf), jnp.zeros(()))
    _, out = jax.lax.scan(step, init, jnp.arange(max_steps))
    return out


def _combine(a, b, bound_a, bound_b):
    """The larger epsilon of two directions, step by step.  A refusal in one direction refuses the step unless
    that direction's epsilon cannot exceed the other's interval (its losses are bounded: ``bound``)."""
    ok_a, ok_b = a[:, 4] < 0.5, b[:, 4] < 0.5
    larger = jnp.where((a[:, :1] >= b[:, :1]), a, b)
    only_a = ok_a & ~ok_b & (bound_b <= a[:, 2])
    only_b = ok_b & ~ok_a & (bound_a <= b[:, 2])
    refused = jnp.full_like(a, jnp.nan).at[:, 4].set(1.0)
    out = jnp.where((ok_a & ok_b)[:, None], larger, refused)
    out = jnp.where(only_a[:, None], a, out)
    return jnp.where(only_b[:, None], b, out)


def _online_impl(mech, key_data, log_delta, *, max_steps, directions, estimator, num_samples, z):
    key = jax.random.wrap_key_data(key_data)
    steps = jnp.arange(1, max_steps + 1, dtype=jnp.float64)
    worst, bound = None, None
    for i, d in enumerate(directions):
        out = _direction_curve(
            mech,
            d,
            jax.random.fold_in(key, i),
            log_delta,
            z,
            max_steps=max_steps,
            estimator=estimator,
            num_samples=num_samples,
        )
        b = steps * mech.max_privacy_loss(d)  # L_k <= k max loss: epsilon below it
        if worst is None:
            worst, bound = out, b
        else:
            worst, bound = _combine(worst, out, bound, b), jnp.maximum(bound, b)
    return worst


_online_jit = jax.jit(_online_impl, static_argnames=("max_steps", "directions", "estimator", "num_samples", "z"))


def online_epsilon(
    mechanism,
    *,
    delta,
    max_steps: int,
    key,
    num_samples: int = 100_000,
    estimator: str = "tilted",
    confidence: float = 0.95,
) -> OnlineCurve:
    """epsilon(delta) after every step ``1..max_steps`` of ``mechanism`` from one Monte Carlo sample set.

    What a training loop shows as it runs, in one jitted call: ``num_samples`` sample paths of the
    privacy loss are extended step by step, and epsilon is re-solved after each step.  Estimates, not
    bounds (see :class:`OnlineCurve`): at each step the interval covers the true epsilon with about the
    stated confidence; where the samples cannot vouch for an estimate (too few effective paths beyond
    epsilon) the step is refused, NaN with ``refused`` set.

    ``"tilted"`` samples from a mixture of proposals (one step tilted, for delta made of one large step;
    every step tilted at the saddle points of ``K, ..., 10, 1`` steps, for delta made of many small ones)
    weighted by the mixture's density, so that every step's estimate has a proposal suited to it (the
    module :mod:`jaxdp.accountants.montecarlo._online` says how).  The standard error is delta's over the
    slope of delta(eps) at the estimate (the delta method); the interval is where delta's normal interval
    crosses ``delta`` (``ci_high`` is ``inf`` where delta's relative standard error exceeds ``1 / z``).
    Their coverage at every checkpoint step, over many seeds at the paper's Figure 5 online setting (sigma = 1,
    q = 1e-3, delta = 1e-9, 1000 steps) and at q = 0.01, delta = 1e-5: ``benchmarks/results/online_coverage.md``.

    Args:
      mechanism: one step (a Gaussian, Laplace or mixture-of-Gaussians mechanism).
      delta: in ``(0, 1)``.
      max_steps: ``K``, a whole number ``>= 1``.
      key: a JAX PRNG key.
      num_samples: sample paths.
      estimator: ``"tilted"`` (the mixture above) or ``"simple"`` (paths drawn from ``P``).
      confidence: level of the intervals.

    Example:
      >>> import jax, jaxdp
      >>> c = jaxdp.online_epsilon(jaxdp.Gaussian(10.0), delta=1e-5, max_steps=100, key=jax.random.key(0),
      ...                          num_samples=20_000)
      >>> c.epsilon.shape, bool(abs(float(c.epsilon[-1]) - 4.3659) < 4 * float(c.stderr[-1]))
      ((100,), True)
    """
    key_data = _check_common(key, num_samples, estimator, confidence)
    if estimator not in ("tilted", "simple"):
        raise ValueError(f"online_epsilon's estimator must be 'tilted' or 'simple', got {estimator!r}.")
    _validate.open_unit("delta", delta)
    _validate.num_steps("max_steps", max_steps)
    if not _validate.is_concrete(max_steps):
        raise ValueError("max_steps must be a concrete integer.")
    if hasattr(mechanism, "counts"):
        raise ValueError("online_epsilon takes one step's mechanism, not a Composition.")
    comp, parts = parts_of(mechanism, 1)
    statics = dict(
        max_steps=int(max_steps),
        directions=tuple(str(getattr(d, "value", d)) for d in comp.directions),
        estimator=estimator,
        num_samples=int(num_samples),
        z=_z(confidence),
    )
    return _online_entry(parts[0].mech, key_data, delta, statics, float(confidence))


@functools.partial(float64_entry)
def _online_entry(mech, key_data, delta, statics, confidence):
    out = _online_jit(mech, key_data, jnp.log(jnp.asarray(delta, jnp.float64)), **statics)
    steps = jnp.arange(1, statics["max_steps"] + 1)
    return OnlineCurve(steps, out[:, 0], out[:, 1], out[:, 2], out[:, 3], out[:, 4] > 0.5, confidence)
