"""Argument checks with messages that name the argument and the allowed range.

Checks run on concrete values only (Python numbers, NumPy arrays, concrete JAX
arrays).  Traced values cannot be inspected; for those the accountants return
NaN instead of a number (the entry points of :mod:`jaxdp.accountants._api` test the
composition's ``valid()``), so an invalid traced input can never come out as a finite
epsilon or delta.
"""

from __future__ import annotations

import numbers
import os
import sys
import warnings

import jax
import numpy as np

__all__ = [
    "finite",
    "is_concrete",
    "nonnegative",
    "num_steps",
    "open_unit",
    "positive",
    "probability",
    "warn_at_caller",
]


def is_concrete(value) -> bool:
    """True when ``value`` holds actual numbers (not a tracer or a placeholder)."""
    if isinstance(value, jax.core.Tracer):
        return False
    if isinstance(value, (numbers.Number, np.ndarray, np.generic, jax.Array)):
        return True
    if isinstance(value, (list, tuple)):
        return len(value) > 0 and all(is_concrete(v) for v in value)
    return False


def _as_array(name, value):
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number, got {value!r}.") from None
    return arr


def _fmt(value):
    arr = np.asarray(value)
    return repr(arr.item()) if arr.ndim == 0 else np.array2string(arr)


def finite(name, value):
    """Requires every element of ``value`` to be finite."""
    if not is_concrete(value):
        return
    if isinstance(value, bool) or np.iscomplexobj(value):
        raise ValueError(f"{name} must be a real number, got {value!r}.")
    arr = _as_array(name, value)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite (not NaN or inf), got {_fmt(value)}.")


def positive(name, value):
    """Requires ``0 < value < inf``."""
    if not is_concrete(value):
        return
    finite(name, value)
    if not np.all(_as_array(name, value) > 0):
        raise ValueError(f"{name} must be > 0, got {_fmt(value)}.")


def nonnegative(name, value):
    """Requires ``0 <= value < inf``."""
    if not is_concrete(value):
        return
    finite(name, value)
    if not np.all(_as_array(name, value) >= 0):
        raise ValueError(f"{name} must be >= 0, got {_fmt(value)}.")


def probability(name, value):
    """Requires ``0 < value <= 1``."""
    if not is_concrete(value):
        return
    finite(name, value)
    arr = _as_array(name, value)
    if not np.all((arr > 0) & (arr <= 1)):
        raise ValueError(f"{name} must be in (0, 1], got {_fmt(value)}.")


def open_unit(name, value):
    """Requires ``0 < value < 1``."""
    if not is_concrete(value):
        return
    finite(name, value)
    arr = _as_array(name, value)
    if not np.all((arr > 0) & (arr < 1)):
        raise ValueError(f"{name} must be in (0, 1), got {_fmt(value)}.")


def num_steps(name, value):
    """Requires a whole number ``>= 1`` (``2000`` or ``2000.0``, not ``2000.5``)."""
    if not is_concrete(value):
        return
    finite(name, value)
    arr = _as_array(name, value)
    if not np.all(arr == np.round(arr)):
        raise ValueError(f"{name} must be an integer >= 1, got {_fmt(value)}.")
    if not np.all(arr >= 1):
        raise ValueError(f"{name} must be an integer >= 1, got {_fmt(value)}.")


def integer(name, value, minimum: int = 1) -> int:
    """Requires a Python or NumPy integer ``>= minimum`` (a count: ``True`` and ``2.0`` are refused); returns it
    as an ``int``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")
    return int(value)


def warn_at_caller(message, category=UserWarning):
    """``warnings.warn`` attributed to the first frame outside jaxdp (the user's call), whatever the depth of the
    library's own wrappers in between."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = sys._getframe(0), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(root):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
