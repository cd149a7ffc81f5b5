"""What a task's compiled graph was made of: short hashes of the output-code modules inductor loaded while the task
compiled, and how many benchmarks inductor timed meanwhile (autotuning, pad_mm). Two runs of the same task whose
compile verdicts differ can then tell a different program (hashes differ) from a choice made by timing (benchmarks
> 0) from the same program computing other bits."""

from __future__ import annotations

import functools
import hashlib
import re
import sys
from typing import Any

# inductor writes where each kernel's file lies, and the process's count of graphs so far, into the output code:
# neither is the program
_NOT_THE_PROGRAM = re.compile(r"^# (kernel path|AOT ID): .*$", re.MULTILINE)
_benchmarks = [0]


def _py_code_cache() -> Any:
    """inductor's PyCodeCache once inductor is imported (a task compiled), else None: importing it here would cost
    a worker that never compiles its seconds of imports."""
    codecache = sys.modules.get("torch._inductor.codecache")
    return getattr(codecache, "PyCodeCache", None)


def code_mark() -> int:
    """Where the list of loaded output-code modules stands now (pass it to code_hashes_since)."""
    cache = _py_code_cache()
    return len(cache.modules) if cache is not None else 0


def source_hash(source: str, cache_dir: str = "") -> str:
    """12 hex digits of sha256 over an output-code module's source without the places of its files: the same
    program in a private or a shared inductor cache hashes alike."""
    if cache_dir:
        source = source.replace(cache_dir, "<cache>")
    return hashlib.sha256(_NOT_THE_PROGRAM.sub("", source).encode()).hexdigest()[:12]


def code_hashes_since(mark: int) -> str:
    """Comma-joined source_hash of each graph's output code loaded since `mark` (in load order; all of them when
    the list was cleared meanwhile), "" when none was. Kernel modules are left out: the output code holds their
    source, and which of them a worker loads anew depends on what it compiled before."""
    cache = _py_code_cache()
    if cache is None:
        return ""
    mods = cache.modules[mark:] if len(cache.modules) >= mark else list(cache.modules)
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir
        where = cache_dir()
    except Exception:  # noqa: BLE001 - an older layout: hash the paths in as they are
        where = ""
    out = []
    for mod in mods:
        path = getattr(mod, "__file__", None)
        if not path or not callable(getattr(mod, "call", None)):
            continue
        try:
            with open(path, encoding="utf-8") as f:
                out.append(source_hash(f.read(), where))
        except OSError:
            out.append("missing")
    return ",".join(out)


def count_benchmarks(benchmarker: Any, name: str = "benchmark_gpu") -> bool:
    """Count every call of `benchmarker.name` (inductor's timing of autotuning configs and of pad_mm's choices) in
    this process; benchmarks_run() reads the count. False when there is no such method or it is counted already."""
    fn = getattr(benchmarker, name, None)
    if fn is None or getattr(fn, "_counted", False):
        return False

    @functools.wraps(fn)
    def counted(*args: Any, **kwargs: Any) -> Any:
        _benchmarks[0] += 1
        return fn(*args, **kwargs)

    counted._counted = True  # type: ignore[attr-defined]
    setattr(benchmarker, name, counted)
    return True


def benchmarks_run() -> int:
    """How many benchmarks count_benchmarks has seen in this process."""
    return _benchmarks[0]
