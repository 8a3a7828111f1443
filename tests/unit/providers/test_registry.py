"""The provider registry: complete, ordered, every card filled in."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys

import pytest

from service.workspace.model import Kind, ProviderId, QueryCard
from service.workspace.providers import REGISTRY, ProviderSpec, check_registry
from service.workspace.providers._common import check_card


def test_registry_lists_every_provider_in_order() -> None:
    assert list(REGISTRY) == list(ProviderId)
    assert all(spec.id is provider for provider, spec in REGISTRY.items())


def test_every_card_is_complete() -> None:
    for spec in REGISTRY.values():
        for field in dataclasses.fields(QueryCard):
            assert getattr(spec.card, field.name).strip(), (spec.id, field.name)


def test_kinds_only_for_github_and_gitlab() -> None:
    assert REGISTRY[ProviderId.GITHUB].kinds == (
        Kind.ISSUES,
        Kind.CODE,
        Kind.COMMITS,
        Kind.REPOSITORIES,
    )
    assert REGISTRY[ProviderId.GITLAB].kinds == (
        Kind.ISSUES,
        Kind.CODE,
        Kind.MERGE_REQUESTS,
        Kind.WIKI,
    )
    others = [
        spec.kinds
        for p, spec in REGISTRY.items()
        if p not in (ProviderId.GITHUB, ProviderId.GITLAB)
    ]
    assert all(kinds == () for kinds in others)


def test_limits_and_base_urls() -> None:
    assert REGISTRY[ProviderId.GITHUB].max_text_length == 256
    assert REGISTRY[ProviderId.GITHUB].default_base_url == "https://api.github.com"
    assert REGISTRY[ProviderId.GMAIL].default_base_url == "https://gmail.googleapis.com"
    assert REGISTRY[ProviderId.JIRA].default_base_url == "https://api.atlassian.com"
    assert all(spec.default_base_url.startswith("https://") for spec in REGISTRY.values())


@pytest.mark.parametrize("field", ["syntax", "scope", "example", "avoid"])
def test_empty_card_field_fails(field: str) -> None:
    card = dataclasses.replace(REGISTRY[ProviderId.SLACK].card, **{field: "  "})
    with pytest.raises(ValueError, match=field):
        check_card("slack", card)
    broken = dict(REGISTRY)
    broken[ProviderId.SLACK] = dataclasses.replace(REGISTRY[ProviderId.SLACK], card=card)
    with pytest.raises(ValueError, match=field):
        check_registry(broken)


def test_missing_provider_fails() -> None:
    broken: dict[ProviderId, ProviderSpec] = {
        p: spec for p, spec in REGISTRY.items() if p is not ProviderId.GMAIL
    }
    with pytest.raises(ValueError, match="gmail"):
        check_registry(broken)


def test_missing_card_fails() -> None:
    broken: dict[ProviderId, ProviderSpec] = dict(REGISTRY)
    spec = REGISTRY[ProviderId.JIRA]
    broken[ProviderId.JIRA] = dataclasses.replace(spec, card=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no query card"):
        check_registry(broken)


def test_incomplete_card_fails_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    # Execute the registry module afresh (under another name, leaving the real one alone)
    # while one provider's card is incomplete: the import itself must raise.
    import service.workspace.providers as package
    from service.workspace.providers import slack

    monkeypatch.setattr(slack, "CARD", dataclasses.replace(slack.CARD, example=""))
    spec = importlib.util.spec_from_file_location("_registry_copy", package.__file__)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "_registry_copy", module)  # dataclasses look it up
    with pytest.raises(ValueError, match="example"):
        spec.loader.exec_module(module)
