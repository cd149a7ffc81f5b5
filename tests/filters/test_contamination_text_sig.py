"""Text signature of untraceable Hugging Face model wrappers (KernelBench level-4 style), on synthetic sources.

Nothing here imports transformers or reaches the Hub: the sources are only parsed.
"""

from filters.contamination import (
    ReferenceMatrix,
    compare,
    fingerprints,
    hf_model_ids,
    normalize_ops,
    text_signature,
)

LEVEL4 = '''
import torch
from transformers import AutoModelForCausalLM, AutoConfig

class Model(torch.nn.Module):
    def __init__(self, model_name, config):
        super().__init__()
        self.model_name = model_name
        self.config = config
        self.model = AutoModelForCausalLM.from_pretrained(self.model_name, config=self.config)

    def forward(self, x):
        return self.model(x).logits

model_name = "acme/tiny-lm-7b"
config = AutoConfig.from_pretrained(model_name)
vocab_size = config.vocab_size
sequence_length = 256
batch_size = 32

def get_inputs():
    return [torch.randint(0, vocab_size, (batch_size, sequence_length))]

def get_init_inputs():
    return [model_name, config]
'''

# renamed, wrapped in a no-op, sizes changed, the id spelled as a concatenation and passed only through
# get_init_inputs: the text detectors fall well short, the model id is still there
DISGUISED = '''
"""Auto-generated operator benchmark."""
import torch
import torch.nn as nn
import transformers as tf

class Model(nn.Module):
    def __init__(self, v_q, v_w):
        super(Model, self).__init__()
        self.v_a = v_q
        self.v_b = tf.AutoModelForCausalLM.from_pretrained(self.v_a, config=v_w)
        self.v_c = nn.Identity()

    def forward(self, v_x):
        v_x = self.v_c(v_x)

        def v_body(v_x):
            v_y = self.v_b(v_x)
            return v_y.logits
        return v_body(v_x)
v_n = 64
v_s = 512

def get_inputs():
    return [torch.randint(0, 1000, (v_n, v_s))]

def get_init_inputs():
    return ["ACME/" + "tiny-lm-7b", tf.AutoConfig.from_pretrained("acme/tiny-lm-7b")]

def v_unused(t):
    return t
'''

OTHER_MODEL = LEVEL4.replace("acme/tiny-lm-7b", "acme/other-lm")

# torch only; it even carries the id string, but nothing loads a model from it
CLEAN = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, name):
        super().__init__()
        self.name = name
        self.proj = nn.Linear(256, 256)

    def forward(self, x):
        return torch.softmax(self.proj(x), dim=-1)

batch_size = 32

def get_inputs():
    return [torch.rand(batch_size, 256)]

def get_init_inputs():
    return ["acme/tiny-lm-7b"]
'''


def _ref() -> ReferenceMatrix:
    codes = [LEVEL4, LEVEL4.replace("= 256", "= 1024")]  # one model id, two problems (sizes differ)
    fp = fingerprints(codes, None)  # untraceable: no ops, like KernelBench level 4 offline
    return ReferenceMatrix(["level4/1_tiny_bs32_seq256", "level4/2_tiny_bs32_seq1024"], fp["ast"], fp["minhash"],
                           list(fp["ops"]), fp["text_sig"])


def test_model_ids_follow_assignments_init_inputs_and_concatenation():
    assert hf_model_ids(LEVEL4) == ["acme/tiny-lm-7b"]
    assert hf_model_ids(DISGUISED) == ["acme/tiny-lm-7b"]
    assert text_signature(LEVEL4) == ("model:acme/tiny-lm-7b", "const:32", "const:256")
    assert hf_model_ids(CLEAN) == [] and text_signature(CLEAN) == ()  # no transformers import, no signature
    assert hf_model_ids("class Model(:") == []


def test_disguised_model_wrapper_fires_the_op_signature_detector_as_a_text_match():
    rows = compare(fingerprints([DISGUISED, LEVEL4.replace("= 32", "= 16")], None), _ref())
    for r in rows:
        assert r["contaminated"] and r["kb_op_signature_match"] and "op_signature" in r["detectors_fired"]
        assert r["_op_signature_via"] == "text:acme/tiny-lm-7b"
        assert r["kb_op_signature_nearest"] in ("level4/1_tiny_bs32_seq256", "level4/2_tiny_bs32_seq1024")
    # the disguise beats both text detectors: only the model id catches it
    assert rows[0]["detectors_fired"] == ["op_signature"]
    assert rows[0]["kb_ast_similarity"] < 0.9 and rows[0]["kb_minhash_jaccard"] < 0.7
    # with sizes 16x256 kept from problem 1 the matching size constant picks it
    assert rows[1]["kb_nearest"] == "level4/1_tiny_bs32_seq256"


def test_clean_torch_task_and_other_model_are_not_text_matches():
    rows = compare(fingerprints([CLEAN, OTHER_MODEL], None), _ref())
    assert not rows[0]["contaminated"] and not rows[0]["kb_op_signature_match"]
    assert rows[0]["_op_signature_via"] is None
    # another model in the same wrapper: no model-id match (the text detectors judge it on their own)
    assert not rows[1]["kb_op_signature_match"] and "op_signature" not in rows[1]["detectors_fired"]


def test_text_match_respects_the_op_signature_switch():
    rows = compare(fingerprints([DISGUISED], None), _ref(), use_op_signature=False)
    assert not rows[0]["kb_op_signature_match"] and rows[0]["_op_signature_via"] is None


def test_rsub_and_sub_are_one_op():
    assert normalize_ops(["aten.mul", "aten.rsub", "aten.clamp"]) == normalize_ops(["aten.mul", "aten.sub", "aten.clamp"])
