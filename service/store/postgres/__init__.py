"""PostgreSQL + pgvector store."""

from service.store.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
