"""Heterogeneous compositions of mechanisms."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdp.mechanisms._base import (
    AbstractMechanism,
    Adjacency,
    _check_direction,
    _f64,
)
from jaxdp.mechanisms._quadrature import (
    CheckedMoments,
)
from jaxdp.numerics import pytree_dataclass
from jaxdp.numerics import validate as _validate


@pytree_dataclass(data=("mechanisms", "counts"))
class Composition(AbstractMechanism):
    """Heterogeneous composition: ``mechanisms[i]`` applied ``counts[i]`` times.

    Accepted wherever a single mechanism is; the ``num_steps`` argument of the
    accountants then repeats the whole composition.  All non-symmetric parts
    must share one adjacency relation (the neighbouring relation is a property
    of the datasets, not of a step).

    Example:
      >>> import jaxdp
      >>> c = jaxdp.Composition.of((jaxdp.Gaussian(1.0), 10), (jaxdp.Gaussian(2.0), 5))
      >>> round(float(c.cgf(1.0)), 6)      # 10 * 1 + 5 * 0.25
      11.25
    """

    mechanisms: tuple
    counts: tuple

    def __post_init__(self):
        mechs = tuple(self.mechanisms)
        counts = tuple(self.counts)
        if len(mechs) == 0 or len(mechs) != len(counts):
            raise ValueError("Composition needs one count per mechanism and at least one mechanism.")
        for m in mechs:
            if not isinstance(m, AbstractMechanism) or isinstance(m, Composition):
                raise ValueError(f"Composition parts must be (non-composition) mechanisms, got {m!r}.")
        for n in counts:
            _validate.num_steps("counts", n)
        object.__setattr__(self, "mechanisms", mechs)
        object.__setattr__(self, "counts", counts)
        self.adjacency  # noqa: B018 -- validates that the parts agree

    @classmethod
    def of(cls, *parts):
        """``Composition.of((mechanism, count), ...)``."""
        return cls(tuple(m for m, _ in parts), tuple(n for _, n in parts))

    @property
    def symmetric(self):  # type: ignore[override]
        return all(m.symmetric for m in self.mechanisms)

    @property
    def adjacency(self):  # type: ignore[override]
        adj = {m.adjacency for m in self.mechanisms if not m.symmetric}
        if len(adj) > 1:
            raise ValueError(
                "all non-symmetric parts of a Composition must use the same adjacency, "
                f"got {sorted(a.value for a in adj)}."
            )
        return adj.pop() if adj else Adjacency.ADD_OR_REMOVE

    def scaled(self, factor):
        """The composition repeated ``factor`` times."""
        return _unchecked_composition(self.mechanisms, tuple(n * factor for n in self.counts))

    def _count_weighted(self, per_mechanism):
        """``sum_i counts[i] * per_mechanism(mechanisms[i])`` (composition adds CGFs)."""
        total = 0.0
        for m, n in zip(self.mechanisms, self.counts):
            total = total + _f64(n) * per_mechanism(m)
        return total

    def cgf(self, t, direction="remove"):
        _check_direction(direction)
        return self._count_weighted(lambda m: m.cgf(t, direction))

    def gaussian_mu2(self):
        return self._count_weighted(lambda m: m.gaussian_mu2())

    def tilted_abs_moment(self, t, direction="remove"):
        """Sum over steps of the per-step tilted third absolute central moments."""
        _check_direction(direction)
        return self._count_weighted(lambda m: m.tilted_abs_moment(t, direction))

    def checked_moments(self, t, direction="remove"):
        """Count-weighted sums of the parts' :meth:`AbstractMechanism.checked_moments` (all must be resolved)."""
        _check_direction(direction)
        parts = [(m.checked_moments(t, direction), _f64(n)) for m, n in zip(self.mechanisms, self.counts)]
        fields = [sum(n * getattr(p, f) for p, n in parts) for f in ("k0", "k1", "k2", "abs3", "k0_error")]
        ok = jnp.array(True)
        for p, _ in parts:
            ok &= p.resolved
        return CheckedMoments(*fields, ok & jnp.isfinite(fields[0]) & jnp.isfinite(fields[2]))

    def cgf_upper(self, t, direction="remove"):
        _check_direction(direction)
        return self._count_weighted(lambda m: m.cgf_upper(t, direction))

    def max_privacy_loss(self, direction="remove"):
        _check_direction(direction)
        return self._count_weighted(lambda m: m.max_privacy_loss(direction))

    @property
    def identical_steps(self) -> bool:
        """True when every step is the same mechanism (one part): the i.i.d. Berry-Esseen constant applies."""
        return len(self.mechanisms) == 1

    def privacy_loss(self, x, direction="remove"):
        """Privacy loss of a tuple ``x`` of per-part outputs, each of shape ``(count, ...)``."""
        return sum(jnp.sum(m.privacy_loss(xi, direction), axis=0) for m, xi in zip(self.mechanisms, x))

    def sample_output(self, key, shape=(), *, direction="remove", under="P"):
        """Per-part outputs; part ``i`` has shape ``(counts[i],) + shape`` (counts must be concrete)."""
        keys = jax.random.split(key, len(self.mechanisms))
        return tuple(
            m.sample_output(k, (int(n), *tuple(shape)), direction=direction, under=under)
            for m, n, k in zip(self.mechanisms, self.counts, keys)
        )

    def valid(self):
        ok = jnp.array(True)
        for m, n in zip(self.mechanisms, self.counts):
            n = _f64(n)
            ok &= m.valid() & jnp.isfinite(n) & (n >= 1)
        return ok


def _unchecked_composition(mechanisms, counts):
    obj = object.__new__(Composition)
    object.__setattr__(obj, "mechanisms", tuple(mechanisms))
    object.__setattr__(obj, "counts", tuple(counts))
    return obj


def as_composition(mechanism, num_steps) -> Composition:
    """Normalises ``(mechanism, num_steps)`` to a :class:`Composition`."""
    if isinstance(mechanism, Composition):
        return mechanism.scaled(num_steps)
    if not isinstance(mechanism, AbstractMechanism):
        raise ValueError(f"mechanism must be a jaxdp mechanism, got {type(mechanism).__name__}.")
    return _unchecked_composition((mechanism,), (num_steps,))
