"""Fingerprints of a task's code and the three KernelBench contamination detectors.

A fingerprint holds no source text, only what the detectors compare:

- `ast`: the Model class, helper classes and module-level helper functions (a functional rewrite's
  `module_fn`; not get_inputs/get_init_inputs) as a pre-order sequence of normalized AST node tokens,
  each hashed to uint32; `super().__init__()` calls are template and dropped. User identifiers become `_`, literals become their type, torch/nn/F API names
  are kept with their module prefix dropped (`torch.relu` and `F.relu` are one token), docstrings and
  type annotations are dropped. AST similarity is 2*LCS/(len(a)+len(b)) over these sequences: the usual
  "ratio" of two sequences (difflib's ratio is a greedy lower bound of it); benchmarks/decontam_bench.py
  calibrates the 0.9 threshold (KernelBench problems vs each other, v0 vs main, disguised copies).
- `minhash`: datasketch MinHash (128 permutations) of 5-token shingles of the lexical token stream with
  comments, docstrings and numbers normalized away (short strings such as model ids are kept) and
  KernelBench's template lines removed (imports, class and def headers, `super().__init__()`, size
  constants, `self.a = a`, `return [a, b]`): what is left is what the module builds and computes.
- `ops`: the ATen ops that run in forward (traced on the meta device), normalized so module and
  functional spellings agree (in-place `relu_` is `relu`, `rsub` is `sub`; pure view/reshape/copy ops are
  dropped): `normalize_ops`, the exact signature.
- `core`: the ops the output depends on (dead ops such as BatchNorm's `num_batches_tracked` update, guards
  and printed reductions dropped by the tracer's data flow), with glue (allocations, fills, constants),
  dropout and, when data flow is unknown, BatchNorm's counter update removed: `core_ops`. A functional
  rewrite, a CUDA-graph wrapper and the module it copies share it.
- `shape`: the equality pattern of the input shapes (`a,b|a,b`: ranks, and which sizes are equal) and the
  log2 of their total size (`@27`), which a resize keeps (within SIZE_LOG2_SLACK): a single-call problem
  (level 1, or one or two core ops) matches a traced program only when this agrees as well, since one op
  alone (a softmax, a pooling, an attention call) is common to many unrelated tasks (a KV-cache decode step
  and level 1's self-attention differ only here).

Detectors: the op signature fires on an equal exact signature, an equal core signature, or a core signature
one reduction away (a rewrite that adds a final `mean`/`sum` as a summary, or drops a final reduction; never a
reduction next to a problem that is a lone reduction), or at `core kinds` (a multi-op program with the same kinds
of core ops as a problem that is not a single call, in other numbers, and text alike: AST >= 0.7 or MinHash >= 0.5);
`op_normalization` says which. AST and MinHash fire
only when the computation overlaps as well (core multiset Jaccard >= 0.75 with the problem they point at, >= 0.5
for a near-verbatim text, or the same kinds of ops in other numbers, as a resize has; and the shape pattern for one-
or two-op programs), so shared boilerplate is not shared content; a side without a trace (level 4, a failed trace) is compared by text alone.
- `text_sig`: for problems that cannot be traced offline because they load a Hugging Face model (KernelBench
  level 4), the model ids that reach a `transformers` entry point (`from_pretrained`, `AutoConfig`, ...) as
  `model:<id>`, plus the module's integer size constants as `const:<n>`. The model id is what the program
  computes; renaming, reordering or wrapping cannot remove it, so a shared model id fires the op-signature
  detector (recorded as a text match). Sources that do not import transformers have no text signature.

The all-pairs comparison is vectorized: a sparse matmul over the multiset of AST tokens gives an upper
bound on the ratio for every (task, reference) pair (the LCS cannot exceed the multiset intersection), and
the exact ratio (bit-parallel LCS) is computed only for pairs that could reach the threshold plus each
task's best candidates, so no firing pair is ever missed. Large inputs are split over worker processes.
"""

from __future__ import annotations

import ast
import difflib
import io
import keyword
import re
import tokenize
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

NUM_PERM = 128
SHINGLE = 5
MINHASH_SEED = 1
# 3: text_sig (model ids), rsub normalized to sub; 4: core ops, shape, template-free text; 5: identity glue removed
FINGERPRINT_VERSION = 5
REFINE_TOP = 2  # exact AST ratio for this many best upper-bound candidates per task (and all that can fire)

API_ROOTS = frozenset({"torch", "nn", "F", "functional", "math", "np", "numpy", "einops"})
KEEP_NAMES = frozenset({"self", "super", "range", "len", "int", "float", "list", "tuple", "dict", "min",
                        "max", "sum", "abs", "zip", "enumerate", "isinstance", "print", "None", "True",
                        "False", "torch", "nn", "F", "math", "np"})
# ATen ops that only change a tensor's metadata or copy it: renderers spell the same computation with or
# without them (x.view vs torch.flatten, F.relu(inplace=True) vs torch.relu), so they carry no signal.
NEUTRAL_OPS = frozenset({"view", "_unsafe_view", "reshape", "expand", "contiguous", "clone", "alias", "detach",
                         "lift_fresh", "_to_copy", "copy", "unsqueeze", "squeeze", "flatten", "as_strided",
                         "view_as", "expand_as", "reshape_as", "resolve_conj", "resolve_neg"})
# one computation, two ATen spellings: `1 - x` dispatches to rsub, `torch.sub(1, x)` to sub; `.t()`, `.T` (permute)
# and `.transpose(0, 1)` are one transpose
OP_ALIASES = {"rsub": "sub", "t": "transpose", "permute": "transpose"}
# transformers calls that take a model id (or a config made from one) as their first argument or keyword
HF_ENTRY_ATTRS = frozenset({"from_pretrained", "from_config", "for_model"})
HF_ID_KEYWORDS = frozenset({"pretrained_model_name_or_path", "model", "model_name_or_path", "config", "model_id"})
HF_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}(/[A-Za-z0-9][\w.-]{0,95})?")
# ops that build or fill tensors without reading the inputs: a wrapper's static buffers, a mask's zeros
GLUE_OPS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zero", "fill",
                      "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones",
                      "new_full", "scalar_tensor", "lift_fresh_copy", "_local_scalar_dense"})
DROPOUT_OPS = frozenset({"native_dropout", "dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout"})
BATCH_NORM_OPS = frozenset({"native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_functional",
                            "batch_norm", "cudnn_batch_norm", "_batch_norm_impl_index"})
# one of these added or dropped at the end of a copy (a `.mean()` to make a loss) keeps it a copy
REDUCTION_OPS = frozenset({"mean", "sum", "amax", "amin", "max", "min", "logsumexp", "var", "std", "norm",
                           "linalg_vector_norm", "prod"})
# the reductions a rewrite adds at the end to report a scalar summary (a loss): `core + <op>` counts only for these
# (a GroupNorm then a max over channels is a new task, not level 1's GroupNorm)
SUMMARY_OPS = frozenset({"mean", "sum"})
SHORT_PROGRAM = 2  # a core signature this short is a single call: it needs the input shape pattern as well
SIZE_LOG2_SLACK = 8  # input sizes within 2^8 of a single-call problem's still count as its shape (resizes)
STRICT_TEXT = 0.95  # a text score this high (a verbatim copy, resized) fires even when the shapes disagree
# core-op multiset Jaccard a text match needs with the problem it points at: text alike but not verbatim (shared
# KernelBench boilerplate) counts only when the computations are nearly the same (one op in four may differ: a
# composition that swaps one activation of a 3-6 op problem stays below it); a near-verbatim text (>= STRICT_TEXT)
# needs half, since a resize scales layer counts and with them the traced ops (DenseNet, deep MLPs)
OVERLAP_MIN = 0.75
OVERLAP_VERBATIM = 0.5
# the op detector's `core kinds`: a multi-op program with the same kinds of core ops as a problem (other counts: a
# resized RNN, a deeper MLP) counts when its text is alike as well, at these lower bars than the text detectors'
KINDS_AST = 0.7
KINDS_MINHASH = 0.5
TEMPLATE_FUNCS = frozenset({"get_inputs", "get_init_inputs"})
# identity-glue rules the text fingerprints read through (operators.identity_glue.RULES; the tracer applies the same)
GLUE_RULES = ("arith", "copy", "shape", "dropout", "idempotent", "spelling")


# ---- AST fingerprint -----------------------------------------------------------------------------
def _dotted(node: ast.AST) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def _is_docstring(node: ast.AST) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _is_super_init(node: ast.AST) -> bool:
    """`super().__init__(...)` / `super(Model, self).__init__()`: template, in every module."""
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute) and node.value.func.attr == "__init__"
            and isinstance(node.value.func.value, ast.Call) and isinstance(node.value.func.value.func, ast.Name)
            and node.value.func.value.func.id == "super")


def _emit(node: ast.AST, out: list[str]) -> None:
    if isinstance(node, ast.expr_context | ast.operator | ast.unaryop | ast.cmpop | ast.boolop):
        if not isinstance(node, ast.expr_context):
            out.append(type(node).__name__)
        return
    if _is_docstring(node) or _is_super_init(node):
        return
    if isinstance(node, ast.Name):
        out.append("Name:" + (node.id if node.id in KEEP_NAMES else "_"))
    elif isinstance(node, ast.Attribute):
        chain = _dotted(node)
        if chain and chain[0] in API_ROOTS:
            out.append("API:" + chain[-1])
        elif chain and chain[0] == "self":
            out.append("Self:_" + "".join(".attr" for _ in chain[2:]))
        else:
            out.append("Attr:" + node.attr)
            _emit(node.value, out)
    elif isinstance(node, ast.Constant):
        out.append("Const:" + type(node.value).__name__)
    elif isinstance(node, ast.arg):
        out.append("arg")
    elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        out.append("Def:" + (node.name if node.name in ("__init__", "forward") else "_"))
        _emit(node.args, out)
        for stmt in node.body:
            _emit(stmt, out)
    elif isinstance(node, ast.ClassDef):
        out.append("Class")
        for b in node.bases:
            _emit(b, out)
        for stmt in node.body:
            _emit(stmt, out)
    elif isinstance(node, ast.keyword):
        out.append("kw:" + (node.arg or "**"))
        _emit(node.value, out)
    elif isinstance(node, ast.AnnAssign):  # `x: T = v` is `x = v`
        out.append("Assign")
        _emit(node.target, out)
        if node.value is not None:
            _emit(node.value, out)
    else:
        out.append(type(node).__name__)
        for child in ast.iter_child_nodes(node):
            _emit(child, out)


def glue_free(code: str, glue: Any = GLUE_RULES) -> tuple[ast.Module | None, str]:
    """(AST with identity glue rewritten away, the source the text detectors read): the source is re-rendered from
    the AST only when glue was removed (`x = x * 1.0`, `torch.mm` for `torch.matmul`), else kept as written."""
    from operators.identity_glue import strip_source

    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None, code
    tree, changes = strip_source(tree, glue)
    if changes:
        try:
            return tree, ast.unparse(tree)
        except (ValueError, RecursionError):
            return tree, code
    return tree, code


def ast_tokens(code: str | ast.Module | None, glue: Any = GLUE_RULES) -> list[str]:
    """Normalized AST tokens of the module's classes and helper functions (the Model class, its helpers, a
    functional rewrite's `module_fn`), in source order, read through identity glue (`glue_free`); [] if
    unparsable. `code` may be an AST already read through glue."""
    tree = glue_free(code, glue)[0] if isinstance(code, str) else code
    if tree is None:
        return []
    out: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) or (isinstance(node, ast.FunctionDef) and node.name not in TEMPLATE_FUNCS):
            _emit(node, out)
    return out


def _h32(s: str) -> int:
    return zlib.crc32(s.encode())


def ast_fingerprint(code: str | ast.Module | None, glue: Any = GLUE_RULES) -> np.ndarray:
    return np.array([_h32(t) for t in ast_tokens(code, glue)], dtype=np.uint32)


def lcs_masks(a: Sequence[int]) -> dict[int, int]:
    """Bit masks of each token's positions in `a`, for `lcs_length`."""
    masks: dict[int, int] = {}
    for i, x in enumerate(a):
        masks[int(x)] = masks.get(int(x), 0) | (1 << i)
    return masks


def lcs_length(n_a: int, masks_a: dict[int, int], b: Sequence[int]) -> int:
    """Length of the longest common subsequence, bit-parallel (Allison-Dix / Hyyro): O(len(b)) big-int steps."""
    full = (1 << n_a) - 1
    v = full
    for y in b:
        u = v & masks_a.get(int(y), 0)
        v = ((v + u) | (v - u)) & full
    return n_a - v.bit_count()


def ast_ratio(a: Sequence[int], b: Sequence[int], masks_a: dict[int, int] | None = None) -> float:
    """2*LCS/(len(a)+len(b)) of two hashed token sequences (the ratio of an insert/delete-only edit distance)."""
    if len(a) == 0 or len(b) == 0:
        return 0.0
    return 2.0 * lcs_length(len(a), masks_a if masks_a is not None else lcs_masks(a), b) / (len(a) + len(b))


def difflib_ratio(a: Sequence[int], b: Sequence[int]) -> float:
    """difflib's ratio over the same sequences (a lower bound of `ast_ratio`; used to calibrate)."""
    if len(a) == 0 or len(b) == 0:
        return 0.0
    return difflib.SequenceMatcher(None, list(a), list(b), autojunk=False).ratio()


# ---- lexical tokens: MinHash and exact dedupe ---------------------------------------------------
def code_tokens(code: str, normalize_ids: bool = False) -> list[str]:
    """Lexical tokens with comments, docstrings and numbers removed; [] if it does not tokenize.

    With `normalize_ids`, user identifiers (names, and attributes of `self`) become `ID`, so a renamed copy
    has the same tokens; names after a dot (torch.relu, x.view) and keywords are kept.
    """
    out: list[str] = []
    prev = tokenize.NEWLINE
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING,
                            tokenize.ENDMARKER):
                continue
            if tok.type == tokenize.STRING and prev in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
                prev = tok.type  # a docstring or bare string statement
                continue
            prev = tok.type
            if tok.type == tokenize.NUMBER:
                out.append("<num>")
            elif tok.type == tokenize.STRING:
                # short strings name things (a model id, an einsum equation) and separate problems
                out.append(tok.string if len(tok.string) <= 40 else "<str>")
            elif tok.type == tokenize.NEWLINE:
                if out and out[-1] != ";":
                    out.append(";")
            else:
                out.append(tok.string)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return []
    if normalize_ids:
        out = [("ID" if t.isidentifier() and not keyword.iskeyword(t) and t not in KEEP_NAMES
                and (i == 0 or out[i - 1] != "." or (i > 1 and out[i - 2] == "self")) else t)
               for i, t in enumerate(out)]
    return out


def exact_text(code: str) -> str:
    """Code with comments, docstrings and whitespace normalized (literal values kept): the exact-dedupe key."""
    out: list[str] = []
    prev = tokenize.NEWLINE
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
                continue
            if tok.type == tokenize.STRING and prev in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
                prev = tok.type
                continue
            prev = tok.type
            out.append(";" if tok.type == tokenize.NEWLINE else tok.string)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return " ".join(code.split())
    return " ".join(out)


_TEMPLATE_LINE = re.compile(
    r"^(?:import |from |class |def |@|super \( .*\) \. __init__ \(|return(?: [\[(]?(?: ?(?:ID|<num>|,|None|True|False))*"
    r" ?[\])]?)? ;$|self \. ID = (?:ID|<num>|None|True|False) ;$|pass ;$)")
_CONST_TOKENS = frozenset({"ID", "<num>", "=", ",", "(", ")", "[", "]", ";", "None", "True", "False", "-"})


def content_tokens(code: str) -> list[str]:
    """Identifier-normalized lexical tokens without KernelBench's template lines (imports, class/def headers,
    `super().__init__()`, `self.a = a`, `return [a, b]`, size constants such as `batch_size = 16`)."""
    toks = code_tokens(code, normalize_ids=True)
    out: list[str] = []
    line: list[str] = []
    for t in toks:
        line.append(t)
        if t != ";":
            continue
        text = " ".join(line)
        if not _TEMPLATE_LINE.match(text) and not set(line) <= _CONST_TOKENS:
            out += line
        line = []
    if line and not _TEMPLATE_LINE.match(" ".join(line)) and not set(line) <= _CONST_TOKENS:
        out += line
    return out


def _shingles(tokens: list[str]) -> list[bytes]:
    if not tokens:
        return []
    if len(tokens) < SHINGLE:
        return [" ".join(tokens).encode()]
    return sorted({" ".join(tokens[i : i + SHINGLE]).encode() for i in range(len(tokens) - SHINGLE + 1)})


def minhashes(codes: Sequence[str], normalize_ids: bool = True) -> np.ndarray:
    """(n, NUM_PERM) uint32 MinHash signatures; an empty or untokenizable source gets all-max values.

    Contamination uses identifier-normalized tokens without template lines (`content_tokens`: a renamed
    KernelBench copy stays a copy, shared boilerplate is not shared content); dedupe keeps identifiers and
    template, since template-rendered tasks share their names and would all look alike without them.
    """
    from datasketch import MinHash

    shingles = [_shingles(content_tokens(c) if normalize_ids else code_tokens(c)) for c in codes]
    mhs = MinHash.bulk(shingles, num_perm=NUM_PERM, seed=MINHASH_SEED, scheme="affine32")
    out = np.stack([m.hashvalues for m in mhs]).astype(np.uint32) if mhs else np.zeros((0, NUM_PERM), np.uint32)
    return out


def minhash_jaccard(a: np.ndarray, b: np.ndarray, chunk: int = 512) -> np.ndarray:
    """Estimated Jaccard of every row of `a` against every row of `b`: (len(a), len(b)) float32."""
    out = np.zeros((len(a), len(b)), dtype=np.float32)
    empty_b = (b == np.uint32(0xFFFFFFFF)).all(axis=1)
    for i in range(0, len(a), chunk):
        block = a[i : i + chunk]
        out[i : i + chunk] = (block[:, None, :] == b[None, :, :]).mean(axis=2)
    out[:, empty_b] = 0.0  # an empty source matches nothing
    out[(a == np.uint32(0xFFFFFFFF)).all(axis=1)] = 0.0
    return out


# ---- operator signature ---------------------------------------------------------------------------
def normalize_ops(ops: Sequence[str] | None) -> tuple[str, ...]:
    """`aten.relu_` -> `relu`; metadata-only ops dropped."""
    out = []
    for op in ops or ():
        name = op.split(".", 1)[1] if op.startswith(("aten.", "prim.")) else op
        name = name.rstrip("_") if not name.startswith("_") else "_" + name[1:].rstrip("_")
        if name and name not in NEUTRAL_OPS:
            out.append(OP_ALIASES.get(name, name))
    return tuple(out)


def core_ops(ops: Sequence[str] | None, live: bool = False) -> tuple[str, ...]:
    """`normalize_ops` without glue (GLUE_OPS), dropout (a fused op, or meta's bernoulli -> div -> mul) and,
    unless `ops` are already the live ones, BatchNorm's counter update (the `add` right before it)."""
    norm = list(normalize_ops(ops))
    out: list[str] = []
    i = 0
    while i < len(norm):
        op = norm[i]
        if op == "bernoulli":  # x * (bernoulli(p) / (1 - p)): dropout as meta decomposes it
            i += 1
            if i < len(norm) and norm[i] == "div":
                i += 1
            if i < len(norm) and norm[i] == "mul":
                i += 1
            continue
        if not live and op == "add" and i + 1 < len(norm) and norm[i + 1] in BATCH_NORM_OPS:
            i += 1
            continue
        if op not in GLUE_OPS and op not in DROPOUT_OPS:
            out.append(op)
        i += 1
    return tuple(out)


def shape_key(shapes: Sequence[Sequence[int] | None] | None) -> str:
    """Input shapes as an equality pattern and a size: `a,b|a,b@20` (two inputs of one 2-D shape, 2^20 numbers
    in all), `1` for size 1, `-` for a non-tensor input; "" when unknown. A uniform resize keeps the pattern;
    a KV-cache query (length 1) does not."""
    if not shapes:
        return ""
    import math

    labels: dict[int, str] = {}
    parts = []
    total = sum(math.prod(int(d) for d in shp) for shp in shapes if shp is not None)
    for shp in shapes:
        if shp is None:
            parts.append("-")
            continue
        dims = []
        for d in shp:
            d = int(d)
            if d == 1:
                dims.append("1")
                continue
            if d not in labels:
                n = len(labels)
                labels[d] = (chr(97 + n % 26) + (str(n // 26) if n >= 26 else ""))
            dims.append(labels[d])
        parts.append(",".join(dims))
    return "|".join(parts) + f"@{round(math.log2(total)) if total > 0 else 0}"


def shapes_agree(a: str, b: str) -> bool:
    """Same equality pattern, total sizes within 2^SIZE_LOG2_SLACK (True when either is unknown)."""
    if not a or not b:
        return True
    pa_, _, sa = a.rpartition("@")
    pb, _, sb = b.rpartition("@")
    return pa_ == pb and abs(int(sa or 0) - int(sb or 0)) <= SIZE_LOG2_SLACK


def without_one(ops: Sequence[str], which: frozenset[str] = REDUCTION_OPS) -> list[tuple[tuple[str, ...], str]]:
    """Each signature `ops` gives with one op of `which` deleted, and the op deleted."""
    return [(tuple(ops[:i]) + tuple(ops[i + 1:]), op) for i, op in enumerate(ops) if op in which]


def _lone_reduction(core: Sequence[str]) -> bool:
    return len(core) == 1 and core[0] in REDUCTION_OPS


def op_overlap(a: Sequence[str], b: Sequence[str]) -> float:
    """Multiset Jaccard of two op sequences (1.0 for equal multisets, 0.0 for disjoint ones)."""
    from collections import Counter

    ca, cb = Counter(a), Counter(b)
    union = sum((ca | cb).values())
    return sum((ca & cb).values()) / union if union else 0.0


def signature_key(ops: Sequence[str]) -> str:
    return "|".join(ops)


def op_signature(aten_ops: Sequence[str] | None) -> str:
    """The op-signature detector's key of a task's traced ATen ops (a tasks-table `aten_ops` list): the sampler
    checks its draws with it, so a task it emits cannot fire that detector; "" when nothing remains."""
    return signature_key(normalize_ops(aten_ops))


def multiset_key(ops: Sequence[str]) -> str:
    return "|".join(sorted(ops))


# ---- text signature (untraceable Hugging Face model wrappers) -------------------------------------
def _str_value(node: ast.AST) -> str | None:
    """The value of a string expression built only from literals ("a" + "b", f"{'a'}b"), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _str_value(node.left), _str_value(node.right)
        return left + right if left is not None and right is not None else None
    if isinstance(node, ast.JoinedStr):
        parts = [_str_value(v.value if isinstance(v, ast.FormattedValue) and v.format_spec is None
                            and v.conversion == -1 else v) for v in node.values]
        return "".join(parts) if all(p is not None for p in parts) else None
    return None


def _ref_name(node: ast.AST) -> str | None:
    """`x` -> "x", `self.x` -> "self.x": the names a value can flow through."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return "self." + node.attr
    return None


def _flow(node: ast.AST, names: set[str], strings: list[str]) -> None:
    """Collect the string values and the names that `node` reads."""
    s = _str_value(node)
    if s is not None:
        strings.append(s)
        return
    n = _ref_name(node)
    if n is not None:
        names.add(n)
        if n.startswith("self."):
            return
    for child in ast.iter_child_nodes(node):
        _flow(child, names, strings)


def hf_model_ids(code: str) -> list[str]:
    """Sorted, lower-cased model ids that reach a transformers entry point; [] without a transformers import.

    Follows values back through assignments (`name = "gpt2"`, `self.name = name`), through tuple unpacking and
    from `get_init_inputs()` into `Model.__init__` parameters, so a renamed or wrapped copy keeps its id.
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return []
    hf_names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            hf_names |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.split(".")[0] == "transformers"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "transformers":
            hf_names |= {a.asname or a.name for a in node.names}
    if not hf_names:
        return []
    names: set[str] = set()
    strings: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        chain = _dotted(node.func) or []
        entry = isinstance(node.func, ast.Attribute) and node.func.attr in HF_ENTRY_ATTRS
        if not (entry or (chain and chain[0] in hf_names)):
            continue
        for arg in node.args[:1] if entry else ():  # pipeline("text-generation", model=...): the task is no id
            _flow(arg, names, strings)
        for kw in node.keywords:
            if kw.arg in HF_ID_KEYWORDS:
                _flow(kw.value, names, strings)
    # assignments, and get_init_inputs()' list feeding Model.__init__'s parameters, as (targets, value) edges
    edges: list[tuple[list[str], ast.AST]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Tuple | ast.List) and isinstance(node.value, ast.Tuple | ast.List) and len(
                        t.elts) == len(node.value.elts):
                    edges += [([_ref_name(a) or ""], b) for a, b in zip(t.elts, node.value.elts, strict=True)]
                else:
                    edges.append(([n for e in ast.walk(t) if (n := _ref_name(e))], node.value))
    init_params: list[str] = []
    init_values: list[ast.AST] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            init = next((f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
            init_params = [a.arg for a in init.args.args[1:]] if init else []
        elif isinstance(node, ast.FunctionDef) and node.name == "get_init_inputs":
            ret = next((r for r in ast.walk(node) if isinstance(r, ast.Return)), None)
            if ret is not None and isinstance(ret.value, ast.List | ast.Tuple):
                init_values = list(ret.value.elts)
    edges += [([p], v) for p, v in zip(init_params, init_values, strict=False)]
    done: set[str] = set()
    while names - done:
        todo = names - done
        done |= todo
        for targets, value in edges:
            if todo & set(targets):
                _flow(value, names, strings)
    return sorted({s.strip().lower() for s in strings if HF_ID.fullmatch(s.strip()) and not s.strip().isdigit()})


def size_constants(code: str) -> list[int]:
    """Integer constants assigned at module level (batch size, sequence length): the shape of a problem."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return []
    return sorted({n.value for s in tree.body if isinstance(s, ast.Assign) for n in ast.walk(s.value)
                   if isinstance(n, ast.Constant) and type(n.value) is int})


def text_signature(code: str) -> tuple[str, ...]:
    """`model:<id>` for every transformers model id, then `const:<n>` sizes; () for sources without model ids."""
    ids = hf_model_ids(code)
    if not ids:
        return ()
    return tuple([f"model:{m}" for m in ids] + [f"const:{c}" for c in size_constants(code)])


def model_ids(sig: Sequence[str]) -> list[str]:
    return [s[len("model:"):] for s in sig if s.startswith("model:")]


# ---- fingerprints --------------------------------------------------------------------------------
def fingerprints(codes: Sequence[str], ops: Sequence[Sequence[str] | None] | None = None,
                 live_ops: Sequence[Sequence[str] | None] | None = None,
                 shapes: Sequence[Sequence[Sequence[int] | None] | None] | None = None,
                 glue: Any = GLUE_RULES) -> dict[str, Any]:
    """Columnar fingerprints of many sources: ast (list of uint32 arrays), minhash (n, NUM_PERM), ops, core,
    shape, text_sig. `live_ops` (the tracer's data-flow slice) makes `core` exact; without it `core` comes
    from `ops`. The text fingerprints read through the identity-glue rules `glue` (`glue_free`)."""
    n = len(codes)
    free = [glue_free(c, glue) for c in codes]
    ops = ops if ops is not None else [None] * n
    live_ops = live_ops if live_ops is not None else [None] * n
    shapes = shapes if shapes is not None else [None] * n
    return {"ast": [ast_fingerprint(t, glue) for t, _ in free], "minhash": minhashes([text for _, text in free]),
            "ops": [normalize_ops(o) if o else () for o in ops],
            "core": [core_ops(lv, live=True) if lv else core_ops(o) if o else () for o, lv in zip(ops, live_ops, strict=True)],
            "shape": [shape_key(sh) for sh in shapes], "text_sig": [text_signature(c) for c in codes]}


# ---- the comparison -------------------------------------------------------------------------------
def _bag_rows(seqs: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(row, feature) pairs of the multiset encoding: the k-th copy of token t is feature (t, k)."""
    lens = np.array([len(s) for s in seqs], dtype=np.int64)
    if lens.sum() == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.uint64)
    row = np.repeat(np.arange(len(seqs)), lens)
    tok = np.concatenate([np.asarray(s, dtype=np.uint64) for s in seqs])
    order = np.lexsort((tok, row))
    row, tok = row[order], tok[order]
    idx = np.arange(len(tok))
    start = np.r_[True, (row[1:] != row[:-1]) | (tok[1:] != tok[:-1])]
    first = np.maximum.accumulate(np.where(start, idx, 0))
    occ = (idx - first).astype(np.uint64)
    return row, (tok << np.uint64(20)) | np.minimum(occ, np.uint64((1 << 20) - 1))


class ReferenceMatrix:
    """Reference fingerprints prepared for fast all-pairs comparison."""

    def __init__(self, keys: list[str], ast_seqs: list[np.ndarray], minhash: np.ndarray,
                 ops: list[tuple[str, ...]], text_sigs: list[tuple[str, ...]] | None = None,
                 core: list[tuple[str, ...]] | None = None, shapes: list[str] | None = None,
                 levels: list[int | None] | None = None):
        from collections import Counter

        from scipy import sparse

        self.keys, self.ast, self.minhash = keys, ast_seqs, minhash
        self.masks = [lcs_masks(a) for a in ast_seqs]
        row, feat = _bag_rows(ast_seqs)
        self.vocab, col = np.unique(feat, return_inverse=True)
        self.mat = sparse.csr_matrix((np.ones(len(row), np.float32), (row, col)),
                                     shape=(len(keys), len(self.vocab))).T.tocsr()
        self.lens = np.array([len(s) for s in ast_seqs], dtype=np.float32)
        self.by_multiset: dict[str, list[int]] = {}
        # exact signatures keyed by the op tuples: a recurrent program has ~10^5 ops, and hashing its tuple is
        # several times cheaper than joining it into a string key
        self.sig_t: dict[tuple[str, ...], list[int]] = {}
        self.ms_key: list[str] = [""] * len(keys)
        for i, o in enumerate(ops):
            if o:
                self.sig_t.setdefault(tuple(o), []).append(i)
                self.ms_key[i] = multiset_key(o)
                self.by_multiset.setdefault(self.ms_key[i], []).append(i)
        self.ms_lens = {len(o) for o in ops if o}
        # an index without core ops (built before they existed) derives them from the exact signature
        self.core = [tuple(c) for c in core] if core is not None else [core_ops(o) for o in ops]
        self.shapes = list(shapes) if shapes is not None else [""] * len(keys)
        # single-call problems: KernelBench level 1 (one operator, however many ATen ops it decomposes into)
        self.single = [(lv == 1) or len(c) <= SHORT_PROGRAM
                       for lv, c in zip(levels if levels is not None else [None] * len(keys), self.core, strict=True)]
        self.core_counts = [Counter(c) for c in self.core]
        self.op_kinds = [frozenset(c) for c in self.core]
        self.by_core: dict[tuple[str, ...], list[int]] = {}
        self.by_core_less: dict[tuple[str, ...], list[tuple[int, str]]] = {}  # core with one reduction deleted
        for i, c in enumerate(self.core):
            if c:
                self.by_core.setdefault(c, []).append(i)
                for less, op in without_one(c):
                    if less:
                        self.by_core_less.setdefault(less, []).append((i, op))
        self.text_sigs = [tuple(t or ()) for t in text_sigs] if text_sigs is not None else [()] * len(keys)
        self.by_model: dict[str, list[int]] = {}
        for i, t in enumerate(self.text_sigs):
            for m in model_ids(t):
                self.by_model.setdefault(m, []).append(i)

    def agrees(self, r: int, core: Sequence[str], shape: str, counts: Any = None, score: float = 0.0) -> bool:
        """May a text match with problem `r` (at `score`) count? True when either side has no trace (nothing
        to check); else the core multisets must overlap (OVERLAP_MIN, OVERLAP_VERBATIM for a near-verbatim
        text, or the same kinds of ops in other numbers) and, for a single-call problem, the shapes agree or the text
        is a near-verbatim copy (STRICT_TEXT)."""
        ref_core = self.core[r]
        if not core or not ref_core:
            return True
        if core != ref_core and not self._overlaps(r, core, counts,
                                                   OVERLAP_VERBATIM if score >= STRICT_TEXT else OVERLAP_MIN):
            # the same kinds of ops in other numbers is a resize (layer counts, sequence length), not new content
            if self.op_kinds[r] != frozenset(counts() if callable(counts) else counts if counts is not None else core):
                return False
        return score >= STRICT_TEXT or self.shape_agrees(r, core, shape)

    def _overlaps(self, r: int, core: Sequence[str], counts: Any, need: float) -> bool:
        """Core multiset Jaccard of problem `r` and `core` >= `need`."""
        from collections import Counter

        ref_core = self.core[r]
        if min(len(core), len(ref_core)) < need * max(len(core), len(ref_core)):
            return False  # the multiset Jaccard cannot exceed the ratio of the lengths
        ca = counts() if callable(counts) else counts if counts is not None else Counter(core)
        inter = sum((ca & self.core_counts[r]).values())
        return inter >= need * (len(core) + len(ref_core) - inter)

    def shape_agrees(self, r: int, core: Sequence[str], shape: str) -> bool:
        """A single-call problem (or a one- or two-op program) matches only with agreeing input shapes."""
        if not (self.single[r] or len(core) <= SHORT_PROGRAM):
            return True
        return shapes_agree(shape, self.shapes[r])

    def op_hits(self, ops: Sequence[str], core: Sequence[str], shape: str,
                same: list[int] | None = None) -> tuple[list[int], str | None]:
        """Problems the traced program matches, and how: `exact` (the whole normalized signature), `core` (the
        ops the output depends on, without glue and dropout), `core + <op>` / `core - <op>` (one reduction
        more or less than the problem); ([], None) when none does. Without input shapes (a sampler task's
        recorded `aten_ops`, nothing traced) a single-call problem is matched exactly only: one op plus a
        reduction is a new two-op task there (InstanceNorm2d then a vector norm matched level1/34 `core + norm`).
        `same`: the problems whose exact signature is `ops`, when the caller has looked them up."""
        ops, core = tuple(ops), tuple(core)
        if ops:
            hits = [r for r in (self.sig_t.get(ops, []) if same is None else same) if self.shape_agrees(r, core, shape)]
            if hits:
                return hits, "exact"
        if not core:
            return [], None

        def core_ok(r: int, c: Sequence[str], sh: str) -> bool:
            if not sh and (self.single[r] or len(c) <= SHORT_PROGRAM):
                return False
            return self.shape_agrees(r, c, sh)

        hits = [r for r in self.by_core.get(core, []) if core_ok(r, core, shape)]
        if hits:
            return hits, "core"
        for less, op in without_one(core, SUMMARY_OPS):
            # one reduction more than a problem that is a lone reduction is another reduction problem
            hits = [r for r in self.by_core.get(less, []) if core_ok(r, less, shape) and not _lone_reduction(less)]
            if hits:
                return hits, f"core + {op}"
        found = [(r, op) for r, op in self.by_core_less.get(core, [])
                 if core_ok(r, core, shape) and not _lone_reduction(core)]
        if found:
            return [r for r, _ in found], f"core - {found[0][1]}"
        return [], None

    def multiset_hits(self, ops: Sequence[str], same: list[int] | None = None) -> list[int]:
        """Problems with the same op multiset as `ops` (any order); only lengths some problem has are sorted.
        `same`: the problems with this exact sequence, when the caller has looked them up."""
        ops = tuple(ops)
        if not ops or len(ops) not in self.ms_lens:
            return []
        same = self.sig_t.get(ops) if same is None else same
        if same:  # an equal sequence has an equal multiset
            return self.by_multiset[self.ms_key[same[0]]]
        return self.by_multiset.get(multiset_key(ops), [])

    def text_hits(self, sig: Sequence[str]) -> list[int]:
        """Reference problems that load one of the model ids in `sig`."""
        return sorted({r for m in model_ids(sig) for r in self.by_model.get(m, [])})

    def ast_upper_bound(self, seqs: Sequence[np.ndarray]) -> np.ndarray:
        """Multiset Dice of AST tokens for every (task, reference): an upper bound on the difflib ratio."""
        from scipy import sparse

        row, feat = _bag_rows(seqs)
        pos = np.searchsorted(self.vocab, feat)
        pos = np.minimum(pos, len(self.vocab) - 1)
        hit = self.vocab[pos] == feat
        m = sparse.csr_matrix((np.ones(int(hit.sum()), np.float32), (row[hit], pos[hit])),
                              shape=(len(seqs), len(self.vocab)))
        inter = (m @ self.mat).toarray()
        lens = np.array([len(s) for s in seqs], dtype=np.float32)
        total = lens[:, None] + self.lens[None, :]
        return np.where(total > 0, 2 * inter / np.maximum(total, 1), 0.0)


_SHARED: dict[str, Any] = {}


def _compare_range(bounds: tuple[int, int]) -> list[dict]:
    lo, hi = bounds
    fp, ref, kw = _SHARED["fp"], _SHARED["ref"], _SHARED["kw"]
    part = {k: fp[k][lo:hi] for k in ("ast", "minhash", "ops", "core", "shape", "text_sig") if k in fp}
    return _compare(part, ref, **kw)


def compare(task_fp: dict[str, Any], ref: ReferenceMatrix, ast_threshold: float = 0.9,
            minhash_threshold: float = 0.7, use_op_signature: bool = True, workers: int = 1) -> list[dict]:
    """Score every task against every reference problem; one dict per task with the nearest of each detector."""
    import multiprocessing as mp

    kw = {"ast_threshold": ast_threshold, "minhash_threshold": minhash_threshold,
          "use_op_signature": use_op_signature}
    n = len(task_fp["ast"])
    if workers <= 1 or n < 5000:
        return _compare(task_fp, ref, **kw)
    _SHARED.update(fp=task_fp, ref=ref, kw=kw)  # inherited by the forked workers, never pickled
    step = -(-n // (workers * 4))
    try:
        with mp.get_context("fork").Pool(workers) as pool:
            parts = pool.map(_compare_range, [(lo, min(n, lo + step)) for lo in range(0, n, step)])
    finally:
        _SHARED.clear()
    return [row for part in parts for row in part]


def _ratio(ref: ReferenceMatrix, r: int, seq: np.ndarray, memo: dict[int, float]) -> float:
    """ast_ratio of problem `r` and `seq`, once per pair (a verbatim copy is 1.0 without the LCS)."""
    if r not in memo:
        a = ref.ast[r]
        memo[r] = 1.0 if len(a) == len(seq) and len(a) and np.array_equal(a, seq) else ast_ratio(a, seq, ref.masks[r])
    return memo[r]


def _best_ast(ref: ReferenceMatrix, seq: np.ndarray, bound_row: np.ndarray, cand: list[int],
              ok: Any = None, memo: dict[int, float] | None = None) -> tuple[float, int]:
    """Best exact AST ratio over `cand` (optionally only refs where `ok(r)`), skipping what the bound rules out."""
    best, best_r = 0.0, -1
    memo = {} if memo is None else memo
    for r in sorted(cand, key=lambda r: -bound_row[r]):
        if bound_row[r] <= best:
            break  # the bound says no later candidate can beat the best exact ratio
        s = _ratio(ref, r, seq, memo)
        if ok is not None and not ok(r, s):
            continue
        if s > best:
            best, best_r = s, r
    return best, best_r


def _compare(task_fp: dict[str, Any], ref: ReferenceMatrix, ast_threshold: float, minhash_threshold: float,
             use_op_signature: bool, chunk: int = 4096) -> list[dict]:
    from collections import Counter

    n = len(task_fp["ast"])
    cores = task_fp.get("core") or [core_ops(o) for o in task_fp["ops"]]
    shapes = task_fp.get("shape") or [""] * n
    out: list[dict] = []
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        seqs = task_fp["ast"][lo:hi]
        bound = ref.ast_upper_bound(seqs)
        jac = minhash_jaccard(task_fp["minhash"][lo:hi], ref.minhash)
        k = min(REFINE_TOP, bound.shape[1])
        top = np.argpartition(-bound, k - 1, axis=1)[:, :k] if k else np.zeros((len(bound), 0), int)
        for j in range(hi - lo):
            ops, core, shape = tuple(task_fp["ops"][lo + j]), tuple(cores[lo + j]), shapes[lo + j]
            same = ref.sig_t.get(ops) if ops else None  # hashed once: a recurrent program's tuple is long
            op_hit, how = ref.op_hits(ops, core, shape, same) if ops or core else ([], None)
            hit_set = set(op_hit)
            counted: list[Any] = []  # the core's Counter, made on first use (a recurrent core has ~10^5 ops)

            def counts(core=core, counted=counted) -> Any:
                if not counted:
                    counted.append(Counter(core))
                return counted[0]

            def ok(r: int, score: float = 0.0, core=core, shape=shape, counts=counts, hit_set=hit_set) -> bool:
                # a problem the op detector matches shares the computation by definition
                return r in hit_set or ref.agrees(r, core, shape, counts, score)

            memo: dict[int, float] = {}
            over = np.nonzero(bound[j] >= ast_threshold)[0].tolist()
            cand = set(top[j].tolist()) | set(over)
            best_ast, best_ref = _best_ast(ref, seqs[j], bound[j], list(cand), memo=memo)
            # the AST detector: the best ratio among problems whose computation the task shares
            fire_ast, fire_ref = (best_ast, best_ref) if best_ref < 0 or ok(best_ref, best_ast) else _best_ast(
                ref, seqs[j], bound[j], over, ok, memo)
            mj = int(np.argmax(jac[j])) if jac.shape[1] else -1
            best_jac = float(jac[j, mj]) if mj >= 0 else 0.0
            fire_jac = best_jac >= minhash_threshold and (ok(mj, best_jac) or any(
                ok(r, float(jac[j, r])) for r in np.nonzero(jac[j] >= minhash_threshold)[0].tolist()))
            sig_hits = op_hit if use_op_signature else []
            if use_op_signature and not sig_hits and len(core) > SHORT_PROGRAM:
                for r in dict.fromkeys(r for r in (best_ref, mj) if r >= 0):  # the text-nearest problems
                    if (not ref.single[r] and ref.op_kinds[r] == frozenset(counts()) and (
                            float(jac[j, r]) >= KINDS_MINHASH or _ratio(ref, r, seqs[j], memo) >= KINDS_AST)):
                        sig_hits, how = [r], "core kinds"
                        break
            ms_hits = ref.multiset_hits(ops, same) if ops and use_op_signature else []
            tsig = task_fp["text_sig"][lo + j] if "text_sig" in task_fp else ()
            text_hits = ref.text_hits(tsig) if tsig and use_op_signature and not sig_hits else []
            via = how if sig_hits else ("text:" + ",".join(model_ids(tsig)) if text_hits else None)
            if text_hits:  # the problem whose sizes agree most, then the closest text
                consts = set(tsig)
                sig_hits = [max(text_hits, key=lambda r: (len(consts & set(ref.text_sigs[r])), jac[j, r]))]
            fired = []
            if fire_ast >= ast_threshold:
                fired.append("ast")
            if sig_hits:
                fired.append("op_signature")
            if fire_jac:
                fired.append("minhash")
            key = ref.keys
            if text_hits:
                sig_ref = sig_hits[0]
            elif sig_hits or ms_hits:
                sig_ref = max(sig_hits or ms_hits, key=lambda r: jac[j, r])
            else:
                sig_ref = -1
            if sig_hits:
                nearest = sig_ref
            else:  # the candidate with the most evidence over both text detectors
                cands = {r for r in (best_ref, mj, fire_ref) if r >= 0}
                if fired:
                    cands = {r for r in cands if ok(r, 1.0)} or cands
                nearest = max(cands, key=lambda r: _ratio(ref, r, seqs[j], memo) + float(jac[j, r]), default=-1)
            out.append({
                "contaminated": bool(fired),
                "kb_nearest": key[nearest] if nearest >= 0 else None,
                "kb_ast_similarity": round(best_ast, 4),
                "kb_ast_nearest": key[best_ref] if best_ref >= 0 else None,
                # the AST detector's second condition for that problem: a kept row above the AST threshold has False
                "kb_shared_computation": bool(best_ref >= 0 and ok(best_ref, best_ast)),
                "kb_op_signature_match": bool(sig_hits),
                "kb_op_multiset_match": bool(ms_hits),
                "kb_op_signature_nearest": key[sig_ref] if sig_ref >= 0 else None,
                "kb_op_normalization": via if sig_hits and via and not via.startswith("text:") else None,
                "kb_minhash_jaccard": round(best_jac, 4),
                "kb_minhash_nearest": key[mj] if mj >= 0 else None,
                "detectors_fired": fired,
                "_nearest_index": nearest,
                "_op_signature_via": via,
            })
    return out
