package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay"
)

// rawClaimBatch is how many rows the raw relay loop claims at a time.
const rawClaimBatch = 500

func relayScenario() scenario {
	return scenario{
		name: "relay",
		about: fmt.Sprintf("Move a backlog of pre-inserted outbox rows (written by outbox.PublishBatch) to a fanout exchange, with publisher confirms. "+
			"The raw loop uses bare pgx and amqp091-go: it claims %d due rows with `FOR UPDATE SKIP LOCKED` (setting a lease, as any relay "+
			"that can crash must), publishes them all with confirms pipelined, waits for the confirms and deletes the batch with one statement. "+
			"warren is `relay.Run` at its defaults (batches of %d, %d claim–publish–settle loops). Both sides publish the same envelope "+
			"with the same properties, mandatory, to an exchange bound to one queue. "+
			"Watermill is the Forwarder (watermill components) reading its own outbox table, filled with the same events through its publisher, "+
			"with a watermill-sql subscriber on Postgres (queue schema, %d rows per query, rows deleted on ack) and publishing through "+
			"watermill-amqp with confirms, mandatory, in Watermill's own message format.", rawClaimBatch, relay.DefaultBatchSize, relay.DefaultWorkers, watermillForwarderBatch),
		metrics: []metric{{name: throughput.name, target: target{ratio: 1.1, peerRatio: 7}}},
		variants: []variant{
			{name: "raw: claim 500, publish, confirm, delete", baseline: true, run: rawRelay},
			{name: "watermill: Forwarder, watermill-sql → amqp", peer: true, run: watermillRelay},
			{name: "warren: relay.Run defaults", run: warrenRelay(nil),
				why: "both sides do the same work in Postgres and RabbitMQ, and that work is the time: the claim's UPDATE of 500 rows takes " +
					"50–110 ms on this machine with either side's statement (EXPLAIN ANALYZE), the confirms of a batch about twice that. " +
					"relay.Run's own work per message is now close to the raw loop's (BenchmarkRelay: 68 allocations to its 57), so " +
					"what it can gain is overlap, one of its two loops claiming while the other publishes, and on two cores shared with " +
					"Postgres and RabbitMQ there is little idle time to overlap into."},
			{name: "warren: relay.Run, BatchSize 100", run: warrenRelay(func(c *relay.Config) { c.BatchSize = 100 }),
				why: "a fifth of the default batch makes five claim and five settle round trips for each one of the defaults'; " +
					"the smaller batch bounds how many rows a lapsed lease publishes twice."},
		},
	}
}

// outboxBench is one measurement's outbox table and the exchange the relay
// publishes to, with one queue bound so that mandatory publishes route.
type outboxBench struct {
	pool     *pgxpool.Pool
	outbox   *outbox.Table
	conn     *amqp.Connection
	exchange string
	queue    string
	// slot is the CDC relay's replication slot on the table, once one may
	// have been made (cdc.go): close drops it, since a slot left behind
	// makes Postgres keep WAL for ever.
	slot string
}

// newOutboxBench creates a table of its own, migrated, and the exchange
// and queue. The queue keeps at most maxLength messages, dropping the
// oldest: the measurements are of the relay, not of a broker holding a
// growing backlog.
func newOutboxBench(ctx context.Context, e *env, maxLength int) (*outboxBench, error) {
	pool, err := pgPool(ctx, e)
	if err != nil {
		return nil, err
	}
	ob := &outboxBench{pool: pool}
	name := uniqueName("outbox")
	if ob.outbox, err = outbox.New(name); err != nil {
		ob.close()
		return nil, err
	}
	if _, err := ob.outbox.Migrate(ctx, pool); err != nil {
		ob.close()
		return nil, err
	}
	if ob.conn, err = amqpx.Dial(ctx, e.amqpURL, amqpx.DialOptions{Name: "bench outbox setup"}); err != nil {
		ob.close()
		return nil, err
	}
	ch, err := ob.conn.Channel()
	if err != nil {
		ob.close()
		return nil, err
	}
	defer ch.Close()
	ob.exchange, ob.queue = name+".ex", name
	args := amqp.Table{"x-max-length": int64(maxLength)}
	if maxLength <= 0 {
		args = nil
	}
	args = e.queueArgs(args)
	err = errors.Join(
		ch.ExchangeDeclare(ob.exchange, amqp.ExchangeFanout, true, false, false, false, nil),
		declareAndBind(ch, ob.queue, ob.exchange, args))
	if err != nil {
		ob.close()
		return nil, err
	}
	return ob, nil
}

func declareAndBind(ch *amqp.Channel, queue, exchange string, args amqp.Table) error {
	if _, err := ch.QueueDeclare(queue, true, false, false, false, args); err != nil {
		return err
	}
	return ch.QueueBind(queue, "", exchange, false, nil)
}

// filledOutbox is a new outbox bench whose table holds n events.
func filledOutbox(ctx context.Context, e *env, n int) (*outboxBench, error) {
	ob, err := newOutboxBench(ctx, e, 1000)
	if err != nil {
		return nil, err
	}
	if err := ob.insert(ctx, n, e.event); err != nil {
		ob.close()
		return nil, err
	}
	return ob, nil
}

// insert writes events 0 … n-1 to the outbox, 1000 to a transaction.
func (ob *outboxBench) insert(ctx context.Context, n int, event func(int) warren.Event) error {
	for start := 0; start < n; start += 1000 {
		evs := make([]warren.Event, 0, 1000)
		for i := start; i < min(start+1000, n); i++ {
			evs = append(evs, event(i))
		}
		err := pgx.BeginFunc(ctx, ob.pool, func(tx pgx.Tx) error {
			_, err := ob.outbox.PublishBatch(ctx, tx, evs)
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// pending reports whether the outbox holds a pending row.
func (ob *outboxBench) pending(ctx context.Context) (bool, error) {
	var found bool
	err := ob.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+ob.table()+` WHERE state = 'pending')`).Scan(&found)
	return found, err
}

func (ob *outboxBench) table() string { return pgx.Identifier{ob.outbox.Name()}.Sanitize() }

// close removes what the bench made. Every relay on the table must have
// stopped.
func (ob *outboxBench) close() {
	ctx := context.Background()
	if ob.slot != "" {
		dropCDCSlot(ob)
	}
	if ob.outbox != nil {
		ob.pool.Exec(ctx, `DROP TABLE IF EXISTS `+ob.table()+`, `+pgx.Identifier{ob.outbox.Name() + "_migrations"}.Sanitize()+
			`, `+cdcStateTable(ob))
	}
	ob.pool.Close()
	if ob.conn != nil {
		if ch, err := ob.conn.Channel(); err == nil {
			ch.QueueDelete(ob.queue, false, false, false)
			ch.ExchangeDelete(ob.exchange, false, false)
		}
		ob.conn.Close()
	}
}

// warrenRelay drains a backlog with relay.Run at its defaults, as tweak
// changes them.
func warrenRelay(tweak func(*relay.Config)) func(ctx context.Context, e *env) (figures, error) {
	return warrenRelays(1, tweak)
}

// rawRelay drains a backlog with the loop a team would write on bare pgx
// and amqp091-go.
func rawRelay(ctx context.Context, e *env) (figures, error) {
	return rawRelays(1)(ctx, e)
}

// rawRelayLoop is the raw side's relay: one channel in confirm mode, one
// claim statement, one delete.
type rawRelayLoop struct {
	ob          *outboxBench
	conn        *amqp.Connection
	ch          *amqp.Channel
	claim, done string
}

func newRawRelayLoop(ctx context.Context, e *env, ob *outboxBench) (*rawRelayLoop, error) {
	conn, err := amqpx.Dial(ctx, e.amqpURL, amqpx.DialOptions{Name: "bench raw relay"})
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	t := ob.table()
	l := &rawRelayLoop{ob: ob, conn: conn, ch: ch}
	// The body is built by Postgres, in one pass with the claim: the
	// cheapest way a raw loop can produce the envelope.
	l.claim = `UPDATE ` + t + ` AS o SET attempts = o.attempts + 1, claims = o.claims + 1,
	available_at = now() + interval '30 seconds', claimed_by = 'raw'
WHERE o.id IN (SELECT id FROM ` + t + ` WHERE state = 'pending' AND available_at <= now()
	ORDER BY available_at, id LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING o.id, o.event_id, o.event_type, o.initiator_type, o.created_at, json_build_object(
	'event_id', o.event_id, 'event_type', o.event_type, 'entity_type', o.entity_type, 'entity_id', o.entity_id,
	'workspace_id', o.workspace_id, 'project_id', o.project_id, 'initiator_id', o.initiator_id,
	'initiator_type', o.initiator_type, 'payload', o.payload, 'created_at', o.created_at, 'version', o.version)::text`
	l.done = `DELETE FROM ` + t + ` WHERE id = ANY($1::bigint[])`
	return l, nil
}

// cycle claims up to limit rows, publishes them all, waits for every
// confirm and deletes the batch. It returns how many rows it moved.
func (l *rawRelayLoop) cycle(ctx context.Context, limit int) (int, error) {
	rows, err := l.ob.pool.Query(ctx, l.claim, limit)
	if err != nil {
		return 0, err
	}
	// The claim is read whole before the first publish, as relay.Run
	// reads its own, so that the claim's time (the backlog scenario's
	// claim latency) is the statement's alone.
	claimed, err := pgx.CollectRows(rows, pgx.RowToStructByPos[rawClaimed])
	if err != nil {
		return 0, err
	}
	ids := make([]int64, 0, len(claimed))
	confirms := make([]*amqp.DeferredConfirmation, 0, len(claimed))
	for _, c := range claimed {
		dc, err := l.ch.PublishWithDeferredConfirmWithContext(ctx, l.ob.exchange, c.EventType, true, false, amqp.Publishing{
			MessageId: c.EventID, Type: c.EventType, ContentType: "application/json", DeliveryMode: amqp.Persistent,
			Timestamp: c.Created, Headers: amqp.Table{warren.HeaderInitiatorType: c.Initiator}, Body: []byte(c.Body),
		})
		if err != nil {
			return 0, err
		}
		ids, confirms = append(ids, c.ID), append(confirms, dc)
	}
	for _, dc := range confirms {
		ok, err := dc.WaitContext(ctx)
		if err != nil {
			return 0, err
		}
		if !ok {
			return 0, errors.New("broker nacked a message")
		}
	}
	// Deleted only once every message of the batch is confirmed.
	if len(ids) > 0 {
		if _, err := l.ob.pool.Exec(ctx, l.done, ids); err != nil {
			return 0, err
		}
	}
	return len(ids), nil
}

func (l *rawRelayLoop) close() { l.conn.Close() }

// rawClaimed is a row as the raw loop's claim returns it.
type rawClaimed struct {
	ID                            int64
	EventID, EventType, Initiator string
	Created                       time.Time
	Body                          string
}
