"""Embedded SQLite backend: FTS5 for text, sqlite-vec for vectors, one file."""

from service.store.sqlite.store import SqliteStore

__all__ = ["SqliteStore"]
