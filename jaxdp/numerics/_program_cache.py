"""Exported accountant programs kept on disk, so a warm process skips Python tracing and lowering.

JAX's persistent compilation cache saves the XLA compile, but its key is the lowered program: every
process still traces and lowers the accountant (about 15 s for ``certified`` on two cores) before it can
look the executable up.  With a program cache directory set (:func:`enable`; the command line sets one
beside its XLA cache), the first run of a (function, method, mechanism structure, shapes) exports the
jitted program with :mod:`jax.export` and writes it; later processes deserialise it (milliseconds) and
call it, and the XLA compile of the deserialised module is what the persistent cache holds.

The key covers the function, its static arguments, the argument structure, shapes and dtypes, the JAX
version and a digest of jaxdp's own source files, so an edited or upgraded jaxdp never runs a stale program.
Traced arguments (a user's ``jit``/``vmap``/``grad``) bypass the cache.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pathlib
import tempfile

import jax

__all__ = ["call", "enable", "enabled"]

_DIR: pathlib.Path | None = None
_LOADED: dict = {}


def enable(directory) -> None:
    """Keeps exported programs under ``directory`` (``None`` turns the cache off)."""
    global _DIR
    _DIR = None if directory is None else pathlib.Path(directory)
    if _DIR is not None:
        _DIR.mkdir(parents=True, exist_ok=True)


def enabled() -> bool:
    return _DIR is not None


@functools.cache
def _source_digest() -> str:
    root = pathlib.Path(__file__).parent.parent  # the jaxdp package
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _key(fn, static, treedef, leaves) -> str:
    parts = (
        fn.__module__,
        fn.__qualname__,
        tuple(sorted(static.items())),
        str(treedef),
        tuple((tuple(x.shape), str(x.dtype)) for x in leaves),
        jax.__version__,
        jax.config.jax_enable_x64,
        _source_digest(),
    )
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:32]


def _export(fn, static, treedef, leaves):
    def flat(*xs):  # flat array arguments: custom pytree nodes need no serialisation rules
        return fn(*jax.tree_util.tree_unflatten(treedef, xs), **static)

    shapes = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in leaves]
    return jax.export.export(jax.jit(flat))(*shapes)


def call(jitted, fn, args: tuple, static: dict):
    """``jitted(*args, **static)``, through an exported program on disk when the cache is enabled."""
    leaves, treedef = jax.tree_util.tree_flatten(args)
    if _DIR is None or any(isinstance(x, jax.core.Tracer) for x in leaves):
        return jitted(*args, **static)
    leaves = [jax.numpy.asarray(x) for x in leaves]
    key = _key(fn, static, treedef, leaves)
    exported = _LOADED.get(key)
    if exported is None:
        exported = _load_or_export(key, fn, static, treedef, leaves)
        _LOADED[key] = exported
    if exported is False:  # this program cannot be exported here: the plain jit
        return jitted(*args, **static)
    return exported.call(*leaves)


def _load_or_export(key, fn, static, treedef, leaves):
    """The exported program (read, or exported and written), or False where export is unavailable."""
    path = _DIR / f"{key}.jaxexport"
    try:
        return jax.export.deserialize(bytearray(path.read_bytes()))
    except Exception:  # missing, truncated or from another jaxlib: export afresh
        pass
    try:
        exported = _export(fn, static, treedef, leaves)
        data = exported.serialize()  # (needs the optional flatbuffers package)
    except Exception:  # an export limitation must never cost the answer
        return False
    try:  # written atomically: a concurrent reader never sees half a file
        fd, tmp = tempfile.mkstemp(dir=_DIR, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache: the program still runs
    return exported
