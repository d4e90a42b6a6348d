"""The method registry: what an accountant is, what it supports, and the ``method=`` names."""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable

from jaxdp.numerics import validate as _validate

__all__ = [
    "DEPRECATED_METHODS",
    "NO_HINTS",
    "CompileHints",
    "MethodInfo",
    "Screened",
    "WithFallback",
    "available_methods",
    "check_supported",
    "compile_hints",
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
    How the entry points compile a method is said where it is registered (:func:`register_method`).

    Attributes:
      name: the ``method=`` string.
      certified: True when the returned epsilon/delta is a proven upper bound
        (up to the documented numerical assumptions of the method); a report gives an estimate's
        certified upper bound beside it (from :func:`~jaxdp.default_method`).
      description: one line for reports.
      log_delta: ``(composition, direction, epsilon) -> log delta`` (traceable; ``direction`` is a
        :class:`~jaxdp.mechanisms.Direction`).
      epsilon: ``(composition, direction, log_delta) -> epsilon`` (traceable).
      supports: ``composition -> bool``, decided from the mechanism types alone (no traced values):
        False makes the entry points raise one ``ValueError`` naming the method and the mechanism.
    """

    name: str
    certified: bool
    description: str
    log_delta: Callable = dataclasses.field(repr=False)
    epsilon: Callable = dataclasses.field(repr=False)
    supports: Callable = dataclasses.field(default=supports_all, repr=False)


@dataclasses.dataclass(frozen=True)
class CompileHints:
    """How the entry points may compile a registered method (given to :func:`register_method`; not the method's
    meaning: every hint left off gives the same numbers, to rounding, in a larger or slower program).

    Attributes:
      direction_as_data: ``log_delta`` and ``epsilon`` also accept ``direction`` as a boolean scalar
        (True: add; possibly traced), so that both directions of an add-or-remove composition run
        through one traced copy (a ``lax.scan`` over the two): half the program to compile.
      staged: ``log_delta`` and ``epsilon`` honour ``Facts.light`` (``jaxdp/accountants/_staging.py``): traced
        under it for concrete inputs, they may answer NaN instead of tracing a branch few inputs take (a second
        pass, a last-resort bound), and the entry points then run the full program (compiled only then).
      quick_compile: the entry points compile the method's programs for concrete inputs with
        ``numerics.program_cache.QUICK_COMPILE`` (XLA options that shorten the compile of chains of special
        functions and slow down some loops), where the installed XLA has them.
      host_epsilon: with ``staged``, the method's epsilon of the worse direction for concrete inputs as programs
        the host runs one after another (a search's passes, each compiled only where a query reaches it):
        ``(composition, delta, *, facts, call) -> epsilon``, NaN where the full program must answer;
        ``call(jitted, fn, args, static)`` runs one program.  Its values are those of the traced ``epsilon``.
    """

    direction_as_data: bool = False
    staged: bool = False
    quick_compile: bool = False
    host_epsilon: Callable | None = dataclasses.field(default=None, repr=False, compare=False)


NO_HINTS = CompileHints()


@dataclasses.dataclass(frozen=True, eq=False)
class Screened(MethodInfo):
    """A certified method whose second adjacency direction is computed only where a cheaper certified method,
    ``screen``, does not already show it below the first (the worse direction decides the result, so skipping it
    is exact).  Made by :func:`screened`.  ``screen_stage`` (optional): ``(composition, direction, log_delta) ->
    stage``, the screen's epsilon with what it computed on the way (a pytree whose ``epsilon`` field is the
    screen's epsilon); ``epsilon_given_screen`` (optional): the method's epsilon given that stage of the same
    direction (or given the screen's epsilon, where there is no stage)."""

    screen: str = ""
    screen_stage: Callable | None = dataclasses.field(default=None, repr=False)
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


def screened(
    method: MethodInfo,
    *,
    by: str,
    screen_stage: Callable | None = None,
    epsilon_given_screen: Callable | None = None,
) -> Screened:
    """``method`` screened by the cheaper certified method named ``by`` (see :class:`Screened`).

    ``screen_stage(composition, direction, log_delta)``: the screen's epsilon as a stage (a pytree with an
    ``epsilon`` field, equal to the screen's own epsilon); ``epsilon_given_screen(composition, direction, log_delta,
    screened)`` receives that stage where it is given, else the screen's epsilon.

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
    return Screened(
        **_fields_of(method), screen=by, screen_stage=screen_stage, epsilon_given_screen=epsilon_given_screen
    )


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
# keyed by the registered object (MethodInfo hashes by identity): a method re-registered under its name gets its own
_HINTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def register_method(
    info: MethodInfo, *, direction_as_data: bool = False, staged: bool = False, quick_compile: bool = False
) -> None:
    """Registers an accountant under ``info.name`` (replacing one of the same name).

    ``info.log_delta`` and ``info.epsilon`` receive a :class:`~jaxdp.Composition` (float64
    leaves, possibly traced) and one adjacency direction; the entry points take care of
    validation, the number of steps, float64, ``jax.jit`` and the worse of two directions.
    A ``screen`` or ``fallback`` must name a registered method (or the method itself).  The keywords are
    :class:`CompileHints`: how the entry points may compile it (each left off gives the same numbers).

    Example (``tests/test_architecture.py`` registers a working toy accountant this way):
      >>> import jax.numpy as jnp, jaxdp
      >>> info = jaxdp.MethodInfo(
      ...     "trivial", certified=True, description="delta = 1, a valid and useless bound",
      ...     log_delta=lambda comp, direction, eps: jnp.zeros_like(eps),
      ...     epsilon=lambda comp, direction, log_delta: jnp.full_like(log_delta, jnp.inf))
      >>> info.supports(jaxdp.Composition.of((jaxdp.Laplace(1.0), 3)))
      True
    """
    hints = CompileHints(direction_as_data=direction_as_data, staged=staged, quick_compile=quick_compile)
    register_methods((info,), hints={info.name: hints} if isinstance(info, MethodInfo) else None)


def register_methods(infos, hints: dict[str, CompileHints] | None = None) -> None:
    """Registers several :class:`MethodInfo` at once (they may name each other as screen or fallback), with the
    :class:`CompileHints` of those named in ``hints``."""
    infos = tuple(infos)
    hints = dict(hints or {})
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
        for field in ("screen_stage", "epsilon_given_screen", "epsilon_or_nan_given_screen"):
            given = getattr(info, field, None)
            if given is not None and not callable(given):
                raise ValueError(f"{kind}.{field} of {info.name!r} must be callable or None.")
        for field in ("screen", "fallback"):
            other = getattr(info, field, None)
            if other is not None and other not in names and other not in _METHODS:
                raise ValueError(f"{kind}.{field} of {info.name!r} names an unregistered method {other!r}.")
    unknown = set(hints) - names
    if unknown:
        raise ValueError(f"hints name methods not registered here: {sorted(unknown)}.")
    for info in infos:
        _METHODS[info.name] = info
        _HINTS[info] = hints.get(info.name, NO_HINTS)


def compile_hints(method: MethodInfo) -> CompileHints:
    """The :class:`CompileHints` ``method`` was registered with (none for a method not registered)."""
    return _HINTS.get(method, NO_HINTS)


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
