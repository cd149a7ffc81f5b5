"""Bytecode for the packages the profile workers import, where the installation ships none: compiled once, on
every host core, into a cache folder of our own.

Why: a GPU image whose torch came without `__pycache__` (and does not write one) compiles every module it
imports from source, in every fresh interpreter. On the H200 image that made the fork server's imports of torch,
Dynamo and inductor 13.7 s with the page cache warm (16.6 s cold), and
each worker compiled Triton and inductor's code generators again at its first compile: the GPU idled meanwhile.
With PYTHONPYCACHEPREFIX pointing at a folder we can write, an interpreter reads its bytecode there (and writes
it there, unless PYTHONDONTWRITEBYTECODE says not to); compiling the packages' sources into it ahead, on every
core, turns a serial compile inside the import into a parallel one before it.

Only where the installation lacks bytecode (`needs_cache`): where pip compiled it, a prefix would only make
every interpreter compile again into the new folder. Tests folders are left out: nothing imports them.
Stdlib only: the fork server runs it before it imports anything else.
"""

from __future__ import annotations

import compileall
import importlib.util
import os
import re
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

# what the fork server's imports and a worker's first compile import (sys.modules after them on a CUDA build:
# torch 1,289 modules, sympy 420, networkx 285, numpy 99, mpmath 51; Triton at inductor's first CUDA compile)
PACKAGES = ("torch", "triton", "sympy", "networkx", "numpy", "mpmath", "jinja2", "markupsafe", "filelock")
SKIP = re.compile(r"[/\\](tests?|testing)[/\\]")
PREFIX_VAR = "PYTHONPYCACHEPREFIX"
COMPILE_AHEAD_VAR = "OPSYNTH_COMPILE_AHEAD"  # set in the fork server's environment: the packages to compile


def cache_dir() -> Path:
    """Where the bytecode goes: $OPSYNTH_PYCACHE, else the user's cache folder."""
    if explicit := os.environ.get("OPSYNTH_PYCACHE"):
        return Path(explicit)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "opsynth" / "pycache"


def _package_init(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith("__init__.py"):
        return None
    return Path(spec.origin)


def ships_bytecode(package: str = "torch") -> bool:
    """Whether `package` (not imported) has this interpreter's bytecode next to its sources; True when it is not
    installed (nothing to do)."""
    init = _package_init(package)
    if init is None:
        return True
    return (init.parent / "__pycache__" / f"__init__.{sys.implementation.cache_tag}.pyc").exists()


def needs_cache(env: dict[str, str], probe: str = "torch") -> bool:
    """Whether workers started with `env` need our bytecode folder: `probe` ships no bytecode and the caller set
    no prefix of its own."""
    return not env.get(PREFIX_VAR) and not ships_bytecode(probe)


def with_cache(env: dict[str, str], packages: Iterable[str] = PACKAGES, probe: str = "torch") -> dict[str, str]:
    """`env` for the fork server (and fresh workers) that reads bytecode from cache_dir() and compiles `packages`
    into it ahead; `env` unchanged when needs_cache says no. PYTHONDONTWRITEBYTECODE stays as it is: the imports
    then read what was compiled ahead and write nothing else (inductor's generated modules stay unwritten too)."""
    if not needs_cache(env, probe):
        return env
    out = dict(env)
    out[PREFIX_VAR] = str(cache_dir())
    out[COMPILE_AHEAD_VAR] = ",".join(packages)
    return out


def source_files(packages: Iterable[str]) -> list[Path]:
    """The packages' Python sources outside tests folders, largest first (the longest compiles start first)."""
    files: list[tuple[int, Path]] = []
    for name in packages:
        init = _package_init(name)
        if init is None:
            continue
        for root, _dirs, names in os.walk(init.parent):
            for n in names:
                path = Path(root, n)
                if n.endswith(".py") and not SKIP.search(str(path)):
                    try:
                        files.append((path.stat().st_size, path))
                    except OSError:
                        continue
    return [p for _, p in sorted(files, key=lambda sp: -sp[0])]


def _compile(path: str) -> bool:
    # quiet=2: a file that does not compile (a Python 2 example, a template) is the import's business, not ours
    return bool(compileall.compile_file(path, quiet=2))


def compile_ahead(packages: Iterable[str], workers: int | None = None) -> dict[str, float]:
    """Compile the packages' sources into this interpreter's bytecode location (sys.pycache_prefix) on `workers`
    processes (every core by default); files with fresh bytecode cost a stat. Forks: call it before threads
    exist (the fork server does, before its imports)."""
    t0 = time.perf_counter()
    files = [str(p) for p in source_files(packages)]
    workers = max(1, workers or os.cpu_count() or 1)
    if workers == 1 or len(files) < 2:
        ok = sum(_compile(f) for f in files)
    else:
        with ProcessPoolExecutor(workers, mp_context=get_context("fork")) as pool:
            ok = sum(pool.map(_compile, files, chunksize=16))
    return {"files": len(files), "compiled_ok": ok, "seconds": round(time.perf_counter() - t0, 2)}


def compile_ahead_from_env() -> dict[str, float] | None:
    """What COMPILE_AHEAD_VAR asks for (the fork server's environment), or None when it asks nothing."""
    named = os.environ.get(COMPILE_AHEAD_VAR, "")
    if not named or sys.pycache_prefix is None:
        return None
    try:
        return compile_ahead([p for p in named.split(",") if p])
    except Exception as e:  # noqa: BLE001 - the imports then compile what they need themselves, as without it
        return {"error": f"{type(e).__name__}: {e}"[:200]}
