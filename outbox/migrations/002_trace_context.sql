-- The W3C trace context of the producer's span when it wrote the event
-- (Publish reads it from its context), so the relay's publish and the
-- consumer's handler join the producer's trace. NULL when the producer was
-- not tracing. Adding nullable columns without a default rewrites nothing.
ALTER TABLE {table}
    ADD COLUMN traceparent text,
    ADD COLUMN tracestate  text;
