package amqpx

import (
	"errors"
	"fmt"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Which of RabbitMQ's handshake replies end a retry loop: the ones no wait
// mends. The replies a live broker gives for a wrong password and a
// missing vhost are also checked end to end in TestDialRetryGivesUpOnARefusal.
func TestRefusalTellsPermanentFromTransient(t *testing.T) {
	t.Parallel()
	const url = "amqp://app:s3cret@mq:5672/orders"
	for _, tc := range []struct {
		err       error
		permanent bool
	}{
		{&amqp.Error{Code: amqp.AccessRefused, Reason: "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN"}, true},
		{&amqp.Error{Code: amqp.NotAllowed, Reason: "NOT_ALLOWED - vhost orders not found"}, true},
		{&amqp.Error{Code: amqp.NotAllowed, Reason: "NOT_ALLOWED - access to vhost 'orders' refused for user 'app'"}, true},
		{amqp.ErrVhost, true},
		{fmt.Errorf("handshake: %w", amqp.ErrCredentials), true},
		{&amqp.Error{Code: amqp.NotAllowed, Reason: "NOT_ALLOWED - access to vhost 'orders' refused for user 'app': connection limit (10) is reached"}, false},
		{&amqp.Error{Code: amqp.NotAllowed, Reason: "NOT_ALLOWED - vhost orders is down"}, false},
		{&amqp.Error{Code: amqp.ConnectionForced, Reason: "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"}, false},
		{errors.New("dial tcp 10.0.0.1:5672: connect: connection refused"), false},
	} {
		got := refusal(url, tc.err)
		if (got != nil) != tc.permanent {
			t.Errorf("%v: refusal %v, want permanent=%v", tc.err, got, tc.permanent)
		}
		if got != nil && !errors.Is(got, ErrRefused) {
			t.Errorf("%v: %v does not match ErrRefused", tc.err, got)
		}
	}
}
