"""The bulk/jump-split saddle-point estimate: ``method="saddlepoint"`` (``delta_2`` alone is ``"delta2"``).

At small sampling rates the tilted step law ``P(x) e^{t* L(x)} / M(t*)`` at the saddle point ``t*`` has
a heavy right shoulder or a second mode: the outputs where the privacy loss is in its linear regime
(the sensitivity terms of ``R(x) = P/Q`` outweigh the zero-sensitivity term ``p_0``).  Under the tilt only
a fraction ``p_J`` of the steps land there ("jumps", each adding a loss of several units) and
``T p_J`` is of order 0.01-1, so the composed tilted law is a Binomial mixture over the number of jumps,
not one Gaussian: the one-Gaussian formula ``delta_2`` reads ``K''(t*)`` inflated by the rare jumps and is
far off there, in epsilon and more so in delta, at ``q`` of 1e-4 to 1e-3
(``benchmarks/results/saddlepoint_accuracy.md``).

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


The package's rooms, in dependency order: ``_edgeworth`` (closed-form Edgeworth expectations), ``_shape`` (the
split and its cumulants), ``_jumps`` (one and many jumps), ``_few`` (the few-steps path), ``_estimate`` (log
delta) and ``_solve`` (epsilon).
"""

from jaxdp.accountants._registry import CompileHints, MethodInfo
from jaxdp.accountants._split_saddle._estimate import SplitTerms, log_delta_estimate, split_terms
from jaxdp.accountants._split_saddle._shape import NUM_COUNTS, SPLIT, SplitShape, bulk_shape, split_shape
from jaxdp.accountants._split_saddle._solve import epsilon_estimate

__all__ = [
    "HINTS",
    "METHODS",
    "NUM_COUNTS",
    "SPLIT",
    "SplitShape",
    "SplitTerms",
    "bulk_shape",
    "epsilon_estimate",
    "log_delta_estimate",
    "split_shape",
    "split_terms",
]

_SADDLEPOINT = MethodInfo(
    "saddlepoint",
    certified=False,
    description="saddle-point estimate with the bulk/jump split (estimate; O(1) in the number of steps)",
    log_delta=log_delta_estimate,
    epsilon=epsilon_estimate,
)
METHODS = (_SADDLEPOINT,)

#: how the entry points may compile these (see :class:`~jaxdp.accountants._registry.CompileHints`): the XLA options
#: that shorten the compile of chains of special functions
HINTS = {info.name: CompileHints(quick_compile=True) for info in METHODS}
