"""Compiled accountant programs kept on disk: each is compiled once per machine, not once per process.

An entry point called on concrete values runs one jitted program per (function, method, mechanism structure,
shapes).  Its first run in a process traces, lowers and compiles it (the times:
``benchmarks/results/startup.md``).  This cache keeps the compiled executable itself
(:mod:`jax.experimental.serialize_executable`) in a directory jaxdp owns, so a later process loads it in
milliseconds and skips all three; the user's global JAX configuration (its own persistent cache) is not touched.

The directory is ``$JAXDP_CACHE_DIR/programs`` (default ``$XDG_CACHE_HOME/jaxdp/xla/programs``, i.e.
``~/.cache/jaxdp/xla/programs``, beside the command line's JAX cache); ``JAXDP_CACHE_DIR=off`` turns it off, and
:func:`enable` sets it for this process.  The key covers the function, its static arguments, the argument
structure, shapes and dtypes, the JAX and jaxlib versions, the device and its CPU, ``XLA_FLAGS`` and a digest of
jaxdp's own source files: an edited or upgraded jaxdp, or another machine sharing the directory, never runs a
stale program.  Traced arguments (a user's ``jit``/``vmap``/``grad``) bypass the cache.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import pathlib
import pickle
import platform
import tempfile
import threading

import jax

__all__ = ["QUICK_COMPILE", "call", "compiled_here", "directory", "enable", "enabled", "forget_loaded", "quick_options"]

#: XLA options for the programs of a method registered with ``quick_compile`` (concrete inputs only; a user's own
#: ``jit`` compiles with its own options).  XLA:CPU's legacy elemental emitters compile the accountants' long
#: chains of scalar special functions much faster than the fusion emitters (the same values to rounding), but make loops
#: over wide vectors slower: a method opts in where its queries stay within 1.2x (the measurements:
#: ``benchmarks/results/startup.md``).  XLA versions without the option (jaxlib >= 0.11) compile as usual.
QUICK_COMPILE = (("xla_cpu_use_fusion_emitters", False),)

_UNSET = object()
_DIR = _UNSET  # pathlib.Path, None (off) or _UNSET (read JAXDP_CACHE_DIR on first use)
_LOADED: dict = {}  # key -> compiled program
_KEYS: dict = {}  # the cheap part of a key -> its digest
_COMPILED_HERE = 0  # programs this process traced and compiled (not loaded)
_NOTIFIED: set = set()
_LOG = logging.getLogger("jaxdp.compile")


def enable(directory) -> None:
    """Keeps compiled programs under ``directory`` for this process (``None`` turns the cache off)."""
    global _DIR
    _DIR = None if directory is None else pathlib.Path(directory)
    if _DIR is not None:
        _DIR.mkdir(parents=True, exist_ok=True)


def directory() -> pathlib.Path | None:
    """Where compiled programs are kept (None: nowhere), from :func:`enable` or ``JAXDP_CACHE_DIR``."""
    global _DIR
    if _DIR is _UNSET:
        where = os.environ.get("JAXDP_CACHE_DIR")
        if where == "off":
            _DIR = None
        else:
            if not where:
                base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
                where = os.path.join(base, "jaxdp", "xla")
            try:
                enable(os.path.join(where, "programs"))
            except OSError:  # a read-only home: every process compiles
                _DIR = None
    return _DIR


def enabled() -> bool:
    return directory() is not None


def compiled_here() -> int:
    """How many programs this process has traced and compiled through the cache (loaded ones not counted)."""
    return _COMPILED_HERE


def forget_loaded() -> None:
    """Drops the programs held in memory (the files stay): the next call reads them from disk again."""
    _LOADED.clear()


@functools.cache
def _source_digest() -> str:
    root = pathlib.Path(__file__).parent.parent  # the jaxdp package
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


@functools.cache
def _machine() -> str:
    """What an executable depends on beyond the program: versions, device, CPU features, XLA's flags."""
    import jaxlib

    device = jax.devices()[0]
    cpu = ""
    try:  # XLA:CPU compiles for the host's instruction set
        with open("/proc/cpuinfo") as f:
            cpu = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        cpu = platform.processor()
    return repr(
        (
            jax.__version__,
            jaxlib.__version__,
            device.platform,
            device.device_kind,
            platform.machine(),
            hashlib.sha256(cpu.encode()).hexdigest(),
            os.environ.get("XLA_FLAGS", ""),
        )
    )


def _signature(static, treedef, leaves, options) -> tuple:
    """What a program compiled from one function depends on: its static arguments, the argument structure, shapes
    and dtypes, the x64 mode and the compiler options."""
    return (
        tuple(sorted(static.items())),
        treedef,
        tuple((x.shape, str(x.dtype)) for x in leaves),
        jax.config.jax_enable_x64,
        options,
    )


def _key(fn, static, treedef, leaves, options=()) -> str:
    cheap = (fn.__module__, fn.__qualname__, *_signature(static, treedef, leaves, options))
    key = _KEYS.get(cheap)
    if key is None:
        parts = (*cheap[:3], str(treedef), *cheap[4:], _machine(), _source_digest())
        key = _KEYS[cheap] = hashlib.sha256(repr(parts).encode()).hexdigest()[:32]
    return key


@functools.cache
def _accepted(options: tuple) -> tuple:
    """``options`` where this XLA knows them all, else ``()`` (checked once, on a one-op program)."""
    try:
        jax.jit(lambda x: x + 1).lower(0.0).compile(compiler_options=dict(options))
        return options
    except Exception:  # an XLA without them ("No such compile option"): compile as usual
        return ()


def quick_options(quick: bool) -> tuple:
    """The compiler options of a ``quick_compile`` method's concrete-input programs here (``()``: none)."""
    return _accepted(QUICK_COMPILE) if quick else ()


def call(jitted, fn, args: tuple, static: dict, *, keep: bool = True, quick: bool = False):
    """``jitted(*args, **static)``, through a compiled program kept on disk when the cache is enabled.

    ``keep=False``: not on disk (a program holding code the key does not cover: a user's registered method or
    mechanism class).  ``quick``: compiled with :data:`QUICK_COMPILE` where this XLA has those options."""
    leaves, treedef = jax.tree_util.tree_flatten(args)
    # (under jax.disable_jit the plain function runs op by op, as the user asked; a compiled program cannot)
    traced = any(isinstance(x, jax.core.Tracer) for x in leaves)
    if traced or jax.config.jax_disable_jit:
        return jitted(*args, **static)
    options = quick_options(quick)
    on_disk = keep and directory() is not None
    if not on_disk and not options:
        return jitted(*args, **static)
    leaves = [jax.numpy.asarray(x) for x in leaves]
    if not on_disk:
        return _in_memory(jitted, static, treedef, leaves, options)
    key = _key(fn, static, treedef, leaves, options)
    compiled = _LOADED.get(key)
    if compiled is None:
        compiled = _LOADED[key] = _load_or_compile(key, fn, static, treedef, leaves, options)
    return compiled(*leaves)


_IN_MEMORY: dict = {}


def _in_memory(jitted, static, treedef, leaves, options):
    """``jitted`` on ``leaves`` compiled with ``options``, kept in this process only (jit's own cache cannot take
    compiler options per call)."""
    key = (jitted, *_signature(static, treedef, leaves, options))
    args = jax.tree_util.tree_unflatten(treedef, leaves)
    compiled = _IN_MEMORY.get(key)
    if compiled is None:
        compiled = _IN_MEMORY[key] = jitted.lower(*args, **static).compile(compiler_options=dict(options))
    return compiled(*args)


def _flat(fn, static, treedef):
    def flat(*xs):  # flat array arguments: the key, not a pickled tree, describes the structure
        return fn(*jax.tree_util.tree_unflatten(treedef, xs), **static)

    return flat


def _load_or_compile(key, fn, static, treedef, leaves, options=()):
    """The compiled program: read, or compiled and written (kept in memory only where it cannot be serialised)."""
    global _COMPILED_HERE
    from jax.experimental import serialize_executable

    path = _DIR / f"{key}.xla"
    try:
        payload, in_tree, out_tree = pickle.loads(path.read_bytes())
        return serialize_executable.deserialize_and_load(payload, in_tree, out_tree)
    except Exception:  # missing, truncated or unreadable: compile afresh
        pass
    _notify(static)
    compiled, fresh = _compile(_flat(fn, static, treedef), leaves, options)
    _COMPILED_HERE += 1
    if not fresh:
        return compiled
    try:
        data = pickle.dumps(serialize_executable.serialize(compiled))
    except Exception:  # a backend that cannot serialise: this process keeps the program in memory
        return compiled
    try:  # written atomically: a concurrent reader never sees half a file
        fd, tmp = tempfile.mkstemp(dir=_DIR, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache: the program still runs
    return compiled


_HITS = threading.local()


def _count_hit(event, **kwargs):
    if event == "/jax/compilation_cache/cache_hits":
        _HITS.count = getattr(_HITS, "count", 0) + 1


@functools.cache
def _listen_for_hits() -> bool:
    try:
        jax.monitoring.register_event_listener(_count_hit)
        return True
    except Exception:  # no monitoring here: never serialise (see _compile)
        return False


def _compile(flat, leaves, options=()):
    """``(compiled, fresh)``: ``fresh`` is False when the executable came from JAX's own persistent cache (a user's,
    or the tests'): an XLA:CPU executable loaded from there serialises without its code ("Function ... not found"
    when the copy runs), so only what this process compiled itself is kept."""
    listening = _listen_for_hits()
    before = getattr(_HITS, "count", 0)
    compiled = jax.jit(flat).lower(*leaves).compile(compiler_options=dict(options) if options else None)
    return compiled, listening and getattr(_HITS, "count", 0) == before


def _notify(static) -> None:
    """Says once per method and process that a program is being compiled (how long: benchmarks/results/startup.md),
    on the ``jaxdp.compile`` logger (stderr by default; the command line keeps it for a terminal)."""
    method = static.get("method")
    if method is None or method in _NOTIFIED:
        return
    _NOTIFIED.add(method)
    _LOG.warning("jaxdp: compiling the %r accountant for this mechanism (once per machine: kept in %s)", method, _DIR)
