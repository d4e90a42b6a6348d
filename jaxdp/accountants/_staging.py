"""Facts the host knows about a query's concrete inputs, fixed into that query's program.

A ``lax.cond`` compiles both of its branches (and ``grad`` differentiates both).  Called on concrete values, an
entry point can leave out the branches those values never take: it computes :class:`Facts` on the host and
passes them to its jitted program as a static argument (so they are part of the program's cache key), the
program traces under them (:func:`assume`), and a kernel reads them at trace time (:func:`assumed`).  Traced
inputs (a user's ``jit``, ``vmap`` or ``grad``) get no facts, and every branch stays in their program.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.numerics._validate import is_concrete

__all__ = ["FEW_STEPS", "Facts", "assume", "assumed", "of_concrete", "valid_query"]

#: up to this many steps of one two-point mixture the saddle-point estimate is exact, not the split's
FEW_STEPS = 3


@dataclasses.dataclass(frozen=True)
class Facts:
    """What holds for every input a program will be called with.

    Attributes:
      no_few_steps: every part of the composition runs 0 or more than :data:`FEW_STEPS` steps (the
        saddle-point estimate's exact few-step branch is never taken).
      light: every input is concrete, and the caller runs the full program where this one answers NaN: a
        method registered ``staged`` (``CompileHints``) may answer NaN instead of tracing a branch that few inputs take.
    """

    no_few_steps: bool = False
    light: bool = False


NOTHING = Facts()
_STATE = threading.local()


def assumed() -> Facts:
    """The facts of the program being traced (none outside :func:`assume`)."""
    return getattr(_STATE, "facts", NOTHING)


@contextlib.contextmanager
def assume(facts: Facts | None):
    """Traces the block under ``facts`` (``None``: under the enclosing block's)."""
    previous = assumed()
    _STATE.facts = previous if facts is None else facts
    try:
        yield
    finally:
        _STATE.facts = previous


def of_concrete(mechanism, num_steps=1) -> Facts:
    """The facts of ``num_steps`` runs of ``mechanism`` (a :class:`~jaxdp.Composition` or one mechanism), from
    the step counts where they are concrete (none where any is traced).  Take them before the counts become
    arrays: inside a trace, even a constant count does."""
    leaves = [num_steps] + ([] if not hasattr(mechanism, "counts") else jax.tree.leaves(mechanism.counts))
    if not is_concrete(leaves):
        return NOTHING
    counts = np.asarray(num_steps, np.float64) * np.concatenate(
        [np.ravel(np.asarray(x, np.float64)) for x in leaves[1:]] or [np.ones(1)]
    )
    return Facts(no_few_steps=bool(np.all((counts == 0) | (counts > FEW_STEPS))))


def valid_query(comp, arg, name):
    """The inputs are in range: ``epsilon >= 0`` (``name == "epsilon"``) or ``0 < delta < 1``, finite, and a valid
    composition (traced, or concrete: a mechanism rebuilt by pytree operations is never checked by its constructor)."""
    if name == "epsilon":
        return comp.valid() & jnp.isfinite(arg) & (arg >= 0)
    return comp.valid() & jnp.isfinite(arg) & (arg > 0) & (arg < 1)
