"""The certified accountant: pessimistic lattice privacy-loss distributions composed by FFT in the
tilted domain.  What it bounds and how: ``docs/accountants/certified.md``."""

from jaxdp.accountants.certified._search import (
    FAST_GRID,
    HINTS,
    METHODS,
    CertifiedResult,
    certified_terms,
    epsilon_certified,
    log_delta_certified,
)

__all__ = [
    "FAST_GRID",
    "HINTS",
    "METHODS",
    "CertifiedResult",
    "certified_terms",
    "epsilon_certified",
    "log_delta_certified",
]
