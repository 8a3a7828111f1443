"""GitHub search answers (issues/PRs, code, commits, repositories) as documents."""

from __future__ import annotations

from typing import Any

from service.workspace.model import Kind, NativeDocument
from service.workspace.providers._common import as_dict, dicts, parse_time, sub, text


def parse_repos(data: Any) -> list[str]:
    """`full_name` of each repository in a /user/repos answer."""
    return [name for item in dicts(data) if (name := text(item.get("full_name")))]


def _repo_of(item: dict[str, Any]) -> str:
    name = text(sub(item, "repository", "full_name"))
    if name:
        return name
    parts = text(item.get("repository_url")).rstrip("/").split("/")
    return "/".join(parts[-2:]) if len(parts) >= 2 else ""


def _issue(item: dict[str, Any]) -> NativeDocument:
    repo = _repo_of(item)
    title = text(item.get("title"))
    return NativeDocument(
        id=text(item.get("number")),
        title=f"{repo} · {title}",
        url=text(item.get("html_url")),
        content=text(item.get("body")) or title,
        kind="pull_request" if isinstance(item.get("pull_request"), dict) else "issue",
        container=repo,
        author=text(sub(item, "user", "login")),
        modified_at=parse_time(item.get("updated_at")),
    )


def _code(item: dict[str, Any]) -> NativeDocument:
    repo = _repo_of(item)
    path = text(item.get("path"))
    fragments = [text(m.get("fragment")) for m in dicts(item.get("text_matches"))]
    return NativeDocument(
        id=path,
        title=f"{repo} · {path}",
        url=text(item.get("html_url")),
        content="\n…\n".join(f for f in fragments if f) or path,
        kind="code",
        container=repo,
    )


def _commit(item: dict[str, Any]) -> NativeDocument:
    repo = _repo_of(item)
    message = text(sub(item, "commit", "message"))
    first_line = message.splitlines()[0] if message else text(item.get("sha"))
    return NativeDocument(
        id=text(item.get("sha")),
        title=f"{repo} · {first_line}",
        url=text(item.get("html_url")),
        content=message,
        kind="commit",
        container=repo,
        author=text(sub(item, "author", "login")) or text(sub(item, "commit", "author", "name")),
        modified_at=parse_time(sub(item, "commit", "author", "date")),
    )


def _repository(item: dict[str, Any]) -> NativeDocument:
    name = text(item.get("full_name"))
    return NativeDocument(
        id=name,
        title=name,
        url=text(item.get("html_url")),
        content=text(item.get("description")) or name,
        kind="repository",
        container=name,
        author=text(sub(item, "owner", "login")),
        modified_at=parse_time(item.get("pushed_at")) or parse_time(item.get("updated_at")),
    )


_PARSERS = {
    Kind.ISSUES: _issue,
    Kind.CODE: _code,
    Kind.COMMITS: _commit,
    Kind.REPOSITORIES: _repository,
}


def parse_search(kind: Kind, data: Any) -> tuple[tuple[NativeDocument, ...], int | None, bool]:
    """Documents, total_count and incomplete_results of a /search/{kind} answer."""
    body = as_dict(data)
    parse = _PARSERS[kind]
    documents = tuple(doc for doc in map(parse, dicts(body.get("items"))) if doc.id)
    total = body.get("total_count")
    return (
        documents,
        total if isinstance(total, int) else None,
        body.get("incomplete_results") is True,
    )
