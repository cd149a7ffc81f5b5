"""Graph -> KernelBench-format source: module attributes in __init__, the graph in forward in topological
order, size constants at module level, get_inputs drawing fresh random tensors, get_init_inputs.
"""

from __future__ import annotations

import json
from typing import Any

import networkx as nx

from operators.graph import op_nodes


def as_graph(graph: str | dict | nx.DiGraph) -> nx.DiGraph:
    if isinstance(graph, nx.DiGraph):
        return graph
    data = json.loads(graph) if isinstance(graph, str) else graph
    return nx.node_link_graph(data, directed=True, edges="links" if "links" in data else "edges")


def task_name(g: nx.DiGraph) -> str:
    """KernelBench-style name: Conv2d_GroupNorm_Gelu_ResidualAdd."""
    parts = []
    for var in op_nodes(g):
        d = g.nodes[var]
        stem = d["op"].rsplit(".", 1)[-1].strip("_")
        stem = stem if stem[:1].isupper() else "".join(p.capitalize() for p in stem.split("_"))
        srcs = [s for s in g.predecessors(var)]
        if len(srcs) == 2 and any(a in nx.ancestors(g, b) for a in srcs for b in srcs if a != b):
            stem = "Residual" + stem
        parts.append(stem)
    return "_".join(parts)


def render(graph: str | dict | nx.DiGraph, constants: dict[str, Any] | None = None) -> str:
    """The task module for `graph`; `constants` override module-level size constants (shape variants)."""
    g = as_graph(graph)
    consts = {**g.graph["constants"], **(constants or {})}
    inputs = [v for v, d in g.nodes(data=True) if d["kind"] == "input"]
    init_args = list(g.graph["init_args"])
    ops = op_nodes(g)
    lines = ["import torch", "import torch.nn as nn", "import torch.nn.functional as F", "", ""]
    lines.append("class Model(nn.Module):")
    lines.append(f'    """{" -> ".join(g.nodes[v]["op"] for v in ops)}"""')
    lines.append("")
    lines.append(f"    def __init__(self{''.join(', ' + a for a in init_args)}):")
    lines.append("        super().__init__()")
    for var in ops:
        d = g.nodes[var]
        if d["init"]:
            lines.append(f"        self.{d['attr']} = {d['init']}")
        for attr, expr in d["tensors"]:
            if expr.startswith("nn.Parameter("):
                lines.append(f"        self.{attr} = {expr}")
            else:
                lines.append(f'        self.register_buffer("{attr}", {expr})')
    lines.append("")
    lines.append(f"    def forward(self, {', '.join(inputs)}):")
    for var in ops:
        lines.append(f"        {var} = {g.nodes[var]['call']}")
    lines.append(f"        return {g.graph['output']}")
    lines += ["", ""]
    lines += [f"{k} = {v!r}" for k, v in consts.items()]
    lines += ["", ""]
    lines.append("def get_inputs():")
    for var in inputs:
        lines.append(f"    {var} = {g.nodes[var]['expr']}")
    lines.append(f"    return [{', '.join(inputs)}]")
    lines += ["", ""]
    lines.append("def get_init_inputs():")
    lines.append(f"    return [{', '.join(init_args)}]")
    return "\n".join(lines) + "\n"
