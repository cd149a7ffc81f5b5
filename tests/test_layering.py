"""The import layering the layout intends: every module of opsynth, operators, detectors, filters, pipeline and pinning
sits in one tier, and imports (at the top or inside a function) only modules of its own tier or one below. A new
module must be given a tier here, so the choice is made once, on purpose."""

import ast
import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("opsynth", "detectors", "operators", "measures", "filters", "pipeline", "pinning", "verify")

# bottom to top; within a tier, the first pattern that matches a module places it (exact names before wildcards)
TIERS: list[tuple[str, list[str]]] = [
    ("errors", ["opsynth.*"]),
    # what a task resembles (fingerprints, MinHash, canonical graphs) and the reference index files
    # operators.identity_glue is pure rules over ATen op records and ASTs: the detectors read through the same glue
    ("detectors", ["detectors.*", "operators.identity_glue"]),
    # what can be sampled and how it becomes code: catalog, graph, sizing, peak, render, trace, labels
    ("operators", ["operators.*"]),
    # the checks: a record and the config's section in, a reason or None out (labels reads operators' pins);
    # the old filters.contamination / filters.dedupe names
    # are the detectors' modules
    # what the checks read off a task's forwards (output checks, shortcut checks, cheap and exhaustive): torch only,
    # run by the GPU worker and the CPU pre-screen
    ("measures", ["measures.*"]),
    ("filters", ["filters.*"]),
    # the sampler draws tasks and screens them with the filter's output checks and the detectors' op signature
    ("sampler", ["operators.sample", "operators.prescreen", "operators.llm_composer"]),
    # pipeline, bottom up: plain contracts, the run directory, the profile worker, what is built from a run,
    # the stages, the command line
    ("pipeline contracts", ["pipeline.errors", "pipeline.rundir.config", "pipeline.rundir.schema", "pipeline.rundir.stage_defs",
                            "pipeline.gpu.worker_settings", "pipeline.progress", "pipeline.gpu.gpu_share",
                            "pipeline.gpu.compile_cache", "pipeline.gpu.compiled_code", "pipeline.gpu.mps", "pipeline.gpu.bytecode",
                            "pipeline.gpu.fork_server", "pipeline.gpu.lock_trace",
                            "pipeline.gpu.task_order",
                            "pipeline.gpu.tensor_checks"]),
    ("pipeline store", ["pipeline.rundir.store", "pipeline.rundir.selection", "pipeline.rundir.completeness",
                        "pipeline.rundir.reference", "pipeline.rundir.pack"]),
    ("pipeline worker", ["pipeline.gpu.harness", "pipeline.gpu.kernel_warmup", "pipeline.gpu.executors"]),
    ("pipeline outputs", ["pipeline.outputs.card", "pipeline.outputs.figures", "pipeline.outputs.docs_gen",
                          "pipeline.outputs.plots", "pipeline.outputs.hub", "pipeline.outputs.publish",
                          "pipeline.outputs.report", "pipeline.outputs.audit_export", "pipeline.outputs.recheck",
                          "pipeline.outputs.provenance"]),
    ("pipeline stages", ["pipeline.stages.*"]),
    # the reward a training job calls: candidate checks and timing over the task format (verify/)
    ("verify", ["verify", "verify.*"]),
    # the reward where trainers work (TRL, verl): adapters over verify_batch
    ("rl", ["opsynth.rl"]),
    ("cli", ["pipeline.cli"]),
    # scripts that regenerate operators' pinned data: they may use anything, nothing imports them
    ("pinning", ["pinning.*"]),
]
INITS = {*(set(PACKAGES) - {"verify"}), "pipeline.stages", "pipeline.rundir", "pipeline.gpu", "pipeline.outputs"}  # empty package __init__ modules: anyone may name them


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in (ROOT / pkg).rglob("*.py"):
            parts = p.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = p
    return out


def _tier(module: str) -> int:
    exact = [i for i, (_, pats) in enumerate(TIERS) for p in pats if p == module]
    if exact:
        return exact[0]
    wild = [i for i, (_, pats) in enumerate(TIERS) for p in pats if "*" in p and fnmatch.fnmatch(module, p)]
    assert wild, f"{module} has no tier in tests/test_layering.py TIERS: give it one"
    return wild[0]


def _imports(path: Path, known: set[str]) -> set[str]:
    """Modules of ours that `path` imports anywhere (lazy imports inside functions included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        else:
            continue
        for n in names:
            parts = n.split(".")
            hit = next((".".join(parts[:k]) for k in range(len(parts), 0, -1) if ".".join(parts[:k]) in known), None)
            if hit:
                found.add(hit)
    return found


def test_every_import_goes_down_or_sideways():
    mods = _modules()
    known = set(mods)
    bad = []
    for name, path in sorted(mods.items()):
        if name in INITS:
            continue
        mine = _tier(name)
        for target in sorted(_imports(path, known) - INITS - {name}):
            if _tier(target) > mine:
                bad.append(f"{name} ({TIERS[mine][0]}) imports {target} ({TIERS[_tier(target)][0]})")
    assert not bad, "imports that reach up a tier:\n" + "\n".join(bad)


def test_the_worker_reaches_no_stage():
    mods = _modules()
    for worker in ("pipeline.gpu.harness", "pipeline.gpu.worker_settings", "pipeline.gpu.executors"):
        assert not {t for t in _imports(mods[worker], set(mods)) if t.startswith("pipeline.stages")}, worker


def test_the_check_catches_an_upward_import(tmp_path):
    known = {"operators.sample", "pipeline.rundir.store"}
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from pipeline.rundir.store import RunDir\n")
    assert _imports(f, known) == {"pipeline.rundir.store"}
    assert _tier("pipeline.rundir.store") > _tier("operators.catalog")


# the one import an empty __init__ may make: `from opsynth import verify`, a lazy re-export of the library call
FACADES = {"opsynth": {"verify.api"}}


def test_package_inits_import_only_their_facade():
    mods = _modules()
    for name in sorted(INITS & set(mods)):
        got = _imports(mods[name], set(mods)) - {name}
        assert got <= FACADES.get(name, set()), f"{name}/__init__.py imports {sorted(got)}: only {FACADES.get(name)}"
