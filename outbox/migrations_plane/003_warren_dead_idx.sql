-- The dead-row listing and redrive. Built concurrently.
CREATE INDEX CONCURRENTLY IF NOT EXISTS {table_warren_dead_idx} ON {table} (id)
    WHERE warren_dead_at IS NOT NULL AND processed_at IS NULL;
