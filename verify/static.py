"""Static check of a candidate before it runs: the task check's rules (filters/static_check.py), with `ModelNew`
required instead of `Model`, and the one route a candidate needs to bring its own kernel allowed:
`from torch.utils.cpp_extension import load_inline`, and `import triton` / `triton.language`."""

from __future__ import annotations

import ast

from filters import static_check as sc

EXTENSION_IMPORT = ("torch.utils.cpp_extension", "load_inline")
CANDIDATE_IMPORTS = sc.ALLOWED_IMPORTS | {"triton", "triton.language"}


def check_candidate_source(code: str) -> str | None:
    """None if `code` may run as a candidate, else the reason."""
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        return f"candidate: syntax error at line {e.lineno}: {e.msg}"
    if "ModelNew" not in {n.name for n in tree.body if isinstance(n, ast.ClassDef)}:
        return "candidate: no top-level class ModelNew"
    kept = []
    for st in tree.body:
        if (isinstance(st, ast.ImportFrom) and st.module == EXTENSION_IMPORT[0]
                and [a.name for a in st.names] == [EXTENSION_IMPORT[1]] and st.names[0].asname is None):
            continue  # the allowed extension route: checked by name, the rest of the file as a task's
        kept.append(st)
    tree.body = kept
    checker = sc._Checker(tree, CANDIDATE_IMPORTS)
    checker.visit(tree)
    return checker.reason
