"""The Rényi-DP (moments) method: real orders and the tight conversion.

The curve and its conversion are in :mod:`jaxdp.accountants._bounds` (the certified method uses them as a
fallback); derivation and guarantees: ``docs/accountants/rdp.md``.
"""

from __future__ import annotations

from jaxdp.accountants._bounds import epsilon_rdp, log_delta_rdp
from jaxdp.accountants._registry import MethodInfo

METHODS = (
    MethodInfo(
        "rdp",
        certified=True,
        description="Rényi DP over real orders with the Canonne-Kamath-Steinke conversion",
        log_delta=log_delta_rdp,
        epsilon=epsilon_rdp,
    ),
)
