"""Constants of the certified accountant (lattice, window, search)."""

from __future__ import annotations

import numpy as np

from jaxdp.mechanisms.internal import LOG_ZERO, NEWTON_MAX_ITER, X_FAR
from jaxdp.numerics import UNIT_ROUNDOFF

NUM_BINS = 2**19  # FFT window (lattice points of the composed law)
MIXTURE_NUM_BINS = 2**20  # the window for mixtures of more than two components (see _grid)
LATTICE_SIZE = 2**17  # lattice points per step (zero-padded, or folded, to the window)
FAST_GRID = (2**16, 2**14)  # (NUM_BINS, LATTICE_SIZE) of method="certified-fast": 8x coarser (any mixture)
WINDOW_SDS_BELOW = 4.0  # the window starts this many tilted standard deviations below the tilted mean
WINDOW_SDS_ABOVE = 6.0  # and ends this many above it (narrower windows let heavy tilted tails wrap around)
Z_TAIL = 13.0  # default per-step output range, in noise standard deviations
TAIL_FRACTION = 1e-8  # the +inf atoms may add at most this fraction of the estimated delta
COARSE_FACTOR = 32  # above the fine lattice, LATTICE_SIZE / COARSE_SHARE cells 32 lattice spacings wide
COARSE_SHARE = 8
FINE_TILTED_MASS = 1e-2  # coarse cells may hold this much of the composed tilted law (see _fine_top)
FALLBACK_TILT = 1.0  # a moderate tilt tried too when the first window fails
TILT_FACTORS = np.array([1.0, 1.5, 2.25, 3.4, 8.0, 16.0])  # retried tilts, times the saddle point of the root
REFINE_TOL = 5e-2  # re-centre the window when the root moved this far from the estimate

_U = UNIT_ROUNDOFF
_GAMMA4 = 4 * _U / (1 - 4 * _U)
_TINY = 1e-300
_NEG = LOG_ZERO
_X_FAR = X_FAR
# (NumPy, not JAX arrays: a module's JAX array would be made under whatever trace and x64 setting are active when
# the module is first imported, e.g. inside a user's jit, and leak out of that trace)
_CHERNOFF_STEPS = np.array([0.25, 1.0, 2.0, 4.0, 6.0, 16.0, 64.0])  # s - t, in 1 / (tilted deviation)
_CHERNOFF_ABS = np.array([16.0, 128.0, 1024.0, 8192.0])  # and absolute s (a few steps of a tiny q: bimodal laws)
_EPS_NUDGES = np.array([1e-12, 1e-9])
_FAST_ORDER = 10  # the same for the linear-space sum of the cells, w max(1, |m|) <= _FAST_NARROW
_FAST_NARROW = 0.125
_BAD_CELLS = 1024  # cells computed in log space (a component is wide there) without the full fallback

__all__ = ["FAST_GRID", "NEWTON_MAX_ITER"]
