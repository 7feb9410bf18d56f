-- The warren dedup store: one row per key, a lease (done_at NULL) or a
-- done-mark. A row whose expires_at has passed means nothing — a lease
-- nobody completed or a done-mark past its retention — and is treated
-- exactly like a missing row; Purge deletes such rows.
CREATE TABLE IF NOT EXISTS {{table}} (
	key        text        PRIMARY KEY,
	token      text        NOT NULL,
	done_at    timestamptz,
	expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS {{index}} ON {{table}} (expires_at);
