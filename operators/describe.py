"""A readable description of a task's graph, sizes and constants: what an LLM composer is asked to write."""

from __future__ import annotations

import json
from typing import Any

from operators.graph import op_nodes
from operators.render import as_graph, task_name


def describe_graph(row: dict[str, Any]) -> str:
    """Describe the graph of a task row (needs `graph`; uses `shape_variants` when present)."""
    g = as_graph(row["graph"])
    consts = g.graph["constants"]
    inputs = [(v, d) for v, d in g.nodes(data=True) if d["kind"] == "input"]
    ops = op_nodes(g)
    lines = [f"Task {row.get('name') or task_name(g)}: {len(ops)} operator(s), "
             f"{'a DAG' if row.get('is_dag') else 'a chain'}; forward({', '.join(v for v, _ in inputs)})."]
    lines.append("Module-level size constants: " + ", ".join(f"{k} = {v}" for k, v in consts.items()))
    init_args = g.graph["init_args"]
    lines.append("Constructor arguments, in order (get_init_inputs): " + (", ".join(init_args) or "none"))
    lines.append("Inputs (get_inputs draws them fresh each call):")
    for v, d in inputs:
        lines.append(f"  {v} = {d['expr']}  # shape {d['shape']}, {d['dtype']}")
    lines.append("Operators, in topological order (each must appear in the code and actually run):")
    for i, var in enumerate(ops, 1):
        d = g.nodes[var]
        args = ", ".join(f"{k}={src}" for k, src in d["args"].items())
        lines.append(f"  {i}. {var} = {d['op']} ({d['category']}) on {args} -> shape {d['shape']}")
        if d["init"]:
            lines.append(f"     module: self.{d['attr']} = {d['init']}")
        for attr, expr in d["tensors"]:
            lines.append(f"     tensor: self.{attr} = {expr}")
        lines.append(f"     reference call: {d['call']}")
        params = {k: v for k, v in d["params"].items() if k not in ("rest", "kshape", "ishape")}
        if params:
            lines.append(f"     parameters: {json.dumps(params, sort_keys=True)}")
        lines.append(f"     ATen ops it runs: {', '.join(dict.fromkeys(d['aten'])) or 'none (layout only)'}")
    lines.append(f"Output: {g.graph['output']} with shape {g.nodes[g.graph['output']]['shape']}")
    if row.get("shape_variants"):
        lines.append(f"The code must also run with these constant overrides: {row['shape_variants']}")
    return "\n".join(lines)
