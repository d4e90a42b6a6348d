"""Heterogeneous compositions of mechanisms."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

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

#: Stacks hold at least this many segments (padding with count 0), so one compiled program serves every
#: schedule of up to this many segments of a kind; longer ones take the next power of two.
STACK_CAPACITY = 128


def is_stacked(count) -> bool:
    """A part is a stack of segments when its count is a 1-D array (one count per segment)."""
    return jnp.ndim(count) == 1


def _concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _stack_leaves(xs):
    """Stacks scalar or array leaves along a new axis 0: numpy float64 for concrete values (no float32 rounding
    with x64 off), ``jnp.stack`` for traced ones."""
    if all(_concrete(x) for x in xs):
        return np.stack([np.asarray(x, dtype=np.float64) for x in xs])
    return jnp.stack([jnp.asarray(x) for x in xs])


def _capacity(num_segments: int) -> int:
    cap = STACK_CAPACITY
    while cap < num_segments:
        cap *= 2
    return cap


def _stack_key(mech):
    leaves, treedef = jax.tree_util.tree_flatten(mech)
    return type(mech), treedef, tuple(jnp.shape(x) for x in leaves)


def _stack_parts(mechs, counts):
    """Groups the parts by kind (type, static fields, leaf shapes) into stacks padded with count-0 copies."""
    groups: dict = {}
    for m, n in zip(mechs, counts):
        if is_stacked(n):  # an existing stack: its segments join the group
            group = groups.setdefault(_stack_key(segment(m, 0)), [])
            group.extend((segment(m, i), n[i]) for i in range(jnp.shape(n)[0]))
            continue
        groups.setdefault(_stack_key(m), []).append((m, n))
    out_m, out_n = [], []
    for members in groups.values():
        real = [(m, n) for m, n in members if not (_concrete(n) and np.all(np.asarray(n) == 0))] or members[:1]
        cap = _capacity(len(real))
        padded = real + [(real[-1][0], 0)] * (cap - len(real))
        ms = [m for m, _ in padded]
        stacked = jax.tree_util.tree_map(lambda *xs: _stack_leaves(xs), *ms)
        out_m.append(stacked)
        out_n.append(_stack_leaves([n for _, n in padded]))
    return tuple(out_m), tuple(out_n)


def segment(stack, i):
    """Segment ``i`` of a stacked mechanism."""
    return jax.tree_util.tree_map(lambda x: x[i], stack)


def scan_stack(body, carry, stack, counts):
    """``carry = body(carry, segment, count)`` over a stack's segments: one ``lax.scan`` whose padding (count 0)
    is skipped by ``lax.cond``, so the program does not grow with the number of segments and a query costs
    what its real segments cost (reverse-mode differentiable, unlike a loop to a traced bound)."""
    counts = _f64(counts)
    # the carry takes the shape and dtype of one segment's result (e.g. a vector of t)
    proto = jax.eval_shape(lambda c: body(c, segment(stack, 0), counts[0]), carry)
    carry = jax.tree_util.tree_map(lambda c, p: jnp.broadcast_to(c, p.shape).astype(p.dtype), carry, proto)

    def step(c, xs):
        mi, ni = xs
        return jax.lax.cond(ni > 0, lambda c: body(c, mi, ni), lambda c: c, c), None

    carry, _ = jax.lax.scan(step, carry, (stack, counts))
    return carry


def scan_parts(comp, body, init):
    """``carry = body(carry, mechanism, count)`` over the parts of ``comp``, a stack's segments one by one
    (:func:`scan_stack`)."""
    carry = init
    for m, n in zip(comp.mechanisms, comp.counts):
        carry = scan_stack(body, carry, m, n) if is_stacked(n) else body(carry, m, _f64(n))
    return carry


@pytree_dataclass(data=("mechanisms", "counts"))
class Composition(AbstractMechanism):
    """Heterogeneous composition: ``mechanisms[i]`` applied ``counts[i]`` times.

    Accepted wherever a single mechanism is; the ``num_steps`` argument of the
    accountants then repeats the whole composition.  All non-symmetric parts
    must share one adjacency relation (the neighbouring relation is a property
    of the datasets, not of a step).

    Segments of one kind (same mechanism type, adjacency and parameter shapes)
    are held as one *stacked* mechanism, each parameter an array with a leading
    segment axis, and ``counts[i]`` an array of one count per segment, padded
    with count-0 segments to ``STACK_CAPACITY`` (128, then powers of two).  A
    schedule of 1 to 128 segments therefore compiles once, and its per-step
    work runs in one loop over the real segments.  :meth:`segments` lists
    them one by one.

    Example:
      >>> import jaxdp
      >>> c = jaxdp.Composition.of((jaxdp.Gaussian(1.0), 10), (jaxdp.Gaussian(2.0), 5))
      >>> round(float(c.cgf(1.0)), 6)      # 10 * 1 + 5 * 0.25
      11.25
      >>> c.num_segments
      2
    """

    mechanisms: tuple
    counts: tuple

    def __post_init__(self):
        mechs = tuple(self.mechanisms)
        counts = tuple(self.counts)
        if len(mechs) == 0 or len(mechs) != len(counts):
            raise ValueError("Composition needs one count per mechanism and at least one mechanism.")
        for m, n in zip(mechs, counts):
            if not isinstance(m, AbstractMechanism) or isinstance(m, Composition):
                raise ValueError(f"Composition parts must be (non-composition) mechanisms, got {m!r}.")
            if is_stacked(n):
                if _concrete(n):
                    arr = np.asarray(n, dtype=np.float64)
                    if not (np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)) and np.all(arr >= 0)):
                        raise ValueError(f"counts of a stacked part must be integers >= 0, got {arr!r}.")
            else:
                _validate.num_steps("counts", n)
        mechs, counts = _stack_parts(mechs, counts)
        object.__setattr__(self, "mechanisms", mechs)
        object.__setattr__(self, "counts", counts)
        self.adjacency  # noqa: B018 -- validates that the parts agree

    @classmethod
    def of(cls, *parts):
        """``Composition.of((mechanism, count), ...)``."""
        return cls(tuple(m for m, _ in parts), tuple(n for _, n in parts))

    @classmethod
    def from_schedule(cls, *, noise_multipliers, sampling_probs=None, counts=None, adjacency="add_or_remove"):
        """A noise (and sampling-rate) schedule: step ``i`` is ``PoissonSubsampledGaussian(noise_multipliers[i],
        sampling_probs[i])`` (a ``Gaussian`` when ``sampling_probs`` is None), applied ``counts[i]`` times (once
        each by default).  Runs of equal consecutive values are merged into one segment when the inputs are
        concrete.

        Example:
          >>> import numpy as np, jaxdp
          >>> sigmas = np.repeat([1.0, 0.9, 0.8], 100)        # a per-step schedule of 300 steps
          >>> c = jaxdp.Composition.from_schedule(noise_multipliers=sigmas, sampling_probs=np.full(300, 0.01))
          >>> c.num_segments, c.num_steps
          (3, 300)
        """
        from jaxdp.mechanisms._gaussian import Gaussian
        from jaxdp.mechanisms._mixture import PoissonSubsampledGaussian

        sig = noise_multipliers
        n = np.shape(sig)[0] if np.ndim(sig) == 1 else None
        if n is None or n == 0:
            raise ValueError(f"noise_multipliers must be a non-empty 1-D array, got shape {np.shape(sig)}.")
        qs = sampling_probs
        if qs is not None and np.shape(qs) != (n,):
            raise ValueError(f"sampling_probs must have the shape of noise_multipliers ({n},), got {np.shape(qs)}.")
        cs = np.ones(n, dtype=np.int64) if counts is None else counts
        if np.shape(cs) != (n,):
            raise ValueError(f"counts must have the shape of noise_multipliers ({n},), got {np.shape(cs)}.")
        values = [sig] + ([] if qs is None else [qs])
        if all(_concrete(v) for v in values) and _concrete(cs):
            arrs = [np.asarray(v, dtype=np.float64) for v in values]
            cs = np.asarray(cs, dtype=np.float64)
            keep = np.ones(n, dtype=bool)
            keep[1:] = np.any([a[1:] != a[:-1] for a in arrs], axis=0)
            starts = np.flatnonzero(keep)
            cs = np.add.reduceat(cs, starts)
            values = [a[starts] for a in arrs]
        m = len(cs)
        if qs is None:
            parts = [(Gaussian(values[0][i], adjacency=adjacency), cs[i]) for i in range(m)]
        else:
            parts = [
                (PoissonSubsampledGaussian(values[0][i], values[1][i], adjacency=adjacency), cs[i]) for i in range(m)
            ]
        return cls.of(*parts)

    @property
    def symmetric(self):  # type: ignore[override]
        return all(m.symmetric for m in self.mechanisms)

    @property
    def direction_as_data(self):  # type: ignore[override]
        return all(m.direction_as_data for m in self.mechanisms)

    @property
    def both_directions_as_data(self) -> bool:
        """Whether both directions are accounted and every mechanism takes the direction as data: then the two
        directions are the two steps of one traced copy (a ``lax.scan`` or ``lax.map``, remove then add)."""
        return len(self.directions) == 2 and self.direction_as_data

    @property
    def adjacency(self):  # type: ignore[override]
        adj = {m.adjacency for m in self.mechanisms if not m.symmetric}
        if len(adj) > 1:
            raise ValueError(
                "all non-symmetric parts of a Composition must use the same adjacency, "
                f"got {sorted(a.value for a in adj)}."
            )
        return adj.pop() if adj else Adjacency.ADD_OR_REMOVE

    @property
    def num_segments(self) -> int:
        """Number of segments with a nonzero count (concrete counts only)."""
        return len(self.segments())

    @property
    def num_steps(self) -> int:
        """Total number of steps (concrete counts only)."""
        return int(sum(float(n) for _, n in self.segments()))

    def segments(self):
        """``[(mechanism, count), ...]`` one segment at a time, padding left out (concrete counts only)."""
        out = []
        for m, n in zip(self.mechanisms, self.counts):
            if not is_stacked(n):
                out.append((m, n))
                continue
            counts = np.asarray(n)
            out.extend((segment(m, i), counts[i].item()) for i in range(counts.shape[0]) if counts[i] > 0)
        return out

    def scaled(self, factor):
        """The composition repeated ``factor`` times."""
        return _unchecked_composition(self.mechanisms, tuple(n * factor for n in self.counts))

    def _count_weighted(self, per_mechanism):
        """``sum_i counts[i] * per_mechanism(mechanisms[i])`` (composition adds CGFs)."""
        return scan_parts(self, lambda acc, m, n: acc + n * per_mechanism(m), _f64(0.0))

    def total_count(self):
        """The number of steps, traced (the sum of the counts)."""
        return sum(jnp.sum(_f64(n)) for n in self.counts)

    def cgf(self, t, direction="remove"):
        _check_direction(direction)
        return self._count_weighted(lambda m: m.cgf(t, direction))

    def cgf_derivatives(self, t, direction="remove"):
        _check_direction(direction)
        t = _f64(t)
        zero = jnp.zeros_like(t)

        def body(acc, m, n):
            return tuple(a + n * v for a, v in zip(acc, m.cgf_derivatives(t, direction)))

        return scan_parts(self, body, (zero, zero, zero))

    def gaussian_mu2(self):
        return self._count_weighted(lambda m: m.gaussian_mu2())

    def tilted_abs_moment(self, t, direction="remove"):
        """Sum over steps of the per-step tilted third absolute central moments."""
        _check_direction(direction)
        return self._count_weighted(lambda m: m.tilted_abs_moment(t, direction))

    def checked_moments(self, t, direction="remove"):
        """Count-weighted sums of the parts' :meth:`AbstractMechanism.checked_moments` (all must be resolved)."""
        _check_direction(direction)
        t = _f64(t)
        zero = jnp.zeros_like(t)
        init = CheckedMoments(zero, zero, zero, zero, zero, jnp.ones(jnp.shape(t), bool))

        def body(acc, m, n):
            p = m.checked_moments(t, direction)
            fields = [getattr(acc, f) + n * getattr(p, f) for f in ("k0", "k1", "k2", "abs3", "k0_error")]
            return CheckedMoments(*fields, acc.resolved & p.resolved)

        out = scan_parts(self, body, init)
        return out._replace(resolved=out.resolved & jnp.isfinite(out.k0) & jnp.isfinite(out.k2))

    def cgf_upper(self, t, direction="remove"):
        _check_direction(direction)
        return self._count_weighted(lambda m: m.cgf_upper(t, direction))

    def max_privacy_loss(self, direction="remove"):
        _check_direction(direction)
        return self._count_weighted(lambda m: m.max_privacy_loss(direction))

    @property
    def identical_steps(self):
        """True when every step is the same mechanism: the i.i.d. Berry-Esseen constant applies.  A bool, or
        for a stack a traced one (exactly one segment with a nonzero count)."""
        if len(self.mechanisms) != 1:
            return False
        n = self.counts[0]
        return jnp.sum(_f64(n) > 0) == 1 if is_stacked(n) else True

    def privacy_loss(self, x, direction="remove"):
        """Privacy loss of a tuple ``x`` of per-segment outputs (see :meth:`sample_output`)."""
        return sum(jnp.sum(m.privacy_loss(xi, direction), axis=0) for (m, _), xi in zip(self.segments(), x))

    def sample_output(self, key, shape=(), *, direction="remove", under="P"):
        """Per-segment outputs (the order of :meth:`segments`); segment ``i`` has shape ``(count_i,) + shape``."""
        segs = self.segments()
        keys = jax.random.split(key, len(segs))
        return tuple(
            m.sample_output(k, (int(n), *tuple(shape)), direction=direction, under=under)
            for (m, n), k in zip(segs, keys)
        )

    def valid(self):
        ok = jnp.array(True)
        for m, n in zip(self.mechanisms, self.counts):
            n = _f64(n)
            if is_stacked(n):
                seg_ok = jax.vmap(lambda mi: mi.valid())(m)
                ok &= jnp.all((seg_ok | (n == 0)) & jnp.isfinite(n) & (n >= 0)) & jnp.any(n >= 1)
            else:
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
