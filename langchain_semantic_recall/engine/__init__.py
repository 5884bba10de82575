"""The engine behind every surface, written once.

- `identity`: who is asking (thread and resource), one rule for every surface;
- `vector_space`: the embedder, its cache, the vector index and the index's model
  and dimension, resolved once;
- `steps`: the I/O steps an operation asks for, and the two drivers (sync, async)
  that perform them;
- `search_ops`, `index_ops`, `bulk_ops`, `maintenance_ops`: every operation as a
  generator of steps, so that `x` and `ax` share every decision and differ only in
  the driver that runs them.
"""
