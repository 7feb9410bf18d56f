package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay"
	"github.com/warrenmq/warren/relay/cdc"
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
	if o.migrate {
		if err := migrateBeforeRun(ctx, &o.db, env.stdout); err != nil {
			return err
		}
	}
	return o.db.redact(r.Run(ctx))
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
	case o.healthAddr != "":
		return usagef("--health-addr is not served with --mode cdc yet; 'warren outbox stats' shows the slot's lag")
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
