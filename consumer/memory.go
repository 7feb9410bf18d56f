package consumer

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/amqpx"
)

// A consumer's memory is bounded by what the broker may send it, not by
// MaxBodyBytes, which is checked only once a body has arrived: every
// channel holds up to its prefetch of unacknowledged deliveries, each as
// large as the broker's max_message_size, and RabbitMQ ignores the
// byte-based prefetch_size of basic.qos. So at the start of each session
// the consumer learns that limit (probeBrokerLimit), states the worst
// case, and, under a MemoryBudget, lowers the prefetch until the worst
// case fits or refuses to start (planMemory).
// docs/adr/003-memory-budget.md explains the choices.

// ErrOverMemoryBudget is wrapped by the error Run returns when
// Config.MemoryBudget cannot hold even one delivery per channel of the
// largest message the broker accepts.
var ErrOverMemoryBudget = errors.New("the broker's max_message_size does not fit the memory budget")

// Where the broker's max_message_size the consumer plans with came from.
const (
	limitProbed     = "probed"     // the broker refused the probe and named its limit
	limitConfigured = "configured" // Config.BrokerMaxMessageSize
	// limitAssumed: the limit is unknown and the consumer plans with
	// rabbitHardMaxMessageSize, the only value it can be sure is not
	// exceeded. A version's default would do for a stock broker, but one
	// whose limit was raised would then hold several times the stated
	// worst case, and a MemoryBudget would not be honoured.
	limitAssumed = "assumed"
)

// rabbitHardMaxMessageSize is the most max_message_size may be set to:
// RabbitMQ caps a larger setting at it.
const rabbitHardMaxMessageSize = 512 << 20

// probeTimeout bounds the whole probe: dial, publish and the broker's
// answer.
const probeTimeout = 5 * time.Second

// warnWorstCase is the worst case above which a consumer without a budget,
// whose stated broker limit is above MaxBodyBytes, warns at start.
const warnWorstCase = 1 << 30

// brokerLimit is the broker's max_message_size as far as the consumer knows
// it.
type brokerLimit struct {
	// bytes is the limit the consumer plans with: the broker's, or, when
	// that is unknown (limitAssumed), RabbitMQ's hard maximum.
	bytes  int64
	source string // limitProbed, limitConfigured or limitAssumed
	// atLeast is, for an unknown limit, what it is known to exceed: the
	// size of a probe the broker accepted (0 when the probe failed).
	atLeast int64
	// why says, for an assumed limit, why the probe did not settle it.
	why string
	// probeFailed: the probe got no answer (an alarm, a timeout, a refused
	// connection), so another try may yet read the limit.
	probeFailed bool
	// version is the broker's RabbitMQ version, as its connection said;
	// versionDefault, for a limit the probe found larger than MaxBodyBytes,
	// is that version's default max_message_size when it is larger still
	// (0 otherwise): what a broker nobody configured allows. It is only
	// reported, never planned with (see planMemory).
	version        string
	versionDefault int64
}

// exact reports whether the broker's limit is known rather than assumed.
func (l brokerLimit) exact() bool { return l.source != limitAssumed }

// errProbeTimeout is the cause of a probe that ran out of time.
var errProbeTimeout = errors.New("the broker did not answer the size probe in time")

// probeBrokerLimit reads the broker's max_message_size by publishing one
// body of size bytes to the default exchange with a routing key no queue
// has, on a connection of its own with publisher confirms. A broker whose
// limit is below size closes the channel with 406 naming the limit (limit
// > 0, or -1 when its text does not parse); one that accepts it confirms,
// and drops the message since nothing is bound (limit 0).
//
// The body is allocated here and dropped when the probe returns, before
// the session's channels consume: a transient size bytes per session, not
// counted in the worst case.
//
// The probe has a connection of its own because a broker under a memory
// alarm stops reading any connection that publishes: on the consumer's
// connection, the probe would stop the acks that let the broker free
// memory. On its own, a block ends the probe at once, and probeTimeout
// bounds every other silence.
func probeBrokerLimit(ctx context.Context, url, name string, size int) (limit int64, version string, err error) {
	ctx, cancel := context.WithTimeoutCause(ctx, probeTimeout, errProbeTimeout)
	defer cancel()
	// url may name several nodes: each gets its share of the time, so a
	// node that drops packets (no refusal) cannot spend all of it.
	perNode := probeTimeout / time.Duration(len(amqpx.SplitURLs(url)))
	conn, err := amqpx.Dial(ctx, url, amqpx.DialOptions{Name: name, Timeout: perNode})
	if err != nil {
		return 0, "", err
	}
	version, _ = conn.Properties["version"].(string)

	// A block is the broker's answer for as long as its alarm lasts: give
	// up at once rather than wait out the timeout.
	ctx, stop := context.WithCancelCause(ctx)
	blocks := conn.NotifyBlocked(make(chan amqp.Blocking, 1))
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for b := range blocks { // closed with the connection
			if b.Active {
				stop(fmt.Errorf("the broker blocked the probe's connection (%s)", b.Reason))
			}
		}
	}()
	defer func() {
		amqpx.CloseConnection(conn, amqpx.CloseTimeout)
		<-watched
		stop(nil)
	}()

	err = amqpx.Bound(ctx, conn, func() error {
		ch, err := conn.Channel()
		if err != nil {
			return fmt.Errorf("open the probe's channel: %w", err)
		}
		closed := ch.NotifyClose(make(chan *amqp.Error, 1))
		if err := ch.Confirm(false); err != nil {
			return fmt.Errorf("confirm mode on the probe's channel: %w", err)
		}
		confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 1))
		// Not mandatory: the broker drops it unrouted, and confirms it.
		key := "warren.size-probe." + rand.Text()
		_ = ch.Publish("", key, false, false, amqp.Publishing{Body: make([]byte, size)}) // a refusal closes the channel: read below
		select {
		case c, ok := <-confirms:
			switch {
			case ok && c.Ack:
				return ch.Close()
			case ok:
				return errors.New("the broker nacked the size probe")
			}
			limit, err = limitFromClose(<-closed)
			return err
		case e := <-closed:
			limit, err = limitFromClose(e)
			return err
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	if err != nil && ctx.Err() != nil {
		err = context.Cause(ctx) // the block or the timeout says it all
	}
	return limit, version, err
}

// versionDefaultLimit is RabbitMQ version's default max_message_size:
// 128 MiB from 3.8, 16 MiB from 4.0; 0 for a version it cannot read.
func versionDefaultLimit(version string) int64 {
	major, rest, _ := strings.Cut(version, ".")
	minor, _, _ := strings.Cut(rest, ".")
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(minor)
	switch {
	case err1 != nil || err2 != nil:
		return 0
	case ma >= 4:
		return 16 << 20
	case ma == 3 && mi >= 8:
		return 128 << 20
	}
	return 0
}

// refusedSize matches RabbitMQ's 406 for an oversized message: "message
// size 1048577 is larger than configured max size 262144" (or "than max
// size" at the hard maximum).
var refusedSize = regexp.MustCompile(`message size \d+ is larger than (?:configured )?max size (\d+)`)

// limitFromClose reads the broker's limit from the error that closed the
// probe's channel. A 406 whose text does not parse still says the limit
// is below the probe's size: limit -1 tells the caller so.
func limitFromClose(e *amqp.Error) (int64, error) {
	switch {
	case e == nil:
		return 0, errors.New("the probe's channel closed without a reason")
	case e.Code != amqp.PreconditionFailed:
		return 0, fmt.Errorf("the broker refused the size probe: %w", e)
	}
	m := refusedSize.FindStringSubmatch(e.Reason)
	if m == nil {
		return -1, nil
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil || n <= 0 {
		return -1, nil
	}
	return n, nil
}

// resolveLimit turns a probe's outcome (of a body of probeSize bytes, on a
// broker of version) into the limit the consumer plans with. A limit the
// broker named is exact; otherwise it is unknown and RabbitMQ's hard
// maximum is assumed, with the reason.
func resolveLimit(probeSize int, limit int64, version string, err error) brokerLimit {
	switch {
	case err == nil && limit > 0:
		return brokerLimit{bytes: limit, source: limitProbed}
	case err == nil && limit < 0:
		// Refused, its text unreadable: below the probe's size.
		return brokerLimit{bytes: int64(probeSize - 1), source: limitProbed}
	}
	l := brokerLimit{bytes: rabbitHardMaxMessageSize, source: limitAssumed, version: version}
	if err == nil {
		l.atLeast = int64(probeSize)
		l.why = fmt.Sprintf("the broker accepted a %d-byte probe, so its limit is larger and unknown", probeSize)
		if d := versionDefaultLimit(version); d >= l.atLeast {
			l.versionDefault = d
		}
	} else {
		l.why = fmt.Sprintf("size probe failed: %v", err)
		l.probeFailed = true
	}
	return l
}

// memoryPlan is what a session consumes with.
type memoryPlan struct {
	limit    brokerLimit
	prefetch int // per channel, at most Config.Prefetch
	// worstCase is the most bytes of message bodies the consumer can hold:
	// Channels × prefetch × the limit in unacknowledged deliveries, plus
	// Workers × the largest body decoded (the decoded event's copy). With
	// an unknown limit it is computed at the hard maximum: an upper bound.
	worstCase int64
	// worstCaseAtLeast is, with an unknown limit, the worst case at the
	// least the limit is known to be (0 when nothing is known), and
	// worstCaseAtDefault at the broker version's default (0 when that is
	// not known): what a broker nobody configured lets the consumer hold.
	worstCaseAtLeast, worstCaseAtDefault int64
}

// reported is the worst case Health reports: without a budget, at the
// broker version's default when the limit is unknown and the default is
// known, the figure a stock broker allows; otherwise the one planned with.
func (p memoryPlan) reported() int64 {
	if !p.limit.exact() && p.worstCaseAtDefault > 0 {
		return p.worstCaseAtDefault
	}
	return p.worstCase
}

// logAttrs are the plan's attributes for the start-up log. An unknown
// limit gives a range, named so (…_at_least, …_at_most), rather than a
// figure that looks exact.
func (p memoryPlan) logAttrs() []any {
	if p.limit.exact() {
		return []any{"broker_max_message_size", p.limit.bytes, "max_message_size_source", p.limit.source, "worst_case_bytes", p.worstCase}
	}
	attrs := []any{"max_message_size_source", p.limit.source}
	if p.limit.atLeast > 0 {
		attrs = append(attrs, "broker_max_message_size_at_least", p.limit.atLeast, "worst_case_bytes_at_least", p.worstCaseAtLeast)
	}
	if p.worstCaseAtDefault > 0 {
		attrs = append(attrs, "rabbitmq_version", p.limit.version, "default_max_message_size", p.limit.versionDefault,
			"worst_case_bytes_at_default", p.worstCaseAtDefault)
	}
	return append(attrs, "worst_case_bytes_at_most", p.worstCase)
}

// planMemory works out the prefetch that keeps the worst case within
// cfg.MemoryBudget (no budget: cfg.Prefetch), or fails with
// ErrOverMemoryBudget when even a prefetch of 1 does not fit.
func planMemory(cfg Config, limit brokerLimit) (memoryPlan, error) {
	plan := memoryPlan{limit: limit, prefetch: cfg.Prefetch}
	if cfg.MemoryBudget > 0 {
		decoding := decodingBytes(cfg, limit.bytes)
		fits := (cfg.MemoryBudget - decoding) / mulSat(int64(cfg.Channels), limit.bytes) // floor; negative when decoding alone is over
		if fits < 1 {
			return plan, budgetError(cfg, limit, decoding)
		}
		plan.prefetch = int(min(fits, int64(cfg.Prefetch)))
	}
	plan.worstCase = worstCase(cfg, plan.prefetch, limit.bytes)
	if !limit.exact() && limit.atLeast > 0 {
		plan.worstCaseAtLeast = worstCase(cfg, plan.prefetch, limit.atLeast)
	}
	// Without a budget, what a stock broker allows is the figure worth
	// stating; under one, the bound the budget holds is.
	if !limit.exact() && limit.versionDefault > 0 && cfg.MemoryBudget == 0 {
		plan.worstCaseAtDefault = worstCase(cfg, plan.prefetch, limit.versionDefault)
	}
	return plan, nil
}

// worstCase is Channels × prefetch × limit in unacknowledged deliveries
// plus the decoding.
func worstCase(cfg Config, prefetch int, limit int64) int64 {
	inFlight := mulSat(mulSat(int64(cfg.Channels), limit), int64(prefetch))
	return addSat(inFlight, decodingBytes(cfg, limit))
}

// decodingBytes is Workers × the largest body a worker decodes.
func decodingBytes(cfg Config, limit int64) int64 {
	return mulSat(int64(cfg.Workers), min(int64(cfg.MaxBodyBytes), limit))
}

func budgetError(cfg Config, limit brokerLimit, decoding int64) error {
	need := addSat(mulSat(int64(cfg.Channels), limit.bytes), decoding)
	source := limit.source
	fixes := "raise Config.MemoryBudget, or lower the broker's max_message_size (rabbitmq.conf: max_message_size = <bytes>)"
	if !limit.exact() {
		source += ": RabbitMQ's maximum, since " + limit.why
		fixes = fmt.Sprintf("state the broker's limit in Config.BrokerMaxMessageSize, or lower the broker's max_message_size to at most MaxBodyBytes (%d) so the probe reads it, or raise Config.MemoryBudget",
			cfg.MaxBodyBytes)
	}
	return fmt.Errorf("%w: memory budget %d bytes < %d channels × prefetch 1 × max_message_size %d bytes (%s) + %d workers × %d bytes decoding = %d bytes; %s",
		ErrOverMemoryBudget, cfg.MemoryBudget, cfg.Channels, limit.bytes, source,
		cfg.Workers, min(int64(cfg.MaxBodyBytes), limit.bytes), need, fixes)
}

// mulSat and addSat saturate instead of wrapping: a worst case past
// MaxInt64 is still "too much".
func mulSat(a, b int64) int64 {
	if a != 0 && b > (1<<63-1)/a {
		return 1<<63 - 1
	}
	return a * b
}

func addSat(a, b int64) int64 {
	if a > 1<<63-1-b {
		return 1<<63 - 1
	}
	return a + b
}

// planSession reads the broker's limit (or takes the configured one) and
// plans the session's prefetch, logging what a reader of the start-up log
// needs: a failed probe, a lowered prefetch, a worst case too large for
// no budget. A failed probe under a budget the hard maximum does not fit
// is an error that another session may not have (the alarm lifts), not
// ErrOverMemoryBudget.
func (c *BaseConsumer) planSession(ctx context.Context) (memoryPlan, error) {
	cfg := c.cfg
	var limit brokerLimit
	if cfg.BrokerMaxMessageSize > 0 {
		// The operator stated it: no probe, which also lets a user without
		// write permission on the default exchange consume quietly.
		limit = brokerLimit{bytes: cfg.BrokerMaxMessageSize, source: limitConfigured}
	} else if cfg.MaxBodyBytes >= rabbitHardMaxMessageSize {
		// No probe: the broker refuses nothing this large anyway, so
		// the most it can send is RabbitMQ's maximum, and a probe of
		// MaxBodyBytes+1 bytes (math.MaxInt+1 wraps) would cost more than
		// any message it could read.
		limit = brokerLimit{bytes: rabbitHardMaxMessageSize, source: limitAssumed,
			why: fmt.Sprintf("MaxBodyBytes (%d) is at least RabbitMQ's maximum max_message_size, so no probe was sent", cfg.MaxBodyBytes)}
	} else {
		size := cfg.MaxBodyBytes + 1
		probed, version, err := probeBrokerLimit(ctx, cfg.URL, c.connectionName()+" size probe", size)
		limit = resolveLimit(size, probed, version, err)
	}
	plan, err := planMemory(cfg, limit)
	switch {
	case err != nil && limit.probeFailed:
		// %v, not %w: not ErrOverMemoryBudget, which stops Run for good.
		return plan, fmt.Errorf("the broker's max_message_size is unknown and RabbitMQ's maximum does not fit: %v", err)
	case err != nil:
		return plan, err
	case limit.probeFailed:
		c.log.Warn("could not read the broker's max_message_size; planning with RabbitMQ's maximum", "max_message_size", limit.bytes, "reason", limit.why)
	}
	switch {
	case plan.prefetch < cfg.Prefetch:
		c.log.Info("prefetch lowered to fit the memory budget", "prefetch", cfg.Prefetch, "effective_prefetch", plan.prefetch,
			"memory_budget", cfg.MemoryBudget, "max_message_size", limit.bytes, "max_message_size_source", limit.source)
	case cfg.MemoryBudget == 0 && !limit.exact() && !limit.probeFailed:
		// A broker nobody configured: nothing is wrong yet, so not a
		// warning, and said once per process, not per reconnect. The
		// "consuming" line carries the figures every session.
		c.memoryNote.Do(func() {
			c.log.Info(fmt.Sprintf("the broker accepts messages larger than MaxBodyBytes (%d), which the consumer can only dead-letter; to bound the memory they can take, set the broker's max_message_size to at most MaxBodyBytes, or Config.MemoryBudget with Config.BrokerMaxMessageSize",
				cfg.MaxBodyBytes), plan.logAttrs()...)
		})
	case cfg.MemoryBudget == 0 && limit.bytes > int64(cfg.MaxBodyBytes) && plan.worstCase > warnWorstCase:
		// A limit the operator stated, above what the consumer decodes:
		// producers may fill memory with messages it can only dead-letter.
		c.log.Warn(fmt.Sprintf("the consumer may hold more than 1 GiB of message bodies: the broker's max_message_size (%d) is above MaxBodyBytes (%d); lower it (rabbitmq.conf) or set Config.MemoryBudget",
			limit.bytes, cfg.MaxBodyBytes), plan.logAttrs()...)
	}
	return plan, nil
}
