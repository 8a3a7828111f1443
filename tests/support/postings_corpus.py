"""Documents, queries and a random write sequence shared by both stores' postings tests."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable

from tests.integration.conftest import Corpus, Doc

WORDS = [
    *("deploy", "deployment", "freeze", "friday", "release", "rollback", "runbook"),
    *("star", "starts", "start", "stare", "config.json", "el/1", "70803", "C++"),
    *("café", "naïve", "résumé", "O'Reilly", "東京の会議", "会議室", "foo-bar"),
    *("alpha", "beta", "gamma", "delta", "epsilon", "the", "of"),
]
# Natural language, explicit syntax, prefixes, phrases, numbers, identifiers, CJK.
QUERIES = [
    "deploy freeze",
    "star",
    "the start of the release",
    "run running",
    'which tools give "what you see is what you get" friday',
    "release AND rollback",
    "deploy OR café",
    "runbook NOT friday",
    "deplo*",
    "sta* friday",
    '"deploy freeze"',
    "70803 el/1 config.json",
    "foo-bar alpha",
    "東京の会議",
    "会議室 release",
    "C++ O'Reilly naïve",
]
KINDS = ("note", "issue")


def random_text(rng: random.Random, words: int) -> str:
    """`words` words drawn from WORDS."""
    return " ".join(rng.choice(WORDS) for _ in range(words))


async def write_random_documents(corpus: Corpus, rng: random.Random, project: int) -> None:
    """One write of 1-4 documents (new or replacing one of 24 keys), some of them empty."""
    docs = [
        Doc(
            rng.choice(KINDS),
            str(rng.randrange(12)),
            random_text(rng, rng.randrange(0, 30)),
            title=random_text(rng, rng.randrange(0, 4)),
            path=rng.choice(["notes/a.md", "ops/runbook.md", "src/config.json"]),
        )
        for _ in range(rng.randrange(1, 5))
    ]
    await corpus.write(project, {(d.kind, d.row_id): d for d in docs}.values())


async def random_writes(
    corpus: Corpus, rng: random.Random, check: Callable[[], Awaitable[None]], steps: int = 40
) -> None:
    """Creates, updates, deletes and project deletions over 3 projects; `check` after each."""
    projects = [p.project_id for p in await corpus.projects(3)]
    for step in range(steps):
        action = rng.random()
        project = rng.choice(projects)
        if action < 0.6:
            await write_random_documents(corpus, rng, project)
        elif action < 0.9:
            keys = [(rng.choice(KINDS), str(rng.randrange(12))) for _ in range(rng.randrange(1, 4))]
            await corpus.store.delete_documents(corpus.tenant, project, keys)
        elif len(projects) > 1:
            await corpus.store.delete_project(corpus.tenant, project)
            projects.remove(project)
            projects.append((await corpus.project(f"again-{step}")).project_id)
        await check()


async def scored_projects(corpus: Corpus, rng: random.Random) -> list[int]:
    """3 projects of 25 random documents each (kinds note and issue), for score checks."""
    projects = [p.project_id for p in await corpus.projects(3)]
    for project in projects:
        docs = [
            Doc(
                rng.choice(KINDS),
                str(i),
                random_text(rng, rng.randrange(1, 40)),
                title=random_text(rng, 2),
            )
            for i in range(25)
        ]
        await corpus.write(project, docs)
    return projects
