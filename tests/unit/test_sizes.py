"""Sizes a reader can hold, in runner/ and bench/: no function over 60 lines, no module over
500, no function with more than 6 parameters (self and cls not counted; *args and **kwargs
count one each). Read from the source, no JVM."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE = (ROOT / "runner", ROOT / "bench")  # the bench is code too
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 500
MAX_PARAMETERS = 6


def _functions() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    found = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                found.append((f"{path.relative_to(ROOT)}:{node.lineno}", node))
    return found


def _modules() -> list[Path]:
    return sorted(path for root in CODE for path in root.rglob("*.py"))


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = node.args
    named = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    return (
        len([n for n in named if n not in ("self", "cls")]) + bool(args.vararg) + bool(args.kwarg)
    )


def test_no_module_is_over_500_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for p in _modules()
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"split these modules by concern: {long}"


def test_no_function_is_over_60_lines():
    long = {
        f"{where} {node.name}": n
        for where, node in _functions()
        if (n := (node.end_lineno or node.lineno) - node.lineno + 1) > MAX_FUNCTION_LINES
    }
    assert not long, f"split these functions into named steps: {long}"


def test_no_function_takes_more_than_6_parameters():
    wide = {
        f"{where} {node.name}": n
        for where, node in _functions()
        if (n := _parameters(node)) > MAX_PARAMETERS
    }
    assert not wide, f"pass a frozen dataclass of options instead: {wide}"
