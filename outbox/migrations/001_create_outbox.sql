-- The outbox table. Envelope columns follow the Plane event stream; the
-- identifiers are text rather than uuid because warren.Event takes any
-- string. payload and extra are jsonb (key order and whitespace are not
-- kept; values are).
CREATE TABLE {table} (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id       text        NOT NULL,
    event_type     text        NOT NULL,
    entity_type    text        NOT NULL DEFAULT '',
    entity_id      text        NOT NULL DEFAULT '',
    workspace_id   text        NOT NULL DEFAULT '',
    project_id     text,
    initiator_id   text,
    initiator_type text        NOT NULL DEFAULT 'USER',
    payload        jsonb       NOT NULL DEFAULT '{}',
    version        text,
    -- top-level fields of the event that this schema has no column for
    extra          jsonb,
    created_at     timestamptz NOT NULL DEFAULT now(),
    inserted_at    timestamptz NOT NULL DEFAULT now(),

    -- relay state
    state          text        NOT NULL DEFAULT 'pending',
    -- when the row may next be claimed: the insert time, a lease's end
    -- while a relay holds it, or a retry's due time after a failure
    available_at   timestamptz NOT NULL DEFAULT now(),
    -- claims spent toward the relay's MaxAttempts; Redrive resets it
    attempts       integer     NOT NULL DEFAULT 0,
    -- every claim ever made; never reset, so it fences settle statements
    claims         bigint      NOT NULL DEFAULT 0,
    claimed_by     text,
    last_error     text,
    -- when the row became delivered or dead
    finished_at    timestamptz,

    CONSTRAINT {table_event_id_key} UNIQUE (event_id),
    CONSTRAINT {table_state_check} CHECK (state IN ('pending', 'delivered', 'dead')),
    -- event_id and event_type become AMQP short strings (message_id, type,
    -- routing key): non-empty, at most 255 bytes
    CONSTRAINT {table_event_id_check} CHECK (event_id <> '' AND octet_length(event_id) <= 255),
    CONSTRAINT {table_event_type_check} CHECK (event_type <> '' AND octet_length(event_type) <= 255),
    CONSTRAINT {table_payload_check} CHECK (jsonb_typeof(payload) = 'object'),
    CONSTRAINT {table_extra_check} CHECK (extra IS NULL OR jsonb_typeof(extra) = 'object')
);

-- The claim: due pending rows in (available_at, id) order.
CREATE INDEX {table_claim_idx} ON {table} (available_at, id) WHERE state = 'pending';

-- Per-entity ordering: the oldest pending row of an entity.
CREATE INDEX {table_entity_idx} ON {table} (entity_type, entity_id, id)
    WHERE state = 'pending' AND entity_id <> '';

-- Purge and the dead-row listing: finished rows by state and age.
CREATE INDEX {table_finished_idx} ON {table} (state, finished_at) WHERE state <> 'pending';
