"""The sampler's own WL hash and graph JSON equal networkx's (task ids and stored graphs stay as they were)."""

import json
import warnings

import networkx as nx

from operators.render import as_graph
from operators.sample import sample_tasks, wl_hash
from pipeline.rundir.config import load_preset


def test_wl_hash_and_graph_json_match_networkx():
    rows = sample_tasks(load_preset("demo").sample, 3, range(25), set())
    assert any(r["is_dag"] for r in rows)
    for r in rows:
        g = as_graph(r["graph"])
        assert json.loads(r["graph"]) == nx.node_link_data(g, edges="edges")
        assert r["graph"] == json.dumps(nx.node_link_data(g, edges="edges"))
        h = nx.DiGraph()
        labels = {}
        for n, d in g.nodes(data=True):
            labels[n] = f"{n}|{d['kind']}|{d['shape']}"
            h.add_node(n, label=labels[n])
        for u, v, d in g.edges(data=True):
            h.add_edge(u, v, arg=d["arg"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = nx.weisfeiler_lehman_graph_hash(h, node_attr="label", edge_attr="arg", iterations=3)
        assert wl_hash(labels, [(u, v, d["arg"]) for u, v, d in g.edges(data=True)]) == want
