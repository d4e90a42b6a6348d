"""The saddle-point methods (Alghamdi, Gomez, Asoodeh, Calmon, Kosut & Sankar, ICML 2023).

``"delta2"`` is the paper's one-Gaussian approximation ``delta_2`` at the saddle point (the fastest
method; an estimate, far off in epsilon at small q: ``benchmarks/results/saddlepoint_accuracy.md``);
``"delta2-certified"`` is ``delta_2`` plus its proven error bound.  Both are computed in
:mod:`jaxdp.accountants._bounds`, which the other methods share; ``"saddlepoint"`` itself, the bulk/jump-split
estimate, is registered by :mod:`jaxdp.accountants._split_saddle`.

Derivation and guarantees: ``docs/accountants/saddlepoint.md`` (and ``docs/soundness.md``).
"""

from __future__ import annotations

from jaxdp.accountants._bounds import (
    epsilon_saddlepoint,
    epsilon_saddlepoint_upper,
    log_delta_saddlepoint,
    log_delta_saddlepoint_upper,
)
from jaxdp.accountants._registry import CompileHints, MethodInfo

METHODS = (
    MethodInfo(
        "delta2",
        certified=False,
        description="one-Gaussian saddle-point approximation delta_2 (estimate; fastest, 20-200 % off at small q)",
        log_delta=log_delta_saddlepoint,
        epsilon=epsilon_saddlepoint,
    ),
    MethodInfo(
        "delta2-certified",
        certified=True,
        description="saddle-point delta_2 plus its error bound (proven upper bound, see docs)",
        log_delta=log_delta_saddlepoint_upper,
        epsilon=epsilon_saddlepoint_upper,
    ),
)

#: how the entry points may compile these (see :class:`~jaxdp.accountants._registry.CompileHints`): the XLA options
#: that shorten the compile of chains of special functions
HINTS = {info.name: CompileHints(quick_compile=True) for info in METHODS}
