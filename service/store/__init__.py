"""Stores: the protocol in `base`, backends in `sqlite` and `postgres`, and a factory."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from service.embeddings.base import EmbeddingIdentity
from service.store.base import Store

DEFAULT_SQLITE_FILE = "search.sqlite3"
SQLITE_PREFIX = "sqlite:///"
POSTGRES_PREFIXES = ("postgresql://", "postgres://")


def sqlite_path(database_url: str, data_dir: Path) -> Path:
    """The file a SQLite URL names; empty means the default file in `data_dir`.

    `sqlite:///name.db` is relative to `data_dir`, `sqlite:////abs/name.db` is absolute.
    """
    if not database_url:
        return data_dir / DEFAULT_SQLITE_FILE
    rest = database_url[len(SQLITE_PREFIX) :]
    if not rest or rest == ":memory:" or rest.startswith("file:"):
        raise ValueError(
            f"database URL {database_url!r}: name a SQLite file, e.g. sqlite:///search.sqlite3"
        )
    path = Path(rest)
    return path if path.is_absolute() else data_dir / path


async def open_store(
    database_url: str,
    data_dir: Path,
    identity: EmbeddingIdentity | None,
    *,
    pool_size: int = 10,
    replica_urls: Sequence[str] = (),
    replica_max_lag: float = 10.0,
    replica_check_interval: float = 1.0,
    partitions: int = 0,
    sqlite_vector_cache_bytes: int | None = None,
    sqlite_lexical_cache_bytes: int | None = None,
    pg_vector_cache_bytes: int = 0,
    pg_lexical_cache_bytes: int = 0,
    vector_cache_refresh: float = 0.0,
) -> Store:
    """Open (and migrate) the store a database URL names: SQLite by default, or PostgreSQL
    (with at most `pool_size` connections)."""
    if not database_url or database_url.startswith(SQLITE_PREFIX):
        if replica_urls:
            raise ValueError("read replicas need a postgresql:// primary")
        from service.store.sqlite import SqliteStore
        from service.store.sqlite.store import DEFAULT_VECTOR_CACHE_BYTES

        cache = (
            DEFAULT_VECTOR_CACHE_BYTES
            if sqlite_vector_cache_bytes is None
            else sqlite_vector_cache_bytes
        )
        lexical = (
            DEFAULT_VECTOR_CACHE_BYTES
            if sqlite_lexical_cache_bytes is None
            else sqlite_lexical_cache_bytes
        )
        store: Store = SqliteStore(
            sqlite_path(database_url, data_dir), identity, vector_cache_bytes=cache,
            vector_cache_refresh=vector_cache_refresh, lexical_cache_bytes=lexical,
        )
    elif database_url.startswith(POSTGRES_PREFIXES):
        # Imported lazily so the embedded default never needs asyncpg loaded.
        from service.store.postgres import PostgresStore

        store = PostgresStore(
            database_url,
            identity=identity,
            max_size=pool_size,
            replica_dsns=replica_urls,
            replica_max_lag=replica_max_lag,
            replica_check_interval=replica_check_interval,
            partitions=partitions,
            vector_cache_bytes=pg_vector_cache_bytes,
            lexical_cache_bytes=pg_lexical_cache_bytes,
            vector_cache_refresh=vector_cache_refresh,
        )
    else:
        raise ValueError(
            f"unsupported database URL {database_url.split(':', 1)[0]!r}: use sqlite:///<file> "
            "or postgresql://..."
        )
    await store.open()
    return store
