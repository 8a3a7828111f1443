"""The documentation cannot drift from the service.

- Every `grpcurl` line in the ```sh blocks of README.md and docs/*.md runs through a
  reflection-only client (no proto files) against a real server, as do the CLI lines
  (`.venv/bin/python -m service index|status|demo`) and the README's ```python blocks.
  docs/*.md run in order on one fresh server per file; each README ```sh block gets its own
  fresh server (its ```python blocks run on the server of the block before). A line
  `# expect: CODE` makes the next command expect that status code. Placeholders:
  `NEXT_PAGE_TOKEN` (the last token received), `ACCOUNT_ID` (the last account connected);
  the server's GitHub origin is the fake GitHub (SEARCH_PROVIDER_BASE_URLS, as
  docs/contract.md says), and the documented token is the fake's.
- The README's configuration table equals `service.settings.describe()`; run this module
  (`python -m tests.integration.test_docs_examples`) to rewrite it.
- The README's error table lists exactly the reasons the service code raises.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import sys
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format, message_factory

from service import cli_client, errors
from service.__main__ import build_parser
from service.fakes.suite import FakeProviders
from service.settings import describe
from tests.support.reflection_client import ReflectionClient
from tests.support.server import running_server

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
DOC_ADDRESS = "127.0.0.1:50051"
GHE_TOKEN = "ghp_example"
TABLE_BEGIN, TABLE_END = "<!-- settings-table:begin -->", "<!-- settings-table:end -->"
_FENCE = re.compile(r"^```(\w*)\s*$")
_CLI_PREFIXES = ((".venv/bin/python", "-m", "service"), ("python", "-m", "service"))
_REASON_SOURCE = re.compile(r'reason\s*=\s*"([A-Z][A-Z0-9_]+)"')


@dataclass(frozen=True)
class Step:
    """One runnable thing from a document."""

    source: str  # file:line, for messages
    kind: str  # "grpcurl" | "cli" | "python"
    argv: tuple[str, ...] = ()
    code: str = ""
    expect: str = ""


@dataclass
class Group:
    """Steps that run in order on one fresh server."""

    name: str
    steps: list[Step] = field(default_factory=list)


# ---- parsing --------------------------------------------------------------------------------


def blocks(path: Path) -> Iterator[tuple[str, int, str]]:
    """(language, first line number, text) of every fenced block."""
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        opened = _FENCE.match(lines[i])
        if opened is None:
            i += 1
            continue
        start = i + 1
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            i += 1
        yield opened.group(1), start + 1, "\n".join(lines[start:i])
        i += 1


def commands(text: str) -> Iterator[tuple[int, str]]:
    """Shell commands of a block (quotes may span lines; `\\` joins lines), with offsets."""
    current, quoted, line, first = [], False, 0, 0
    chars = iter(enumerate(text))
    for _, char in chars:
        if char == "\\" and not quoted:
            nxt = next(chars, (0, ""))[1]
            if nxt == "\n":
                line += 1
                continue
            current.append(char + nxt)
            continue
        if char == "'":
            quoted = not quoted
        if char == "\n":
            line += 1
            if not quoted:
                yield first, "".join(current)
                current, first = [], line
                continue
        current.append(char)
    yield first, "".join(current)


# Commands that run a server until Ctrl-C: the README's PostgreSQL recipe is run by
# tests/integration/test_cli.py (test_demo_runs_to_the_end_on_the_readme_postgres_recipe).
_SERVERS = ("serve", "postgres")


def steps_of(path: Path, language: str, first_line: int, text: str) -> list[Step]:
    """The runnable steps of one block."""
    where = path.relative_to(ROOT)
    if language == "python":
        return [Step(f"{where}:{first_line}", "python", code=text)]
    out, expect = [], ""
    for offset, command in commands(text):
        stripped = command.strip()
        source = f"{where}:{first_line + offset}"
        if stripped.startswith("#"):
            found = re.match(r"#\s*expect:\s*([A-Z_]+)", stripped)
            expect = found.group(1) if found else expect
            continue
        if not stripped:
            continue
        argv = tuple(shlex.split(stripped, comments=True))
        if argv[0] == "grpcurl":
            out.append(Step(source, "grpcurl", argv, expect=expect))
        elif argv[:3] in _CLI_PREFIXES and argv[3] not in _SERVERS:
            out.append(Step(source, "cli", argv[3:], expect=expect))
        expect = ""
    return out


def groups() -> list[Group]:
    """README: a group per ```sh block; docs/*.md: a group per file."""
    out: list[Group] = []
    for language, line, text in blocks(README):
        steps = steps_of(README, language, line, text) if language in ("sh", "python") else []
        if language == "python" and steps and out:
            out[-1].steps.extend(steps)
        elif language == "sh" and steps:
            out.append(Group(f"README.md:{line}", steps))
    for path in DOCS:
        group = Group(path.name)
        for language, line, text in blocks(path):
            if language == "sh":
                group.steps.extend(steps_of(path, language, line, text))
        if group.steps:
            out.append(group)
    return out


GROUPS = groups()


# ---- running --------------------------------------------------------------------------------


@dataclass
class Runner:
    """Runs steps in a worker thread; CLI coroutines go back to the server's loop."""

    address: str
    loop: asyncio.AbstractEventLoop
    fakes: FakeProviders
    client: ReflectionClient
    last_token: str = ""
    account_id: str = ""

    def run(self, step: Step) -> None:
        handler: Callable[[Step], None] = {
            "grpcurl": self.grpcurl, "cli": self.cli, "python": self.python,
        }[step.kind]
        if not step.expect:
            handler(step)
            return
        with pytest.raises(grpc.RpcError) as caught:
            handler(step)
        code = caught.value.code().name
        assert code == step.expect, f"{step.source}: expected {step.expect}, got {code}"

    def substitute(self, text: str) -> str:
        text = text.replace(GHE_TOKEN, self.fakes.github.token)
        text = text.replace("NEXT_PAGE_TOKEN", self.last_token)
        return text.replace("ACCOUNT_ID", self.account_id)

    def grpcurl(self, step: Step) -> None:
        args = list(step.argv[1:])
        body = ""
        while args and args[0].startswith("-"):
            flag = args.pop(0)
            if flag == "-d":
                body = self.substitute(args.pop(0))
            elif flag == "-H":
                args.pop(0)
            else:
                assert flag == "-plaintext", f"{step.source}: unsupported flag {flag}"
        assert args[0] == DOC_ADDRESS, f"{step.source}: examples use {DOC_ADDRESS}"
        verb = args[1:]
        if verb == ["list"]:
            assert "search.v1.ProjectSearchService" in self.client.list_services()
        elif verb[0] == "describe":
            assert self.client.describe(verb[1]).methods, step.source
        else:
            self.remember(self.invoke(verb[0], body or "{}"))

    def invoke(self, method: str, body: str) -> list[dict[str, Any]]:
        descriptor = self.client.method(method)
        if not descriptor.client_streaming:
            return self.client.invoke(method, body)
        # grpcurl sends each JSON object of -d as one message of a client stream.
        request_cls = message_factory.GetMessageClass(descriptor.input_type)
        response_cls = message_factory.GetMessageClass(descriptor.output_type)
        decoder, messages, rest = json.JSONDecoder(), [], body.strip()
        while rest:
            value, end = decoder.raw_decode(rest)
            messages.append(json_format.ParseDict(value, request_cls()))
            rest = rest[end:].lstrip()
        path = f"/{descriptor.containing_service.full_name}/{descriptor.name}"
        with grpc.insecure_channel(self.address) as channel:
            call = channel.stream_unary(
                path, request_serializer=request_cls.SerializeToString,
                response_deserializer=response_cls.FromString,
            )
            reply = call(iter(messages), timeout=30)
        return [json_format.MessageToDict(reply)]

    def remember(self, replies: list[dict[str, Any]]) -> None:
        for reply in replies:
            token = reply.get("page", {}).get("nextPageToken", "")
            self.last_token = token or self.last_token
            self.account_id = reply.get("account", {}).get("accountId", self.account_id)

    def cli(self, step: Step) -> None:
        argv = list(step.argv)
        if argv[0] == "index":
            argv[1] = str(ROOT / argv[1])
        args = build_parser().parse_args([*argv, "--target", self.address])
        code = self.call_soon(cli_client.run_client_command(args))
        assert code == 0, f"{step.source}: exit code {code}"

    def python(self, step: Step) -> None:
        code = compile(step.code.replace(DOC_ADDRESS, self.address), step.source, "exec")
        exec(code, {"__name__": "docs_example"})  # noqa: S102 - the README's own example

    def call_soon(self, coroutine: Coroutine[Any, Any, int]) -> int:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=120)


def _seed_fake_github(fakes: FakeProviders) -> None:
    fakes.github.add_repo("acme/api")
    fakes.github.add_issue("acme/api", 7, "Deploy freeze on Fridays", "No deploys after noon.")
    fakes.github.add_code("acme/api", "ops/freeze.md", "The deploy freeze starts at noon.")


@pytest.mark.parametrize("group", GROUPS, ids=[g.name for g in GROUPS])
async def test_documented_examples_run(
    group: Group, tmp_path: Path, fakes: FakeProviders, capsys: pytest.CaptureFixture[str]
) -> None:
    _seed_fake_github(fakes)
    env = {
        "SEARCH_PROVIDER_BASE_URLS": f"github={fakes.github.base_url}",
        "SEARCH_ALLOW_INSECURE_PROVIDER_HTTP": "true",
    }
    async with running_server(tmp_path, env=env) as app:
        address = f"127.0.0.1:{app.port}"
        client = ReflectionClient(address)
        runner = Runner(address, asyncio.get_running_loop(), fakes, client)
        try:
            for step in group.steps:
                await asyncio.to_thread(runner.run, step)
        finally:
            client.close()
    capsys.readouterr()


def test_every_rpc_has_an_example() -> None:
    documented = {s.argv[-1] for g in GROUPS for s in g.steps if s.kind == "grpcurl"}
    expected = {
        "search.v1.IndexService/" + m for m in (
            "CreateProject", "ListProjects", "DeleteProject", "UpsertDocuments",
            "DeleteDocuments", "GetIndexStatus",
        )
    } | {
        "search.v1.ProjectSearchService/SearchProjects",
        "search.v1.WorkspaceSearchService/ListAccounts",
        "search.v1.WorkspaceSearchService/SearchWorkspace",
        "search.v1.AccountService/ConnectAccount",
        "search.v1.AccountService/UpdateAccountCredentials",
        "search.v1.AccountService/DisconnectAccount",
    }
    assert expected <= documented


# ---- README tables --------------------------------------------------------------------------


def settings_table() -> str:
    """The configuration table, rendered from `service.settings.describe()`."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    rows = ["| variable | default | meaning |", "|---|---|---|"]
    rows += [
        f"| `{key}` | {f'`{cell(default)}`' if default else ''} | {cell(doc)} |"
        for key, default, doc in describe()
    ]
    return "\n".join(rows)


def _with_table(text: str) -> str:
    head, _, rest = text.partition(TABLE_BEGIN)
    _, _, tail = rest.partition(TABLE_END)
    return f"{head}{TABLE_BEGIN}\n{settings_table()}\n{TABLE_END}{tail}"


def test_readme_configuration_table_matches_the_settings() -> None:
    text = README.read_text()
    assert TABLE_BEGIN in text
    assert TABLE_END in text
    assert text == _with_table(text), (
        "README configuration table is stale; run `.venv/bin/python -m "
        "tests.integration.test_docs_examples` to regenerate it"
    )


def _readme_reasons() -> dict[str, str]:
    section = README.read_text().split("## Errors", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([A-Z0-9_]+)` \| ([A-Z_]+) \|", section, flags=re.MULTILINE)
    return dict(rows)


def test_readme_error_table_lists_every_reason_the_service_raises() -> None:
    table = _readme_reasons()
    raised = {
        reason
        for path in (ROOT / "service").rglob("*.py")
        if "pb" not in path.relative_to(ROOT / "service").parts
        for reason in _REASON_SOURCE.findall(path.read_text())
    } | {"INTERNAL"}
    assert set(table) == raised
    for cls in _error_classes(errors.ServiceError):
        assert table[cls.reason] == cls.code.name, cls.__name__


def _error_classes(base: type[errors.ServiceError]) -> Iterator[type[errors.ServiceError]]:
    for sub in base.__subclasses__():
        yield sub
        yield from _error_classes(sub)


if __name__ == "__main__":
    README.write_text(_with_table(README.read_text()))
    print(f"rewrote the configuration table of {README}", file=sys.stderr)
