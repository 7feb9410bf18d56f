package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay"
	"github.com/warrenmq/warren/relay/cdc"
	"github.com/warrenmq/warren/warrenprom/cdcprom"
)

// runCDCRelay is 'warren relay run --mode cdc': the relay that streams
// the table's inserts from a logical replication slot.
func runCDCRelay(ctx context.Context, c *relayRun) error {
	o, env := c.opts, c.env
	pcfg, err := o.config(env)
	if err != nil {
		return err
	}
	if err := o.cdcOnly(pcfg); err != nil {
		return err
	}
	cfg := cdc.Config{
		DatabaseURL:    pcfg.DatabaseURL,
		AMQPURL:        pcfg.AMQPURL,
		Exchange:       pcfg.Exchange,
		Table:          pcfg.Table,
		Slot:           o.slot,
		Name:           o.name,
		Format:         pcfg.Format,
		Publisher:      pcfg.Publisher,
		BatchSize:      o.batchSize,
		PublishTimeout: pcfg.PublishTimeout,
		MaxAttempts:    o.cdcMaxAttempts(),
		NackTimeout:    time.Duration(o.nackTimeout),
		RetryMin:       pcfg.RetryMin,
		RetryMax:       pcfg.RetryMax,
		Logger:         pcfg.Logger,
	}
	if o.dropSlot {
		return o.db.redact(dropCDCSlot(ctx, c, cfg))
	}
	r, err := cdc.New(cfg)
	if errors.Is(err, cdc.ErrInvalidConfig) {
		return usagef("%v", err)
	}
	if err != nil {
		return err
	}
	return c.serveMigrateRun(ctx, func() (func(), error) {
		return serveCDCHealth(ctx, o, r, cfg.Logger)
	}, r.Run)
}

// serveCDCHealth serves --health-addr for the CDC relay r: its probes, and
// its metrics with the slot's status, read at each scrape on a small pool
// of its own (the relay's pool lives only while it runs, and a scrape must
// not take a connection the relay needs).
func serveCDCHealth(ctx context.Context, o *relayRunOptions, r *cdc.Relay, log *slog.Logger) (stop func(), err error) {
	pcfg, err := pgxpool.ParseConfig(o.db.databaseURL)
	if err != nil {
		return nil, usagef("--database-url: %v", o.db.redact(err))
	}
	pcfg.MaxConns = 2
	pcfg.ConnConfig.RuntimeParams["application_name"] = cmp.Or(pcfg.ConnConfig.RuntimeParams["application_name"], "warren cdc metrics")
	// Connects on the first scrape: a database that is down now is the
	// relay's to wait out, and the scrape's to report.
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, o.db.redact(err)
	}
	reg := newRegistry()
	m, err := cdcprom.New(reg, pool, cdcprom.Options{})
	if err != nil {
		pool.Close()
		return nil, err
	}
	m.Watch(r)
	stopServing, err := serveHealth(o.healthAddr, r.HealthHandler(), reg, log)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return func() {
		stopServing()
		pool.Close()
	}, nil
}

// cdcOnly refuses the polling relay's own flags: the stream has no claims,
// leases, polls or kept rows.
func (o *relayRunOptions) cdcOnly(cfg relay.Config) error {
	switch {
	case cfg.Schema != outbox.SchemaWarren:
		return usagef("--mode cdc streams a warren-schema outbox; Plane's table is drained with --mode poll --schema plane")
	case o.keepDelivered, o.orderByEntity, o.noListen:
		return usagef("--keep-delivered, --order-by-entity and --no-listen are the polling relay's; --mode cdc trims published rows and keeps commit order")
	case o.workers != relay.DefaultWorkers, o.lease != 0, o.pollMin != 0, o.pollMax != 0:
		return usagef("--workers, --lease, --poll-min and --poll-max are the polling relay's; --mode cdc has one stream per slot")
	}
	return nil
}

// cdcMaxAttempts is --max-attempts when given: the polling relay's default
// (20 claims, spread over hours) would hold the stream for as long.
func (o *relayRunOptions) cdcMaxAttempts() int {
	if o.maxAttempts == relay.DefaultMaxAttempts {
		return cdc.DefaultMaxAttempts
	}
	return o.maxAttempts
}

func dropCDCSlot(ctx context.Context, c *relayRun, cfg cdc.Config) error {
	_, pool, err := c.opts.db.open(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	slot := cfg.Slot
	if slot == "" {
		slot = cfg.Table + "_cdc"
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := cdc.DropSlot(ctx, pool, cfg.Table, slot, slot); err != nil {
		return err
	}
	fmt.Fprintf(c.env.stdout, "dropped replication slot and publication %s of outbox %s\n", slot, cfg.Table)
	return nil
}
