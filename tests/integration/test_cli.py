"""The client commands of the CLI: `index`, `status` and `demo` against a running server."""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from search_client import SearchClient
from service import cli_client
from service.__main__ import build_parser
from tests.support.serve_process import ROOT, clean_env, served
from tests.support.server import running_server


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "notes"
    (folder / "sub").mkdir(parents=True)
    (folder / ".hidden").mkdir()
    (folder / "a.md").write_text("Intro line\n\n## Alpha notes\n\nThe alpha body: comets.\n")
    (folder / "sub" / "b.txt").write_text("plain text about telescopes and mirrors\n")
    (folder / ".hidden" / "c.md").write_text("# Hidden\n")
    (folder / "binary.md").write_bytes(b"\xff\xfe not utf-8")
    (folder / "image.png").write_bytes(b"\x89PNG")
    return folder


async def _run(argv: list[str]) -> int:
    return await cli_client.run_client_command(build_parser().parse_args(argv))


async def test_index_then_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path)
    async with running_server(tmp_path / "data") as app:
        target = f"127.0.0.1:{app.port}"
        assert await _run(["index", str(folder), "--project", "notes", "--target", target]) == 0
        first = capsys.readouterr()
        assert "project notes (id 1): 2 documents in" in first.out
        assert "documents: 2 created, 0 updated, 0 unchanged, 0 rejected" in first.out
        assert "indexing [" in first.err
        assert "2/2 files" in first.err
        assert "skipped binary.md: not UTF-8 text" in first.err

        assert await _run(["index", str(folder), "--project", "notes", "--target", target]) == 0
        again = capsys.readouterr()
        assert "project notes (id 1)" in again.out
        assert "2 unchanged" in again.out
        assert "chunks: 0 written, 0 embedded" in again.out

        assert await _run(["status", "--target", target]) == 0
        status = capsys.readouterr().out
        header, row = status.splitlines()[1:3]
        assert header.split()[:4] == ["PROJECT", "EXTERNAL", "ID", "DOCUMENTS"]
        assert row.split()[:3] == ["1", "notes", "2"]
        assert "configured embedding:" in status
        assert "*" in row

        def documents() -> dict[str, str]:
            with SearchClient(target) as client:
                return {r.path: r.title for r in client.iter_project_results([1], "")}

        assert await asyncio.to_thread(documents) == {"a.md": "Alpha notes", "sub/b.txt": "b.txt"}


async def test_demo_indexes_the_corpus_and_prints_ranked_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with running_server(tmp_path) as app:
        args = argparse.Namespace(client_command="demo", target=f"127.0.0.1:{app.port}", token="")
        assert await cli_client.run_client_command(args) == 0
    out = capsys.readouterr()
    assert "project demo (id 1): 12 documents" in out.out
    assert "12/12 files" in out.err
    for mode, text in cli_client.DEMO_SEARCHES:
        assert f"{mode} search: {text}" in out.out
    assert out.out.count("RANK  SCORE") == len(cli_client.DEMO_SEARCHES)
    fts_table = out.out.split('FTS search: "dark matter"')[1].split("search:")[0]
    assert "Dark matter" in fts_table
    assert "search.v1.ProjectSearchService/SearchProjects" in out.out


def test_demo_is_a_cli_command() -> None:
    args = build_parser().parse_args(["demo", "--target", "127.0.0.1:1"])
    assert args.client_command == "demo"


async def test_errors_are_explained(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_client, "CONNECT_TIMEOUT", 0.3)
    assert await _run(["status", "--target", "127.0.0.1:1"]) == 1
    assert "no search service answers at 127.0.0.1:1" in capsys.readouterr().err
    async with running_server(tmp_path) as app:
        target = f"127.0.0.1:{app.port}"
        assert await _run(["index", str(tmp_path / "nope"), "--project", "p", "--target",
                           target]) == 1
        assert "is not a folder" in capsys.readouterr().err
        folder = _folder(tmp_path)
        assert await _run(["index", str(folder), "--project", "bad id!", "--target",
                           target]) == 1
        err = capsys.readouterr().err
        assert "INVALID_ARGUMENT" in err
        assert "external_id" in err


def test_demo_on_a_fresh_server_process(tmp_path: Path) -> None:
    """What the README promises: `scripts/serve` in one terminal, `demo` in another."""
    with served(tmp_path / "data") as address:
        run = subprocess.run(
            [sys.executable, "-m", "service", "demo", "--target", address],
            cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=120,
        )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "HYBRID search:" in run.stdout
    assert "RANK  SCORE" in run.stdout


def test_client_commands_reach_the_server_that_search_port_started(tmp_path: Path) -> None:
    """`SEARCH_PORT=... scripts/serve`, then `status` in the same environment: no --target."""
    with served(tmp_path / "data") as address:
        host, port = address.rsplit(":", 1)
        env = clean_env({"SEARCH_PORT": port, "SEARCH_HOST": host})
        run = subprocess.run(
            [sys.executable, "-m", "service", "status"], cwd=ROOT, env=env,
            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "configured embedding:" in run.stdout


def test_default_target_follows_search_host_and_port() -> None:
    from service.__main__ import default_target

    assert default_target({}) == "127.0.0.1:50051"
    assert default_target({"SEARCH_PORT": "6000"}) == "127.0.0.1:6000"
    assert default_target({"SEARCH_HOST": "0.0.0.0", "SEARCH_PORT": "7"}) == "127.0.0.1:7"
    assert default_target({"SEARCH_HOST": "::1"}) == "[::1]:50051"


def test_a_port_in_use_is_a_one_line_configuration_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = subprocess.run(
            [sys.executable, "-m", "service", "serve", "--port", str(port), "--data-dir",
             str(tmp_path / "data")],
            cwd=ROOT, env=clean_env({"SEARCH_EMBEDDER": "deterministic"}), capture_output=True,
            text=True, timeout=120, stdin=subprocess.DEVNULL,
        )
    assert run.returncode == 2, run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "Traceback" in line or "configuration error" in line]
    assert errors == [
        f"configuration error: cannot listen on 127.0.0.1:{port}: the port is in use or the "
        "address is not on this machine (set SEARCH_PORT / SEARCH_HOST, or --port / --host)"
    ], run.stderr


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.mark.postgres
def test_demo_runs_to_the_end_on_the_readme_postgres_recipe(tmp_path: Path) -> None:
    """README: `python -m service postgres`, then serve on its SEARCH_DATABASE_URL, then demo."""
    import signal

    postgres = subprocess.Popen(
        [sys.executable, "-m", "service", "postgres", "--dir", str(tmp_path / "pg"), "--port",
         str(_free_port())],
        cwd=ROOT, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert postgres.stdout is not None
        lines = []
        for line in postgres.stdout:  # until the URL is printed (or the command ends)
            lines.append(line)
            if line.startswith("SEARCH_DATABASE_URL="):
                break
        assert "pgvector canary passed" in "".join(lines), "".join(lines)
        url = lines[-1].strip().split("=", 1)[1]
        with served(tmp_path / "data", {"SEARCH_DATABASE_URL": url}) as address:
            run = subprocess.run(
                [sys.executable, "-m", "service", "demo", "--target", address], cwd=ROOT,
                env=clean_env(), capture_output=True, text=True, timeout=300,
                stdin=subprocess.DEVNULL,
            )
        assert run.returncode == 0, run.stdout + run.stderr
        assert "HYBRID search: telescope mirror" in run.stdout
        assert "Try it yourself" in run.stdout
    finally:
        postgres.send_signal(signal.SIGINT)
        rest, _ = postgres.communicate(timeout=120)
    assert postgres.returncode == 0, rest
    assert "PostgreSQL stopped" in rest


def test_the_server_accepts_the_client_token_variable_in_its_environment() -> None:
    """`export SEARCH_CLIENT_TOKEN=...` for the CLI, then `scripts/serve` in the same shell."""
    from service.settings import Settings, SettingsError

    Settings.from_mapping({"SEARCH_CLIENT_TOKEN": "secret"})
    with pytest.raises(SettingsError, match="unknown setting SEARCH_CLIENT"):
        Settings.from_mapping({"SEARCH_CLIENTS": "1"})
