"""The method registry: what an accountant is, what it supports, and the ``method=`` names."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from jaxdp.numerics import validate as _validate

__all__ = [
    "DEPRECATED_METHODS",
    "MethodInfo",
    "Screened",
    "WithFallback",
    "available_methods",
    "check_supported",
    "method_info",
    "register_method",
    "register_methods",
    "screened",
    "supports_all",
    "with_fallback",
]


def supports_all(composition) -> bool:
    """The default :attr:`MethodInfo.supports`: every mechanism."""
    return True


# eq=False: compared and hashed by identity (a jit key: a registration is its own program, whatever its fields hold)
@dataclasses.dataclass(frozen=True, eq=False)
class MethodInfo:
    """An accountant: two traceable functions, what it supports, and whether its numbers are proven upper bounds.

    Policy across methods is not a field: :func:`screened` and :func:`with_fallback` return methods that carry it.

    Attributes:
      name: the ``method=`` string.
      certified: True when the returned epsilon/delta is a proven upper bound
        (up to the documented numerical assumptions of the method).
      description: one line for reports.
      log_delta: ``(composition, direction, epsilon) -> log delta`` (traceable; ``direction`` is a
        :class:`~jaxdp.mechanisms.Direction`).
      epsilon: ``(composition, direction, log_delta) -> epsilon`` (traceable).
      supports: ``composition -> bool``, decided from the mechanism types alone (no traced values):
        False makes the entry points raise one ``ValueError`` naming the method and the mechanism.
      companion: for an estimate, the name of the method giving its certified
        upper bound (reported beside it by the command line).
      calibration_nudge: for a certified method, the relative first move of a calibrated
        parameter before its certified check (about the method's slack over the estimate).
      epsilon_stage: optional ``(composition, direction, log_delta) -> stage``, a pytree whose ``epsilon`` field is
        the method's epsilon and whose other fields a method it screens may reuse (see :func:`screened`).
      direction_as_data: ``log_delta`` and ``epsilon`` also accept ``direction`` as a boolean scalar
        (True: add; possibly traced), so that both directions of an add-or-remove composition run
        through one traced copy (a ``lax.scan`` over the two): half the program to compile.
      staged: ``log_delta`` and ``epsilon`` honour ``Facts.light`` (``jaxdp/accountants/_staging.py``): traced
        under it for concrete inputs, they may answer NaN instead of tracing a branch few inputs take (a second
        pass, a last-resort bound), and the entry points then run the full program (compiled only then).
      quick_compile: the entry points compile this method's programs for concrete inputs with
        ``numerics.program_cache.QUICK_COMPILE`` (XLA options that shorten the compile of chains of special
        functions and slow down some loops), where the installed XLA has them.
    """

    name: str
    certified: bool
    description: str
    log_delta: Callable = dataclasses.field(repr=False)
    epsilon: Callable = dataclasses.field(repr=False)
    supports: Callable = dataclasses.field(default=supports_all, repr=False)
    companion: str | None = None
    calibration_nudge: float = 3e-6
    epsilon_stage: Callable | None = dataclasses.field(default=None, repr=False)
    direction_as_data: bool = False
    staged: bool = False
    quick_compile: bool = False


@dataclasses.dataclass(frozen=True, eq=False)
class Screened(MethodInfo):
    """A certified method whose second adjacency direction is computed only where a cheaper certified method,
    ``screen``, does not already show it below the first (the worse direction decides the result, so skipping it
    is exact).  Made by :func:`screened`; ``epsilon_given_screen`` (optional) is the method's epsilon given the
    screen's ``epsilon_stage`` of the same direction (or its epsilon, where the screen has no stage)."""

    screen: str = ""
    epsilon_given_screen: Callable | None = dataclasses.field(default=None, repr=False)


@dataclasses.dataclass(frozen=True, eq=False)
class WithFallback(MethodInfo):
    """An estimate the entry points replace by the method ``fallback`` wherever it cannot vouch for its value.
    Made by :func:`with_fallback`; ``log_delta_or_nan`` / ``epsilon_or_nan`` are the estimate's functions with NaN
    there.  Its own ``log_delta`` / ``epsilon`` (the internal callers', the calibrators') keep their in-program
    answer there.  ``epsilon_or_nan_given_screen`` (optional, where the fallback is :class:`Screened`):
    ``epsilon_or_nan`` given the stage of the fallback's screen (agreeing with ``epsilon_or_nan`` to the solvers'
    tolerance); under a user's trace the entry points then compute that stage once per direction, for both."""

    fallback: str = ""
    log_delta_or_nan: Callable | None = dataclasses.field(default=None, repr=False)
    epsilon_or_nan: Callable | None = dataclasses.field(default=None, repr=False)
    epsilon_or_nan_given_screen: Callable | None = dataclasses.field(default=None, repr=False)


def _fields_of(method: MethodInfo) -> dict:
    if type(method) is not MethodInfo:
        raise TypeError(f"a combinator takes a plain MethodInfo, got {type(method).__name__}.")
    return {f.name: getattr(method, f.name) for f in dataclasses.fields(MethodInfo)}


def screened(method: MethodInfo, *, by: str, epsilon_given_screen: Callable | None = None) -> Screened:
    """``method`` screened by the cheaper certified method named ``by`` (see :class:`Screened`).

    ``epsilon_given_screen(composition, direction, log_delta, screened)`` receives the screen's ``epsilon_stage``
    (a pytree with an ``epsilon`` field) where the screen has one, else the screen's epsilon.

    The screen is traced into the method's own program, in each form of it (concrete inputs and a user's ``jit``).

    Example:
      >>> import jax.numpy as jnp, jaxdp
      >>> base = jaxdp.MethodInfo(
      ...     "trivial-screened", certified=True, description="delta = 1 (a valid and useless bound)",
      ...     log_delta=lambda comp, direction, eps: jnp.zeros_like(eps),
      ...     epsilon=lambda comp, direction, log_delta: jnp.full_like(log_delta, jnp.inf))
      >>> jaxdp.screened(base, by="delta2-certified").screen
      'delta2-certified'
    """
    return Screened(**_fields_of(method), screen=by, epsilon_given_screen=epsilon_given_screen)


def with_fallback(
    method: MethodInfo,
    *,
    fallback: str,
    log_delta_or_nan: Callable,
    epsilon_or_nan: Callable,
    epsilon_or_nan_given_screen: Callable | None = None,
) -> WithFallback:
    """The estimate ``method``, answered by the method named ``fallback`` wherever ``log_delta_or_nan`` /
    ``epsilon_or_nan`` give NaN (see :class:`WithFallback`).

    Under a user's ``jit``/``vmap``/``grad`` the entry points trace both in one program (a ``lax.cond``); called on
    concrete values they run the estimate's program, and compile the fallback's only where it answered NaN.
    ``epsilon_or_nan_given_screen(composition, direction, log_delta, stage)``: where the fallback is screened, the
    estimate's epsilon given the screen's ``epsilon_stage`` (traced once for both, see :class:`WithFallback`).
    """
    return WithFallback(
        **_fields_of(method),
        fallback=fallback,
        log_delta_or_nan=log_delta_or_nan,
        epsilon_or_nan=epsilon_or_nan,
        epsilon_or_nan_given_screen=epsilon_or_nan_given_screen,
    )


_METHODS: dict[str, MethodInfo] = {}


def register_method(info: MethodInfo) -> None:
    """Registers an accountant under ``info.name`` (replacing one of the same name).

    ``info.log_delta`` and ``info.epsilon`` receive a :class:`~jaxdp.Composition` (float64
    leaves, possibly traced) and one adjacency direction; the entry points take care of
    validation, the number of steps, float64, ``jax.jit`` and the worse of two directions.
    ``companion`` and ``screen`` must name registered methods (or the method itself).

    Example (``tests/test_architecture.py`` registers a working toy accountant this way):
      >>> import jax.numpy as jnp, jaxdp
      >>> info = jaxdp.MethodInfo(
      ...     "trivial", certified=True, description="delta = 1, a valid and useless bound",
      ...     log_delta=lambda comp, direction, eps: jnp.zeros_like(eps),
      ...     epsilon=lambda comp, direction, log_delta: jnp.full_like(log_delta, jnp.inf))
      >>> info.supports(jaxdp.Composition.of((jaxdp.Laplace(1.0), 3)))
      True
    """
    register_methods((info,))


def register_methods(infos) -> None:
    """Registers several :class:`MethodInfo` at once (they may name each other as companion, screen or fallback)."""
    infos = tuple(infos)
    names = {i.name for i in infos if isinstance(i, MethodInfo)}
    for info in infos:
        if not isinstance(info, MethodInfo):
            raise TypeError(f"register_method takes a MethodInfo, got {type(info).__name__}.")
        if not isinstance(info.name, str) or not info.name:
            raise ValueError(f"MethodInfo.name must be a non-empty string, got {info.name!r}.")
        kind = type(info).__name__
        required = ("log_delta", "epsilon", "supports") + (
            ("log_delta_or_nan", "epsilon_or_nan") if isinstance(info, WithFallback) else ()
        )
        for field in required:
            if not callable(getattr(info, field)):
                raise ValueError(f"{kind}.{field} of {info.name!r} must be callable.")
        for field in ("epsilon_given_screen", "epsilon_or_nan_given_screen"):
            given = getattr(info, field, None)
            if given is not None and not callable(given):
                raise ValueError(f"{kind}.{field} of {info.name!r} must be callable or None.")
        for field in ("companion", "screen", "fallback"):
            other = getattr(info, field, None)
            if other is not None and other not in names and other not in _METHODS:
                raise ValueError(f"{kind}.{field} of {info.name!r} names an unregistered method {other!r}.")
    for info in infos:
        _METHODS[info.name] = info


#: method names of jaxdp 0.1.0 that a name saying what the method is replaced, kept for one release: old -> new.
#: A name is its construction (``rdp``, ``exact``, ``saddlepoint``, ``delta2``, ``characteristic``, ``gil-pelaez``,
#: ``certified``); a suffix is one of two words, each with one meaning: ``-certified``, the proven upper bound built
#: on that construction (``delta2-certified``), and ``-fast``, the same method on a coarser grid (``certified-fast``).
DEPRECATED_METHODS = {
    "saddlepoint-split": "saddlepoint",
    "saddlepoint-delta2": "delta2",
    "saddlepoint-certified": "delta2-certified",
    "characteristic-real": "gil-pelaez",
}


def available_methods() -> tuple[str, ...]:
    """Names accepted by ``method=`` (the deprecated names of :data:`DEPRECATED_METHODS` are accepted too)."""
    return tuple(_METHODS)


def method_info(method: str | MethodInfo) -> MethodInfo:
    """The :class:`MethodInfo` of ``method`` (ValueError for unknown names); a :class:`MethodInfo` is itself."""
    if isinstance(method, MethodInfo):
        return method
    if isinstance(method, str) and method not in _METHODS and method in DEPRECATED_METHODS:
        new = DEPRECATED_METHODS[method]
        _validate.warn_at_caller(
            f"method={method!r} is deprecated and will be removed in the next release: it is now {new!r} (the same "
            "method).",
            DeprecationWarning,
        )
        method = new
    try:
        return _METHODS[method]
    except (KeyError, TypeError):
        raise ValueError(f"method must be one of {', '.join(map(repr, _METHODS))}, got {method!r}.") from None


def check_supported(info: MethodInfo, composition) -> None:
    """``ValueError`` when ``info`` does not support every part of ``composition``."""
    if not info.supports(composition):
        kinds = sorted({type(m).__name__ for m in composition.mechanisms})
        usable = [n for n, i in _METHODS.items() if i.supports(composition)]
        raise ValueError(
            f"method={info.name!r} does not support {' + '.join(kinds)}; "
            f"methods that do: {', '.join(map(repr, usable))}."
        )
