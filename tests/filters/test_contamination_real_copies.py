"""Detectors on the forms real copies take: functional rewrites, shared boilerplate, one-op programs."""

from filters.contamination import (
    ReferenceMatrix,
    compare,
    content_tokens,
    core_ops,
    fingerprints,
    op_overlap,
    shape_key,
    shapes_agree,
)

REF = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    """Model that performs a transposed convolution, subtracts a bias term, and applies tanh activation."""
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape, stride=2, padding=1, output_padding=1):
        super(Model, self).__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding, output_padding=output_padding)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        x = self.conv_transpose(x)
        x = x - self.bias
        x = torch.tanh(x)
        return x

batch_size = 32
in_channels = 64
out_channels = 64
height = width = 256
kernel_size = 4
bias_shape = (out_channels, 1, 1)

def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size, bias_shape]
'''
# same boilerplate and docstring, other operators
LOOKALIKE = REF.replace("x = x - self.bias\n        x = torch.tanh(x)", "x = torch.sigmoid(x) * 2.0\n        x = x.abs()")
REF_OPS = ["aten.convolution", "aten.sub", "aten.tanh"]
LOOK_OPS = ["aten.convolution", "aten.sigmoid", "aten.mul", "aten.abs"]


def _ref(codes, ops, live=None, shapes=None):
    fp = fingerprints(codes, ops, live, shapes)
    return ReferenceMatrix([f"level2/{i}_p" for i in range(len(codes))], fp["ast"], fp["minhash"], list(fp["ops"]),
                           None, list(fp["core"]), list(fp["shape"]))


def test_core_ops_drop_glue_dropout_and_the_batchnorm_counter():
    meta_dropout = ["aten.empty_like", "aten.bernoulli_", "aten.div_", "aten.mul"]
    module_form = ["aten.addmm", "aten.add_", "aten.native_batch_norm", *meta_dropout, "aten.relu"]
    functional_form = ["aten.addmm", "aten.native_batch_norm", "aten.relu"]
    assert core_ops(module_form) == core_ops(functional_form) == ("addmm", "native_batch_norm", "relu")
    assert core_ops(["aten.zeros_like", "aten.copy_", "aten.native_dropout", "aten.mul"]) == ("mul",)
    # with live ops the tracer already removed the counter: an add before a norm is real computation
    assert core_ops(["aten.add", "aten.native_batch_norm"], live=True) == ("add", "native_batch_norm")


def test_shape_key_is_an_equality_pattern_and_a_size_a_resize_keeps():
    full, resized = shape_key([[32, 32, 512, 64]] * 3), shape_key([[16, 16, 256, 32]] * 3)
    assert full == "a,a,b,c|a,a,b,c|a,a,b,c@27" and resized == "a,a,b,c|a,a,b,c|a,a,b,c@23"
    assert shapes_agree(full, resized)
    assert shape_key([[32, 32, 1, 64], [32, 32, 512, 64]]) == "a,a,1,b|a,a,c,b@25"
    assert shape_key([[4, 8], None]) == "a,b|-@5" and shape_key(None) == ""
    assert not shapes_agree(shape_key([[3, 5, 7]]), shape_key([[64, 128, 65536]]))  # same pattern, 2^19 apart
    assert shapes_agree("", full)  # unknown: nothing to disagree with


def test_template_lines_are_not_content():
    toks = " ".join(content_tokens(REF))
    assert "import" not in toks and "def" not in toks and "get_init_inputs" not in toks and "super" not in toks
    assert "ConvTranspose2d" in toks and "tanh" in toks


def test_shared_boilerplate_with_other_ops_is_not_a_text_match():
    ref = _ref([REF], [REF_OPS], [REF_OPS], [[[32, 64, 256, 256]]])
    text_only = compare(fingerprints([LOOKALIKE], None), ref)[0]
    traced = compare(fingerprints([LOOKALIKE], [LOOK_OPS], [LOOK_OPS], [[[32, 64, 256, 256]]]), ref)[0]
    assert text_only["kb_minhash_jaccard"] >= 0.5  # the text alone looks alike
    assert text_only["contaminated"]  # without a trace there is nothing else to go on
    assert not traced["contaminated"], traced
    assert op_overlap(core_ops(LOOK_OPS), core_ops(REF_OPS)) < 0.5


def test_functional_rewrite_matches_at_core_and_says_so():
    bn_ref = ["aten.t", "aten.addmm", "aten.add_", "aten.native_batch_norm", "aten.relu"]
    ref = _ref([REF], [bn_ref], [["aten.t", "aten.addmm", "aten.native_batch_norm", "aten.relu"]], [[[128, 512]]])
    rewrite = ["aten.t", "aten.addmm", "aten.native_batch_norm", "aten.empty_like", "aten.bernoulli_", "aten.div_",
               "aten.mul", "aten.relu"]
    extra_mean = [*rewrite, "aten.mean"]
    rows = compare(fingerprints(["x = 1", "x = 1"], [rewrite, extra_mean]), ref)
    assert rows[0]["kb_op_signature_match"] and rows[0]["kb_op_normalization"] == "core"
    assert rows[1]["kb_op_signature_match"] and rows[1]["kb_op_normalization"] == "core + mean"
    exact = compare(fingerprints(["x = 1"], [bn_ref]), ref)[0]
    assert exact["kb_op_normalization"] == "exact"


def test_one_op_programs_need_the_shape_pattern_too():
    sdpa = ["aten._scaled_dot_product_flash_attention_for_cpu"]
    full = [[32, 32, 512, 1024]] * 3
    ref = _ref([REF], [sdpa], [sdpa], [full])
    resized = [[16, 16, 256, 512]] * 3
    kv_cache = [[16, 16, 1, 512], [16, 16, 4096, 512], [16, 16, 4096, 512]]
    rows = compare(fingerprints(["x = 1"] * 3, [sdpa] * 3, [sdpa] * 3, [resized, kv_cache, None]), ref)
    assert rows[0]["kb_op_signature_match"]  # a resized copy keeps the pattern
    assert not rows[1]["kb_op_signature_match"]  # a KV-cache decode step computes something else
    assert rows[2]["kb_op_signature_match"]  # shapes unknown (a tasks table's aten_ops): the signature decides


def test_an_extra_reduction_counts_only_as_a_summary_and_not_on_a_lone_reduction():
    gn = [[512, 16, 128, 128]]
    ref = _ref([REF, REF], [["aten.native_group_norm"], ["aten.sum"]], [["aten.native_group_norm"], ["aten.sum"]],
               [gn, [[64, 128, 128000]]])
    rows = compare(fingerprints(["x = 1"] * 4, [["aten.native_group_norm", "aten.mean"], ["aten.native_group_norm", "aten.max"],
                                               ["aten.sum", "aten.sum"], ["aten.sum", "aten.mean"]],
                                None, [gn, gn, [[64, 128, 128000]], [[64, 128, 128000]]]), ref)
    assert rows[0]["kb_op_normalization"] == "core + mean"  # a rewrite that reports the mean of the problem's output
    assert not rows[1]["kb_op_signature_match"]  # a max over channels after a GroupNorm is a new task
    assert not rows[2]["kb_op_signature_match"] and not rows[3]["kb_op_signature_match"]  # another reduction problem


def test_long_programs_match_in_any_order_and_text_agrees_with_the_op_match():
    lstm = [f"aten.{op}" for op in ("addmm", "sigmoid", "tanh", "mul", "add") * 4000]
    ref = _ref([REF], [lstm], [lstm], [[[10, 512, 128]]])
    shuffled = lstm[1:] + lstm[:1]
    rows = compare(fingerprints([REF, "x = 1", "x = 1"], [lstm, shuffled, lstm[:-5]]), ref)
    assert rows[0]["detectors_fired"] == ["ast", "op_signature", "minhash"] and rows[0]["kb_ast_similarity"] == 1.0
    assert rows[1]["kb_op_multiset_match"] and not rows[1]["kb_op_signature_match"]
    assert not rows[2]["kb_op_multiset_match"]


def test_text_alike_needs_nearly_the_same_computation_unless_verbatim():
    ref_ops = ["aten.convolution", "aten.sub", "aten.tanh", "aten.mul", "aten.add"]
    ref = _ref([REF], [ref_ops], [ref_ops], [[[32, 64, 256, 256]]])
    one_swapped = ["aten.convolution", "aten.sub", "aten.sigmoid", "aten.mul", "aten.add"]  # Jaccard 4/6
    reordered = ["aten.convolution", "aten.mul", "aten.sub", "aten.add", "aten.tanh"]
    fewer = ["aten.convolution", "aten.sub", "aten.tanh"]  # Jaccard 3/5, as a resize that drops layers
    rows = compare(fingerprints([LOOKALIKE, LOOKALIKE, REF, LOOKALIKE], [one_swapped, reordered, fewer, fewer]), ref,
                   ast_threshold=0.5, minhash_threshold=0.3)
    assert 0.5 <= rows[0]["kb_ast_similarity"] < 0.95
    assert not rows[0]["contaminated"], rows[0]  # boilerplate alike, one activation of five swapped
    assert rows[1]["kb_op_normalization"] == "core kinds"  # the same ops in another order, the text alike
    assert rows[2]["contaminated"] and rows[2]["kb_ast_similarity"] == 1.0  # verbatim text, fewer layers traced
    assert not rows[3]["contaminated"]  # the same ops as rows[2] with text that is only alike


def test_a_resize_keeps_the_kinds_of_ops():
    block = ["aten.convolution", "aten.native_batch_norm", "aten.relu", "aten.cat"]
    ref_ops = block * 10
    ref = _ref([REF], [ref_ops], [ref_ops], [[[32, 64, 256, 256]]])
    fewer_layers = block * 5  # multiset Jaccard 0.5: the same op kinds, half the layers
    other_kind = block[:3] * 5 + ["aten.add"] * 5
    rows = compare(fingerprints([LOOKALIKE, LOOKALIKE, "x = 1"], [fewer_layers, other_kind, fewer_layers]), ref,
                   ast_threshold=0.5, minhash_threshold=0.3)
    assert rows[0]["contaminated"] and "ast" in rows[0]["detectors_fired"], rows[0]
    assert rows[0]["kb_op_normalization"] == "core kinds"
    assert not rows[1]["contaminated"], rows[1]  # alike text, another kind of op in place of cat
    assert not rows[2]["contaminated"], rows[2]  # the same kinds of ops alone are common to unrelated programs
