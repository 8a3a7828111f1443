"""Versioned schema migrations, applied at start-up under an advisory lock.

Every table that grows with content (documents, chunks, vectors) is keyed by `project_id`
first, so the same DDL works with `PARTITION BY HASH (project_id)` or Citus distribution.
The GIN indexes are the exception (GIN has no btree leading column without btree_gin);
under partitioning each partition carries its own.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import asyncpg

from service.embeddings.base import EmbeddingIdentity
from service.store.lengths import INDEXED_BODY_CHARS, INDEXED_NGRAM_CHARS

# pg_advisory_xact_lock key shared by every replica: "search-service schema" as a bigint.
MIGRATION_LOCK_KEY = 0x5EA2C4_5C4E3A
# Words of a document body beyond this many characters are not in its tsvector: a tsvector
# holds at most 1 MiB, and 100,000 characters stay below that even for 4-byte characters
# (lexemes <= 400 KB, entries and positions <= 300 KB). Chunks still carry the full text.
FTS_BODY_CHARS = INDEXED_BODY_CHARS
FTS_NGRAM_CHARS = INDEXED_NGRAM_CHARS
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 64


@dataclass(frozen=True)
class Migration:
    """One schema version: statements run in one transaction."""

    version: int
    name: str
    statements: tuple[str, ...]


CREATE_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""
LOCK = "SELECT pg_advisory_xact_lock($1)"
APPLIED_VERSIONS = "SELECT version FROM schema_migrations"
RECORD_VERSION = "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)"

_PROJECTS = """
CREATE TABLE projects (
    project_id  bigserial PRIMARY KEY,
    tenant      text NOT NULL,
    external_id text NOT NULL,
    name        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT projects_tenant_external_id_key UNIQUE (tenant, external_id)
)"""
_PROJECTS_TENANT = "CREATE INDEX projects_tenant_idx ON projects (tenant, project_id)"
_DOCUMENTS = """
CREATE TABLE documents (
    project_id   bigint NOT NULL REFERENCES projects (project_id) ON DELETE CASCADE,
    kind         text NOT NULL,
    row_id       text NOT NULL,
    title        text NOT NULL,
    path         text NOT NULL,
    body         text NOT NULL,
    category     text NOT NULL,
    note_type    text NOT NULL,
    metadata     jsonb NOT NULL,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    content_hash text NOT NULL,
    fts          tsvector NOT NULL,
    ngram_fts    tsvector NOT NULL,
    doc_len      integer NOT NULL,
    ngram_len    integer NOT NULL,
    -- INCLUDE: BM25 statistics of a scope come from an index-only scan.
    PRIMARY KEY (project_id, kind, row_id) INCLUDE (doc_len, ngram_len)
)"""
# Searches read `fts` several times per candidate: keep it (and rows up to a page) inline,
# since each out-of-line read is a TOAST index lookup. Large bodies still move out first.
_DOCUMENTS_INLINE = """
ALTER TABLE documents
    SET (toast_tuple_target = 8160),
    ALTER COLUMN fts SET STORAGE MAIN,
    ALTER COLUMN ngram_fts SET STORAGE MAIN"""
_DOCUMENTS_FTS = "CREATE INDEX documents_fts_idx ON documents USING gin (fts)"
_DOCUMENTS_NGRAM_FTS = "CREATE INDEX documents_ngram_fts_idx ON documents USING gin (ngram_fts)"
_CHUNKS = """
CREATE TABLE chunks (
    project_id  bigint NOT NULL,
    kind        text NOT NULL,
    row_id      text NOT NULL,
    chunk_index integer NOT NULL,
    text        text NOT NULL,
    source_hash text NOT NULL,
    PRIMARY KEY (project_id, kind, row_id, chunk_index) INCLUDE (source_hash),
    FOREIGN KEY (project_id, kind, row_id)
        REFERENCES documents (project_id, kind, row_id) ON DELETE CASCADE
)"""
_VECTORS = """
CREATE TABLE vectors (
    project_id  bigint NOT NULL,
    kind        text NOT NULL,
    row_id      text NOT NULL,
    chunk_index integer NOT NULL,
    model       text NOT NULL,
    dimensions  integer NOT NULL,
    source_hash text NOT NULL,
    state       text NOT NULL,
    embedding   vector,
    ann         boolean NOT NULL DEFAULT false,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, kind, row_id, chunk_index, model, dimensions),
    FOREIGN KEY (project_id, kind, row_id, chunk_index)
        REFERENCES chunks (project_id, kind, row_id, chunk_index) ON DELETE CASCADE,
    CONSTRAINT vectors_state_check CHECK (state IN ('pending', 'ready')),
    CONSTRAINT vectors_embedding_check CHECK (
        state = 'pending' OR (embedding IS NOT NULL AND vector_dims(embedding) = dimensions)
    )
)"""
_VECTORS_SOURCE = """
CREATE INDEX vectors_source_idx ON vectors (project_id, model, dimensions, source_hash)
    WHERE state = 'ready'"""
# Ready vectors not yet in the HNSW index (see service.store.postgres.ann).
_VECTORS_ANN_BACKLOG = """
CREATE INDEX vectors_ann_backlog_idx ON vectors (project_id, model, dimensions)
    WHERE state = 'ready' AND NOT ann"""
_ACCOUNTS = """
CREATE TABLE accounts (
    tenant             text NOT NULL,
    account_id         text NOT NULL,
    provider           text NOT NULL,
    display_name       text NOT NULL,
    base_url           text NOT NULL,
    sealed_credentials bytea NOT NULL,
    created_at         timestamptz NOT NULL,
    needs_reconnect    boolean NOT NULL DEFAULT false,
    PRIMARY KEY (account_id)
)"""
_ACCOUNTS_TENANT = "CREATE INDEX accounts_tenant_idx ON accounts (tenant, created_at)"
# Provider waits shared by replicas (service.workspace.limits); `until` in unix seconds.
_RATE_LIMITS = """
CREATE TABLE rate_limits (
    account_id text NOT NULL,
    resource   text NOT NULL,
    until      double precision NOT NULL,
    PRIMARY KEY (account_id, resource)
)"""
# A malformed query becomes NULL instead of an error, so one statement can fall back to the
# relaxed form (or to an empty lexical channel) without a savepoint or a second round trip.
# PostgreSQL 16+ checks the syntax first (pg_input_is_valid), with no exception block and so
# no subtransaction per call; older servers catch the error (OTHERS never catches
# query_canceled, so statement timeouts still stop the statement). plpgsql keeps the planner
# from folding to_tsquery() over a constant, malformed argument while planning.
_TRY_TSQUERY = """
DO $do$
BEGIN
    IF current_setting('server_version_num')::integer >= 160000 THEN
        EXECUTE $ddl$
            CREATE OR REPLACE FUNCTION search_try_tsquery(config regconfig, query text)
            RETURNS tsquery LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
            BEGIN
                IF pg_input_is_valid(query, 'tsquery') THEN
                    RETURN to_tsquery(config, query);
                END IF;
                RETURN NULL;
            END
            $fn$
        $ddl$;
    ELSE
        EXECUTE $ddl$
            CREATE OR REPLACE FUNCTION search_try_tsquery(config regconfig, query text)
            RETURNS tsquery LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
            BEGIN
                RETURN to_tsquery(config, query);
            EXCEPTION WHEN OTHERS THEN
                RETURN NULL;
            END
            $fn$
        $ddl$;
    END IF;
END
$do$"""

# The lexical channel's postings (service.store.postgres.lexical_sql): one row per document
# and lexeme of its `fts` (chan 0) or `ngram_fts` (chan 1), with the lexeme's position count
# (tsvector keeps at most 256 positions; a lexeme without positions counts 1) and the
# document's length in that channel. Keyed by project first, lexemes in byte order, so a
# query term's postings in a scope are one index range per project; the second index serves
# the delete of one document's postings. No foreign key: its check would cost one lookup per
# posting, and every write deletes a document's postings with the document itself.
# Partitioned like `documents` (read from the catalog, since partitioning is decided when
# migration 1 creates the schema; see `partitioned`).
_TERM_POSTINGS = """
DO $do$
DECLARE
    parts integer := (
        SELECT count(*) FROM pg_inherits AS i JOIN pg_partitioned_table AS t
          ON t.partrelid = i.inhparent
        WHERE i.inhparent = 'documents'::regclass
    );
    columns text := $cols$(
        project_id bigint NOT NULL,
        chan       smallint NOT NULL,
        lexeme     text COLLATE "C" NOT NULL,
        kind       text NOT NULL,
        row_id     text NOT NULL,
        tf         integer NOT NULL,
        dl         integer NOT NULL,
        PRIMARY KEY (project_id, chan, lexeme, kind, row_id)
    )$cols$;
BEGIN
    IF parts = 0 THEN
        EXECUTE 'CREATE TABLE term_postings ' || columns;
    ELSE
        EXECUTE 'CREATE TABLE term_postings ' || columns || ' PARTITION BY HASH (project_id)';
        FOR i IN 0 .. parts - 1 LOOP
            EXECUTE format(
                'CREATE TABLE term_postings_p%s PARTITION OF term_postings '
                'FOR VALUES WITH (MODULUS %s, REMAINDER %s)', i, parts, i);
        END LOOP;
    END IF;
END
$do$"""
_TERM_POSTINGS_DOCUMENT = """
CREATE INDEX term_postings_document_idx ON term_postings (project_id, kind, row_id)"""
# Per project: documents, summed `doc_len` and `ngram_len` (N and the mean lengths of an
# unfiltered scope), and (migration 5) chunks; moved by each write by the difference it makes.
_LEXICAL_STATS = """
CREATE TABLE lexical_stats (
    project_id bigint PRIMARY KEY REFERENCES projects (project_id) ON DELETE CASCADE,
    n          bigint NOT NULL,
    sum_dl     bigint NOT NULL,
    sum_nl     bigint NOT NULL
)"""
BACKFILL_POSTINGS = """
INSERT INTO term_postings (project_id, chan, lexeme, kind, row_id, tf, dl)
SELECT d.project_id, 0, u.lexeme, d.kind, d.row_id, COALESCE(array_length(u.positions, 1), 1),
       d.doc_len
FROM documents AS d CROSS JOIN LATERAL unnest(d.fts) AS u
UNION ALL
SELECT d.project_id, 1, u.lexeme, d.kind, d.row_id, COALESCE(array_length(u.positions, 1), 1),
       d.ngram_len
FROM documents AS d CROSS JOIN LATERAL unnest(d.ngram_fts) AS u"""
BACKFILL_STATS = """
INSERT INTO lexical_stats (project_id, n, sum_dl, sum_nl)
SELECT project_id, count(*), sum(doc_len), sum(ngram_len) FROM documents GROUP BY project_id"""

# The key carries each posting's tf and dl, so a term's postings are read from the index
# alone (an index-only scan once vacuum has marked the pages visible) instead of one heap
# fetch each: FTS statement at 100k chunks p50 5.35 -> ~4.6 ms, p95 23 -> ~17.8 ms, and the
# rebuilt index was smaller (389 -> 342 MB; the one built by inserts was fragmented).
_TERM_POSTINGS_COVERING = """
ALTER TABLE term_postings
    DROP CONSTRAINT term_postings_pkey,
    ADD PRIMARY KEY (project_id, chan, lexeme, kind, row_id) INCLUDE (tf, dl)"""

# Each project's chunks, so that the vector channel of an unfiltered scope picks the exact scan
# or the HNSW index from a few rows instead of counting up to SEARCH_EXACT_SCAN_LIMIT + 1
# index entries (~2 ms of a VECTOR statement at the default 10,000).
_LEXICAL_STATS_CHUNKS = "ALTER TABLE lexical_stats ADD COLUMN chunks bigint NOT NULL DEFAULT 0"
BACKFILL_STATS_CHUNKS = """
UPDATE lexical_stats AS s SET chunks = c.n
FROM (SELECT project_id, count(*) AS n FROM chunks GROUP BY project_id) AS c
WHERE s.project_id = c.project_id"""

# Each project's vector generation: moved by every write or delete that inserts or removes
# any of its vectors, in the statement that moves its other statistics (so under the same
# row lock, taken last). A snapshot that sees generation g of a project sees exactly the
# vectors the writes up to g left; the in-process KNN matrices (vector_cache.py) are
# checked against it by the search statement itself.
_LEXICAL_STATS_VGEN = "ALTER TABLE lexical_stats ADD COLUMN vgen bigint NOT NULL DEFAULT 0"
# A vector changed in place (a tool re-embedding or un-readying rows behind the service)
# moves the generation too. The service's own writes never update a vector's content (only
# `ann`, which the WHEN clause passes over without calling the function).
_VGEN_FUNCTION = """
CREATE FUNCTION search_vector_changed() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    UPDATE lexical_stats SET vgen = vgen + 1 WHERE project_id = NEW.project_id;
    RETURN NULL;
END
$fn$"""
_VGEN_TRIGGER = """
CREATE TRIGGER vectors_changed_in_place AFTER UPDATE ON vectors FOR EACH ROW
WHEN (OLD.embedding IS DISTINCT FROM NEW.embedding OR OLD.state IS DISTINCT FROM NEW.state
      OR OLD.model IS DISTINCT FROM NEW.model OR OLD.dimensions IS DISTINCT FROM NEW.dimensions
      OR OLD.source_hash IS DISTINCT FROM NEW.source_hash)
EXECUTE FUNCTION search_vector_changed()"""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "projects, documents, chunks, vectors, accounts",
        (
            "CREATE EXTENSION IF NOT EXISTS vector",
            _PROJECTS,
            _PROJECTS_TENANT,
            _DOCUMENTS,
            _DOCUMENTS_INLINE,
            _DOCUMENTS_FTS,
            _DOCUMENTS_NGRAM_FTS,
            _CHUNKS,
            _VECTORS,
            _VECTORS_SOURCE,
            _VECTORS_ANN_BACKLOG,
            _ACCOUNTS,
            _ACCOUNTS_TENANT,
            _TRY_TSQUERY,
        ),
    ),
    Migration(2, "rate_limits", (_RATE_LIMITS,)),
    Migration(
        3,
        "term_postings, lexical_stats",
        (
            _TERM_POSTINGS,
            _TERM_POSTINGS_DOCUMENT,
            _LEXICAL_STATS,
            BACKFILL_POSTINGS,
            BACKFILL_STATS,
        ),
    ),
    Migration(4, "term_postings key covers tf and dl", (_TERM_POSTINGS_COVERING,)),
    Migration(5, "lexical_stats counts chunks", (_LEXICAL_STATS_CHUNKS, BACKFILL_STATS_CHUNKS)),
    Migration(
        6,
        "lexical_stats vector generations",
        (_LEXICAL_STATS_VGEN, _VGEN_FUNCTION, _VGEN_TRIGGER),
    ),
)

# Hash partitioning by project_id (SEARCH_PG_PARTITIONS, fixed when the schema is created):
# every key and foreign key starts with project_id, so each project lives in one partition
# per table (a custom plan prunes to them; a generic plan over `= ANY($scope)` visits every
# partition's index). Storage parameters cannot be set on a partitioned parent.
PARTITIONED_TABLES = ("documents", "chunks", "vectors")
PARTITION_BY = " PARTITION BY HASH (project_id)"
PARTITION_OF = (
    "CREATE TABLE {table}_p{index} PARTITION OF {table} "
    "FOR VALUES WITH (MODULUS {count}, REMAINDER {index})"
)
_DOCUMENTS_STORAGE = """
ALTER TABLE documents
    ALTER COLUMN fts SET STORAGE MAIN,
    ALTER COLUMN ngram_fts SET STORAGE MAIN"""
_PARTITION_INLINE = "ALTER TABLE documents_p{index} SET (toast_tuple_target = 8160)"


def partitioned(migration: Migration, partitions: int) -> Migration:
    """`migration` with documents, chunks and vectors hash-partitioned (0: unchanged).

    Only migration 1 is rewritten: later migrations that add content tables partition them
    like `documents` themselves, from the catalog (a schema keeps the partitioning it was
    created with, whatever the setting says later)."""
    if partitions == 0 or migration.version != 1:
        return migration
    tables = dict(zip((_DOCUMENTS, _CHUNKS, _VECTORS), PARTITIONED_TABLES, strict=True))
    statements: list[str] = []
    for statement in migration.statements:
        table = tables.get(statement)
        if table is not None:
            statements.append(statement + PARTITION_BY)
            statements += [
                PARTITION_OF.format(table=table, index=i, count=partitions)
                for i in range(partitions)
            ]
        elif statement == _DOCUMENTS_INLINE:
            statements.append(_DOCUMENTS_STORAGE)
            statements += [_PARTITION_INLINE.format(index=i) for i in range(partitions)]
        else:
            statements.append(statement)
    return Migration(migration.version, migration.name, tuple(statements))


INDEX_EXISTS = "SELECT to_regclass($1) IS NOT NULL"
# Index DDL cannot take parameters; format() quotes the name and the model on the server.
HNSW_DDL = """
SELECT format(
    'CREATE INDEX IF NOT EXISTS %I ON vectors USING hnsw ((embedding::vector(%s)) '
    'vector_cosine_ops) WITH (m = %s, ef_construction = %s) '
    'WHERE model = %L AND dimensions = %s AND ann',
    $1::text, $2::integer, $3::integer, $4::integer, $5::text, $2::integer)"""


def hnsw_index_name(identity: EmbeddingIdentity) -> str:
    """Name of the partial HNSW index for one embedding identity (<= 63 bytes)."""
    digest = hashlib.sha256(identity.key().encode()).hexdigest()[:16]
    return f"vectors_hnsw_{identity.dimensions}_{digest}"


async def apply_migrations(conn: asyncpg.Connection, partitions: int = 0) -> list[int]:
    """Apply missing migrations; returns the versions applied now (idempotent, replica-safe).

    `partitions` > 0 hash-partitions the content tables when the schema is created now.
    """
    applied_now: list[int] = []
    async with conn.transaction():
        # Replicas starting together queue here; the loser sees the winner's versions.
        await conn.execute(LOCK, MIGRATION_LOCK_KEY)
        await conn.execute(CREATE_MIGRATIONS_TABLE)
        done = {row["version"] for row in await conn.fetch(APPLIED_VERSIONS)}
        for original in MIGRATIONS:
            if original.version in done:
                continue
            migration = partitioned(original, partitions)
            for statement in migration.statements:
                await conn.execute(statement)
            await conn.execute(RECORD_VERSION, migration.version, migration.name)
            applied_now.append(migration.version)
    return applied_now


async def ensure_vector_index(conn: asyncpg.Connection, identity: EmbeddingIdentity) -> bool:
    """Create the HNSW index of `identity` unless it exists; True when created now."""
    name = hnsw_index_name(identity)
    if await conn.fetchval(INDEX_EXISTS, name):
        return False
    async with conn.transaction():
        await conn.execute(LOCK, MIGRATION_LOCK_KEY)
        if await conn.fetchval(INDEX_EXISTS, name):
            return False
        ddl = await conn.fetchval(
            HNSW_DDL, name, identity.dimensions, HNSW_M, HNSW_EF_CONSTRUCTION, identity.model
        )
        await conn.execute(ddl)
    return True
