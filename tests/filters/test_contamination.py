"""Fingerprints and the three detectors, on tiny hand-written sources."""

import numpy as np

from filters.contamination import (
    ReferenceMatrix,
    ast_fingerprint,
    ast_ratio,
    ast_tokens,
    code_tokens,
    compare,
    fingerprints,
    minhash_jaccard,
    minhashes,
    normalize_ops,
)

CONV_RELU = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    """Conv then ReLU then bias."""
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        x = self.conv(x)
        x = torch.relu(x)
        x = x + self.bias
        return x

batch_size = 128
in_channels, out_channels, kernel_size = 3, 16, 3
bias_shape = (out_channels, 1, 1)

def get_inputs():
    return [torch.rand(batch_size, in_channels, 32, 32)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size, bias_shape]
'''

RENAMED = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, a, b, k, s):
        super().__init__()
        self.c1 = nn.Conv2d(a, b, k)
        self.offset = nn.Parameter(torch.randn(s))

    def forward(self, inp: torch.Tensor) -> torch.Tensor:
        inp = self.c1(inp)  # the conv
        inp = torch.relu(inp)
        inp = inp + self.offset
        return inp

N = 7
a, b, k = 5, 9, 5
s = (b, 1, 1)

def get_inputs():
    return [torch.rand(N, a, 64, 64)]

def get_init_inputs():
    return [a, b, k, s]
'''

MATMUL = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)

N = 1024

def get_inputs():
    return [torch.rand(N, N), torch.rand(N, N)]

def get_init_inputs():
    return []
'''

CLEAN = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x, y):
        z = torch.cumsum(x, dim=self.dim)
        w = torch.logsumexp(y, dim=self.dim, keepdim=True)
        return torch.where(z > w, z.sin(), w.cos()) * 3.0

def get_inputs():
    return [torch.rand(4, 8), torch.rand(4, 8)]

def get_init_inputs():
    return [1]
'''


def test_ast_fingerprint_ignores_names_literals_docstrings_and_annotations():
    assert ast_tokens(CONV_RELU) == ast_tokens(RENAMED)
    assert ast_ratio(ast_fingerprint(CONV_RELU), ast_fingerprint(RENAMED)) == 1.0


def test_ast_fingerprint_keeps_the_operators():
    gelu = CONV_RELU.replace("torch.relu", "torch.nn.functional.gelu")
    s = ast_ratio(ast_fingerprint(CONV_RELU), ast_fingerprint(gelu))
    assert 0.9 < s < 1.0
    # functional spelling through F. or torch. is one token
    assert ast_tokens(CONV_RELU.replace("torch.relu", "F.relu")) == ast_tokens(CONV_RELU)
    assert ast_ratio(ast_fingerprint(CONV_RELU), ast_fingerprint(CLEAN)) < 0.7


def test_unparsable_source_has_empty_fingerprint():
    assert ast_tokens("class Model(:\n") == []
    assert ast_ratio([], ast_fingerprint(CONV_RELU)) == 0.0


def test_code_tokens_drop_comments_docstrings_and_numbers():
    toks = code_tokens(CONV_RELU)
    assert "<num>" in toks and "128" not in toks
    assert not any("Conv then ReLU" in t for t in toks)


def test_code_tokens_normalize_identifiers_only_when_asked():
    toks = code_tokens(RENAMED, normalize_ids=True)
    assert "inp" not in toks and "c1" not in toks and "ID" in toks
    assert "relu" in toks and "Conv2d" in toks  # API names after a dot stay
    assert "inp" in code_tokens(RENAMED)


def test_minhash_identical_and_empty():
    m = minhashes([CONV_RELU, CONV_RELU.replace("# x", ""), CLEAN, ""])
    j = minhash_jaccard(m, m)
    assert j[0, 1] == 1.0
    assert j[0, 2] < 0.5
    assert j[3, 3] == 0.0  # an empty source matches nothing, not even itself


def test_normalize_ops_unifies_inplace_and_drops_views():
    assert normalize_ops(["aten.convolution", "aten.view", "aten.relu_", "aten.add"]) == ("convolution", "relu", "add")
    assert normalize_ops(["aten._softmax"]) == ("_softmax",)
    assert normalize_ops(None) == ()


def _ref(codes, ops):
    fp = fingerprints(codes, ops)
    return ReferenceMatrix([f"level1/{i}_p" for i in range(len(codes))], fp["ast"], fp["minhash"], list(fp["ops"]))


def test_compare_fires_each_detector_for_its_own_kind_of_copy():
    ref = _ref([CONV_RELU, MATMUL], [["aten.convolution", "aten.relu", "aten.add"], ["aten.mm"]])
    tasks = fingerprints(
        [RENAMED, CLEAN, CLEAN, CONV_RELU],
        [None,
         ["aten.convolution", "aten.relu_", "aten.view", "aten.add"],  # same ops, different code
         ["aten.convolution", "aten.relu", "aten.add", "aten.sigmoid"],  # longer: not the whole signature
         None])
    rows = compare(tasks, ref)
    # a renamed copy: same normalized AST, and the same identifier-normalized shingles
    assert rows[0]["detectors_fired"] == ["ast", "minhash"] and rows[0]["kb_nearest"] == "level1/0_p"
    assert rows[1]["detectors_fired"] == ["op_signature"] and rows[1]["kb_op_signature_nearest"] == "level1/0_p"
    assert rows[2]["contaminated"] is False and rows[2]["kb_op_signature_match"] is False
    assert set(rows[3]["detectors_fired"]) == {"ast", "minhash"} and rows[3]["kb_minhash_jaccard"] == 1.0
    for r in rows:
        assert 0.0 <= r["kb_ast_similarity"] <= 1.0 and r["kb_ast_nearest"] is not None


def test_single_op_task_matches_single_op_problem_only_as_a_whole():
    ref = _ref([MATMUL, CONV_RELU], [["aten.mm"], ["aten.convolution", "aten.relu", "aten.add"]])
    tasks = fingerprints([CLEAN, CLEAN], [["aten.mm"], ["aten.convolution"]])
    rows = compare(tasks, ref)
    assert rows[0]["kb_op_signature_match"] and rows[0]["kb_nearest"] == "level1/0_p"
    assert not rows[1]["kb_op_signature_match"]


def test_thresholds_are_respected():
    ref = _ref([CONV_RELU], [None])
    tasks = fingerprints([RENAMED], None)
    # renamed, resized, re-commented: without template lines the content is the same text
    assert compare(tasks, ref, ast_threshold=1.0, minhash_threshold=1.0)[0]["detectors_fired"] == ["ast", "minhash"]
    assert compare(tasks, ref, ast_threshold=1.01, minhash_threshold=1.01)[0]["detectors_fired"] == []
    tanh = fingerprints([RENAMED.replace("torch.relu", "torch.tanh")], None)
    assert compare(tanh, ref, ast_threshold=1.0, minhash_threshold=1.0)[0]["detectors_fired"] == []
    assert compare(tanh, ref, ast_threshold=0.9, minhash_threshold=1.0)[0]["detectors_fired"] == ["ast"]
    assert "minhash" in compare(tanh, ref, ast_threshold=1.0, minhash_threshold=0.5)[0]["detectors_fired"]


def test_upper_bound_is_never_below_the_exact_ratio():
    codes = [CONV_RELU, RENAMED, MATMUL, CLEAN, CONV_RELU.replace("x = x + self.bias", "x = x * 2.0")]
    fp = fingerprints(codes, None)
    ref = ReferenceMatrix([str(i) for i in range(len(codes))], fp["ast"], fp["minhash"], list(fp["ops"]))
    bound = ref.ast_upper_bound(fp["ast"])
    exact = np.array([[ast_ratio(a, b) for b in fp["ast"]] for a in fp["ast"]])
    assert (bound + 1e-6 >= exact).all()
    assert np.allclose(np.diag(bound), 1.0)


def test_bit_parallel_lcs_matches_dynamic_programming():
    import random

    from filters.contamination import difflib_ratio, lcs_length, lcs_masks

    def dp(a, b):
        prev = [0] * (len(b) + 1)
        for x in a:
            cur = [0]
            for j, y in enumerate(b):
                cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
            prev = cur
        return prev[-1]

    rng = random.Random(0)
    for _ in range(200):
        a = [rng.randrange(6) for _ in range(rng.randrange(1, 50))]
        b = [rng.randrange(6) for _ in range(rng.randrange(1, 50))]
        assert lcs_length(len(a), lcs_masks(a), b) == dp(a, b)
        assert ast_ratio(a, b) + 1e-9 >= difflib_ratio(a, b)
