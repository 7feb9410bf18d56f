package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay"
	"github.com/warrenmq/warren/relay/cdc"
	"github.com/warrenmq/warren/warrenprom/cdcprom"
)

// runCDCRelay is 'warren relay run --mode cdc': the relay that streams
// the table's inserts from a logical replication slot.
func runCDCRelay(ctx context.Context, c *relayRun) error {
	o := c.opts
	cfg, err := c.cdcConfig()
	if err != nil {
		return err
	}
	if o.dropSlot {
		return o.db.redact(dropCDCSlot(ctx, c, cfg))
	}
	reg, observer, err := o.relayMetrics()
	if err != nil {
		return err
	}
	cfg.Observer = observer
	r, err := cdc.New(cfg)
	if errors.Is(err, cdc.ErrInvalidConfig) {
		return usagef("%v", err)
	}
	if err != nil {
		return err
	}
	return c.serveMigrateRun(ctx, func() (func(), error) {
		return serveCDCHealth(ctx, o, r, reg, cfg.Logger)
	}, r.Run)
}

// cdcConfig is the CDC relay's config from the flags and the environment.
// A flag whose two modes' defaults differ is given to the relay as it
// was typed, or as this mode's default when it was not typed: never the
// polling relay's default, and never a typed value taken for a default.
func (c *relayRun) cdcConfig() (cdc.Config, error) {
	o := c.opts
	pcfg, err := o.config(c.env)
	if err != nil {
		return cdc.Config{}, err
	}
	if err := c.cdcOnly(pcfg); err != nil {
		return cdc.Config{}, err
	}
	batchSize, err := c.given("batch-size", o.batchSize, cdc.DefaultBatchSize)
	if err != nil {
		return cdc.Config{}, err
	}
	maxAttempts, err := c.given("max-attempts", o.maxAttempts, cdc.DefaultMaxAttempts)
	if err != nil {
		return cdc.Config{}, err
	}
	cfg := cdc.Config{Slot: o.slot, BatchSize: batchSize, MaxAttempts: maxAttempts, NackTimeout: time.Duration(o.nackTimeout)}
	shareSettings(&cfg, pcfg)
	return cfg, nil
}

// shareSettings copies into dst every setting of src that the CDC relay
// also has, by name and type, and leaves dst's other fields alone: the
// two configs share most settings, and a list of them here would be one
// more place for a new setting to be forgotten (the field list this
// replaced had already lost one). Settings whose defaults differ
// (BatchSize, MaxAttempts) are set from the flags instead (given), and
// only those still zero in dst are copied. It returns the names copied.
func shareSettings(dst *cdc.Config, src relay.Config) (copied []string) {
	to, from := reflect.ValueOf(dst).Elem(), reflect.ValueOf(src)
	for i := range to.NumField() {
		name := to.Type().Field(i).Name
		f := from.FieldByName(name)
		if !f.IsValid() || f.Type() != to.Field(i).Type() || !to.Field(i).IsZero() {
			continue
		}
		to.Field(i).Set(f)
		copied = append(copied, name)
	}
	return copied
}

// given is the value v of the integer flag name when it was given, else
// def. A typed value below 1 is a usage error: cdc.Config would take 0 for
// "the default", and a typed 0 run as 500 is not what was typed.
func (c *relayRun) given(name string, v, def int) (int, error) {
	if !c.fs.isSet(name) {
		return def, nil
	}
	if v < 1 {
		return 0, usagef("--%s %d: want at least 1 (leave it out for the default, %d)", name, v, def)
	}
	return v, nil
}

// serveCDCHealth serves --health-addr for the CDC relay r: its probes, the
// relay metrics already on reg, and the slot's, read at each scrape on a small pool
// of its own (the relay's pool lives only while it runs, and a scrape must
// not take a connection the relay needs).
func serveCDCHealth(ctx context.Context, o *relayRunOptions, r *cdc.Relay, reg *prometheus.Registry, log *slog.Logger) (stop func(), err error) {
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
func (c *relayRun) cdcOnly(cfg relay.Config) error {
	o := c.opts
	switch {
	case cfg.Schema != outbox.SchemaWarren:
		return usagef("--mode cdc streams a warren-schema outbox; Plane's table is drained with --mode poll --schema plane")
	case o.keepDelivered, o.orderByEntity, o.noListen:
		return usagef("--keep-delivered, --order-by-entity and --no-listen are the polling relay's; --mode cdc trims published rows and keeps commit order")
	case c.fs.isSet("workers"), o.lease != 0, o.pollMin != 0, o.pollMax != 0:
		return usagef("--workers, --lease, --poll-min and --poll-max are the polling relay's; --mode cdc has one stream per slot")
	case len(o.holdBackQueues) > 0:
		return usagef("--hold-back-queue is the polling relay's for now; --mode cdc does not hold its stream back")
	}
	return nil
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
	// A mistyped --table or --slot must not say it dropped anything while
	// the real group's slot goes on keeping WAL.
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)
		OR EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, slot).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		return fmt.Errorf("no replication slot or publication %s for outbox %s: nothing dropped (is --table or --slot mistyped? \"warren outbox stats --table TABLE\" lists its slots)", slot, cfg.Table)
	}
	if err := cdc.DropSlot(ctx, pool, cfg.Table, slot, slot); err != nil {
		return err
	}
	fmt.Fprintf(c.env.stdout, "dropped replication slot and publication %s of outbox %s\n", slot, cfg.Table)
	return nil
}
