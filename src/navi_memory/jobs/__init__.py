"""Jobs: long-running or batch work that commits per batch — backfill, the chunk indexer, the
history repair. A facade that starts one takes it as a typed constructor dependency."""
