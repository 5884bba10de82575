"""PostgreSQL message storage: `PostgresStorage` (psycopg 3, sync and async).

Needs the `postgres` extra: `pip install 'langchain-semantic-recall[postgres]'`.
"""

from langchain_semantic_recall.storage.postgres.schema import SCHEMA_VERSION
from langchain_semantic_recall.storage.postgres.sql import plan_put
from langchain_semantic_recall.storage.postgres.storage import PostgresStorage

__all__ = ["SCHEMA_VERSION", "PostgresStorage", "plan_put"]
