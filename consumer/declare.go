package consumer

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
)

// declareTopology makes the consumer's exchange, queue, dead-letter and
// retry topology exist on conn. It plans first: it looks at what exists
// (passively), checks that each existing exchange and queue is declared
// the way the consumer needs it, or with AdoptQueue learns the queue's
// arguments, and only then declares what is missing. So a start refused
// for a conflict leaves nothing new behind. Should a declaration still fail
// midway (a permission, a conflict created meanwhile), what this call
// created is deleted again, each only if empty and unused; over a
// connection that died, nothing can be, and the next start finds it and
// goes on. Declaring what exists with the same arguments changes nothing.
func (c *BaseConsumer) declareTopology(conn *amqp.Connection) error {
	d := &declarer{conn: conn}
	defer d.close()
	var adoptedArgs amqp.Table
	if a := c.adoptedArgs.Load(); a != nil {
		adoptedArgs = *a
	}
	p, err := c.topo.plan(d, c.cfg, adoptedArgs)
	if err != nil {
		return err
	}
	if err := p.apply(d); err != nil {
		if left := p.undo(d); len(left) > 0 {
			c.log.Warn("a failed declaration left what it created behind (not empty, in use, or the connection is gone)", "left", left)
		}
		return err
	}
	if p.adopted {
		c.adoptedArgs.Store(&p.queueArgs)
	}
	if c.topo.Partitioned() {
		c.log.Info("topology declared", "partition_exchange", c.topo.PartitionExchange, "partitions", len(c.topo.PartitionQueues),
			"queue_arguments", formatArgs(p.queueArgs), "found", p.found, "added", p.added(), "notes", p.notes)
		for _, n := range p.notes {
			c.log.Warn(n)
		}
		return nil
	}
	if p.readopted {
		c.log.Warn("the adopted queue was missing (deleted?); it is declared again with the arguments it was adopted with, and what was published to the exchange while it was missing is lost",
			"queue", c.topo.Queue, "queue_arguments", formatArgs(p.queueArgs))
	}
	c.log.Info("topology declared", "queue", c.topo.Queue, "adopted", p.adopted,
		"queue_arguments", formatArgs(p.queueArgs), "found", p.found, "added", p.added(), "notes", p.notes)
	return nil
}

// topologyPlan is what one declaration found on the broker and will add.
type topologyPlan struct {
	queueArgs amqp.Table // the consumer's queue's arguments: learned when adopted, else the config's
	adopted   bool       // the queue was taken with its own arguments
	readopted bool       // adopted earlier, found missing, and declared again with those arguments
	found     []string   // what exists and is used as it is
	notes     []string   // what an operator should know about an adopted queue

	exchanges []exchangeSpec // to declare
	queues    []queueSpec
	bindings  []bindingSpec

	createdExchanges, createdQueues []string // by apply, for undo
}

type queueSpec struct {
	name string
	args amqp.Table
}

// bindingSpec binds the queue, or with toExchange the exchange, queue to
// exchange with the routing key key.
type bindingSpec struct {
	queue, exchange, key string
	toExchange           bool
}

func (b bindingSpec) String() string { return b.queue + " to " + b.exchange }

// exchangeSpec is a durable exchange: fanout unless kind says otherwise.
type exchangeSpec struct {
	name, kind string
	args       amqp.Table
}

func fanout(name string) exchangeSpec { return exchangeSpec{name: name, kind: amqp.ExchangeFanout} }

// consistentHash is the exchange type of the rabbitmq_consistent_hash_exchange plugin.
const consistentHash = "x-consistent-hash"

// queueSpecs are the consumer's queue and the others (the DLQ, then the
// retry tiers) with the arguments the consumer declares them with.
func (t Topology) queueSpecs(cfg Config) (main queueSpec, others []queueSpec) {
	queueArgs := func(ttl time.Duration, extra amqp.Table) amqp.Table {
		args := amqp.Table{}
		if ttl > 0 {
			args["x-message-ttl"] = ttl.Milliseconds()
		}
		if cfg.QueueType == Quorum {
			args["x-queue-type"] = string(Quorum)
		}
		maps.Copy(args, extra)
		return args
	}
	// Quorum queues dead-letter at most once unless asked; at-least-once
	// needs reject-publish overflow. Both matter here: retry queues deliver
	// by dead-lettering, and expiry must not drop a message on its way to
	// the DLQ.
	deadLetterTo := func(exchange, routingKey string) amqp.Table {
		args := amqp.Table{"x-dead-letter-exchange": exchange}
		if routingKey != "" {
			args["x-dead-letter-routing-key"] = routingKey
		}
		if cfg.QueueType == Quorum {
			args["x-dead-letter-strategy"] = "at-least-once"
			args["x-overflow"] = "reject-publish"
		}
		return args
	}
	mainArgs := deadLetterTo(t.DLX, "")
	if cfg.DeliveryLimit > 0 {
		mainArgs["x-delivery-limit"] = int64(cfg.DeliveryLimit)
	}
	main = queueSpec{t.Queue, queueArgs(cfg.MessageTTL, mainArgs)}
	others = []queueSpec{{t.DLQ, queueArgs(cfg.DLQTTL, nil)}}
	// A partition queue is the queue, one of several, with one consumer
	// active at a time: the order the broker keeps is the order handled.
	for _, q := range t.PartitionQueues {
		args := maps.Clone(main.args)
		args["x-single-active-consumer"] = true
		others = append(others, queueSpec{q, args})
	}
	// Retry tiers dead-letter through the default exchange straight to this
	// consumer's queue: a retry must never go back through the fanout
	// exchange, where every other consumer would see it again.
	for _, r := range t.Retry {
		others = append(others, queueSpec{r.Queue, queueArgs(r.Delay, deadLetterTo("", t.Queue))})
	}
	return main, others
}

// plan looks at the broker and decides what to declare, declaring nothing
// new: passive declarations find what exists, and a declaration of an
// existing exchange or queue with the arguments it already has changes
// nothing, while one with others is refused, which is the conflict plan
// reports. adoptedArgs are the arguments the queue was adopted with earlier
// in this Run, if it was.
func (t Topology) plan(d *declarer, cfg Config, adoptedArgs amqp.Table) (*topologyPlan, error) {
	if t.Partitioned() {
		return t.planPartitions(d, cfg)
	}
	p := &topologyPlan{}
	// The partition exchange of this consumer when it was partitioned is
	// still bound to the events exchange, unless deleted: its partition
	// queues would go on filling with copies of every event, nobody
	// consuming them, until they expire into the DLQ.
	x := PartitionExchangeName(cfg.Name)
	switch exists, err := d.exists("exchange", x); {
	case err != nil:
		return nil, topologyError("exchange", x, err)
	case exists:
		return nil, topologyError("exchange", x, fmt.Errorf("%w: it is left from this consumer when it was partitioned (Partitions > 0) and, while it is bound to %q, copies every event into the partition queues %s, which nobody consumes now and whose messages would expire into the DLQ; let the partitioned consumer drain them, then delete the exchange %s and the queues %s.p<i> and %s.replicas (or set Partitions back)",
			errPartitionLeft, t.Exchange, cfg.Name+".p<i>", x, cfg.Name, cfg.Name))
	}
	if err := p.exchange(d, fanout(t.Exchange)); err != nil {
		return nil, err
	}
	main, others := t.queueSpecs(cfg)
	bindDLQ := true
	exists, err := d.exists("queue", main.name)
	switch {
	case err != nil:
		return nil, topologyError("queue", main.name, err)
	case !exists && cfg.AdoptQueue && adoptedArgs == nil:
		// Declared from the config, the queue would have arguments its
		// owner's declaration is refused with: rolling back to the owner
		// would fail.
		return nil, topologyError("queue", main.name, nothingToAdopt(main.name))
	case !exists && cfg.AdoptQueue:
		// Adopted earlier and deleted since: declared again as its owner
		// declares it, so the owner still can.
		main.args = adoptedArgs
		p.queueArgs, p.adopted, p.readopted = adoptedArgs, true, true
		bindDLQ = p.noteAdopted(t, cfg)
	case !exists:
		p.queueArgs = main.args
	case cfg.AdoptQueue:
		args, err := learnQueueArgs(main.name, main.args, func(args amqp.Table) error {
			return d.declareQueue(queueSpec{main.name, args})
		}, func() error {
			return d.do(func(ch *amqp.Channel) error {
				_, err := ch.QueueDelete(main.name, true, true, false)
				return err
			})
		})
		if err != nil {
			return nil, topologyError("queue", main.name, err)
		}
		p.queueArgs, p.adopted = args, true
		p.found = append(p.found, "queue "+main.name)
		bindDLQ = p.noteAdopted(t, cfg)
	default:
		if err := d.declareQueue(main); err != nil {
			te := topologyError("queue", main.name, err)
			te.adoptable = true
			return nil, te
		}
		p.queueArgs = main.args
		p.found = append(p.found, "queue "+main.name)
	}
	if bindDLQ {
		if err := p.exchange(d, fanout(t.DLX)); err != nil {
			return nil, err
		}
	}
	for _, q := range others {
		if err := p.queue(d, q); err != nil {
			return nil, err
		}
	}
	if !exists {
		p.queues = append(p.queues, main) // last: nothing routes to it before the rest exists
	}
	if bindDLQ {
		p.bindings = append(p.bindings, bindingSpec{queue: t.DLQ, exchange: t.DLX})
	}
	// An adopted queue is bound with its own name as the key, which is
	// the binding Plane's consumers made: pika uses the queue's name when
	// given no key. Binding it again is then a no-op, and a rollback to
	// Plane finds no binding of warren's left behind. An owner that bound
	// the queue with another key gains this binding (AMQP cannot list
	// bindings to tell). The exchange is a fanout: the key routes nothing.
	var key string
	if p.adopted {
		key = t.Queue
	}
	p.bindings = append(p.bindings, bindingSpec{queue: t.Queue, exchange: t.Exchange, key: key})
	return p, nil
}

// planPartitions is plan for a partitioned consumer: the events exchange,
// the dead-letter exchange and queue, the consistent-hash exchange bound
// to the events exchange, and the partition queues bound to it, each with
// weight 1. The hash exchange is declared first, so that a broker without
// the plugin (which closes the connection over the unknown type) is met
// before anything else is created.
func (t Topology) planPartitions(d *declarer, cfg Config) (*topologyPlan, error) {
	p := &topologyPlan{}
	hash := exchangeSpec{name: t.PartitionExchange, kind: consistentHash, args: amqp.Table{"hash-header": warren.HeaderEntityID}}
	for _, x := range []exchangeSpec{hash, fanout(t.Exchange), fanout(t.DLX)} {
		if err := p.exchange(d, x); err != nil {
			return nil, err
		}
	}
	// A queue past the last partition is left from a larger Partitions:
	// it is still bound to the hash exchange and takes its share of the
	// events, which nobody would consume.
	extra := PartitionQueueName(cfg.Name, len(t.PartitionQueues))
	switch exists, err := d.exists("queue", extra); {
	case err != nil:
		return nil, topologyError("queue", extra, err)
	case exists:
		return nil, topologyError("queue", extra, fmt.Errorf("%w: it is left from a consumer with more partitions and still takes its share of the events; let a consumer drain it (or shovel its messages away) and delete it, or set Partitions back", errPartitionLeft))
	}
	// So is the queue of this consumer before it was partitioned: AMQP
	// cannot tell whether it is still bound to the events exchange, and
	// if it is, it takes a copy of every event nobody would consume.
	switch exists, err := d.exists("queue", t.Queue); {
	case err != nil:
		return nil, topologyError("queue", t.Queue, err)
	case exists:
		return nil, topologyError("queue", t.Queue, fmt.Errorf("%w: it is this consumer's queue from before it was partitioned and, if it is still bound to %q, takes a copy of every event, which nobody would consume and which would expire into the DLQ; let the unpartitioned consumer drain it, then delete it (or set Partitions back to 0)", errPartitionLeft, t.Exchange))
	}
	main, others := t.queueSpecs(cfg)
	// The roster (Replicas) is not planned: the rebalancer joins it, and a
	// session does not depend on it (partition.go, joinRoster).
	for _, q := range others {
		if err := p.queue(d, q); err != nil {
			return nil, err
		}
	}
	p.queueArgs = main.args
	p.bindings = append(p.bindings, bindingSpec{queue: t.DLQ, exchange: t.DLX})
	for _, q := range t.PartitionQueues {
		p.bindings = append(p.bindings, bindingSpec{queue: q, exchange: t.PartitionExchange, key: "1"}) // the weight
	}
	// Last: nothing routes to the partitions before they all exist.
	p.bindings = append(p.bindings, bindingSpec{queue: t.PartitionExchange, exchange: t.Exchange, toExchange: true})
	return p, nil
}

// noteAdopted records how an adopted queue's arguments differ from the
// config and reports whether the DLQ is to be bound to the queue's
// dead-letter exchange.
func (p *topologyPlan) noteAdopted(t Topology, cfg Config) (bindDLQ bool) {
	ttl, hasTTL := p.queueArgs["x-message-ttl"].(int64)
	switch {
	case !hasTTL && cfg.MessageTTL > 0:
		p.notes = append(p.notes, fmt.Sprintf("the queue has no message TTL (config: %v): messages wait in it without limit", cfg.MessageTTL))
	case hasTTL && time.Duration(ttl)*time.Millisecond != cfg.MessageTTL:
		p.notes = append(p.notes, fmt.Sprintf("messages expire after the queue's TTL of %v, not the configured %v", time.Duration(ttl)*time.Millisecond, cfg.MessageTTL))
	}
	dlx, hasDLX := p.queueArgs["x-dead-letter-exchange"].(string)
	switch {
	case !hasDLX:
		p.notes = append(p.notes, "the queue has no dead-letter exchange: the broker drops messages that expire in it")
		return false
	case dlx != t.DLX:
		p.notes = append(p.notes, fmt.Sprintf("messages that expire in the queue go to its dead-letter exchange %q, not to DeadLetterExchange %q; the DLQ is not bound there, since other queues may dead-letter to it too (set DeadLetterExchange to %q to bind it if they do not)", dlx, t.DLX, dlx))
		return false
	}
	p.notes = append(p.notes, fmt.Sprintf("the DLQ is bound to the queue's dead-letter exchange %q: it receives the expired messages of every queue that dead-letters there", dlx))
	return true
}

// exchange plans the durable exchange x: found, or to declare.
func (p *topologyPlan) exchange(d *declarer, x exchangeSpec) error {
	exists, err := d.exists("exchange", x.name)
	if err == nil && exists {
		err = d.declareExchange(x)
	}
	if err != nil {
		return exchangeError(x, err)
	}
	if exists {
		p.found = append(p.found, "exchange "+x.name)
	} else {
		p.exchanges = append(p.exchanges, x)
	}
	return nil
}

// exchangeError is topologyError for an exchange, saying what to do when
// the broker does not know a consistent-hash exchange.
func exchangeError(x exchangeSpec, err error) *TopologyError {
	var ae *amqp.Error
	if x.kind == consistentHash && errors.As(err, &ae) && ae.Code == amqp.CommandInvalid && strings.Contains(ae.Reason, "exchange type") {
		err = fmt.Errorf("%w (%w)", ErrNoConsistentHash, err)
	}
	return topologyError("exchange", x.name, err)
}

// queue plans q: found with its arguments, or to declare.
func (p *topologyPlan) queue(d *declarer, q queueSpec) error {
	exists, err := d.exists("queue", q.name)
	if err == nil && exists {
		err = d.declareQueue(q)
	}
	if err != nil {
		return topologyError("queue", q.name, err)
	}
	if exists {
		p.found = append(p.found, "queue "+q.name)
	} else {
		p.queues = append(p.queues, q)
	}
	return nil
}

// apply declares what plan found missing and the bindings.
func (p *topologyPlan) apply(d *declarer) error {
	for _, x := range p.exchanges {
		if err := d.declareExchange(x); err != nil {
			return exchangeError(x, err)
		}
		p.createdExchanges = append(p.createdExchanges, x.name)
	}
	for _, q := range p.queues {
		if err := d.declareQueue(q); err != nil {
			return topologyError("queue", q.name, err)
		}
		p.createdQueues = append(p.createdQueues, q.name)
	}
	for _, b := range p.bindings {
		err := d.do(func(ch *amqp.Channel) error {
			if b.toExchange {
				return ch.ExchangeBind(b.queue, b.key, b.exchange, false, nil)
			}
			return ch.QueueBind(b.queue, b.key, b.exchange, false, nil)
		})
		if err != nil {
			return topologyError("binding", b.String(), err)
		}
	}
	return nil
}

// undo deletes what apply created, newest first: a queue only if empty and
// without consumers, so no message is lost, and an exchange only if nothing
// is bound to it. Deleting a queue removes its bindings. Bindings between
// things that existed before are left: one may have existed already, and
// AMQP cannot tell. It returns what it could not delete.
func (p *topologyPlan) undo(d *declarer) (left []string) {
	for _, q := range slices.Backward(p.createdQueues) {
		err := d.do(func(ch *amqp.Channel) error {
			_, err := ch.QueueDelete(q, true, true, false)
			return err
		})
		if err != nil {
			left = append(left, "queue "+q)
		}
	}
	for _, x := range slices.Backward(p.createdExchanges) {
		if err := d.do(func(ch *amqp.Channel) error { return ch.ExchangeDelete(x, true, false) }); err != nil {
			left = append(left, "exchange "+x)
		}
	}
	return left
}

// added lists what apply declared, for the log.
func (p *topologyPlan) added() []string {
	var out []string
	for _, x := range p.exchanges {
		out = append(out, "exchange "+x.name)
	}
	for _, q := range p.queues {
		out = append(out, "queue "+q.name)
	}
	for _, b := range p.bindings {
		out = append(out, "binding "+b.String())
	}
	return out
}

// formatArgs renders queue arguments for a log line, sorted by name.
func formatArgs(args amqp.Table) string {
	parts := make([]string, 0, len(args))
	for _, k := range slices.Sorted(maps.Keys(args)) {
		parts = append(parts, fmt.Sprintf("%s=%v", k, args[k]))
	}
	return strings.Join(parts, " ")
}

// declarer runs the round trips of one declaration on a channel of conn,
// opening a new one after a refusal, which closes the channel.
type declarer struct {
	conn *amqp.Connection
	ch   *amqp.Channel
}

func (d *declarer) do(f func(*amqp.Channel) error) error {
	if d.ch == nil {
		ch, err := d.conn.Channel()
		if err != nil {
			return fmt.Errorf("open channel: %w", err)
		}
		d.ch = ch
	}
	err := f(d.ch)
	if err != nil {
		d.close()
	}
	return err
}

func (d *declarer) close() {
	if d.ch != nil {
		d.ch.Close() // already closed by the broker after a refusal
		d.ch = nil
	}
}

// exists asks passively whether the exchange or queue name exists. A
// passive declaration needs no permission and creates nothing.
func (d *declarer) exists(kind, name string) (bool, error) {
	err := d.do(func(ch *amqp.Channel) error {
		if kind == "exchange" {
			return ch.ExchangeDeclarePassive(name, amqp.ExchangeFanout, true, false, false, false, nil)
		}
		_, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		return err
	})
	var ae *amqp.Error
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &ae) && ae.Code == amqp.NotFound:
		return false, nil
	}
	return false, err
}

func (d *declarer) declareExchange(x exchangeSpec) error {
	return d.do(func(ch *amqp.Channel) error {
		return ch.ExchangeDeclare(x.name, x.kind, true, false, false, false, x.args)
	})
}

func (d *declarer) declareQueue(q queueSpec) error {
	return d.do(func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(q.name, true, false, false, false, q.args)
		return err
	})
}
