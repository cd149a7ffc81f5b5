"""Static check of a task's source before anything executes it: KernelBench shape and allowed imports only.

Generated code (above all LLM-written) is untrusted. This check runs on the AST alone, never imports or
executes the code, and returns None (keep) or a one-line reason (drop). It is a first gate, not a
sandbox: tasks still run only in worker subprocesses with a timeout and a memory limit.
"""

from __future__ import annotations

import ast

ALLOWED_IMPORTS = frozenset({"torch", "torch.nn", "torch.nn.functional", "math"})
# Trusted reference code (KernelBench levels 1-3) also uses these; never allowed for generated tasks.
REFERENCE_IMPORTS = ALLOWED_IMPORTS | {"itertools", "collections", "collections.abc", "numpy", "einops"}

FORBIDDEN_NAMES = frozenset({
    "open", "exec", "eval", "compile", "__import__", "input", "globals", "locals", "vars",
    "breakpoint", "exit", "quit", "memoryview", "setattr", "delattr", "__builtins__",
})
# torch entry points that touch files, the network, processes or native code
FORBIDDEN_ATTRS = frozenset({
    "load", "save", "hub", "from_file", "cpp_extension", "_C", "ops", "classes", "jit", "library",
    "system", "popen", "spawn", "fork", "remove", "unlink", "rmtree", "environ", "subprocess", "socket",
    "set_per_process_memory_fraction", "_dynamo", "compile",
})
REQUIRED = ("Model", "get_inputs", "get_init_inputs")


def check_task_source(code: str, allowed_imports: frozenset[str] = ALLOWED_IMPORTS) -> str | None:
    """None if `code` is a KernelBench-format module using only allowed names, else the reason."""
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
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name not in allowed_imports:
                    return f"forbidden import {alias.name!r} (line {node.lineno}); allowed: {sorted(allowed_imports)}"
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            full = {f"{mod}.{a.name}" for a in node.names}
            if node.level or (mod not in allowed_imports and not full <= allowed_imports):
                return f"forbidden import from {mod!r} (line {node.lineno}); allowed: {sorted(allowed_imports)}"
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            return f"forbidden name {node.id!r} (line {node.lineno})"
        elif isinstance(node, ast.Attribute):
            if node.attr in FORBIDDEN_ATTRS:
                return f"forbidden attribute .{node.attr} (line {node.lineno})"
            if node.attr.startswith("__") and node.attr != "__init__":
                return f"forbidden dunder attribute .{node.attr} (line {node.lineno})"
    return None
