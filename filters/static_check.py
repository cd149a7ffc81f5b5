"""Static check of a task's source before anything executes it: KernelBench shape, and nothing that reaches the host.

Generated and foreign code (LLM output, audited datasets) is untrusted. This check runs on the AST alone, never
imports or executes the code, and returns None (keep) or a one-line reason (drop). It refuses danger, not style:
harmless standard modules (typing, dataclasses, math, functools, collections, ...) and a variable called `input`
pass; modules that reach files, processes, the network or native code (os, sys, subprocess, socket, ctypes,
importlib, ...), the builtins that run or open things (open, eval, exec, compile, __import__, an `input()` call),
and the attribute routes to them (dunder chains, getattr with a computed or private name, torch.load, _C) are
refused with the reason. A module that is neither (a third-party package such as transformers) gets a reason of
its own: the row needs that package. It is a first gate, not a sandbox: tasks still run only in worker
subprocesses with a timeout and a memory limit.
"""

from __future__ import annotations

import ast
import importlib.util
import re

# modules a task may import: torch's numeric namespaces, numpy and side-effect-free standard modules (numpy's
# file routes are refused as attributes)
ALLOWED_IMPORTS = frozenset({
    "torch", "torch.nn", "torch.nn.functional", "torch.nn.init", "torch.fft", "torch.linalg", "torch.special",
    "torch.nn.utils", "torch.nn.utils.rnn", "torch.nn.utils.parametrize", "torch.nn.parameter", "torch.nn.modules",
    "math", "cmath", "typing", "typing_extensions", "dataclasses", "functools", "collections", "collections.abc",
    "itertools", "numbers", "enum", "abc", "operator", "copy", "warnings", "string", "__future__", "numpy",
    "torch.functional",  # einsum, split, stft, norm: the functions behind torch.*, no host access
} | ({"einops"} if importlib.util.find_spec("einops") is not None else set()))  # tensor rearranging only
# Trusted reference code (KernelBench levels 1-3) also uses these (einops even where it is not installed: the row
# then fails to trace, and is compared by text).
REFERENCE_IMPORTS = ALLOWED_IMPORTS | {"einops"}
# modules whose import alone hands the code the host: files, processes, sockets, native code, the import system
HOST_MODULES = frozenset({
    "os", "sys", "subprocess", "socket", "ctypes", "importlib", "builtins", "shutil", "pathlib", "io", "pickle",
    "marshal", "shelve", "multiprocessing", "threading", "_thread", "signal", "pty", "asyncio", "urllib", "http",
    "ftplib", "smtplib", "telnetlib", "ssl", "select", "selectors", "fcntl", "posix", "nt", "tempfile", "glob",
    "code", "codeop", "runpy", "inspect", "gc", "resource", "mmap", "cffi", "sqlite3", "zipimport", "pkgutil",
    "site", "sysconfig", "webbrowser", "requests", "dill", "cloudpickle", "platform", "uuid", "zipfile", "tarfile",
})
# torch namespaces that load files or native code, compile, spawn or talk to other processes
HOST_TORCH = frozenset({
    "torch.utils.cpp_extension", "torch.hub", "torch._C", "torch.library", "torch._dynamo",
    "torch.distributed", "torch.multiprocessing", "torch.package", "torch.serialization", "torch.ops",
    "torch.utils.data", "torch.compiler", "torch._inductor", "torch.cuda.memory",
})
# builtins that open, run or reflect: refused wherever they are named (no task needs a variable called `eval`)
HOST_BUILTINS = frozenset({
    "open", "exec", "eval", "compile", "__import__", "globals", "locals", "vars", "breakpoint", "exit", "quit",
    "setattr", "delattr", "__builtins__", "__loader__", "__spec__", "memoryview", "help",
})
# builtins that are harmless names but dangerous calls: refused only where the name means the builtin
SHADOWABLE = frozenset({"input"})
# attributes that reach files, processes, native code or allocator state on any object
HOST_ATTRS = frozenset({
    "load", "save", "hub", "from_file", "cpp_extension", "_C", "load_library", "library", "system", "popen",
    "spawn", "fork", "forkpty", "execv", "execve", "execl", "environ", "subprocess", "socket", "rmtree", "unlink",
    "set_per_process_memory_fraction", "_dynamo", "ctypeslib", "fromfile", "tofile", "memmap", "open_memmap", "f2py",
    "loadtxt", "savetxt", "genfromtxt", "savez", "savez_compressed", "DataSource",
    "f_globals", "f_locals", "f_builtins", "gi_frame", "cr_frame", "tb_frame", "co_code", "func_globals",
})
# allowed modules re-export host modules (torch.os, torch.importlib, torch.builtins, collections._sys, enum.bltns,
# ndarray.ctypes): those names are refused as attributes on any object, whatever it was bound to. select and signal
# are torch's own (Tensor.select, torch.signal.windows)
HOST_MODULE_ATTRS = (HOST_MODULES - {"select", "signal"}) | {"_sys", "_os", "bltns", "_bltns", "_builtins", "_imp",
                                                             "_importlib", "_ctypes", "_subprocess", "_socket"}
# names that evaluate strings or call attributes by name, reachable from allowed modules (typing.get_type_hints
# evaluates string annotations; operator.attrgetter/methodcaller are getattr by another name): refused as names,
# attributes and imports, so `from typing import *` and `from operator import *` stay harmless
REFLECTING_NAMES = frozenset({"get_type_hints", "ForwardRef", "_eval_type", "evaluate_forward_ref", "attrgetter",
                              "methodcaller"})
# attributes refused only on a module (torch.ops, torch.compile): on `self` they are ordinary names
MODULE_ATTRS = frozenset({"ops", "classes", "compile", "remove", "utils", "distributed", "package"})
# reflection builtins: allowed only as a direct call with a constant, public attribute name
REFLECTORS = frozenset({"getattr", "hasattr"})
# on `self` only, these may take a computed name that starts with a public literal prefix no refused name starts with
# (`getattr(self, f"layer{i}")`, `setattr(self, f"conv{i}", m)`: a module's numbered layers)
SELF_REFLECTORS = frozenset({"getattr", "hasattr", "setattr"})
_FORMAT_DUNDER = re.compile(r"\{[^{}]*(\.|\[)_")
SAFE_DUNDERS = frozenset({"__init__", "__call__", "__name__"})
REQUIRED = ("Model", "get_inputs", "get_init_inputs")


def _module_reason(name: str, allowed: frozenset[str], inside: str = "") -> str | None:
    """Why importing `name` is refused, or None. inside: the function whose body imports it (a row importing a
    package only in get_init_inputs is as unrunnable as one importing it at the top, but reads otherwise)."""
    top = name.split(".")[0]
    if top in HOST_MODULES or any(name == m or name.startswith(m + ".") for m in HOST_TORCH):
        return f"forbidden import {name!r}: it can touch the host"
    if name in allowed or (top != "torch" and top in allowed):
        return None
    if top == "torch" or top in {"typing", "collections", "math"}:
        return f"forbidden import {name!r}: not on the allow list of task imports"
    try:
        installed = importlib.util.find_spec(top) is not None  # top-level only: finding a submodule imports its parent
    except (ImportError, ValueError):
        installed = False
    where = f"; imported inside {inside}()" if inside else "; imported at module level"
    return (f"needs package {top!r} ({'installed but ' if installed else 'not installed; '}not on the allow list of "
            f"task imports{where})")


def _attr_reason(attr: str, on_module: bool) -> str | None:
    if attr in HOST_ATTRS or attr in REFLECTING_NAMES or (on_module and attr in MODULE_ATTRS):
        return f"forbidden attribute .{attr}"
    if attr in HOST_MODULE_ATTRS:
        return f"forbidden attribute .{attr}: it reaches a host module"
    if attr.startswith("__") and attr.endswith("__") and attr not in SAFE_DUNDERS:
        return f"forbidden dunder attribute .{attr}"
    return None


def _bound_names(fn: ast.AST) -> set[str]:
    """Names a function (or lambda, or comprehension) binds locally: its parameters and every assignment target in
    its own body (nested functions and classes keep theirs). Python makes these local for the whole body."""
    names: set[str] = set()
    args = getattr(fn, "args", None)
    if isinstance(args, ast.arguments):
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if a is not None:
                names.add(a.arg)
    if isinstance(fn, ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp):
        for g in fn.generators:
            names |= {n.id for n in ast.walk(g.target) if isinstance(n, ast.Name)}
        return names
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store | ast.Del):
            names.add(n.id)
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(n.name)
            continue  # a nested scope's locals are its own
        elif isinstance(n, ast.Lambda | ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp):
            continue
        elif isinstance(n, ast.alias):
            names.add((n.asname or n.name).split(".")[0])
        elif isinstance(n, ast.ExceptHandler) and n.name:
            names.add(n.name)
        stack.extend(ast.iter_child_nodes(n))
    return names


def _module_bindings(tree: ast.Module) -> set[str]:
    """Names the module binds unconditionally at top level (a plain statement of the module body)."""
    out: set[str] = set()
    for st in tree.body:
        if isinstance(st, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(st.name)
        elif isinstance(st, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = st.targets if isinstance(st, ast.Assign) else [st.target]
            out |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(st, ast.Import | ast.ImportFrom):
            out |= {(a.asname or a.name).split(".")[0] for a in st.names}
    return out


class _Checker(ast.NodeVisitor):
    """Walks the tree with a stack of function scopes, so a parameter called `input` is told from the builtin."""

    def __init__(self, tree: ast.Module, allowed: frozenset[str]) -> None:
        self.allowed = allowed
        self.module_names = _module_bindings(tree)
        self.modules: set[str] = set()  # names bound to an imported module (torch, F, np)
        self.scopes: list[set[str]] = []
        self.functions: list[str] = []  # names of the enclosing function definitions
        self.reason: str | None = None

    def _refuse(self, why: str, node: ast.AST) -> None:
        if self.reason is None:
            self.reason = f"{why} (line {getattr(node, 'lineno', '?')})"

    def _scoped(self, node: ast.AST) -> None:
        self.scopes.append(_bound_names(node))
        self.generic_visit(node)
        self.scopes.pop()

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        a = node.args
        for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
            if arg is not None and arg.annotation is not None:
                self._annotation(arg.annotation)
        if node.returns is not None:
            self._annotation(node.returns)
        self.functions.append(node.name)
        self._scoped(node)
        self.functions.pop()

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._annotation(node.annotation)
        self.generic_visit(node)

    def _annotation(self, node: ast.AST) -> None:
        """A string annotation is code that typing.get_type_hints (and functools.singledispatch through it) evaluates:
        check what it says like any other expression."""
        for c in ast.walk(node):
            if isinstance(c, ast.Constant) and isinstance(c.value, str):
                try:
                    expr = ast.parse(c.value.strip(), mode="eval")
                except SyntaxError:
                    continue
                for n in ast.walk(expr):
                    ast.copy_location(n, c)
                self.visit(expr)

    visit_FunctionDef = visit_AsyncFunctionDef = _function
    visit_Lambda = _scoped
    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _scoped

    def _inside(self) -> str:
        return ".".join(self.functions)

    def _is_builtin(self, name: str) -> bool:
        return not any(name in s for s in self.scopes) and name not in self.module_names

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            why = _module_reason(a.name, self.allowed, self._inside())
            if why:
                return self._refuse(why, node)
            self.modules.add(a.asname or a.name.split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            return self._refuse("forbidden relative import", node)
        mod = node.module or ""
        for a in node.names:
            full = f"{mod}.{a.name}"
            # `from torch import hub` imports a module, `from torch import load` a function: judge the full name too
            if full.split(".")[0] in HOST_MODULES or any(full == m or full.startswith(m + ".") for m in HOST_TORCH):
                why = f"forbidden import {full!r}: it can touch the host"
            else:
                why = (_module_reason(mod, self.allowed, self._inside())
                       or (None if a.name == "*" else _attr_reason(a.name, True)))
            if why:
                return self._refuse(why, node)
            if full in self.allowed:
                self.modules.add(a.asname or a.name)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in HOST_BUILTINS or node.id in REFLECTING_NAMES:
            self._refuse(f"forbidden name {node.id!r}", node)
        elif node.id in REFLECTORS and self._is_builtin(node.id):  # a call reaches visit_Call, a bare name here
            self._refuse(f"forbidden use of {node.id!r} other than a direct call", node)
        elif node.id in SHADOWABLE and isinstance(node.ctx, ast.Load) and self._is_builtin(node.id):
            self._refuse(f"forbidden builtin {node.id!r} (reads the terminal)", node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        root = node.value
        while isinstance(root, ast.Attribute):
            root = root.value
        why = _attr_reason(node.attr, isinstance(root, ast.Name) and root.id in self.modules)
        if why:
            self._refuse(why, node)
        self.generic_visit(node)

    def _self_reflection(self, node: ast.Call) -> bool:
        """`getattr/hasattr/setattr(self, NAME, ...)` with a constant public name or an f-string whose literal prefix
        is public and begins no refused attribute name: the module's own attributes, nothing else reachable."""
        f = node.func
        if not (isinstance(f, ast.Name) and f.id in SELF_REFLECTORS and self._is_builtin(f.id) and len(node.args) >= 2
                and isinstance(node.args[0], ast.Name) and node.args[0].id == "self"
                and any("self" in sc for sc in self.scopes) and "self" not in self.module_names):
            return False
        name = node.args[1]
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            prefix, whole = name.value, True
        elif isinstance(name, ast.JoinedStr) and name.values and isinstance(name.values[0], ast.Constant):
            prefix, whole = str(name.values[0].value), False
        else:
            return False
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", prefix):
            return False
        refused = HOST_ATTRS | HOST_MODULE_ATTRS | REFLECTING_NAMES | MODULE_ATTRS
        if (prefix in refused) if whole else any(r.startswith(prefix) for r in refused):
            return False
        for child in [*node.args[1:], *node.keywords]:
            self.visit(child)
        return True

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if self._self_reflection(node):
            return
        if isinstance(f, ast.Name) and f.id in REFLECTORS and self._is_builtin(f.id):
            if len(node.args) < 2:
                return self._refuse(f"forbidden {f.id} without an attribute name", node)
            name = node.args[1]
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                self._refuse(f"forbidden {f.id} with a computed attribute name", node)
            elif name.value.startswith("_") and name.value not in SAFE_DUNDERS:
                self._refuse(f"forbidden {f.id} of private attribute {name.value!r}", node)
            else:
                why = _attr_reason(name.value, on_module=True)
                if why:
                    self._refuse(why, node)
            for child in [*node.args, *node.keywords]:  # not node.func: the bare name is allowed here only
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        # str.format reaches attributes too: "{0.__init__.__globals__}".format(obj)
        if isinstance(node.value, str) and _FORMAT_DUNDER.search(node.value):
            self._refuse("forbidden dunder attribute inside a format string", node)


def check_task_source(code: str, allowed_imports: frozenset[str] = ALLOWED_IMPORTS) -> str | None:
    """None if `code` is a KernelBench-format module that cannot reach the host, else the reason."""
    if not isinstance(code, str) or not code.strip():
        return "not KernelBench format: empty source"
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        return f"not KernelBench format: syntax error at line {e.lineno}: {e.msg}"
    top = {n.name for n in tree.body if isinstance(n, ast.ClassDef | ast.FunctionDef)}
    missing = [name for name in REQUIRED if name not in top]
    if missing:
        return f"not KernelBench format: missing top-level {', '.join(missing)}"
    checker = _Checker(tree, allowed_imports)
    checker.visit(tree)
    return checker.reason
