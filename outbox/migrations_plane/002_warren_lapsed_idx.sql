-- The takeover of lapsed claims (claimed_at older than the lease, as
-- Plane's crashed poller leaves them, or a retry falling due): with this
-- index the relay looks for them at every claim instead of every Lease/2.
-- Built concurrently, outside a transaction: Plane's writes go on.
CREATE INDEX CONCURRENTLY IF NOT EXISTS {table_warren_lapsed_idx} ON {table} (claimed_at, id)
    WHERE processed_at IS NULL AND claimed_at IS NOT NULL AND warren_dead_at IS NULL;
