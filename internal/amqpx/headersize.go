package amqpx

import (
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/dlq"
)

// MaxContentHeader is the largest content header (properties and headers
// table) a warren producer publishes: frame_max less copyHeadroom, the
// room dlq.Fit keeps free in a copy, and less dlq.MaxRecordBytes, the
// consumer's record in that copy. A larger one either closes the
// publishing connection (over frame_max: FRAME_ERROR frame_too_large, and
// a relay would meet the same row first in every session, for ever) or
// reaches a consumer whose retries and dead letters must drop the
// producer's headers to stay readable (dlq.Fit): for a CloudEvent in
// binary mode, whose headers are the event, that is the event lost.
const MaxContentHeader = frameMax - copyHeadroom - dlq.MaxRecordBytes - frameHdrSize - 1

// copyHeadroom is the room below frame_max that dlq.Fit keeps for what a
// consumer's copy adds (its record, a retry hop's x-death, a replay's
// origin): 8 KiB.
const copyHeadroom = 8 << 10

// CheckContentHeader returns why p's content header cannot be published
// by a warren producer: a property or header the client cannot encode, or
// a header frame over [MaxContentHeader]. The error names the size, so a
// row made dead for it says which limit it passed.
func CheckContentHeader(p amqp.Publishing) error {
	size, err := ContentHeaderSize(p)
	if err != nil {
		return err
	}
	if size > MaxContentHeader {
		return fmt.Errorf("its properties and headers take %d bytes, more than a warren message may (%d, below frame_max %d)", size, MaxContentHeader, frameMax)
	}
	return nil
}

// ContentHeaderSize is the encoded size of p's content-header payload
// (class, weight, body size, property flags, properties and headers), or
// why amqp091-go cannot write it or a consumer's amqp091-go read it back.
func ContentHeaderSize(p amqp.Publishing) (int, error) {
	size := propsStart
	for _, f := range []struct{ name, value string }{
		{"content_type", p.ContentType}, {"content_encoding", p.ContentEncoding},
		{"correlation_id", p.CorrelationId}, {"reply_to", p.ReplyTo}, {"expiration", p.Expiration},
		{"message_id", p.MessageId}, {"type", p.Type}, {"user_id", p.UserId}, {"app_id", p.AppId},
	} {
		if len(f.value) > 255 {
			return 0, fmt.Errorf("its %s is %d bytes, and AMQP holds at most 255", f.name, len(f.value))
		}
		size += 1 + len(f.value)
	}
	n, err := dlq.FieldSize(p.Headers, 0)
	if err != nil {
		return 0, fmt.Errorf("header %w", err)
	}
	return size + n + 1 + 1 + 8, nil // headers, delivery mode, priority, timestamp
}
