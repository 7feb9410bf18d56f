-- warren's optional columns on Plane's outbox table. Additive only, so
-- Plane's Django model (which names its own columns), its triggers (which
-- insert named columns, leaving these to their defaults), its poller and
-- its cleaner notice nothing, and both can run during a cut-over. Adding a
-- column with a constant default or none rewrites nothing; the ALTER holds
-- its lock for a moment. The indexes are built under a lock that holds
-- off Plane's writes (its triggers' inserts) while they are built: about a
-- second per million rows.
ALTER TABLE {table}
    -- claims spent toward the relay's MaxAttempts; Redrive resets it
    ADD COLUMN warren_attempts   integer NOT NULL DEFAULT 0,
    -- why the last attempt failed (redacted)
    ADD COLUMN warren_last_error text,
    -- when the relay gave up on the row; its claimed_at stays set, so
    -- Plane's poller never takes a dead row either
    ADD COLUMN warren_dead_at    timestamptz;

-- The takeover of lapsed claims (claimed_at older than the lease, as
-- Plane's crashed poller leaves them, or a retry falling due): with this
-- index the relay looks for them at every claim instead of every Lease/2.
CREATE INDEX {table_warren_lapsed_idx} ON {table} (claimed_at, id)
    WHERE processed_at IS NULL AND claimed_at IS NOT NULL AND warren_dead_at IS NULL;

-- The dead-row listing and redrive.
CREATE INDEX {table_warren_dead_idx} ON {table} (id)
    WHERE warren_dead_at IS NOT NULL AND processed_at IS NULL;
