"""Reading the files a cold import of torch, Dynamo and inductor will read, many at once, ahead of the import.

Why: on a machine whose page cache is cold (every fresh GPU machine) the fork server's imports took 9.9-12.8 s
(calls 67-72) against 3.0 s for torch alone (call 66), and the GPU idled all that time. An import reads its
files one after another, each read a round trip to the disk; thousands of small modules (inductor, Dynamo, sympy,
Triton) make that latency, not bandwidth, the cost. Threads reading the same files in parallel fill the page
cache ahead of the import, which then finds them in memory.

The reader is a process of its own (`python -m pipeline.page_cache SECONDS PACKAGE...`), stdlib only: it never
shares a process with the fork server, whose forks must not inherit running threads. It reads Python files first
(what the import needs first and most often), then shared libraries smallest first, and stops at its time box
or when killed. It only reads: a package it cannot find is skipped.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path

# what the fork server's imports read on a CUDA build (sys.modules after them: torch 1,289 modules, sympy 420,
# networkx 285, numpy 99, mpmath 51; triton at inductor's CUDA import; nvidia's CUDA libraries at torch's)
PACKAGES = ("torch", "sympy", "networkx", "numpy", "mpmath", "triton", "jinja2", "nvidia")
PYTHON_SUFFIXES = (".py", ".pyc")
LIBRARY_MARK = ".so"
THREADS = 32  # reads in flight: a network disk answers many at once as fast as one
CHUNK = 1 << 20


def package_dirs(packages: Iterable[str]) -> list[Path]:
    """The folders of the top-level packages found on this interpreter's path (a namespace package may have
    several), without importing them."""
    dirs: list[Path] = []
    for name in packages:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.submodule_search_locations:
            dirs.extend(Path(p) for p in spec.submodule_search_locations)
    return dirs


def files_to_read(dirs: Iterable[Path]) -> list[Path]:
    """Python sources and this interpreter's bytecode first, then shared libraries smallest first."""
    tag = sys.implementation.cache_tag
    python: list[Path] = []
    libraries: list[tuple[int, Path]] = []
    for top in dirs:
        for root, _subdirs, names in os.walk(top):
            for name in names:
                path = Path(root, name)
                if name.endswith(".py") or (name.endswith(".pyc") and f".{tag}." in name):
                    python.append(path)
                elif LIBRARY_MARK in name and not name.endswith((".py", ".pyc")):
                    try:
                        libraries.append((path.stat().st_size, path))
                    except OSError:
                        continue
    return python + [p for _, p in sorted(libraries)]


def read_all(paths: list[Path], threads: int = THREADS, deadline: float | None = None) -> dict[str, float]:
    """Read every file of `paths` (in order, `threads` at a time) until `deadline` (time.monotonic()); returns
    files, bytes and seconds read."""
    t0 = time.monotonic()
    lock = threading.Lock()
    state = {"next": 0, "files": 0, "bytes": 0}

    def reader() -> None:
        buf = bytearray(CHUNK)
        while True:
            with lock:
                i = state["next"]
                state["next"] += 1
            if i >= len(paths) or (deadline is not None and time.monotonic() > deadline):
                return
            got = 0
            try:
                with open(paths[i], "rb", buffering=0) as f:
                    while n := f.readinto(buf):
                        got += n
                        if deadline is not None and time.monotonic() > deadline:
                            break
            except OSError:
                continue
            with lock:
                state["files"] += 1
                state["bytes"] += got

    pool = [threading.Thread(target=reader, daemon=True) for _ in range(max(1, threads))]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return {"files": state["files"], "bytes": state["bytes"], "seconds": round(time.monotonic() - t0, 3)}


def warm(packages: Iterable[str] = PACKAGES, budget_s: float = 60.0, threads: int = THREADS) -> dict[str, float]:
    """Read the packages' files into the page cache within `budget_s` seconds."""
    deadline = time.monotonic() + budget_s
    found = files_to_read(package_dirs(packages))
    return {"listed": len(found), **read_all(found, threads, deadline)}


if __name__ == "__main__":
    # python -m pipeline.page_cache SECONDS [PACKAGE...]: one JSON line of what it read
    budget = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
    print(json.dumps(warm(sys.argv[2:] or PACKAGES, budget)), flush=True)
