"""A deterministic synthetic corpus: Zipf-distributed pseudo-words in Markdown documents.

Each document has a title, a path and one to three `##` sections; its chunk count is what the
service's own chunker makes of it (computed here with the same function), so a corpus of N
chunks really holds N chunks. Same seed, same corpus, in every run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchmarks.client import Doc
from service.indexing.chunking import chunk_markdown, document_source_text

_CONSONANTS = "bcdfghjklmnprstvz"
_VOWELS = "aeiou"
AREAS = ("specs", "notes", "research", "ops", "design", "meetings")
KINDS = ("note", "observation")


def _vocabulary(rng: np.random.Generator, size: int) -> list[str]:
    syllables = [c + v for c in _CONSONANTS for v in _VOWELS]
    words: dict[str, None] = {}
    while len(words) < size:
        count = int(rng.integers(2, 5))
        picks = rng.integers(0, len(syllables), size=count)
        words["".join(syllables[i] for i in picks)] = None
    return list(words)


@dataclass(frozen=True)
class Generated:
    """Documents of one project and the chunks they make."""

    docs: list[Doc]
    chunks: int


class SyntheticCorpus:
    """Generates documents per project and natural-language-ish queries."""

    def __init__(self, seed: int = 7, vocabulary: int = 20_000, zipf: float = 1.07) -> None:
        rng = np.random.default_rng(seed)
        self.seed = seed
        self.words = _vocabulary(rng, vocabulary)
        weights = 1.0 / np.arange(1, vocabulary + 1, dtype=np.float64) ** zipf
        self.cumulative = np.cumsum(weights / weights.sum())

    def _draw(self, rng: np.random.Generator, count: int) -> list[str]:
        picks = np.searchsorted(self.cumulative, rng.random(count), side="right")
        picks = np.minimum(picks, len(self.words) - 1)
        return [self.words[i] for i in picks]

    def _body(self, rng: np.random.Generator) -> str:
        sections = int(rng.integers(1, 4))
        parts = []
        for _ in range(sections):
            heading = " ".join(self._draw(rng, 3))
            paragraph = " ".join(self._draw(rng, int(rng.integers(60, 130))))
            parts.append(f"## {heading}\n\n{paragraph}.")
        return "\n\n".join(parts)

    def document(self, project: int, number: int) -> tuple[Doc, int]:
        """Document `number` of project `project` and its chunk count (same inputs, same doc)."""
        rng = np.random.default_rng([self.seed, project, number])
        title = " ".join(self._draw(rng, int(rng.integers(3, 7)))).capitalize()
        area = AREAS[int(rng.integers(0, len(AREAS)))]
        path = f"{area}/{self._draw(rng, 1)[0]}-{number}.md"
        body = self._body(rng)
        doc = Doc(KINDS[number % 2], f"d{number:07d}", title, path, body)
        return doc, len(chunk_markdown(document_source_text(title, path, body)))

    def generate(self, project: int, first_number: int, chunks: int) -> Generated:
        """Documents numbered from `first_number` until at least `chunks` chunks."""
        docs: list[Doc] = []
        made = 0
        number = first_number
        while made < chunks:
            doc, count = self.document(project, number)
            docs.append(doc)
            made += count
            number += 1
        return Generated(docs, made)

    def queries(self, count: int, seed: int = 11) -> list[str]:
        """Queries of 2-4 words taken from the common-but-not-stopword part of the vocabulary."""
        rng = np.random.default_rng([self.seed, seed])
        out = []
        for _ in range(count):
            size = int(rng.integers(2, 5))
            ranks = rng.integers(20, 3000, size=size)
            out.append(" ".join(self.words[int(r)] for r in ranks))
        return out


def scopes(projects: list[int], count: int, size: int, seed: int = 13) -> list[list[int]]:
    """`count` random scopes of `size` distinct projects (sorted), reproducible."""
    rng = np.random.default_rng(seed)
    size = min(size, len(projects))
    return [sorted(int(p) for p in rng.choice(projects, size=size, replace=False))
            for _ in range(count)]
