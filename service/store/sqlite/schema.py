"""Versioned schema migrations and the identity-dependent vec0 KNN table."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import apsw

from service.embeddings.base import EmbeddingIdentity
from service.store.lengths import content_length, ngram_length
from service.store.sqlite import postings
from service.store.sqlite.values import immediate

# Design notes:
# - Every secondary index leads with project_id; row identity is (project_id, kind, row_id).
# - Times are INTEGER unix microseconds (UTC), so range filters compare numerically.
# - No declared foreign keys: SQLite would look children up by document_id / chunk_id
#   alone (no index leads with them), so cascades are explicit deletes keyed by project_id.
# - docs_fts is contentless (content=''): bodies live once, in documents; rowid = documents.id.
# - term_postings / lexical_stats (migration 4, postings.py) hold what BM25 reads: per project,
#   term and document the term frequency and the document's length; per project N and the
#   summed lengths. Written with the document, from FTS5's tokenizer.
# - vectors holds every embedding (any identity; authoritative, used by the exact scan);
#   vec_chunks (vec0) mirrors the ready vectors of one identity for the KNN path.
# - vector_generations (migration 5) counts changes to each project's vectors (triggers), so
#   the in-process KNN matrices (vector_cache.py) know when to read a project again.
# - lexical_generations (migration 6) does the same for the in-process postings
#   (lexical_cache.py), moved by triggers on lexical_stats.
Step = str | Callable[[apsw.Connection], None]


def _backfill_lengths(conn: apsw.Connection) -> None:
    """Migration 3: the stored BM25 lengths of every existing document (service.store.lengths;
    the n-grams are derived from title and body, as at indexing time)."""
    from service.projects.lexical import script_ngrams

    last = 0
    while True:  # in batches: bodies are read into memory
        rows = conn.execute(
            "SELECT id, title, path, body FROM documents WHERE id > ? ORDER BY id LIMIT 500",
            (last,),
        ).fetchall()
        if not rows:
            return
        lengths = []
        for doc_id, title, path, body in rows:
            title, path, body = str(title), str(path), str(body)
            ngrams = script_ngrams(f"{title} {body}")
            lengths.append((content_length(title, path, body), ngram_length(ngrams), doc_id))
        conn.executemany("UPDATE documents SET doc_len = ?, ngram_len = ? WHERE id = ?", lengths)
        last = cast(int, rows[-1][0])


def _backfill_postings(conn: apsw.Connection) -> None:
    """Migration 4: term_postings and lexical_stats of every existing document, from the
    same text and tokenizer as its FTS5 row (service.store.sqlite.postings).

    Project by project (ascending, as the key begins), each project's postings are staged
    in a temporary table and appended in key order: ~5x faster than inserting them where
    they belong document by document. The document index is built afterwards, in one sort.
    """
    from service.projects.lexical import script_ngrams

    conn.execute(
        "INSERT INTO lexical_stats (project_id, n, sum_dl, sum_nl)"
        " SELECT project_id, count(*), sum(doc_len), sum(ngram_len) FROM documents"
        " GROUP BY project_id"
    )
    conn.execute(
        "CREATE TEMP TABLE postings_backfill (project_id INTEGER, col INTEGER, term TEXT,"
        " doc_id INTEGER, tf INTEGER, dl INTEGER)"
    )
    tokenizer = postings.postings_of(conn)
    projects = [row[0] for row in conn.execute("SELECT DISTINCT project_id FROM documents")]
    for project_id in sorted(cast(int, p) for p in projects):
        last = 0
        while True:  # in batches: bodies are read into memory
            rows = conn.execute(
                "SELECT id, title, path, body, doc_len, ngram_len FROM documents"
                " WHERE project_id = ? AND id > ? ORDER BY id LIMIT 500",
                (project_id, last),
            ).fetchall()
            if not rows:
                break
            for doc_id, title, path, body, doc_len, ngram_len in rows:
                title, path, body = str(title), str(path), str(body)
                content = postings.indexed_content(title, path, body)
                # No n-grams counted at write time: none to index (the common case, and
                # script_ngrams reads every character).
                ngrams = script_ngrams(f"{title} {body}") if ngram_len else ""
                lengths = (cast(int, doc_len), cast(int, ngram_len))
                conn.executemany(
                    "INSERT INTO temp.postings_backfill VALUES (?, ?, ?, ?, ?, ?)",
                    tokenizer.rows(project_id, cast(int, doc_id), content, ngrams, lengths),
                )
            last = cast(int, rows[-1][0])
        conn.execute(
            "INSERT INTO term_postings SELECT * FROM temp.postings_backfill"
            " ORDER BY project_id, col, term, doc_id"
        )
        conn.execute("DELETE FROM temp.postings_backfill")
    conn.execute("DROP TABLE temp.postings_backfill")


MIGRATIONS: tuple[tuple[int, str, tuple[Step, ...]], ...] = (
    (
        1,
        "projects, documents, chunks, vectors, fts, accounts",
        (
            """CREATE TABLE projects (
                project_id INTEGER PRIMARY KEY AUTOINCREMENT,
                tenant TEXT NOT NULL,
                external_id TEXT NOT NULL,
                name TEXT NOT NULL,
                created_at INTEGER NOT NULL,
                UNIQUE (tenant, external_id)
            )""",
            """CREATE TABLE documents (
                id INTEGER PRIMARY KEY,
                project_id INTEGER NOT NULL,
                kind TEXT NOT NULL,
                row_id TEXT NOT NULL,
                title TEXT NOT NULL,
                path TEXT NOT NULL,
                body TEXT NOT NULL,
                category TEXT NOT NULL,
                note_type TEXT NOT NULL,
                note_type_key TEXT NOT NULL,
                metadata TEXT NOT NULL CHECK (json_valid(metadata)),
                created_at INTEGER NOT NULL,
                updated_at INTEGER NOT NULL,
                content_hash TEXT NOT NULL,
                UNIQUE (project_id, kind, row_id)
            )""",
            "CREATE INDEX documents_path ON documents (project_id, path)",
            """CREATE TABLE chunks (
                id INTEGER PRIMARY KEY,
                project_id INTEGER NOT NULL,
                document_id INTEGER NOT NULL,
                chunk_index INTEGER NOT NULL,
                text TEXT NOT NULL,
                source_hash TEXT NOT NULL,
                UNIQUE (project_id, document_id, chunk_index)
            )""",
            "CREATE INDEX chunks_source ON chunks (project_id, source_hash)",
            """CREATE TABLE vectors (
                chunk_id INTEGER PRIMARY KEY,
                project_id INTEGER NOT NULL,
                model TEXT NOT NULL,
                dimensions INTEGER NOT NULL,
                source_hash TEXT NOT NULL,
                state TEXT NOT NULL CHECK (state IN ('pending', 'ready')),
                embedding BLOB,
                CHECK (state = 'pending' OR embedding IS NOT NULL)
            )""",
            "CREATE INDEX vectors_identity ON vectors (project_id, model, dimensions, state)",
            """CREATE VIRTUAL TABLE docs_fts USING fts5(
                content, ngrams,
                content = '', contentless_delete = 1,
                tokenize = 'porter unicode61 remove_diacritics 2'
            )""",
            """CREATE TABLE vector_index (
                id INTEGER PRIMARY KEY CHECK (id = 1),
                model TEXT NOT NULL,
                dimensions INTEGER NOT NULL,
                stale INTEGER NOT NULL DEFAULT 0
            )""",
            """CREATE TABLE accounts (
                account_id TEXT PRIMARY KEY,
                tenant TEXT NOT NULL,
                provider TEXT NOT NULL,
                display_name TEXT NOT NULL,
                base_url TEXT NOT NULL,
                sealed_credentials BLOB NOT NULL,
                created_at INTEGER NOT NULL,
                needs_reconnect INTEGER NOT NULL DEFAULT 0
            )""",
            "CREATE INDEX accounts_tenant ON accounts (tenant, created_at)",
        ),
    ),
    (
        2,
        "rate_limits",
        (
            """CREATE TABLE rate_limits (
                account_id TEXT NOT NULL,
                resource TEXT NOT NULL,
                until INTEGER NOT NULL,
                PRIMARY KEY (account_id, resource)
            )""",
        ),
    ),
    (
        3,
        "stored bm25 lengths",
        (
            "ALTER TABLE documents ADD COLUMN doc_len INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE documents ADD COLUMN ngram_len INTEGER NOT NULL DEFAULT 0",
            _backfill_lengths,
        ),
    ),
    (
        4,
        "lexical postings",
        (
            # WITHOUT ROWID: the key is the row; a scope's postings of a term are one range.
            """CREATE TABLE term_postings (
                project_id INTEGER NOT NULL,
                col INTEGER NOT NULL,
                term TEXT NOT NULL,
                doc_id INTEGER NOT NULL,
                tf INTEGER NOT NULL,
                dl INTEGER NOT NULL,
                PRIMARY KEY (project_id, col, term, doc_id)
            ) WITHOUT ROWID""",
            """CREATE TABLE lexical_stats (
                project_id INTEGER PRIMARY KEY,
                n INTEGER NOT NULL,
                sum_dl INTEGER NOT NULL,
                sum_nl INTEGER NOT NULL
            )""",
            _backfill_postings,
            "CREATE INDEX term_postings_doc ON term_postings (project_id, doc_id)",
        ),
    ),
    (
        5,
        "vector generations",
        (
            # What the in-process KNN matrices are checked against (vector_cache.py): any
            # change to a project's vectors, by any writer, moves its generation on.
            """CREATE TABLE vector_generations (
                project_id INTEGER PRIMARY KEY,
                gen INTEGER NOT NULL
            )""",
            "INSERT INTO vector_generations (project_id, gen)"
            " SELECT DISTINCT project_id, 1 FROM vectors",
            """CREATE TRIGGER vectors_generation_insert AFTER INSERT ON vectors BEGIN
                INSERT INTO vector_generations (project_id, gen) VALUES (NEW.project_id, 1)
                ON CONFLICT (project_id) DO UPDATE SET gen = gen + 1;
            END""",
            """CREATE TRIGGER vectors_generation_delete AFTER DELETE ON vectors BEGIN
                INSERT INTO vector_generations (project_id, gen) VALUES (OLD.project_id, 1)
                ON CONFLICT (project_id) DO UPDATE SET gen = gen + 1;
            END""",
            """CREATE TRIGGER vectors_generation_update
            AFTER UPDATE OF project_id, model, dimensions, state, embedding ON vectors BEGIN
                INSERT INTO vector_generations (project_id, gen) VALUES (NEW.project_id, 1)
                ON CONFLICT (project_id) DO UPDATE SET gen = gen + 1;
            END""",
            # An update that moves a row between projects (none does today) moves both on.
            """CREATE TRIGGER vectors_generation_move
            AFTER UPDATE OF project_id ON vectors WHEN OLD.project_id <> NEW.project_id BEGIN
                UPDATE vector_generations SET gen = gen + 1 WHERE project_id = OLD.project_id;
            END""",
        ),
    ),
    (
        6,
        "lexical generations",
        (
            # What the in-process postings are checked against (lexical_cache.py): every
            # write of a document's postings moves its project's lexical_stats in the same
            # transaction (postings.Batch), and any change to those rows, by any writer,
            # moves the project's generation on.
            """CREATE TABLE lexical_generations (
                project_id INTEGER PRIMARY KEY,
                gen INTEGER NOT NULL
            )""",
            "INSERT INTO lexical_generations (project_id, gen)"
            " SELECT project_id, 1 FROM lexical_stats",
            """CREATE TRIGGER lexical_generation_insert AFTER INSERT ON lexical_stats BEGIN
                INSERT INTO lexical_generations (project_id, gen) VALUES (NEW.project_id, 1)
                ON CONFLICT (project_id) DO UPDATE SET gen = gen + 1;
            END""",
            """CREATE TRIGGER lexical_generation_update AFTER UPDATE ON lexical_stats BEGIN
                INSERT INTO lexical_generations (project_id, gen) VALUES (NEW.project_id, 1)
                ON CONFLICT (project_id) DO UPDATE SET gen = gen + 1;
                UPDATE lexical_generations SET gen = gen + 1
                WHERE project_id = OLD.project_id AND OLD.project_id <> NEW.project_id;
            END""",
            """CREATE TRIGGER lexical_generation_delete AFTER DELETE ON lexical_stats BEGIN
                INSERT INTO lexical_generations (project_id, gen) VALUES (OLD.project_id, 1)
                ON CONFLICT (project_id) DO UPDATE SET gen = gen + 1;
            END""",
        ),
    ),
)

CREATE_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at INTEGER NOT NULL
)"""
SELECT_VERSIONS = "SELECT version FROM schema_migrations"
INSERT_VERSION = "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"

VEC_TABLE = "vec_chunks"
SELECT_VECTOR_INDEX = "SELECT model, dimensions, stale FROM vector_index WHERE id = 1"
UPSERT_VECTOR_INDEX = """
INSERT INTO vector_index (id, model, dimensions, stale) VALUES (1, ?, ?, 0)
ON CONFLICT (id) DO UPDATE SET model = excluded.model, dimensions = excluded.dimensions, stale = 0
"""
MARK_VECTOR_INDEX_STALE = "UPDATE vector_index SET stale = 1"
DROP_VEC_TABLE = "DROP TABLE IF EXISTS vec_chunks"
# The dimension is part of the DDL (vec0 cannot bind it); it is a validated int.
CREATE_VEC_TABLE = """
CREATE VIRTUAL TABLE vec_chunks USING vec0(
    chunk_id INTEGER PRIMARY KEY,
    project_id INTEGER PARTITION KEY,
    embedding FLOAT[{dimensions}] distance_metric=cosine
)"""
BACKFILL_VEC_TABLE = """
INSERT INTO vec_chunks (chunk_id, project_id, embedding)
SELECT v.chunk_id, v.project_id, v.embedding
FROM vectors AS v JOIN chunks AS c ON c.id = v.chunk_id
WHERE v.model = ? AND v.dimensions = ? AND v.state = 'ready' AND v.source_hash = c.source_hash
"""


def migrate(conn: apsw.Connection) -> list[int]:
    """Apply missing migrations in one immediate transaction; returns the versions applied."""
    with immediate(conn):
        conn.execute(CREATE_MIGRATIONS_TABLE)
        done = {row[0] for row in conn.execute(SELECT_VERSIONS)}
        applied = []
        for version, name, statements in MIGRATIONS:
            if version in done:
                continue
            for step in statements:
                if isinstance(step, str):
                    conn.execute(step)
                else:
                    step(conn)
            conn.execute(INSERT_VERSION, (version, name, time.time_ns() // 1000))
            applied.append(version)
    return applied


@dataclass(frozen=True)
class VectorIndex:
    """The vec0 table's identity; `usable` when it mirrors the ready vectors of `identity`."""

    identity: EmbeddingIdentity | None
    usable: bool


def prepare_vector_index(
    conn: apsw.Connection, identity: EmbeddingIdentity | None, extension: bool
) -> VectorIndex:
    """Create or rebuild vec_chunks for `identity` (write path, at open only)."""
    with immediate(conn):
        row = conn.execute(SELECT_VECTOR_INDEX).fetchone()
        current = EmbeddingIdentity(row[0], row[1]) if row else None
        stale = bool(row[2]) if row else False
        if not extension:
            # Writes cannot maintain a vec0 table without the module: rebuild it next time.
            if row is not None:
                conn.execute(MARK_VECTOR_INDEX_STALE)
            return VectorIndex(current, False)
        if identity is None:
            return VectorIndex(current, current is not None and not stale)
        if current != identity or stale:
            conn.execute(DROP_VEC_TABLE)
            conn.execute(CREATE_VEC_TABLE.format(dimensions=int(identity.dimensions)))
            conn.execute(BACKFILL_VEC_TABLE, (identity.model, identity.dimensions))
            conn.execute(UPSERT_VECTOR_INDEX, (identity.model, identity.dimensions))
        return VectorIndex(identity, True)
