"""clients/node/example.js writes, reads back, decodes a rich error and searches a real server."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import pytest

from search_client import Document, Provider, SearchClient
from service.fakes.suite import FakeProviders
from tests.support.serve_process import ROOT, clean_env, served

NODE_DIR = ROOT / "clients" / "node"
NEEDED = ("@grpc/grpc-js", "@grpc/proto-loader", "google-proto-files", "protobufjs")


@pytest.fixture(scope="module")
def node() -> str:
    """The node executable, with the example's packages installed in clients/node."""
    executable = shutil.which("node")
    if executable is None:
        pytest.skip("node is not installed: the Node.js example test needs Node.js >= 18")
    if not all((NODE_DIR / "node_modules" / name).is_dir() for name in NEEDED):
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip("npm is not installed: cannot install @grpc/grpc-js for the example")
        command = "ci" if (NODE_DIR / "package-lock.json").exists() else "install"
        done = subprocess.run(
            [npm, command, "--no-audit", "--no-fund"], cwd=NODE_DIR, capture_output=True,
            text=True, timeout=300, env=clean_env(),
        )
        if done.returncode != 0:
            pytest.skip(f"npm {command} failed (is the npm registry reachable?): "
                        f"{done.stderr.strip()[-500:]}")
    return executable


ENV = {"SEARCH_ALLOW_PRIVATE_BASE_URLS": "true", "SEARCH_ALLOW_INSECURE_PROVIDER_HTTP": "true"}


def _seed(address: str, fakes: FakeProviders) -> None:
    fakes.github.add_repo("acme/telescope")
    fakes.github.add_issue("acme/telescope", 1, "Nebula survey pipeline", "nebula catalogue")
    with SearchClient(address) as client:
        project = client.create_project("node-demo", "Node demo")
        client.upsert_documents(project.project_id, [
            Document("note", "nebulae", title="Nebulae", path="stars/nebulae.md",
                     body="A nebula is a cloud of gas and dust where stars are born."),
            Document("note", "comets", title="Comets", path="sky/comets.md",
                     body="A comet grows a coma and two tails near the Sun."),
        ])
        client.connect_account(
            Provider.GITHUB, "GitHub (fake)", fakes.github.token, base_url=fakes.github.base_url
        )


async def test_node_example_writes_reads_and_decodes_errors(
    node: str, tmp_path: Path, fakes: FakeProviders
) -> None:
    with served(tmp_path / "data", env=ENV) as address:
        await asyncio.to_thread(_seed, address, fakes)
        process = await asyncio.create_subprocess_exec(
            node, "example.js", address, "nebula", cwd=NODE_DIR, env=clean_env(),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, (out + err).decode()
    lines = out.decode().splitlines()
    # Writes: a project, a document with a metadata Struct and two timestamps, read back.
    assert any(line.startswith("created project ") for line in lines)
    assert "upserted 1 document(s): incident-review.md: DOCUMENT_OUTCOME_CREATED" in lines
    assert ('metadata round-trip: ok {"owner":{"name":"Ada","oncall":["ada@example.com",'
            '"bob@example.com"]},"ratio":0.25,"reviewed":true,"severity":2,"supersedes":null,'
            '"team":"platform"}') in lines
    assert ("timestamps round-trip: ok createTime=2024-05-01T09:30:00.123456Z "
            "updateTime=2024-06-02T17:45:10.500Z") in lines
    # The refused call: grpc-status-details-bin decoded into ErrorInfo and BadRequest.
    assert any(line.startswith("refused: INVALID_ARGUMENT (code 3): ") for line in lines)
    assert "  ErrorInfo: reason=INVALID_ARGUMENT domain=search.v1 metadata={}" in lines
    assert any(line.startswith("  BadRequest: field=external_id description=") for line in lines)
    # Reads: the Python-written project and the Node-written one, then the workspace.
    assert 'project search: "nebula" over 2 project(s)' in lines
    assert any("Nebulae" in line and "node-demo:stars/nebulae.md" in line for line in lines)
    assert 'workspace search: "nebula" over 1 account(s)' in lines
    assert any("QUERY_STATE_OK" in line for line in lines)
    assert any("Nebula survey pipeline" in line for line in lines)


def test_node_wellknown_helpers(node: str) -> None:
    """The example's Struct / Timestamp helpers pass their own node:test suite."""
    done = subprocess.run(
        [node, "--test", "wellknown.test.js"], cwd=NODE_DIR, capture_output=True, text=True,
        timeout=120, env=clean_env(),
    )
    assert done.returncode == 0, done.stdout + done.stderr
