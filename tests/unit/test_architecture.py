"""The shape of the code: protobuf stays at the edge, dependencies point one way."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVICE = ROOT / "service"
# Only the servicers, the composition root and the CLI may touch generated code.
PB_ALLOWED = {"api", "server.py", "__main__.py", "cli_client.py", "workspace_demo.py"}
# Lower layers must never import higher ones.
FORBIDDEN = {
    "ranking": ("service.api", "service.workspace", "service.projects", "service.store"),
    "store": (
        "service.api",
        "service.workspace",
        "service.projects.search",
        "service.projects.request",
        "service.indexing",
    ),
    "embeddings": ("service.api", "service.workspace", "service.projects", "service.store"),
    "workspace": (
        "service.api",
        "service.projects",
        "service.store.sqlite",
        "service.store.postgres",
    ),
    "projects": (
        "service.api",
        "service.workspace",
        "service.store.sqlite",
        "service.store.postgres",
    ),
    "indexing": ("service.api", "service.workspace"),
}
MAX_LINES = 450


def _modules() -> list[Path]:
    return [p for p in SERVICE.rglob("*.py") if "pb" not in p.relative_to(SERVICE).parts]


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_generated_code_is_imported_only_at_the_edge() -> None:
    offenders = [
        str(p.relative_to(ROOT))
        for p in _modules()
        if any(name.startswith("search_client.pb") for name in _imports(p))
        and p.relative_to(SERVICE).parts[0] not in PB_ALLOWED
    ]
    assert offenders == []


def test_dependencies_point_one_way() -> None:
    offenders = []
    for path in _modules():
        layer = path.relative_to(SERVICE).parts[0]
        for name in _imports(path):
            if name.startswith(FORBIDDEN.get(layer, ())):
                offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert offenders == []


def test_the_fakes_stay_out_of_the_running_service() -> None:
    # service.fakes is for tests and the workspace demo; nothing the server runs imports it.
    allowed = {"fakes", "workspace_demo.py"}
    offenders = [
        str(p.relative_to(ROOT))
        for p in _modules()
        if any(name.startswith("service.fakes") for name in _imports(p))
        and p.relative_to(SERVICE).parts[0] not in allowed
    ]
    assert offenders == []


def test_modules_stay_small() -> None:
    big = {
        str(p.relative_to(ROOT)): n
        for p in [*_modules(), *(ROOT / "clients" / "python" / "src").rglob("*.py")]
        if "pb" not in p.parts and (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert big == {}


def _structs() -> list[tuple[Path, ast.ClassDef]]:
    return [
        (path, node)
        for path in _modules()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
        and any(ast.unparse(base) in ("msgspec.Struct", "Struct") for base in node.bases)
    ]


def test_msgspec_records_are_frozen() -> None:
    # The fan-out's hot records are msgspec Structs instead of frozen dataclasses (ten times
    # cheaper to build); they must stay as immutable as the dataclasses they replaced.
    thawed = [
        f"{path.relative_to(ROOT)}:{node.name}"
        for path, node in _structs()
        if not any(
            k.arg == "frozen" and isinstance(k.value, ast.Constant) and k.value.value is True
            for k in node.keywords
        )
    ]
    assert thawed == []
    assert len(_structs()) >= 10  # the test sees them
