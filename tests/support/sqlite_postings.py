"""What the SQLite store's postings must equal: FTS5's own index of the same documents."""

from __future__ import annotations

import apsw

Posting = tuple[int, int, str, int, int, int]  # project_id, col, term, doc_id, tf, dl


def postings_table(conn: apsw.Connection) -> set[Posting]:
    """Every row of term_postings."""
    rows = conn.execute("SELECT project_id, col, term, doc_id, tf, dl FROM term_postings")
    return {tuple(row) for row in rows}


def fts5_postings(conn: apsw.Connection) -> set[Posting]:
    """The same rows counted from docs_fts's token instances, with each document's stored
    length and project."""
    conn.execute(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.check_instance"
        " USING fts5vocab(main, docs_fts, instance)"
    )
    rows = conn.execute(
        "SELECT d.project_id, CASE i.col WHEN 'content' THEN 0 ELSE 1 END, i.term, i.doc,"
        " count(*), CASE i.col WHEN 'content' THEN d.doc_len ELSE d.ngram_len END"
        " FROM temp.check_instance AS i JOIN documents AS d ON d.id = i.doc"
        " GROUP BY i.doc, i.col, i.term"
    )
    return {tuple(row) for row in rows}


def stats_table(conn: apsw.Connection) -> set[tuple[int, int, int, int]]:
    """lexical_stats rows of projects that have documents."""
    rows = conn.execute("SELECT project_id, n, sum_dl, sum_nl FROM lexical_stats WHERE n > 0")
    return {tuple(row) for row in rows}


def documents_stats(conn: apsw.Connection) -> set[tuple[int, int, int, int]]:
    """The same statistics counted from the documents table."""
    rows = conn.execute(
        "SELECT project_id, count(*), sum(doc_len), sum(ngram_len) FROM documents"
        " GROUP BY project_id"
    )
    return {tuple(row) for row in rows}
