"""Reading torch's shared libraries and compiled modules into the page cache while the fork server imports them.

Why: on a machine that has not run torch since it booted, the fork server's imports (torch, Dynamo, inductor) took
9.4 s before the first worker could start (call 60, H200 host) against ~5 s with the files already cached: the
import reads its libraries by page faults, a few hundred kilobytes at a time, one file after another. A few
threads reading the same files front to back meanwhile turn that into large sequential reads that run in
parallel with the import's own work, so its faults find the pages in memory.

Which files: the shared libraries torch's extension module loads (its dynamic-linker closure, as `ldd` resolves
it, else every library in torch/lib and the nvidia wheels' lib folders) and torch's compiled modules (`__pycache__`, ~56
MB, most of which the server's imports read). Nothing here imports torch; a file that cannot be read is skipped (this is
an optimisation only).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CHUNK = 8 << 20
THREADS = 4


def _package_dir(name: str) -> Path | None:
    with contextlib.suppress(ImportError, ValueError):
        spec = importlib.util.find_spec(name)  # a top-level package: found, not imported
        if spec is not None and spec.submodule_search_locations:
            return Path(next(iter(spec.submodule_search_locations)))
    return None


def _linked_libraries(ext: Path) -> list[Path]:
    """The shared libraries `ext` loads, in the order the dynamic linker lists them; [] when ldd is missing."""
    try:
        out = subprocess.run(["ldd", str(ext)], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    found = [Path(m.group(1)) for m in re.finditer(r"=>\s+(/\S+)", out)]
    return [p for p in found if not str(p).startswith(("/lib", "/usr/lib"))]  # the system's are cached already


def torch_files() -> list[Path]:
    """The files the fork server's imports will read, largest libraries first; [] when torch is not installed."""
    torch_dir = _package_dir("torch")
    if torch_dir is None:
        return []
    libs: list[Path] = []
    exts = sorted([*torch_dir.glob("_C*.so"), *torch_dir.glob("lib/libtorch_global_deps.so")])
    for ext in exts:
        libs += _linked_libraries(ext)
    if not libs:
        site = torch_dir.parent
        libs = [*torch_dir.glob("lib/*.so*"), *site.glob("nvidia/*/lib/*.so*"), *site.glob("nvidia/cu*/lib/*.so*")]
    libs += exts
    triton = _package_dir("triton")
    if triton is not None:
        libs += triton.glob("_C/*.so")
    libs = sorted({p.resolve() for p in libs if p.is_file()}, key=lambda p: -p.stat().st_size)
    return libs + sorted(torch_dir.glob("**/__pycache__/*.pyc"))  # all of them: ~56 MB, most read at import


def _read(path: Path) -> int:
    n = 0
    with contextlib.suppress(OSError), open(path, "rb", buffering=0) as f:
        while chunk := f.read(CHUNK):
            n += len(chunk)
    return n


def prefetch(paths: list[Path], threads: int = THREADS) -> int:
    """Read every file of `paths` (the data is dropped: the page cache keeps it); the bytes read."""
    if not paths:
        return 0
    with ThreadPoolExecutor(max(1, min(threads, len(paths)))) as pool:
        return sum(pool.map(_read, paths))


def prefetch_in_background(paths_of=torch_files) -> threading.Thread:
    """prefetch(paths_of()) on a daemon thread, started now: a process that exits meanwhile does not wait for it."""
    t = threading.Thread(target=lambda: prefetch(paths_of()), name="opsynth-page-cache", daemon=True)
    t.start()
    return t


def page_cache_disabled() -> bool:
    """OPSYNTH_PREFETCH=0 turns it off (to measure a cold start without it)."""
    return os.environ.get("OPSYNTH_PREFETCH", "1") == "0"
