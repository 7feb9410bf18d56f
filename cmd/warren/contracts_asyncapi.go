package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/warrenmq/warren/cmd/warren/internal/inventory"
	"github.com/warrenmq/warren/contract"
	"github.com/warrenmq/warren/contract/asyncapi"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/redact"
)

// asyncapiOptions are the flags of 'warren contracts asyncapi'.
type asyncapiOptions struct {
	contractsDir, exchange, output, title, version string
	consumers                                      consumerFlag
	broker                                         bool
	amqpURL, managementURL                         string
}

var asyncapiVerb = subcommand[contractsOptions, *contractsCall]{
	name: "asyncapi", summary: "write an AsyncAPI 3.0.0 document of the stream: exchange, consumers, contracts",
	about: "Write an AsyncAPI 3.0.0 document (JSON, sorted: commit it and diff it) of the stream: the exchange the relays publish to (a channel whose routing key is the event type) and their send operation; each consumer's queue (a channel with the event types that reach it) and its receive operation (those its handlers' prefixes take); and for each contract in --contracts a message, warren's envelope with the contract as payload.data.\n\nThe consumers come from --consumer flags (CI: no broker; each queue taken as warren binds it, to the fanout exchange, receiving every event), or with --broker from the exchange's bindings, read through RabbitMQ's management API (every queue the exchange's events reach, through topic or direct exchanges too, and the event types they let through); --consumer flags then give the prefixes of consumers found there. Event types without a contract are not in the document.\n\nExit status: 0 written; 1 contracts that cannot be read or placed in the document, or a broker that cannot be read; 2 the command line was wrong.",
	examples: []string{
		"warren contracts asyncapi --contracts contracts --consumer webhook=workitem.,project. --consumer automation > asyncapi.json",
		"warren contracts asyncapi --contracts contracts --broker --management-url http://rabbit:15672/ --consumer webhook=workitem. --output asyncapi.json",
	},
	flags: func(fs *flagSet, o *contractsOptions) {
		a := &o.asyncapi
		fs.String(&a.contractsDir, "contracts", "DIR", "the contracts: DIR/TYPE/VERSION.json, as contract.Set.WriteDir writes them (required)", "")
		fs.Var(&a.consumers, "consumer", "NAME[=PREFIX,...]", "a consumer and the event-type prefixes its handlers are registered for; NAME alone handles every type; repeat for each consumer")
		fs.String(&a.exchange, "exchange", "NAME", "the exchange the relays publish to", asyncapi.DefaultExchange)
		fs.Bool(&a.broker, "broker", "read the consumers from the exchange's bindings on the broker (RabbitMQ's management API) instead of from --consumer alone")
		fs.String(&a.amqpURL, "amqp-url", "URL", "with --broker: the broker, whose vhost is read; default $AMQP_URL, else "+redact.URL(amqpx.DefaultURL), "")
		fs.String(&a.managementURL, "management-url", "URL", "with --broker: RabbitMQ's management API; default http://HOST:15672 of the broker, same user", "")
		fs.String(&a.output, "output", "FILE", "write the document to FILE, once it is complete (default standard output)", "")
		fs.String(&a.title, "title", "TEXT", "the document's info.title", asyncapi.DefaultTitle)
		fs.String(&a.version, "doc-version", "TEXT", "the document's info.version: the version of this description of the stream", asyncapi.DefaultVersion)
	},
	run: runContractsAsyncAPI,
}

// consumerFlag collects --consumer NAME[=PREFIX,...], each name once.
type consumerFlag []asyncapi.Consumer

func (c *consumerFlag) String() string { return "" }

func (c *consumerFlag) Set(v string) error {
	name, list, hasPrefixes := strings.Cut(v, "=")
	if name == "" {
		return errors.New("want NAME or NAME=PREFIX,...; the name is empty")
	}
	if slices.ContainsFunc(*c, func(x asyncapi.Consumer) bool { return x.Name == name }) {
		return fmt.Errorf("the consumer %q is given twice; give its prefixes in one flag, separated by commas", name)
	}
	var prefixes []string
	if hasPrefixes {
		for p := range strings.SplitSeq(list, ",") {
			if p == "" {
				return fmt.Errorf("an empty prefix for %q; give NAME alone for a consumer that handles every event type", name)
			}
			prefixes = append(prefixes, p)
		}
	} else {
		// NAME alone: a handler for "", which matches every type.
		prefixes = []string{""}
	}
	*c = append(*c, asyncapi.Consumer{Name: name, Handles: prefixes})
	return nil
}

func runContractsAsyncAPI(ctx context.Context, c *contractsCall) error {
	o := &c.opts.asyncapi
	if len(c.args) > 0 {
		return usagef("asyncapi: unexpected argument %q; the contracts directory is --contracts DIR", c.args[0])
	}
	if o.contractsDir == "" {
		return usagef("asyncapi: --contracts DIR is required")
	}
	if !o.broker && (o.amqpURL != "" || o.managementURL != "") {
		return usagef("asyncapi: --amqp-url and --management-url read the broker: add --broker")
	}
	if o.exchange == "" {
		return usagef("asyncapi: --exchange is empty; name the exchange the relays publish to")
	}
	if !o.broker && len(o.consumers) == 0 {
		return usagef("asyncapi: no consumers: give --consumer NAME=PREFIX,... for each, or --broker to read them from the exchange's bindings")
	}
	set, err := contract.LoadDir(o.contractsDir)
	if err != nil {
		return fmt.Errorf("the contracts (%s): %w", o.contractsDir, err)
	}
	stream := asyncapi.Stream{Title: o.title, Version: o.version, Exchange: o.exchange, Consumers: o.consumers}
	if o.broker {
		rawURL := cmp.Or(o.amqpURL, c.env.getenv("AMQP_URL"), amqpx.DefaultURL)
		if err := amqpx.CheckURL(rawURL); err != nil {
			src := "--amqp-url"
			if o.amqpURL == "" {
				src = "$AMQP_URL"
			}
			return usagef("asyncapi: %s: %v", src, err)
		}
		inv, err := inventory.New(rawURL, o.managementURL)
		if err != nil {
			return usagef("asyncapi: %v", err)
		}
		fmt.Fprintf(c.env.stderr, "management API %s, vhost %s, exchange %s\n", inv.Endpoint(), inv.Vhost(), o.exchange)
		stream, err = fromBroker(ctx, inv, set, stream)
		if err != nil {
			return redact.Error(err, amqpx.SplitURLs(rawURL)...)
		}
		if len(stream.Consumers) == 0 {
			fmt.Fprintf(c.env.stderr, "no queue is bound to %s: the document has no consumers\n", o.exchange)
		}
	}
	doc, err := asyncapi.Document(set, stream)
	if err != nil {
		return err
	}
	if o.output == "" {
		_, err = c.env.stdout.Write(doc)
		return err
	}
	// Written whole or not at all: a failed run leaves the committed
	// document as it was.
	tmp := o.output + ".tmp"
	if err := os.WriteFile(tmp, doc, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, o.output); err != nil {
		os.Remove(tmp)
		return err
	}
	fmt.Fprintf(c.env.stderr, "wrote %s: %d contracts, %d consumers\n", o.output, len(set.Contracts()), len(stream.Consumers))
	return nil
}

// partitionExchange is the x-consistent-hash exchange a partitioned
// consumer N binds to the events exchange, N.partitions, its queues
// N.p0, N.p1, …: consumer.PartitionExchangeName and PartitionQueueName,
// which this command does not link (the test holds them equal).
func partitionExchange(consumer string) string { return consumer + ".partitions" }

// fromBroker fills s's consumers from the queues the exchange's events
// reach on the broker: one consumer per queue, but a partitioned
// consumer's queues (behind its N.partitions exchange) are one consumer
// N. The --consumer flags' prefixes go to the consumers of their names,
// each of which must be found.
func fromBroker(ctx context.Context, inv *inventory.Client, set *contract.Set, s asyncapi.Stream) (asyncapi.Stream, error) {
	x, err := inv.Exchange(ctx, s.Exchange)
	if err != nil {
		return s, err
	}
	receivers, err := inv.Receivers(ctx, s.Exchange)
	if err != nil {
		return s, err
	}
	// How each queue was declared: a tool's exclusive, auto-deleted
	// queue bound to the exchange is not described as a durable one.
	all, err := inv.Queues(ctx)
	if err != nil {
		return s, err
	}
	declared := map[string]inventory.Queue{}
	for _, q := range all {
		declared[q.Name] = q
	}
	s.ExchangeType, s.Vhost = x.Type, inv.Vhost()
	s.ExchangeDeclaration = asyncapi.Declaration{Transient: !x.Durable, AutoDelete: x.AutoDelete}
	var types []string
	for _, c := range set.Contracts() {
		types = append(types, c.Type)
	}
	byName := map[string]*asyncapi.Consumer{}
	var names []string
	for _, r := range receivers {
		name := consumerOf(r)
		c := byName[name]
		if c == nil {
			c = &asyncapi.Consumer{Name: name}
			byName[name] = c
			names = append(names, name)
		}
		d, ok := declared[r.Queue]
		if !ok {
			return s, fmt.Errorf("the queue %q is bound to the exchange %s but not in the vhost's queues (deleted meanwhile?); run again", r.Queue, s.Exchange)
		}
		q := asyncapi.Queue{Name: r.Queue, Route: r.Route(), Filtered: r.Filtered(),
			Declaration: asyncapi.Declaration{Transient: !d.Durable, AutoDelete: d.AutoDelete, Exclusive: d.Exclusive}}
		if q.Filtered {
			q.EventTypes = []string{}
			for _, t := range types {
				if r.Receives(t) {
					q.EventTypes = append(q.EventTypes, t)
				}
			}
		}
		c.Queues = append(c.Queues, q)
	}
	for _, given := range s.Consumers {
		c, ok := byName[given.Name]
		if !ok {
			return s, fmt.Errorf("--consumer %s: no queue of a consumer %q is bound to the exchange %s (found: %s)", given.Name, given.Name, s.Exchange, cmp.Or(strings.Join(names, ", "), "none"))
		}
		c.Handles = given.Handles
	}
	s.Consumers = nil
	for _, name := range names {
		s.Consumers = append(s.Consumers, *byName[name])
	}
	return s, nil
}

// consumerOf names the consumer a queue belongs to: N for N.p<i> reached
// through N's partition exchange, else the queue's own name (warren
// names a consumer's queue after it).
func consumerOf(r inventory.Receiver) string {
	for _, p := range r.Paths {
		last := p[len(p)-1]
		name, ok := strings.CutSuffix(last.Exchange, ".partitions")
		if !ok || last.Type != "x-consistent-hash" || partitionExchange(name) != last.Exchange {
			continue
		}
		if i, ok := strings.CutPrefix(r.Queue, name+".p"); ok && i != "" && strings.Trim(i, "0123456789") == "" {
			return name
		}
	}
	return r.Queue
}
