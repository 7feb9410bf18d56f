package consumer

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/testenv"
)

// The refusals below are RabbitMQ 3.10.8's, as a queue.declare against
// that broker returned them.
func TestParseInequivalent(t *testing.T) {
	t.Parallel()
	const q = "plane.webhook"
	refusal := func(arg, received, current string) string {
		return fmt.Sprintf("PRECONDITION_FAILED - inequivalent arg '%s' for queue '%s' in vhost '/': received %s but current is %s", arg, q, received, current)
	}
	for _, tc := range []struct {
		name   string
		reason string
		sent   amqp.Table
		want   inequivalence
		err    string
	}{
		{"absent here, typed there", refusal("x-message-ttl", "none", "the value '3600000' of type 'signedint'"), nil,
			inequivalence{arg: "x-message-ttl", known: true, value: int64(3600000)}, ""},
		{"string with a quote", refusal("x-dead-letter-exchange", "none", "the value 'it's.dlx' of type 'longstr'"), nil,
			inequivalence{arg: "x-dead-letter-exchange", known: true, value: "it's.dlx"}, ""},
		{"string naming the phrase", refusal("x-dead-letter-exchange", "none", "the value 'x but current is y' of type 'longstr'"), nil,
			inequivalence{arg: "x-dead-letter-exchange", known: true, value: "x but current is y"}, ""},
		{"bool", refusal("x-single-active-consumer", "none", "the value 'true' of type 'bool'"), nil,
			inequivalence{arg: "x-single-active-consumer", known: true, value: true}, ""},
		{"sent, absent there", refusal("x-dead-letter-exchange", "the value 'c.dlx' of type 'longstr'", "none"),
			amqp.Table{"x-dead-letter-exchange": "c.dlx"}, inequivalence{arg: "x-dead-letter-exchange", absent: true}, ""},
		{"both present: no type shown", refusal("x-message-ttl", "'100'", "'3600000'"),
			amqp.Table{"x-message-ttl": int64(100)}, inequivalence{arg: "x-message-ttl"}, ""},
		{"sent value contains the phrase", refusal("x-dead-letter-exchange", "'a but current is b'", "'c'"),
			amqp.Table{"x-dead-letter-exchange": "a but current is b"}, inequivalence{arg: "x-dead-letter-exchange"}, ""},
		{"durable", refusal("durable", "'true'", "'false'"), nil, inequivalence{arg: "durable"}, ""},
		{"unsupported type", refusal("x-foo", "none", "the value '1.5' of type 'double'"), nil, inequivalence{}, "type double"},
		{"bad integer", refusal("x-message-ttl", "none", "the value 'ten' of type 'long'"), nil, inequivalence{}, "not an integer"},
		{"another queue", strings.Replace(refusal("x-message-ttl", "none", "none"), q, "other", 1), nil, inequivalence{}, "another queue"},
		{"not a mismatch", "PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue 'q' in vhost '/': {unacceptable_type,longstr}", nil, inequivalence{}, "does not name"},
		{"unknown form", refusal("x-message-ttl", "none", "<<\"abc\">>"), nil, inequivalence{}, "not in a form"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseInequivalent(tc.reason, "queue", q, tc.sent)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got.current = ""
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// A reply longer than AMQP's 255 bytes is cut by the broker (this one is
// 3.10.8's, for a 200-byte queue name); the value is then unknown, and
// saying so is the only correct answer.
func TestParseInequivalentCutReply(t *testing.T) {
	t.Parallel()
	q := strings.Repeat("L", 200)
	full := "PRECONDITION_FAILED - inequivalent arg 'x-dead-letter-exchange' for queue '" + q + "' in vhost '/': received none but current is the value 'd' of type 'longstr'"
	cut := full[:replyTextMax-3] + "..."
	if _, err := parseInequivalent(cut, "queue", q, nil); err == nil || !strings.Contains(err.Error(), "cut its reply") {
		t.Fatalf("err = %v, want one saying the reply was cut", err)
	}
}

// fakeQueue answers declarations as RabbitMQ 3.10.8 does for a queue with
// the given arguments, comparing only the keys that broker compares. A
// missing queue is created by the next declaration, with what it sent.
type fakeQueue struct {
	args     amqp.Table
	compared []string
	declares int

	missing   bool
	deleteErr error // what a deletion of the queue returns; nil deletes it
	deletes   int
}

func (f *fakeQueue) delete() error {
	f.deletes++
	if f.deleteErr != nil {
		return f.deleteErr
	}
	f.args, f.missing = nil, true
	return nil
}

// noDelete is the deletion of a probe that must not delete the queue.
func noDelete(t *testing.T) func() error {
	return func() error {
		t.Error("the probe deleted the queue")
		return nil
	}
}

func (f *fakeQueue) declare(sent amqp.Table) error {
	f.declares++
	if f.missing {
		f.args, f.missing = maps.Clone(sent), false
		return nil
	}
	for _, k := range f.compared {
		have, had := f.args[k]
		got, sentIt := sent[k]
		render := func(v any, other bool) string {
			typ := map[bool]string{true: "long", false: "longstr"}[fmt.Sprintf("%T", v) != "string"]
			if other {
				return fmt.Sprintf("the value '%v' of type '%s'", v, typ)
			}
			return fmt.Sprintf("'%v'", v)
		}
		var received, current string
		switch {
		case !had && !sentIt:
			continue
		case had && sentIt && fmt.Sprint(have) == fmt.Sprint(got):
			continue
		case !had:
			received, current = render(got, true), "none"
		case !sentIt:
			received, current = "none", render(have, true)
		default:
			received, current = render(got, false), render(have, false)
		}
		return &amqp.Error{Code: amqp.PreconditionFailed, Reason: fmt.Sprintf(
			"PRECONDITION_FAILED - inequivalent arg '%s' for queue 'q' in vhost '/': received %s but current is %s", k, received, current)}
	}
	return nil
}

var compared310 = []string{"x-expires", "x-message-ttl", "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-max-length", "x-max-priority", "x-overflow", "x-queue-type"}

func TestLearnQueueArgs(t *testing.T) {
	t.Parallel()
	plane := amqp.Table{"x-message-ttl": int64(3600000), "x-dead-letter-exchange": "plane.event_stream.dlq", "x-dead-letter-routing-key": "q_dlq"}
	ours := amqp.Table{"x-message-ttl": int64(60000), "x-dead-letter-exchange": "q.dlx"}
	for _, tc := range []struct {
		name  string
		queue amqp.Table
		start amqp.Table
	}{
		{"Plane's arguments", plane, ours},
		{"only a TTL", amqp.Table{"x-message-ttl": int64(3600000)}, ours},
		{"no arguments", amqp.Table{}, ours},
		{"exactly the config's", ours, ours},
		// Not compared on a classic queue: a start with them would be
		// accepted and reported as the queue's.
		{"quorum-only arguments dropped", amqp.Table{"x-message-ttl": int64(1)}, amqp.Table{"x-message-ttl": int64(1), "x-delivery-limit": int64(3), "x-dead-letter-strategy": "at-least-once"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeQueue{args: tc.queue, compared: compared310}
			got, err := learnQueueArgs("q", tc.start, f.declare, noDelete(t))
			if err != nil {
				t.Fatal(err)
			}
			if !maps.EqualFunc(got, tc.queue, func(a, b any) bool { return fmt.Sprint(a) == fmt.Sprint(b) }) {
				t.Errorf("learned %v, want %v", got, tc.queue)
			}
			if f.declares > 2*len(compared310)+1 {
				t.Errorf("%d declarations", f.declares)
			}
		})
	}
}

func TestLearnQueueArgsRefuses(t *testing.T) {
	t.Parallel()
	t.Run("not durable", func(t *testing.T) {
		_, err := learnQueueArgs("q", nil, func(amqp.Table) error {
			return &amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'q' in vhost '/': received 'true' but current is 'false'"}
		}, noDelete(t))
		if !errors.Is(err, errCannotAdopt) || !strings.Contains(err.Error(), "durable") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("unreadable value", func(t *testing.T) {
		_, err := learnQueueArgs("q", nil, func(amqp.Table) error {
			return &amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - inequivalent arg 'x-foo' for queue 'q' in vhost '/': received none but current is the value '[1,2]' of type 'array'"}
		}, noDelete(t))
		if !errors.Is(err, errCannotAdopt) || !strings.Contains(err.Error(), "array") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("a broker that never accepts", func(t *testing.T) {
		n := 0
		_, err := learnQueueArgs("q", nil, func(amqp.Table) error {
			n++
			return &amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/': received none but current is the value '5' of type 'long'"}
		}, noDelete(t))
		if !errors.Is(err, errCannotAdopt) || n > 3 {
			t.Fatalf("err = %v after %d declarations", err, n)
		}
	})
	t.Run("other errors pass through", func(t *testing.T) {
		refused := &amqp.Error{Code: amqp.AccessRefused, Reason: "ACCESS_REFUSED"}
		_, err := learnQueueArgs("q", nil, func(amqp.Table) error { return refused }, noDelete(t))
		if !errors.Is(err, refused) || errors.Is(err, errCannotAdopt) {
			t.Fatalf("err = %v", err)
		}
	})
}

// A refusal cut at 255 bytes because it quoted the value sent as well is
// asked again without that value: the shorter refusal fits.
func TestLearnQueueArgsRetriesACutRefusal(t *testing.T) {
	t.Parallel()
	q := strings.Repeat("q", 90)
	long := strings.Repeat("d", 60)
	refuse := func(received, current string) error {
		reason := fmt.Sprintf("PRECONDITION_FAILED - inequivalent arg 'x-dead-letter-exchange' for queue '%s' in vhost '/': received %s but current is %s", q, received, current)
		if len(reason) > replyTextMax {
			reason = reason[:replyTextMax-3] + "..."
		}
		return &amqp.Error{Code: amqp.PreconditionFailed, Reason: reason}
	}
	got, err := learnQueueArgs(q, amqp.Table{"x-dead-letter-exchange": long + ".ours"}, func(args amqp.Table) error {
		switch v, ok := args["x-dead-letter-exchange"]; {
		case !ok:
			return refuse("none", "the value 'plane.dlq' of type 'longstr'")
		case v != "plane.dlq":
			return refuse(fmt.Sprintf("'%v'", v), "'plane.dlq'")
		}
		return nil
	}, noDelete(t))
	if err != nil || got["x-dead-letter-exchange"] != "plane.dlq" {
		t.Fatalf("learned %v, %v; want the dead-letter exchange plane.dlq", got, err)
	}
}

// A queue deleted between the passive check that found it and the probe
// is created by the probe's first declaration. The probe must not report
// that queue adopted: it says there is nothing to adopt and deletes what
// it created, when the broker lets it (empty and unused), or says it
// could not.
func TestLearnQueueArgsCreatesNothingToAdopt(t *testing.T) {
	t.Parallel()
	ours := amqp.Table{"x-message-ttl": int64(60000), "x-dead-letter-exchange": "q.dlx"}
	t.Run("deleted again", func(t *testing.T) {
		f := &fakeQueue{missing: true, compared: compared310}
		_, err := learnQueueArgs("q", ours, f.declare, f.delete)
		if !errors.Is(err, errNothingToAdopt) || !strings.Contains(err.Error(), "start without AdoptQueue") || !strings.Contains(err.Error(), "deleted again") {
			t.Fatalf("err = %v, want nothing to adopt, the queue deleted again", err)
		}
		if f.deletes != 1 || !f.missing {
			t.Errorf("%d deletions, queue missing: %v; want the created queue deleted", f.deletes, f.missing)
		}
	})
	t.Run("quorum: left", func(t *testing.T) {
		f := &fakeQueue{missing: true, compared: compared310}
		_, err := learnQueueArgs("q", amqp.Table{"x-queue-type": "quorum"}, f.declare, noDelete(t))
		if !errors.Is(err, errNothingToAdopt) || !strings.Contains(err.Error(), "cannot delete a quorum queue only if") {
			t.Fatalf("err = %v, want nothing to adopt, the created quorum queue left", err)
		}
	})
	t.Run("not empty", func(t *testing.T) {
		notEmpty := &amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - queue 'q' in vhost '/' not empty"}
		f := &fakeQueue{missing: true, compared: compared310, deleteErr: notEmpty}
		_, err := learnQueueArgs("q", ours, f.declare, f.delete)
		if !errors.Is(err, errNothingToAdopt) || !errors.Is(err, notEmpty) || !strings.Contains(err.Error(), "could not be deleted") {
			t.Fatalf("err = %v, want nothing to adopt, the created queue not deleted", err)
		}
	})
}

// On a broker that does not compare the marker's argument, a probe cannot
// tell a queue it created from one that existed; it learns the queue as
// before and deletes nothing, since a queue it did not create may be
// empty and unused too.
func TestLearnQueueArgsMarkerNotCompared(t *testing.T) {
	t.Parallel()
	plane := amqp.Table{"x-message-ttl": int64(3600000), "x-dead-letter-exchange": "plane.event_stream.dlq", "x-dead-letter-routing-key": "q_dlq"}
	compared := slices.DeleteFunc(slices.Clone(compared310), func(k string) bool { return k == probeMarkerArg })
	f := &fakeQueue{args: plane, compared: compared}
	got, err := learnQueueArgs("q", amqp.Table{"x-message-ttl": int64(60000)}, f.declare, noDelete(t))
	if err != nil {
		t.Fatal(err)
	}
	if !maps.EqualFunc(got, plane, func(a, b any) bool { return fmt.Sprint(a) == fmt.Sprint(b) }) {
		t.Errorf("learned %v, want %v", got, plane)
	}
}

// The marker works on the broker itself, for both queue types: a probe
// whose first declaration creates the queue (it vanished after the
// passive check) recognises it, says there is nothing to adopt, and
// deletes the queue it created, a classic one; a quorum one it cannot
// delete only if empty, so it leaves it and says so. On a queue that exists, the adopt tests
// show the marker is dropped and the queue's arguments learned.
func TestProbeRecognisesAQueueItCreated(t *testing.T) {
	t.Parallel()
	conn := testenv.AMQPConn(t)
	for _, tc := range []struct {
		name    string
		start   amqp.Table
		deleted bool
	}{
		{"classic", amqp.Table{"x-message-ttl": int64(60000), "x-dead-letter-exchange": "some.dlx"}, true},
		{"quorum", amqp.Table{"x-queue-type": "quorum", "x-dead-letter-exchange": "some.dlx", "x-delivery-limit": int64(5)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			queue := testenv.Name(t, "q")
			testenv.CleanupQueues(t, queue)
			d := &declarer{conn: conn}
			defer d.close()
			_, err := learnQueueArgs(queue, tc.start, func(args amqp.Table) error {
				return d.declareQueue(queueSpec{queue, args})
			}, func() error {
				return d.do(func(ch *amqp.Channel) error {
					_, err := ch.QueueDelete(queue, true, true, false)
					return err
				})
			})
			want := map[bool]string{true: "deleted again", false: "could not be deleted"}[tc.deleted]
			if !errors.Is(err, errNothingToAdopt) || !strings.Contains(err.Error(), want) {
				t.Fatalf("err = %v, want nothing to adopt, the created queue %s", err, want)
			}
			if exists, err := d.exists("queue", queue); err != nil || exists == tc.deleted {
				t.Errorf("queue %s exists: %v (%v); want %v", queue, exists, err, !tc.deleted)
			}
		})
	}
}
