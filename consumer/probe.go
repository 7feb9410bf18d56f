package consumer

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"strconv"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// errCannotAdopt is wrapped by the error of a start in adopt mode whose
// queue has an argument the consumer cannot learn or will not consume
// with: it is a TopologyError that reconnecting does not fix.
var errCannotAdopt = errors.New("cannot adopt the queue")

// Neither a passive queue.declare nor anything else in AMQP 0-9-1 returns
// a queue's arguments, and RabbitMQ 3.10 has no management API here. What
// the broker does say: a queue.declare whose arguments differ from the
// existing queue's fails with
//
//	PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/':
//	    received none but current is the value '3600000' of type 'signedint'
//
// naming the first argument (in its own order) that differs and both
// values: "none" for an absent one, "the value 'V' of type 'T'" when the
// other side is absent, and a bare 'V' when both are present. So
// learnQueueArgs declares, reads the refusal, adopts the current value,
// and declares again until the broker accepts: what it accepts is the
// queue's arguments, as far as the broker compares them. Arguments it does
// not compare (unknown ones, and on classic queues the quorum-only
// x-delivery-limit and x-dead-letter-strategy) are invisible, and also
// have no effect on the queue. Policies are invisible too: a TTL or
// dead-letter exchange set by a policy is not an argument.

// maxProbes bounds the declarations of one learnQueueArgs: each learns or
// drops one argument, and RabbitMQ compares about twenty.
const maxProbes = 48

// probeStartDrop are the arguments of the consumer's own declaration that
// a probe does not start with: RabbitMQ compares them only on quorum
// queues, so a classic queue would accept them and the probe would report
// arguments the queue does not have. A quorum queue's refusal names them.
var probeStartDrop = []string{"x-dead-letter-strategy", "x-delivery-limit"}

// errNothingToAdopt is wrapped by the error of a start in adopt mode that
// finds no queue: creating one from the config would leave a queue the
// service it is adopted from cannot declare again (other arguments), so a
// rollback to that service would fail.
var errNothingToAdopt = fmt.Errorf("%w: nothing to adopt", errCannotAdopt)

func nothingToAdopt(queue string) error {
	return fmt.Errorf("%w: queue %s does not exist; start without AdoptQueue to create it with warren's arguments", errNothingToAdopt, queue)
}

// The first declaration of a probe carries probeMarker, a value of an
// argument RabbitMQ compares that no queue is declared with (a length
// limit it never reaches). A queue that exists without it refuses it,
// and the probe drops it like any argument the queue lacks. A declaration
// with it that the broker accepts created the queue: it was deleted
// after the passive check found it. One more declaration, with another
// value, tells that apart from a broker that does not compare the
// argument: it is refused naming the argument only when the queue holds
// the marker.
const (
	probeMarkerArg = "x-max-length"
	probeMarker    = int64(math.MaxInt64)
)

// learnQueueArgs returns the arguments queue exists with. declare runs one
// queue.declare of queue (durable, not exclusive, not auto-deleted) with
// the given arguments on a channel of its own, since a refusal closes the
// channel. start is what the consumer would declare; a queue that has
// exactly that is learned in one declaration. An argument whose value
// cannot be read from a refusal (of a type this code does not parse, or
// cut off by the 255-byte limit of the broker's reply text) is an error
// wrapping errCannotAdopt, never a guess.
//
// A queue.declare creates a queue that does not exist. Should the first
// declaration create it (see probeMarker), learnQueueArgs deletes it again
// with deleteCreated (only if empty and unused) and returns an error
// wrapping errNothingToAdopt: there was nothing to adopt, and what the
// probe declared is not what the queue's owner declares. A queue deleted
// between two later declarations, milliseconds apart, is not detected.
func learnQueueArgs(queue string, start amqp.Table, declare func(args amqp.Table) error, deleteCreated func() error) (amqp.Table, error) {
	args := maps.Clone(start)
	for _, k := range probeStartDrop {
		delete(args, k)
	}
	if args == nil {
		args = amqp.Table{}
	}
	if _, own := args[probeMarkerArg]; !own {
		args[probeMarkerArg] = probeMarker
	}
	tries := map[string]int{}
	for range maxProbes {
		err := declare(args)
		if err == nil && args[probeMarkerArg] == probeMarker {
			created, err := probeCreated(args, declare)
			if err != nil {
				return nil, err
			}
			if created {
				return nil, createdByProbe(queue, args, deleteCreated)
			}
			// The broker does not compare the argument, so whether the
			// queue existed cannot be told; it does now.
			delete(args, probeMarkerArg)
			continue
		}
		if err == nil {
			return args, nil
		}
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
			return nil, err // not a refusal about arguments: permissions, the connection
		}
		d, perr := parseInequivalent(ae.Reason, "queue", queue, args)
		if _, sent := args[d.arg]; errors.Is(perr, errReplyCut) && sent && tries[d.arg] == 0 {
			// The refusal quoted what was sent as well; without it, the
			// next one is shorter ("received none") and may fit.
			tries[d.arg]++
			delete(args, d.arg)
			continue
		}
		if perr != nil {
			return nil, fmt.Errorf("%w: %w (the broker said: %s)", errCannotAdopt, perr, ae.Reason)
		}
		if tries[d.arg]++; tries[d.arg] > 2 {
			return nil, fmt.Errorf("%w: the broker keeps refusing argument %s (it said: %s)", errCannotAdopt, d.arg, ae.Reason)
		}
		switch {
		case d.arg == "durable" || d.arg == "auto_delete":
			// A queue lost at a broker restart, or deleted when its last
			// consumer leaves, loses messages whatever the consumer does.
			return nil, fmt.Errorf("%w: it is not a durable, kept queue (%s is %s); warren consumes only those", errCannotAdopt, d.arg, d.current)
		case d.absent:
			delete(args, d.arg)
		case d.known:
			args[d.arg] = d.value
		default:
			// Both sides were present and the refusal shows the value
			// without its type: declare without it, and the next refusal
			// says "the value '…' of type '…'".
			delete(args, d.arg)
		}
	}
	return nil, fmt.Errorf("%w: its arguments were not learned in %d declarations", errCannotAdopt, maxProbes)
}

// probeCreated reports, after a declaration carrying probeMarker was
// accepted, whether the queue holds the marker, that is, whether that
// declaration created it: a declaration with another value is refused
// naming the marker's argument only then.
func probeCreated(args amqp.Table, declare func(amqp.Table) error) (bool, error) {
	other := maps.Clone(args)
	other[probeMarkerArg] = probeMarker - 1
	err := declare(other)
	if err == nil {
		return false, nil
	}
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
		return false, err
	}
	if m := inequivalentPrefix.FindStringSubmatch(ae.Reason); m != nil && m[1] == probeMarkerArg {
		return true, nil
	}
	return false, fmt.Errorf("%w: the queue changed while its arguments were probed (the broker said: %s)", errCannotAdopt, ae.Reason)
}

// createdByProbe deletes the queue a probe's declaration created with
// args, only if it is empty and unused, and returns the error saying so.
// Something may have been published to it by name since (a replay from a
// DLQ, which deletes its copy once the broker has confirmed this one), so
// an unconditional delete could lose a message. RabbitMQ has no such
// delete for quorum queues (it closes the connection for asking), so one
// of those is left for the operator.
func createdByProbe(queue string, args amqp.Table, deleteCreated func() error) error {
	err := nothingToAdopt(queue)
	var deleteErr error
	if typ, _ := args["x-queue-type"].(string); typ != "" && typ != "classic" {
		deleteErr = fmt.Errorf("RabbitMQ cannot delete a %s queue only if it is empty and unused", typ)
	} else {
		deleteErr = deleteCreated()
	}
	if deleteErr != nil {
		return fmt.Errorf("%w (it was deleted while the consumer started, and the probe's declaration created it again with the config's arguments; that queue could not be deleted: %w; delete it before its owner declares it)", err, deleteErr)
	}
	return fmt.Errorf("%w (it was deleted while the consumer started; the queue the probe's declaration created meanwhile was deleted again)", err)
}

// inequivalence is one refusal of a declaration, parsed.
type inequivalence struct {
	arg     string
	current string // as the broker wrote it
	absent  bool   // the existing queue does not have arg
	known   bool   // value holds the existing value, with its type's class
	value   any    // int64, string or bool
}

var (
	inequivalentPrefix = regexp.MustCompile(`^PRECONDITION_FAILED - inequivalent arg '([^']+)' for `)
	typedValue         = regexp.MustCompile(`^the value '(.*)' of type '([a-z]+)'$`)
	bareValue          = regexp.MustCompile(`^'(.*)'$`)
)

// errReplyCut says a refusal was too long for AMQP's reply text.
var errReplyCut = fmt.Errorf("the broker cut its reply at %d bytes (names too long)", replyTextMax)

// replyTextMax is AMQP's limit on a reply text (a short string); RabbitMQ
// cuts a longer one and ends it with "...".
const replyTextMax = 255

// parseInequivalent reads a PRECONDITION_FAILED reply to a declaration of
// the named queue or exchange with the arguments sent, as RabbitMQ 3.x
// words it. Knowing what was sent, it finds where the broker's rendering
// of that ends, so a value that itself contains "but current is" cannot
// mislead it.
func parseInequivalent(reason, kind, name string, sent amqp.Table) (inequivalence, error) {
	m := inequivalentPrefix.FindStringSubmatch(reason)
	if m == nil {
		return inequivalence{}, errors.New("the refusal does not name an inequivalent argument")
	}
	d := inequivalence{arg: m[1]}
	if len(reason) >= replyTextMax-3 && strings.HasSuffix(reason, "...") {
		return d, fmt.Errorf("%w, so the current value of %s is unknown", errReplyCut, d.arg)
	}
	rest := reason[len(m[0]):]
	head := kind + " '" + name + "' in vhost '"
	if !strings.HasPrefix(rest, head) {
		return d, fmt.Errorf("the refusal names another %s than %q", kind, name)
	}
	_, rest, ok := strings.Cut(rest[len(head):], "': received ")
	if !ok {
		return d, errors.New("the refusal does not say what was received")
	}
	var current string
	for _, r := range receivedRenderings(sent, d.arg) {
		if c, ok := strings.CutPrefix(rest, r+" but current is "); ok {
			current = c
			break
		}
	}
	if current == "" {
		return d, fmt.Errorf("the refusal of argument %s does not say its current value", d.arg)
	}
	d.current = current
	if current == "none" {
		d.absent = true
		return d, nil
	}
	if tv := typedValue.FindStringSubmatch(current); tv != nil {
		v, err := parseTyped(tv[1], tv[2])
		if err != nil {
			return d, fmt.Errorf("argument %s: %w", d.arg, err)
		}
		d.known, d.value = true, v
		return d, nil
	}
	if bareValue.MatchString(current) {
		return d, nil // present, type not shown: neither known nor absent
	}
	return d, fmt.Errorf("the current value of argument %s is not in a form this version knows: %s", d.arg, current)
}

// receivedRenderings are the ways RabbitMQ may have written the value of
// arg that was sent.
func receivedRenderings(sent amqp.Table, arg string) []string {
	switch arg {
	case "durable", "auto_delete", "exclusive", "internal", "type":
		// Properties of the declaration itself, not arguments; the probe
		// sends durable, not auto-deleted.
		return []string{"'true'", "'false'", "'fanout'", "'direct'", "'topic'", "'headers'"}
	}
	v, ok := sent[arg]
	if !ok {
		return []string{"none"}
	}
	var text, typ string
	switch v := v.(type) {
	case int64:
		text, typ = strconv.FormatInt(v, 10), "long"
	case int32:
		text, typ = strconv.FormatInt(int64(v), 10), "signedint"
	case string:
		text, typ = v, "longstr"
	case bool:
		text, typ = strconv.FormatBool(v), "bool"
	default:
		return nil
	}
	return []string{"the value '" + text + "' of type '" + typ + "'", "'" + text + "'"}
}

// parseTyped turns a value the broker printed with its AMQP field type
// into the Go value the client encodes with a type of the same class,
// which is what RabbitMQ compares.
func parseTyped(text, typ string) (any, error) {
	switch typ {
	case "long", "signedint", "short", "byte", "unsignedbyte", "unsignedshort", "unsignedint":
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("value %q of type %s is not an integer", text, typ)
		}
		return n, nil
	case "longstr":
		return text, nil
	case "bool":
		b, err := strconv.ParseBool(text)
		if err != nil {
			return nil, fmt.Errorf("value %q of type bool is not true or false", text)
		}
		return b, nil
	}
	return nil, fmt.Errorf("value %q has type %s, which this version does not read", text, typ)
}
