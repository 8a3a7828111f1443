"""The repository says each thing once: one copy of the stubs, tests independent of benchmarks."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STUBS = ROOT / "clients" / "python" / "src" / "search_client" / "pb"
SKIP = {".venv", ".work", "node_modules", ".git", "__pycache__"}


def _files(pattern: str) -> list[Path]:
    return [p for p in ROOT.rglob(pattern) if not SKIP.intersection(p.relative_to(ROOT).parts)]


def test_generated_stubs_exist_once_in_the_client_package() -> None:
    elsewhere = [str(p.relative_to(ROOT)) for p in _files("*_pb2*.py*") if STUBS not in p.parents]
    assert elsewhere == []


def test_tests_never_import_the_benchmarks() -> None:
    offenders = []
    for path in (ROOT / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names
                          if n == "benchmarks" or n.startswith("benchmarks.")]
    assert offenders == []
