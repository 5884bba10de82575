"""The engine behind every surface, written once.

- :mod:`.identity`: who is asking (thread and resource), one rule for every surface;
- :mod:`.vector_space`: the embedder, its cache, the vector index and the index's model
  and dimension, resolved once;
- :mod:`.steps`: the I/O steps an operation asks for, and the two drivers (sync, async)
  that perform them;
- :mod:`.search_ops`, :mod:`.index_ops`, :mod:`.maintenance_ops`: every operation as a
  generator of steps, so that ``x`` and ``ax`` share every decision and differ only in
  the driver that runs them.
"""
