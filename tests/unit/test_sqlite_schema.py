"""Migrations are idempotent; the vec0 table follows the configured embedding identity."""

from __future__ import annotations

from pathlib import Path

import apsw

from service.embeddings.base import EmbeddingIdentity
from service.projects.lexical import script_ngrams
from service.store.lengths import content_length, ngram_length
from service.store.sqlite.connection import connect
from service.store.sqlite.schema import (
    CREATE_MIGRATIONS_TABLE,
    INSERT_VERSION,
    MIGRATIONS,
    migrate,
    prepare_vector_index,
)
from tests.support.sqlite_postings import fts5_postings, postings_table

SMALL = EmbeddingIdentity("m", 4)
LARGE = EmbeddingIdentity("m", 8)


def _vec_sql(conn: apsw.Connection) -> str | None:
    rows = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'vec_chunks'").fetchall()
    return str(rows[0][0]) if rows else None


def _migrated_to(path: Path, versions: int) -> apsw.Connection:
    """A database with only the first `versions` migrations applied."""
    conn, _ = connect(path, True, reader=False)
    conn.execute(CREATE_MIGRATIONS_TABLE)
    for version, name, steps in MIGRATIONS[:versions]:
        for step in steps:
            if isinstance(step, str):
                conn.execute(step)
            else:
                step(conn)
        conn.execute(INSERT_VERSION, (version, name, 0))
    return conn


def test_migrations_apply_once(tmp_path: Path) -> None:
    conn, _ = connect(tmp_path / "db", True, reader=False)
    assert migrate(conn) == [version for version, _, _ in MIGRATIONS]
    assert migrate(conn) == []
    versions = conn.execute("SELECT version FROM schema_migrations").fetchall()
    assert versions == [(version,) for version, _, _ in MIGRATIONS]
    indexes = conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
    ).fetchall()
    assert all("(project_id" in str(sql) or "(tenant" in str(sql) for (sql,) in indexes)


def test_vec_table_is_rebuilt_for_a_new_identity(tmp_path: Path) -> None:
    conn, support = connect(tmp_path / "db", True, reader=False)
    migrate(conn)
    assert prepare_vector_index(conn, SMALL, support.loaded).identity == SMALL
    assert "FLOAT[4]" in (_vec_sql(conn) or "")
    again = prepare_vector_index(conn, SMALL, support.loaded)
    assert (again.identity, again.usable) == (SMALL, True)
    assert prepare_vector_index(conn, LARGE, support.loaded).identity == LARGE
    assert "FLOAT[8]" in (_vec_sql(conn) or "")


def test_opening_without_the_extension_marks_the_vec_table_stale(tmp_path: Path) -> None:
    conn, support = connect(tmp_path / "db", True, reader=False)
    migrate(conn)
    prepare_vector_index(conn, SMALL, support.loaded)
    conn.close()

    plain, _ = connect(tmp_path / "db", False, reader=False)
    index = prepare_vector_index(plain, SMALL, False)
    assert (index.identity, index.usable) == (SMALL, False)
    assert plain.execute("SELECT stale FROM vector_index").fetchall() == [(1,)]
    plain.close()

    conn, support = connect(tmp_path / "db", True, reader=False)
    index = prepare_vector_index(conn, SMALL, support.loaded)
    assert index.usable
    assert conn.execute("SELECT stale FROM vector_index").fetchall() == [(0,)]


def test_stored_lengths_and_postings_are_backfilled_for_documents_written_before_them(
    tmp_path: Path,
) -> None:
    """A database of schema version 2 gets each document's BM25 lengths, postings and its
    project's statistics, as written now."""
    conn = _migrated_to(tmp_path / "db", 2)
    conn.execute("INSERT INTO projects VALUES (1, 't', 'p', 'p', 0)")
    title, path, body = "Deploy freeze", "ops/runbook.md", "The freeze starts on Friday. 東京の会議"
    conn.execute(
        "INSERT INTO documents (id, project_id, kind, row_id, title, path, body, category,"
        " note_type, note_type_key, metadata, created_at, updated_at, content_hash)"
        " VALUES (7, 1, 'note', 'a', ?, ?, ?, '', '', '', '{}', 0, 0, 'h')",
        (title, path, body),
    )
    assert migrate(conn) == [3, 4, 5, 6]
    stored = conn.execute("SELECT doc_len, ngram_len FROM documents WHERE id = 7").fetchall()
    ngrams = script_ngrams(f"{title} {body}")
    expected = (content_length(title, path, body), ngram_length(ngrams))
    assert stored == [expected]
    # deploy freeze | ops runbook md (path) | ops runbook md (its parts) | freeze starts
    # friday 東京の会議 (body; "the" and "on" are stopwords)
    assert expected[0] == 12
    assert expected[1] > 0
    assert conn.execute("SELECT * FROM lexical_stats").fetchall() == [(1, 1, *expected)]
    # The postings are what FTS5 holds for the same row: index it and compare.
    conn.execute(
        "INSERT INTO docs_fts (rowid, content, ngrams) VALUES (7, ?, ?)",
        (f"{title}\n{path}\n{body}", ngrams),
    )
    assert postings_table(conn) == fts5_postings(conn)
    assert ("freez", 7, 2) in {(t, d, tf) for _, c, t, d, tf, _ in postings_table(conn) if c == 0}


def test_every_change_to_a_projects_vectors_moves_its_generation_on(tmp_path: Path) -> None:
    """A version-4 database with vectors gets generations; then each insert, update and
    delete of a vector row, whoever makes it, moves its project's generation (the vector
    cache's check, service.store.sqlite.vector_cache)."""
    conn = _migrated_to(tmp_path / "db", 4)
    insert = (
        "INSERT INTO vectors (chunk_id, project_id, model, dimensions, source_hash, state,"
        " embedding) VALUES (?, ?, 'm', 4, 'h', 'ready', zeroblob(16))"
    )
    conn.execute(insert, (1, 1))
    assert migrate(conn) == [5, 6]

    def generations() -> list[tuple[int, int]]:
        rows = conn.execute("SELECT project_id, gen FROM vector_generations ORDER BY 1")
        return [(int(p), int(g)) for p, g in rows]

    assert generations() == [(1, 1)]
    conn.execute(insert, (2, 1))
    conn.execute(insert, (3, 2))
    assert generations() == [(1, 2), (2, 1)]
    conn.execute("UPDATE vectors SET state = 'pending', embedding = NULL WHERE chunk_id = 2")
    conn.execute("UPDATE vectors SET source_hash = 'other' WHERE chunk_id = 1")  # not a change
    assert generations() == [(1, 3), (2, 1)]
    conn.execute("DELETE FROM vectors WHERE project_id = 1")
    assert generations() == [(1, 5), (2, 1)]


def test_every_change_to_a_projects_lexical_statistics_moves_its_generation_on(
    tmp_path: Path,
) -> None:
    """A version-5 database with lexical statistics gets generations; then each insert,
    update and delete of a project's lexical_stats row (every write of a document's postings
    makes one in its transaction), whoever makes it, moves its project's generation (the
    lexical cache's check, service.store.sqlite.lexical_cache)."""
    conn = _migrated_to(tmp_path / "db", 5)
    conn.execute("INSERT INTO lexical_stats VALUES (1, 3, 30, 0)")
    assert migrate(conn) == [6]

    def generations() -> list[tuple[int, int]]:
        rows = conn.execute("SELECT project_id, gen FROM lexical_generations ORDER BY 1")
        return [(int(p), int(g)) for p, g in rows]

    assert generations() == [(1, 1)]
    conn.execute("INSERT INTO lexical_stats VALUES (2, 1, 5, 0)")
    assert generations() == [(1, 1), (2, 1)]
    conn.execute("UPDATE lexical_stats SET n = n + 1, sum_dl = sum_dl + 4 WHERE project_id = 1")
    conn.execute("UPDATE lexical_stats SET n = n + 0 WHERE project_id = 2")  # a rewrite
    assert generations() == [(1, 2), (2, 2)]
    conn.execute("DELETE FROM lexical_stats WHERE project_id = 1")
    conn.execute("INSERT INTO lexical_stats VALUES (1, 1, 2, 0)")
    assert generations() == [(1, 4), (2, 2)]
