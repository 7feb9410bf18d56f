-- warren's optional columns on Plane's outbox table. Additive only, so
-- Plane's Django model (which names its own columns), its triggers (which
-- insert named columns, leaving these to their defaults), its poller and
-- its cleaner notice nothing, and both can run during a cut-over. Adding a
-- column with a constant default or none changes the catalog only and
-- rewrites nothing, but it needs the table's ACCESS EXCLUSIVE lock for that
-- moment: Migrate runs this step alone in a short transaction with a
-- lock_timeout, so that waiting behind a long transaction fails instead of
-- queueing every Plane write behind the ALTER. The indexes follow, one step
-- each, built concurrently.
ALTER TABLE {table}
    -- claims spent toward the relay's MaxAttempts; Redrive resets it
    ADD COLUMN warren_attempts   integer NOT NULL DEFAULT 0,
    -- why the last attempt failed (redacted)
    ADD COLUMN warren_last_error text,
    -- when the relay gave up on the row; its claimed_at stays set, so
    -- Plane's poller never takes a dead row either
    ADD COLUMN warren_dead_at    timestamptz;
