"""The reference index files a sampler reads: which files a spec (`builtin`, `builtin:NAME`, an index parquet) names,
and the op-signature keys of their problems. pyarrow only: a sampler's processes need no scipy. Building an index
(tracing, fingerprinting) is pipeline.rundir.reference's job."""

from __future__ import annotations

import functools
from pathlib import Path

import pyarrow.parquet as pq

from opsynth.errors import OpsynthError

REFERENCE_DIR = Path(__file__).resolve().parents[1] / "data" / "reference"
BUILTIN = REFERENCE_DIR / "kernelbench_main.index.parquet"


def is_index(path: Path) -> bool:
    return path.suffix == ".parquet" and {"ast", "minhash", "ops"} <= set(pq.read_schema(path).names)


def _index_files(spec: str) -> list[Path]:
    """The index parquet files a sampler-side reference spec names: `builtin` (every shipped index),
    `builtin:NAME`, or an index built by `opsynth reference build`."""
    if spec == "builtin" or spec.startswith("builtin:"):
        want = spec.partition(":")[2]
        files = sorted(REFERENCE_DIR.glob(f"kernelbench_{want or '*'}.index.parquet"))
        if not files:
            raise OpsynthError(f"sample.avoid_reference: no shipped reference index matches {spec!r} in "
                               f"{REFERENCE_DIR}; rebuild it with `opsynth reference build SOURCE --out {BUILTIN}` "
                               "or set sample.avoid_reference = []")
        return files
    path = Path(spec)
    if not path.is_file():
        raise OpsynthError(f"sample.avoid_reference: index file {spec!r} does not exist; build it with "
                           f"`opsynth reference build SOURCE --out {spec}`, or use `builtin`")
    if path.suffix != ".parquet" or not is_index(path):
        raise OpsynthError(f"sample.avoid_reference: {spec!r} is not a reference index (no ast/minhash/ops "
                           "columns); build one with `opsynth reference build SOURCE --out INDEX.parquet`")
    return [path]


@functools.lru_cache(maxsize=8)
def reference_op_signatures(specs: tuple[str, ...]) -> frozenset[str]:
    """Op-signature keys (detectors.contamination.signature_key) of every traced problem in the index files of
    `specs`: what decontaminate's op-signature detector matches a task's normalized ATen ops against. Read
    once per process (the ops column only, pyarrow alone: the sampler's processes need no scipy)."""
    from detectors.contamination import FINGERPRINT_VERSION, signature_key

    out: set[str] = set()
    for spec in specs:
        for f in _index_files(spec):
            cols = pq.read_table(f, columns=["ops", "fingerprint_version"]).to_pydict()
            old = sorted({v for v in cols["fingerprint_version"] if v != FINGERPRINT_VERSION})
            if old:
                raise OpsynthError(f"reference index {f} has fingerprint version {old}, this opsynth computes "
                                   f"{FINGERPRINT_VERSION}; rebuild it with `opsynth reference build SOURCE --out {f}`")
            out.update(signature_key(o) for o in cols["ops"] if o)
    return frozenset(out)
