"""The FTS ranking of the PostgreSQL store from in-process postings (issue 18).

The statement's lexical channel reads each query term's postings of the scope from
`term_postings` and sums BM25 in SQL: its cost follows the matches (~3-4 ms at 100k chunks,
x3 at 1M). The cache holds each project's content postings as arrays
(service.store.lexical_index) with the project's generation (`lexical_stats.vgen`, moved by
every write in the statement that moves the statistics), read in one snapshot, and ranks a
scope in process. As with the KNN matrices (vector_cache.py) it only proposes: the search
statement receives the first rows of the ranking with everything they were computed from
and uses them only when all of it is what the statement itself sees:

- the scope's generations and statistics (N, avgdl) in its snapshot, and every scope
  project the tenant's;
- the query as PostgreSQL parsed it: its rendering of the parsed strict and relaxed forms,
  predicted here from the compiled tsquery text with the Snowball English stemmer (PyStemmer) (the
  rendering fixes the lexemes, the prefixes and the counted shape); a word PostgreSQL stems
  otherwise (21 of 14,443 words measured against PostgreSQL 18) only sends the search down
  the SQL path;
- each term's idf recomputed in SQL from the document counts (the same `ln` the SQL path
  uses).

Otherwise the search ranks in SQL as before: HYBRID in the same statement; FTS, whose
statement holds only the check and the page's rows, in a second one. A kind filter is ranked
here too (N, avgdl and df over the documents of those kinds, as ELIGIBLE_STATS counts them);
other filters, script phrases and queries whose membership needs the tsvectors (NOT,
phrases) always take the SQL path; so do filtered HYBRID and HYBRID fused by MAX_MIN.
HYBRID fused by SUM or RRF is passed the rows the fusion can reach (search._proposal; SUM's
first rows by score alone). Bounded like the
matrices: least recently used out past `budget_bytes`; a scope that does not fit takes the
SQL path.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import Stemmer

from service.projects.lexical import LexicalQuery
from service.projects.lexical_tokens import POSTGRES_ENGLISH_STOPWORDS
from service.store.lexical_index import (
    LexicalCacheStats,
    ProjectPostings,
    Ranking,
    Term,
    postings_count,
    rank,
    term_spans,
)
from service.store.matrices import MatrixLru
from service.store.postgres.pool import Reader, cache_read_row

# A project's content postings, documents and generation in one statement (one snapshot).
# Documents are numbered in identity order (kind, row id, byte order); postings come as
# big-endian int4 document numbers and tfs, by lexeme (byte order), then document.
SELECT_PROJECT = """
WITH d AS MATERIALIZED (
    SELECT kind, row_id, doc_len,
           (row_number() OVER (ORDER BY kind COLLATE "C", row_id COLLATE "C") - 1)::int AS ord
    FROM documents WHERE project_id = $1
),
p AS MATERIALIZED (
    SELECT t.lexeme, d.ord, t.tf
    FROM term_postings AS t JOIN d ON d.kind = t.kind AND d.row_id = t.row_id
    WHERE t.project_id = $1 AND t.chan = 0
),
v AS MATERIALIZED (SELECT lexeme, count(*) AS c FROM p GROUP BY lexeme)
SELECT s.vgen, s.n, s.sum_dl,
       (SELECT COALESCE(array_agg(kind ORDER BY ord), '{}') FROM d) AS kinds,
       (SELECT COALESCE(array_agg(row_id ORDER BY ord), '{}') FROM d) AS row_ids,
       (SELECT COALESCE(array_agg(doc_len ORDER BY ord), '{}') FROM d) AS lengths,
       (SELECT COALESCE(array_agg(lexeme ORDER BY lexeme), '{}') FROM v) AS vocabulary,
       (SELECT COALESCE(array_agg(c ORDER BY lexeme), '{}') FROM v) AS counts,
       (SELECT COALESCE(string_agg(int4send(ord), ''::bytea ORDER BY lexeme, ord), ''::bytea)
        FROM p) AS docs,
       (SELECT COALESCE(string_agg(int4send(tf), ''::bytea ORDER BY lexeme, ord), ''::bytea)
        FROM p) AS tfs
FROM (SELECT 1) AS one
LEFT JOIN lexical_stats AS s ON s.project_id = $1"""
SELECT_GENERATIONS = "SELECT project_id, vgen FROM lexical_stats ORDER BY project_id"
# A project larger than this is left to the SQL path (its arrays travel as one bytea each).
MAX_PROJECT_POSTINGS = 50_000_000
MAX_TF = 65_535  # tfs are held as uint16
# A ranking reading more postings (~0.5 ms of vector work) runs off the event loop, as the
# vector cache's products do (numpy releases the GIL): a costly query (`c*`, common words over
# a large scope) must not hold every other call of the server.
THREAD_POSTINGS = 50_000
MAX_LEARNED = 10_000  # stemming corrections kept (all forgotten when full)
MAX_SHAPES = 4_096  # predicted shapes kept by query text (all forgotten when full)

_TERM = re.compile(r"'((?:[^']|'')+)'(:\*)?")
_AND = re.compile(r"^\(?\s*T(\s*&\s*T)*\s*\)?$")
_OR = re.compile(r"^\(?\s*T(\s*\|\s*T)*\s*\)?$")
_WORD = re.compile(r"[a-z]+")
_NUMBER = re.compile(r"[0-9]+")
_STEMMER = Stemmer.Stemmer("english")


@dataclass(frozen=True)
class Shape:
    """A query's terms as PostgreSQL's 'english' configuration parses them, in `k` order,
    and how membership is counted (LEX_SHAPE)."""

    terms: tuple[Term, ...]
    strict_at: int
    any_term: bool
    words: str  # the strict form as PostgreSQL renders the parsed tsquery (`::text`)
    relaxed_words: str | None  # the relaxed form, likewise
    sources: tuple[str, ...] = ()  # the strict form's words as the service wrote them


@dataclass(frozen=True)
class Proposal:
    """What the statement binds: the ranking's first rows and what they come from."""

    shape: Shape
    project_ids: list[int]
    generations: list[int]
    ranking: Ranking
    keys: tuple[list[int], list[str], list[str]]
    complete: bool  # the whole list (else the first rows and the vector candidates')


def _lexeme(word: str, learned: dict[str, str]) -> str | None:
    if _NUMBER.fullmatch(word):
        return word  # a uint token: the 'simple' dictionary keeps it as written
    if _WORD.fullmatch(word) and word not in POSTGRES_ENGLISH_STOPWORDS:
        return learned.get(word) or str(_STEMMER.stemWord(word))
    return None


def _rendered(operator: str, terms: list[tuple[str, bool]]) -> str:
    """A flat AND / OR of terms as PostgreSQL prints a tsquery."""
    joint = " & " if operator == "and" else " | "
    return joint.join(f"'{lexeme}'" + (":*" if prefix else "") for lexeme, prefix in terms)


def _form(text: str, learned: dict[str, str]) -> tuple[str, list[tuple[str, bool]]] | None:
    """('and' | 'or', [(lexeme, prefix)]) of a plain AND or OR of terms, else None."""
    terms: list[tuple[str, bool]] = []
    for match in _TERM.finditer(text):
        lexeme = _lexeme(match.group(1).replace("''", "'"), learned)
        if lexeme is None:
            return None
        terms.append((lexeme, match.group(2) is not None))
    skeleton = _TERM.sub("T", text)
    if not terms:
        return None
    if len(terms) == 1 and re.fullmatch(r"\(?\s*T\s*\)?", skeleton):
        return "and", terms
    if _AND.fullmatch(skeleton):
        return "and", terms
    if _OR.fullmatch(skeleton):
        return "or", terms
    return None


def predict_shape(
    lexical: LexicalQuery | None, learned: dict[str, str] | None = None
) -> Shape | None:
    """The shape PostgreSQL will parse the query into, when it is a counted one of plain
    words and numbers; None when only the statement can tell. `learned`: words PostgreSQL
    was seen to stem otherwise than the Snowball stemmer here (PgLexicalCache.learn)."""
    if lexical is None or lexical.tsquery is None or lexical.script_tsquery is not None:
        return None
    learned = {} if learned is None else learned
    strict = _form(lexical.tsquery, learned)
    if strict is None:
        return None
    relaxed = None
    if lexical.tsquery_relaxed is not None:
        relaxed = _form(lexical.tsquery_relaxed, learned)
        if relaxed is None or relaxed[0] != "or":
            return None
    forms = [strict[1]] + ([relaxed[1]] if relaxed else [])
    prefixes: dict[str, set[bool]] = {}
    holders: dict[str, set[int]] = {}
    for index, form in enumerate(forms):
        for lexeme, prefix in form:
            prefixes.setdefault(lexeme, set()).add(prefix)
            holders.setdefault(lexeme, set()).add(index)
    if any(len(p) > 1 for p in prefixes.values()):
        return None  # not alike: LEX_SHAPE reads the tsvectors
    if any(len(h) != len(forms) for h in holders.values()):
        return None  # a term of one form only
    ordered = sorted(prefixes, key=lambda lexeme: lexeme.encode())
    terms = tuple(Term(lexeme, next(iter(prefixes[lexeme]))) for lexeme in ordered)
    strict_at = len(terms) if strict[0] == "and" else 1
    words = tuple(m.group(1).replace("''", "'") for m in _TERM.finditer(lexical.tsquery))
    return Shape(
        terms, strict_at, relaxed is not None, _rendered(*strict),
        _rendered(*relaxed) if relaxed else None, words,
    )


class PgLexicalCache:
    """Per-project postings of one store, used from its event loop."""

    def __init__(self, budget_bytes: int) -> None:
        self._lru: MatrixLru[ProjectPostings] = MatrixLru(budget_bytes)
        self._loading = asyncio.Lock()
        self._fallbacks = 0
        self.served = 0  # searches the statement ranked from the proposal
        # Words PostgreSQL stems otherwise than PyStemmer, learned from refused proposals
        # (PostgreSQL's own rendering of the parse comes back with the page).
        self.learned: dict[str, str] = {}
        # predict_shape by the compiled query's forms (with `learned`; cleared when it grows)
        self._shapes: dict[tuple[str | None, ...], Shape | None] = {}

    @property
    def enabled(self) -> bool:
        return self._lru.budget > 0

    def shape(self, lexical: LexicalQuery | None) -> Shape | None:
        """predict_shape(lexical, self.learned), remembered by the query's forms."""
        if lexical is None:
            return None
        key = (lexical.tsquery, lexical.tsquery_relaxed, lexical.script_tsquery)
        if key not in self._shapes:
            if len(self._shapes) >= MAX_SHAPES:
                self._shapes.clear()
            self._shapes[key] = predict_shape(lexical, self.learned)
        return self._shapes[key]

    async def propose(
        self,
        conn: Reader,
        project_ids: Sequence[int],
        shape: Shape,
        k1: float,
        b: float,
        wanted: int,
        also: Sequence[tuple[int, str, str]] = (),
        *,
        complete: bool = False,
        kinds: frozenset[str] = frozenset(),
        statement_timeout: float | None = None,
        by_score: bool = False,
    ) -> Proposal | None:
        """The scope's first `wanted` rows by the in-process ranking, and those of the
        documents `also` ((project, kind, row id)) that are listed further down, each with
        its place in the whole list; loading the missing projects; None when the scope
        cannot be held at once. `complete`: the whole list, None if longer than `wanted`.
        A project is read within the search's `statement_timeout`; while another search is
        reading, this one does not wait for it (None: the statement ranks in SQL). `kinds`:
        a kind filter (only documents of those kinds are ranked and counted). `by_score`: the
        first rows by score alone (lexical_index.rank)."""
        scope = sorted({int(p) for p in project_ids})
        held = self._held(scope)
        if held is None and not self._loading.locked():
            async with self._loading:
                held = await self._load(conn, scope, statement_timeout)
        if held is None:
            self._fallbacks += 1
            return None
        where = {project_id: i for i, project_id in enumerate(scope)}
        extra = []
        for project_id, kind, row_id in also:
            position = where.get(project_id)
            document = held[position].document(kind, row_id) if position is not None else None
            if position is not None and document is not None:
                extra.append((position, document))
        terms = list(shape.terms)
        spans = term_spans(held, terms)
        eligible = [p.of_kinds(kinds) for p in held] if kinds else None
        ranking_of = functools.partial(
            rank, held, terms, k1, b, shape.strict_at, shape.any_term, wanted, extra, spans,
            eligible, by_score=by_score,
        )
        if postings_count(spans) > THREAD_POSTINGS:
            ranking = await asyncio.to_thread(ranking_of)
        else:
            ranking = ranking_of()
        if complete and ranking.total > len(ranking.scores):
            return None
        keys: tuple[list[int], list[str], list[str]] = ([], [], [])
        for position, document in zip(
            ranking.positions.tolist(), ranking.documents.tolist(), strict=True
        ):
            postings = held[position]
            keys[0].append(scope[position])
            keys[1].append(postings.kinds[document])
            keys[2].append(postings.row_ids[document])
        return Proposal(shape, scope, [p.generation for p in held], ranking, keys, complete)

    async def warm(self, conn: Reader) -> int:
        """Read every project's postings that are missing or older than the project, while
        they fit the budget; returns the projects read."""
        rows = await conn.fetch(SELECT_GENERATIONS)
        read, evictions = 0, self._lru.evictions
        for row in rows:
            project_id = int(row["project_id"])
            async with self._loading:
                held = self._lru.get(project_id)
                if held is not None and held.generation == int(row["vgen"]):
                    continue
                if await self._read(conn, project_id) is None or self._lru.evictions > evictions:
                    break  # full: the searches choose what stays
                read += 1
        return read

    def observed(
        self, project_ids: Sequence[int], generations: Sequence[int], used: bool
    ) -> None:
        """What a statement saw: whether it used the ranking, and the scope's generations
        (postings of another generation are dropped)."""
        if used:
            self.served += 1
        else:
            self._fallbacks += 1
        for project_id, generation in zip(project_ids, generations, strict=True):
            found = self._lru.get(project_id)
            if found is not None and found.generation != generation:
                self._lru.drop(project_id)

    def learn(self, shape: Shape, seen: str | None) -> None:
        """Words whose lexeme in PostgreSQL's rendering of the strict form (`seen`) differs
        from the predicted one, position by position when the two have the same shape; a
        wrong entry only costs a search ranked in SQL."""
        if seen is None or seen == shape.words:
            return
        predicted = [m.group(1) for m in _TERM.finditer(shape.words)]
        found = [m.group(1) for m in _TERM.finditer(seen)]
        if len(found) != len(predicted) or len(found) != len(shape.sources):
            return
        if _TERM.sub("T", seen) != _TERM.sub("T", shape.words):
            return
        if len(self.learned) >= MAX_LEARNED:
            self.learned.clear()
        for word, mine, theirs in zip(shape.sources, predicted, found, strict=True):
            if mine != theirs and _WORD.fullmatch(word):
                self.learned[word] = theirs.replace("''", "'")
                self._shapes.clear()

    def stats(self) -> LexicalCacheStats:
        """What the metrics endpoint shows."""
        return LexicalCacheStats(
            len(self._lru), self._lru.bytes, self._lru.budget, self._lru.loads,
            self._lru.evictions, self.served, self._fallbacks,
        )

    def _held(self, scope: list[int]) -> list[ProjectPostings] | None:
        found = [self._lru.get(p) for p in scope]
        if any(p is None for p in found):
            return None
        for project_id in scope:
            self._lru.use(project_id)
        return [p for p in found if p is not None]

    async def _load(
        self, conn: Reader, scope: list[int], statement_timeout: float | None = None
    ) -> list[ProjectPostings] | None:
        held: list[ProjectPostings] = []
        for project_id in scope:
            self._lru.use(project_id)
        for project_id in scope:
            found = self._lru.get(project_id)
            if found is None:
                found = await self._read(conn, project_id, statement_timeout)
                if found is None:
                    return None
            held.append(found)
        if sum(p.nbytes for p in held) > self._lru.budget or any(
            self._lru.get(p) is None for p in scope
        ):
            return None  # the scope pushed part of itself out: it does not fit
        return held

    async def _read(
        self, conn: Reader, project_id: int, statement_timeout: float | None = None
    ) -> ProjectPostings | None:
        row = await cache_read_row(
            conn, SELECT_PROJECT, project_id, statement_timeout=statement_timeout
        )
        assert row is not None  # one row whatever the project holds
        counts = np.asarray(row["counts"], dtype=np.int64)
        if int(counts.sum()) > MAX_PROJECT_POSTINGS:
            return None
        tfs = np.frombuffer(row["tfs"], dtype=">i4")
        if len(tfs) and int(tfs.max()) > MAX_TF:
            return None  # not written by this service (its tf is a position count, <= 256)
        postings = ProjectPostings(
            generation=int(row["vgen"] or 0),
            n=int(row["n"] or 0),
            sum_dl=int(row["sum_dl"] or 0),
            kinds=list(row["kinds"]),
            row_ids=list(row["row_ids"]),
            lengths=np.asarray(row["lengths"], dtype=np.float64),
            vocabulary=list(row["vocabulary"]),
            starts=np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(counts)]),
            docs=np.frombuffer(row["docs"], dtype=">i4").astype(np.int32),
            tfs=tfs.astype(np.uint16),
        )
        return postings if self._lru.put(project_id, postings) else None
