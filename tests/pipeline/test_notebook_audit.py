"""notebooks/audit.ipynb runs top to bottom against a tiny run directory and shows its numbers."""

import os
import re
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from pipeline.rundir.config import Config
from pipeline.rundir.schema import CONTAMINATION, TASKS
from pipeline.rundir.store import RunDir

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "audit.ipynb"


def _tiny_run(path: Path) -> RunDir:
    rd = RunDir(path)
    rd.init(Config())
    rd.write_shard("tasks", 0, [{"task_id": f"t{i}", "code": "x", "ops": ["nn.Conv2d", "F.gelu"][: 1 + i % 2]}
                                for i in range(5)], TASKS)
    rd.write_verdicts("import", [{"task_id": f"t{i}", "keep": i != 4, "reason": "" if i != 4 else
                                  "not KernelBench format: syntax error at line 1"} for i in range(5)])
    rd.replace_table("contamination", [{"task_id": f"t{i}", "contaminated": i == 1, "kb_nearest": "level1/54_conv",
                                        "kb_ast_similarity": 0.3 + 0.15 * i, "kb_minhash_jaccard": 0.1 * i,
                                        "kb_op_signature_match": i == 1,
                                        "detectors_fired": ["op_signature"] if i == 1 else []} for i in range(5)],
                     CONTAMINATION)
    rd.write_verdicts("decontaminate", [{"task_id": f"t{i}", "keep": i != 1, "reason": "contaminated by op_signature"
                                         if i == 1 else ""} for i in range(5)])
    return rd


def test_audit_notebook_executes(tmp_path, monkeypatch):
    rd = _tiny_run(tmp_path / "run")
    monkeypatch.setenv("OPSYNTH_RUN_DIR", str(rd.path))
    root = str(NOTEBOOK.parents[1])
    monkeypatch.setenv("PYTHONPATH", root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=60, kernel_name="python3", resources={"metadata": {"path": root}}).execute()
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert re.search(r"passed import check\s+4\b", text) and re.search(r"kept after decontaminate\s+3\b", text)
    assert "contaminated by op_signature" in text and "syntax error" in text
    assert re.search(r"^op_signature\s+1\b", text, re.M)
    assert not any(o.get("output_type") == "error" for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert sorted(p.name for p in (rd.path / "plots").glob("*.png")) == ["contamination_scores.png", "funnel.png",
                                                                         "op_coverage.png"]
