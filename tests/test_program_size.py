"""The canonical accountant programs stay within their StableHLO op budgets (``tests/program_budgets.py``).

Lowering only (no XLA compile).  The certified and characteristic programs under a user's jit and the gradient
programs are the costliest lowerings (10-30 s each on two cores): -m slow, with the rest in the default run.
"""

from __future__ import annotations

import pytest
from program_budgets import BUDGETS, count_ops, lower

_SLOW = {
    ("certified", "user_jit"),
    ("certified-fast", "user_jit"),
    ("characteristic", "user_jit"),
    ("saddlepoint", "grad"),
    ("rdp", "grad"),
}


@pytest.mark.parametrize(
    "method, form",
    [pytest.param(*k, marks=pytest.mark.slow) if k in _SLOW else k for k in BUDGETS],
    ids=[f"{m}-{f}" for m, f in BUDGETS],
)
def test_program_within_its_budget(method, form):
    ops = count_ops(lower(method, form))
    assert ops <= BUDGETS[method, form], f"{method} ({form}): {ops} StableHLO ops, budget {BUDGETS[method, form]}"
    # a program far below its budget lowers the budget (tests/program_budgets.py): the ceiling must not hide a creep
    assert ops >= 0.8 * BUDGETS[method, form], f"{method} ({form}) shrank to {ops} ops: lower its budget"
