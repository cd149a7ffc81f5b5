"""Identity glue: each rule removes its kind from a traced forward, and only with that rule on."""

import pytest

from detectors.contamination import ast_fingerprint, ast_ratio, normalize_ops
from operators.identity_glue import RULES, parse_rules
from operators.trace import shrink_sizes, trace_program

TEMPLATE = '''
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    """Matrix multiplication."""
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        BODY

N = 16
def get_inputs():
    return [torch.rand(N, N), torch.rand(N, N)]
def get_init_inputs():
    return []
'''
PLAIN = "return torch.matmul(A, B)"

# one disguise per rule: with every rule on it traces as the plain matmul, with its own rule off it does not
GLUED = {
    "arith": "A = A * 1.0\n        B = torch.where(torch.tensor(True), B + 0, A)\n        return torch.matmul(A ** 1, B) / 1",
    "copy": "C = torch.empty_like(A)\n        C.copy_(A)\n        return torch.matmul(torch.cat([C]), B.clone())",
    "shape": "return torch.matmul(A.t().t(), F.pad(B.unsqueeze(0).squeeze(0), (0, 0)))",
    "dropout": "return torch.matmul(torch.native_dropout(A, 0.0, True)[0], torch.native_dropout(B, 0.3, False)[0])",
    "idempotent": "return torch.relu(torch.relu(torch.matmul(A, B)))",
    "spelling": "return torch.einsum('ij,jk->ik', A, B)",
}
PLAIN_OF = {"idempotent": "return torch.relu(torch.matmul(A, B))"}


def _trace(body: str, rules=RULES) -> dict:
    return trace_program(TEMPLATE.replace("BODY", body), "meta", stand_ins=True, glue=rules)


@pytest.mark.parametrize("kind", RULES)
def test_each_rule_removes_its_glue_and_only_it(kind):
    plain = _trace(PLAIN_OF.get(kind, PLAIN))
    glued = _trace(GLUED[kind])
    assert normalize_ops(glued["ops"]) == normalize_ops(plain["ops"])
    assert normalize_ops(glued["live_ops"]) == normalize_ops(plain["live_ops"])
    assert glued["glue_removed"].get(kind, 0) >= 1
    off = _trace(GLUED[kind], [r for r in RULES if r != kind])
    assert normalize_ops(off["ops"]) != normalize_ops(plain["ops"])


def test_a_real_pointwise_op_stays():
    """A sampled matmul + GELU (or a scale by 2, or a real transpose) is not a level-1 matmul."""
    plain = normalize_ops(_trace(PLAIN)["ops"])
    for body in ("return F.gelu(torch.matmul(A, B))", "return torch.matmul(A * 2.0, B)",
                 "return torch.matmul(A.t(), B)", "return torch.matmul(A, B) + 1e-3",
                 "return torch.matmul(A, B) * torch.full((), 0.5)"):
        assert normalize_ops(_trace(body)["ops"]) != plain, body


def test_without_rules_every_op_is_recorded():
    got = trace_program(TEMPLATE.replace("BODY", GLUED["arith"]), "meta", stand_ins=True)
    assert "glue_removed" not in got and "aten.mul" in got["ops"]


def test_unknown_rule_is_refused_with_the_valid_ones():
    with pytest.raises(ValueError, match="arith"):
        parse_rules(["nope"])


@pytest.mark.parametrize("kind", RULES)
def test_the_ast_fingerprint_reads_through_each_kind(kind):
    """The issue's form: an inserted glue line, the docstring moved below it, the call respelled."""
    text = {"arith": "A = A * 1.0", "copy": "A = A.clone()", "shape": "A = A.view(A.shape)",
            "dropout": "A = F.dropout(A, p=0.0)", "idempotent": "A = torch.relu(A)\n        A = torch.relu(A)",
            "spelling": "A = A"}[kind]
    plain = TEMPLATE.replace("BODY", '"""The product."""\n        ' + PLAIN)
    if kind == "idempotent":
        plain = plain.replace(PLAIN, "A = torch.relu(A)\n        " + PLAIN)
    glued = TEMPLATE.replace("BODY", text + '\n        """The product."""\n        ' + PLAIN)
    if kind == "spelling":
        glued = glued.replace("torch.matmul(A, B)", "A @ B")
    on = ast_ratio(ast_fingerprint(plain), ast_fingerprint(glued))
    off = ast_ratio(ast_fingerprint(plain, [r for r in RULES if r != kind]),
                    ast_fingerprint(glued, [r for r in RULES if r != kind]))
    assert on == 1.0 and off < 1.0


def test_shrink_sizes_divides_large_module_constants():
    code = "N = 4096\nM = 32\nclass Model: pass\n"
    assert "N = 512" in shrink_sizes(code) and "M = 32" in shrink_sizes(code)


def test_where_meta_fails_the_trace_runs_small_on_cpu():
    from operators.trace import SMALL, trace_isolated

    code = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        idx = torch.nonzero(x > 0.5)  # a data-dependent size: meta cannot run it
        return x[idx[:, 0]].sum() * 1.0

N = 4096
def get_inputs():
    return [torch.rand(N, 8)]
def get_init_inputs():
    return []
'''
    meta_only = trace_isolated([code], devices=["meta"], glue="all")
    both = trace_isolated([code], devices=["meta", SMALL], glue="all", mem_limit_bytes=4 << 30)[0]
    assert not meta_only[0]["ok"]
    assert both["ok"] and both["device"] == SMALL and "aten.nonzero" in both["ops"]
    assert both["inputs"] == [[4096, 8]]  # the original shapes, for the shape detector
    assert both["glue_removed"].get("arith") == 1
