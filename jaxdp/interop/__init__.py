"""Interoperability with other accounting libraries.

dp_accounting (optional, imported on first use): :func:`from_dp_event` converts its ``DpEvent``s to jaxdp
mechanisms and :func:`make_accountant` returns a ``dp_accounting.PrivacyAccountant`` backed by jaxdp.
``_*`` modules are private.
"""

from jaxdp.interop._dp_accounting import UnsupportedEventError as UnsupportedEventError
from jaxdp.interop._dp_accounting import from_dp_event as from_dp_event
from jaxdp.interop._dp_accounting import make_accountant as make_accountant

__all__ = ["UnsupportedEventError", "from_dp_event", "make_accountant"]
