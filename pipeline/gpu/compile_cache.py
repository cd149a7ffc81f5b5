"""Inductor's on-disk cache, checked instead of trusted: binaries cut short are deleted before a worker compiles
anything and again after any compile failure, and a compile that still fails is tried once more in a private,
empty cache before its failure counts.

How an artefact breaks: the C++ compiler writes its output in place (`g++ ... -o <key>.main.so`) and inductor
loads any file that exists at its content-addressed path. A worker killed mid-link (SIGKILL, the out-of-memory
killer, a lost machine) leaves a short or empty file there, and every later compile that needs it, in the
resumed run or in any run sharing the cache, goes wrong: `ImportError: ...main.so: file too short`, or, when it
is the vector-ISA probe inductor builds once per cache, no error at all: the probe "fails", inductor
generates scalar code (slower timings) or code that no longer compiles against cached kernels.

A binary counts as broken when it is empty or its ELF header does not fit the file (the linker writes the
header and section table last). One whose inductor lock is held is being written and is left alone. A broken
artefact of another kind (a precompiled header) is what the private retry is for: when it works, the shared
copies of every binary it built are deleted, so they are rebuilt on their next use.
Imports torch and stdlib only (the harness runs on a bare GPU image).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import struct
import tempfile

# what a compile leaves that a kill can cut short; ELF ones can be checked
BINARY_SUFFIXES = (".so", ".o", ".gch", ".pch", ".cubin", ".hsaco")
ELF_SUFFIXES = (".so", ".o", ".cubin")


def broken_elf(path: str) -> bool:
    """Empty, not ELF, or cut short (its section header table ends past the end of the file)."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError:
        return False  # gone meanwhile: nothing to repair
    if size == 0 or len(head) < 52 or head[:4] != b"\x7fELF":
        return True
    end = "<" if head[5] == 1 else ">"
    if head[4] == 2:  # 64-bit
        if len(head) < 64:
            return True
        shoff = struct.unpack(end + "Q", head[0x28:0x30])[0]
        shentsize, shnum = struct.unpack(end + "HH", head[0x3A:0x3E])
    else:
        shoff = struct.unpack(end + "I", head[0x20:0x24])[0]
        shentsize, shnum = struct.unpack(end + "HH", head[0x2E:0x32])
    return shoff + shentsize * shnum > size


@contextlib.contextmanager
def _unlocked(cache: str, name: str):
    """Yields True while holding inductor's lock of this artefact (it is not being built), else False."""
    lock = os.path.join(cache, "locks", name.split(".")[0] + ".lock")
    try:
        fd = os.open(lock, os.O_RDWR)
    except OSError:
        yield True  # no lock file: no inductor process builds it
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        yield False
        return
    try:
        yield True
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def repair(cache: str) -> list[str]:
    """Delete the broken binaries of an inductor cache directory; returns their paths relative to it."""
    removed: list[str] = []
    if not cache or not os.path.isdir(cache):
        return removed
    for root, dirs, files in os.walk(cache):
        dirs[:] = [d for d in dirs if d not in ("locks", "fxgraph", "aotautograd")]  # no binaries in those
        for name in files:
            if not name.endswith(ELF_SUFFIXES):
                continue
            path = os.path.join(root, name)
            if not broken_elf(path):
                continue
            with _unlocked(cache, name) as free:
                if free and broken_elf(path):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
                        removed.append(os.path.relpath(path, cache))
    return removed


def _forget_in_memory() -> None:
    """Drop what this process keeps from earlier compiles (loaded modules, code caches keyed by path)."""
    import torch._dynamo as dynamo
    from torch._inductor.utils import clear_caches

    dynamo.reset()
    clear_caches()


def shared_dir() -> str:
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return cache_dir()


class InductorCache:
    """Switches one process between the shared inductor cache and a private one kept under `scratch`."""

    def __init__(self, scratch: str | None = None) -> None:
        self.scratch = scratch if scratch and os.path.isdir(scratch) else tempfile.gettempdir()
        self.private: str | None = None
        self._env: str | None = None
        self.shared = ""

    def repair_shared(self) -> list[str]:
        """`repair` the shared cache and forget what this process loaded from it."""
        removed = repair(self.shared or shared_dir())
        if removed:
            _forget_in_memory()
        return removed

    def use_private(self) -> str:
        """Compile in a new, empty cache from now on (until `use_shared`); returns its path."""
        if self.private is None:
            self._env = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
            self.shared = shared_dir()
        else:
            shutil.rmtree(self.private, ignore_errors=True)
        self.private = tempfile.mkdtemp(prefix="opsynth-inductor-", dir=self.scratch)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = self.private
        _forget_in_memory()
        return self.private

    def purge_shared(self) -> list[str]:
        """Delete from the shared cache each binary the private compile built (same name, same content address):
        a shared copy is what failed. Returns the relative paths removed."""
        removed: list[str] = []
        if self.private is None or not self.shared:
            return removed
        for root, _, files in os.walk(self.private):
            for name in files:
                if not name.endswith(BINARY_SUFFIXES):
                    continue
                rel = os.path.relpath(os.path.join(root, name), self.private)
                with _unlocked(self.shared, name) as free, contextlib.suppress(FileNotFoundError):
                    if free:
                        os.unlink(os.path.join(self.shared, rel))
                        removed.append(rel)
        return removed

    def use_shared(self) -> None:
        """Back to the shared cache; the private one is deleted (call once nothing compiled in it runs)."""
        if self.private is None:
            return
        if self._env is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = self._env
        shutil.rmtree(self.private, ignore_errors=True)
        self.private = None
        _forget_in_memory()
