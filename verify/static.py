"""Static check of a candidate before it runs: the task check's rules (filters/static_check.py), with `ModelNew`
required instead of `Model`, and the two routes a candidate needs to bring its own kernel allowed:
`from torch.utils.cpp_extension import load_inline`, and Triton.

Triton is judged by what it is, not by attribute names meant for torch (`tl.load` is how a Triton kernel reads
device memory; `torch.load` reads a file). The Triton a candidate may import is `triton` and `triton.language` with
its submodules (`triton.language.extra.libdevice`); on a name bound to `triton.language` (or imported from it) every
public attribute is the kernel language; on a name bound to `triton`, the kernel-writing API only (TRITON_API:
jit, autotune, heuristics, Config, cdiv, next_power_of_2, language). The rest of triton (runtime, compiler, backends,
testing, tools, knobs) is refused, and so is a candidate that binds a Triton name to anything else (`tl = torch`),
so the Triton rule never judges a torch object."""

from __future__ import annotations

import ast

from filters import static_check as sc

EXTENSION_IMPORT = ("torch.utils.cpp_extension", "load_inline")
CANDIDATE_IMPORTS = sc.ALLOWED_IMPORTS | {"triton", "triton.language"}
# what a kernel author uses of the top-level triton module
TRITON_API = frozenset({"jit", "autotune", "heuristics", "Config", "cdiv", "next_power_of_2", "language",
                        "constexpr", "OutOfResources"})
LANGUAGE = "triton.language"


def _triton_module(name: str) -> bool:
    return name == "triton" or name.split(".")[0] == "triton"


def _language(name: str) -> bool:
    return name == LANGUAGE or name.startswith(LANGUAGE + ".")


def _bindings(tree: ast.AST) -> dict[str, int]:
    """Every name the code binds other than by an import, with the line of its first binding."""
    out: dict[str, int] = {}
    for n in ast.walk(tree):
        names: list[str] = []
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store | ast.Del):
            names = [n.id]
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names = [n.name]
        elif isinstance(n, ast.arg):
            names = [n.arg]
        elif isinstance(n, ast.ExceptHandler) and n.name:
            names = [n.name]
        elif isinstance(n, ast.Global | ast.Nonlocal):
            names = list(n.names)
        elif isinstance(n, ast.MatchAs | ast.MatchStar) and n.name:
            names = [n.name]
        for x in names:
            out.setdefault(x, getattr(n, "lineno", 0))
    return out


class _CandidateChecker(sc._Checker):
    """The task checker, with Triton's names judged by Triton's rules."""

    def __init__(self, tree: ast.Module, allowed: frozenset[str]) -> None:
        super().__init__(tree, allowed)
        self.triton: dict[str, str] = {}  # name -> "triton" (the module) or "language" (kernel language)
        others: dict[str, int] = {}
        for n in ast.walk(tree):
            if isinstance(n, ast.Import):
                for a in n.names:
                    bound = a.asname or a.name.split(".")[0]
                    if _triton_module(a.name):
                        self.triton[bound] = "language" if a.asname and _language(a.name) else "triton"
                    else:
                        others.setdefault(bound, n.lineno)
            elif isinstance(n, ast.ImportFrom):
                for a in n.names:
                    bound = a.asname or a.name
                    if (n.module or "").split(".")[0] == "triton":
                        full = f"{n.module}.{a.name}"
                        self.triton[bound] = "language" if _language(full) else "api"
                    else:
                        others.setdefault(bound, n.lineno)
        for name, line in {**_bindings(tree), **others}.items():
            if name in self.triton:
                self._refuse(f"binds the Triton name {name!r} to something else", ast.Name(lineno=line))

    def visit_Import(self, node: ast.Import) -> None:
        rest = []
        for a in node.names:
            if not _triton_module(a.name):
                rest.append(a)
            elif a.name not in ("triton", LANGUAGE) and not _language(a.name):
                return self._refuse(f"forbidden import {a.name!r}: of Triton a candidate imports triton and "
                                    "triton.language", node)
            else:
                self.modules.add(a.asname or a.name.split(".")[0])
        if rest:
            super().visit_Import(ast.Import(names=rest, lineno=node.lineno))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        mod = node.module or ""
        if node.level or mod.split(".")[0] != "triton":
            return super().visit_ImportFrom(node)
        for a in node.names:
            full = f"{mod}.{a.name}"
            if mod == "triton" and a.name in TRITON_API or _language(mod) and not a.name.startswith("_"):
                continue
            return self._refuse(f"forbidden import {full!r}: of Triton a candidate uses its kernel language and "
                                f"{', '.join(sorted(TRITON_API))}", node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        chain: list[str] = []
        root: ast.AST = node
        while isinstance(root, ast.Attribute):
            chain.insert(0, root.attr)
            root = root.value
        kind = self.triton.get(root.id) if isinstance(root, ast.Name) else None
        if kind is None:
            return super().visit_Attribute(node)
        if kind == "triton":
            if chain[0] not in TRITON_API:
                return self._refuse(f"forbidden attribute triton.{chain[0]}: of Triton a candidate uses its kernel "
                                    f"language and {', '.join(sorted(TRITON_API))}", node)
            kind, chain = ("language", chain[1:]) if chain[0] == "language" else ("api", chain[1:])
        bad = [a for a in chain if a.startswith("_")]
        if bad:
            return self._refuse(f"forbidden private attribute .{bad[0]} of Triton", node)
        self.visit(root)  # the attributes are Triton's; a call's arguments are visited as any other code


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
    checker = _CandidateChecker(tree, CANDIDATE_IMPORTS)
    checker.visit(tree)
    return checker.reason
