package dlqtool

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/internal/amqpx"
)

// ErrUnpublishable is wrapped by the error of an import that refuses a
// message the client library or the broker would not take, or that a
// consumer could not read back; nothing of the import was published then.
var ErrUnpublishable = errors.New("message cannot be published as it is")

// checkPublishable returns why p cannot be imported as it is, for what is
// known without asking the broker: values the client cannot encode (a
// property or header name over 255 bytes, a header value of a type AMQP
// has no field for), a header table a consumer's client cannot read back
// (nested too deep, too many entries), a content header larger than a
// frame, and routing headers. frameMax is the connection's negotiated
// frame size (0: unknown).
func checkPublishable(p amqp.Publishing, frameMax int) error {
	for _, h := range dlq.RoutingHeaders { // the broker would copy it to the queues they name
		if _, ok := p.Headers[h]; ok {
			return fmt.Errorf("%w: its %s header would make the broker route copies to the queues it names", ErrUnpublishable, h)
		}
	}
	size, err := amqpx.ContentHeaderSize(p)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnpublishable, err)
	}
	if frameMax > 0 && size > frameMax-8 {
		return fmt.Errorf("%w: its properties and headers take %d bytes, more than one frame holds (%d)", ErrUnpublishable, size, frameMax-8)
	}
	return nil
}

// prober asks the broker whether it takes a message, without storing it:
// the message is published through the default exchange under a routing
// key no queue has, not mandatory, so the broker checks it as it would any
// publish (max_message_size, user_id against the connection's user,
// expiration, the headers it routes by), routes it nowhere and confirms
// it. A refusal closes the channel instead, with the reason; the next
// probe opens another. (Not mandatory: a returned message would come back
// whole, body and all, into memory.)
type prober struct {
	conn   *amqp.Connection
	ch     *amqp.Channel
	closed chan *amqp.Error
	key    string
	wait   time.Duration // for the reason of a closed channel
}

func newProber(conn *amqp.Connection) *prober {
	b := make([]byte, 16)
	rand.Read(b) // never fails (crypto/rand)
	return &prober{conn: conn, key: "warren.import-check." + hex.EncodeToString(b), wait: 5 * time.Second}
}

func (pr *prober) check(ctx context.Context, p amqp.Publishing) error {
	if pr.ch == nil {
		ch, err := pr.conn.Channel()
		if err != nil {
			return fmt.Errorf("check the message with the broker: %w", err)
		}
		pr.ch, pr.closed = ch, ch.NotifyClose(make(chan *amqp.Error, 1))
		if err := ch.Confirm(false); err != nil {
			pr.close()
			return fmt.Errorf("check the message with the broker: %w", err)
		}
	}
	dc, err := pr.ch.PublishWithDeferredConfirmWithContext(ctx, "", pr.key, false, false, p)
	if err == nil {
		var acked bool
		if acked, err = dc.WaitContext(ctx); err == nil && acked {
			return nil
		}
	}
	defer pr.close()
	// The broker closed the channel: its reason says what it refused.
	t := time.NewTimer(pr.wait)
	defer t.Stop()
	select {
	case refused := <-pr.closed:
		if refused != nil {
			return fmt.Errorf("%w: the broker refuses it: %s", ErrUnpublishable, refused.Reason)
		}
	case <-ctx.Done():
	case <-t.C:
	}
	if err == nil {
		err = errors.New("the broker nacked it")
	}
	return fmt.Errorf("check the message with the broker: %w", err)
}

func (pr *prober) close() {
	if pr.ch != nil {
		pr.ch.Close()
		pr.ch = nil
	}
}
