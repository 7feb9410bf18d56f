package relay_test

// A stand-in for Plane's own outbox poller, and the relay beside it.

// The relay on Plane's own outbox table (outbox.SchemaPlane), made with
// Plane's DDL and written the way Plane's triggers write it.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay/internal/relaytest"
)

// planePoller is Plane's outbox poller, its SQL as Plane runs it: claim
// unclaimed rows in id order with SKIP LOCKED, publish, then mark them
// processed without a fence. It publishes with confirms (Plane's does
// not) so that the test can require every row to arrive.
type planePoller struct {
	e         *planeEnv
	published int
	err       error
	quit      chan struct{}
	wg        sync.WaitGroup
}

const planePollerClaim = `
UPDATE {table} SET claimed_at = NOW()
WHERE id IN (
	SELECT id FROM {table}
	WHERE processed_at IS NULL AND claimed_at IS NULL
	ORDER BY id
	LIMIT 50
	FOR UPDATE SKIP LOCKED
)
RETURNING id, event_id::text, event_type::text`

func (e *planeEnv) startPlanePoller() *planePoller {
	p := &planePoller{e: e, quit: make(chan struct{})}
	ch, err := testenv.AMQPConn(e.t).Channel()
	if err != nil {
		e.t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		e.t.Fatal(err)
	}
	claim := strings.ReplaceAll(planePollerClaim, "{table}", fmt.Sprintf("%q", e.table))
	processed := fmt.Sprintf(`UPDATE %q SET processed_at = NOW() WHERE id = ANY($1)`, e.table)
	p.wg.Go(func() {
		defer ch.Close()
		ctx := context.Background()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-p.quit:
				return
			case <-tick.C:
			}
			rows, err := e.pool.Query(ctx, claim)
			if err != nil {
				p.err = err
				return
			}
			var ids []int64
			var confirms []*amqp.DeferredConfirmation
			for rows.Next() {
				var id int64
				var eventID, eventType string
				if err := rows.Scan(&id, &eventID, &eventType); err != nil {
					p.err = err
					return
				}
				dc, err := ch.PublishWithDeferredConfirm(e.exchange, eventType, true, false, amqp.Publishing{MessageId: eventID, Body: []byte(`{"event_id":"` + eventID + `"}`)})
				if err != nil {
					p.err = err
					return
				}
				ids = append(ids, id)
				confirms = append(confirms, dc)
			}
			if rows.Err() != nil {
				p.err = rows.Err()
				return
			}
			for _, dc := range confirms {
				if ok, err := dc.WaitContext(ctx); !ok || err != nil {
					p.err = fmt.Errorf("plane poller: publish not confirmed: %v", err)
					return
				}
			}
			if _, err := e.pool.Exec(ctx, processed, ids); err != nil {
				p.err = err
				return
			}
			p.published += len(ids)
		}
	})
	e.t.Cleanup(func() { p.stop() })
	return p
}

func (p *planePoller) stop() int {
	select {
	case <-p.quit:
	default:
		close(p.quit)
	}
	p.wg.Wait()
	if p.err != nil {
		p.e.t.Fatalf("plane poller: %v", p.err)
	}
	return p.published
}

// During a cut-over Plane's poller and warren's relay drain one table at
// once, while rows keep coming: every row is published at least once, all
// are processed, none is stranded. The relay is stopped gracefully half
// way, releasing its claims to Plane's poller, and started again.
func TestPlanePollerAndRelayTogether(t *testing.T) {
	t.Parallel()
	for _, migrated := range []bool{false, true} {
		t.Run(fmt.Sprintf("migrated=%v", migrated), func(t *testing.T) {
			t.Parallel()
			e := newPlaneEnv(t, true, migrated)
			got := consume(t, e.queue)
			poller := e.startPlanePoller()
			var obs relaytest.Recorder
			cfg := e.config(testenv.Name(t, "relay"))
			// A lease far longer than the wait below: a claim the stop did
			// not release would outlast it.
			cfg.BatchSize, cfg.Observer, cfg.Lease = 50, &obs, 5*time.Minute
			first := e.start(cfg)
			for range 20 {
				e.plane.Insert(50)
			}
			got.waitDistinct(t, 300, 60*time.Second)
			if err := first.stop(); err != nil {
				t.Fatal(err)
			}
			// Only Plane's poller runs now, and it finishes its own claims.
			testenv.WaitFor(t, 60*time.Second, "no claim left unprocessed after the graceful stop", func() bool {
				return e.count("claimed_at IS NOT NULL AND processed_at IS NULL") == 0
			})
			for range 20 {
				e.plane.Insert(50)
			}
			cfg.Name = testenv.Name(t, "relay2")
			e.start(cfg)
			for range 10 {
				e.plane.Insert(50)
			}
			ids := e.eventIDs()
			got.waitDistinct(t, len(ids), 2*time.Minute)
			got.requireAll(t, ids)
			testenv.WaitFor(t, 60*time.Second, "every row processed", func() bool { return e.count("processed_at IS NULL") == 0 })
			byPoller := poller.stop()
			byRelay := obs.Counts().Published
			if byPoller == 0 || byRelay == 0 {
				t.Errorf("Plane's poller published %d rows and the relay %d: they did not share the table", byPoller, byRelay)
			}
			t.Logf("%d rows: Plane's poller published %d, the relay %d", len(ids), byPoller, byRelay)
		})
	}
}

// A relay process on Plane's table is killed with SIGKILL four times
// while Plane's triggers keep writing rows: twice right after a claim
// (its rows stranded, as a crashed poller strands them), twice in the
// middle of publishing its batches. Every row is published (each event id
// reaches the queue), none is left stranded, and processed_at is set on
// all; the killed relays' claims are taken over after their lease.
func TestPlaneRelayKilledMidBatchWhileRowsArrive(t *testing.T) {
	t.Parallel()
	for _, migrated := range []bool{false, true} {
		t.Run(fmt.Sprintf("migrated=%v", migrated), func(t *testing.T) {
			t.Parallel()
			e := newPlaneEnv(t, false, migrated)
			got := consume(t, e.queue)
			const lease = 2 * time.Second // its claim must fit in Lease/2
			var (
				mu       sync.Mutex
				inserted []string
				insErr   error
				quit     = make(chan struct{})
				writer   sync.WaitGroup
			)
			writer.Go(func() {
				tick := time.NewTicker(10 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-quit:
						return
					case <-tick.C:
					}
					ids, err := e.plane.TryInsertData(context.Background(), 5, `{"name":"x"}`)
					mu.Lock()
					inserted, insErr = append(inserted, ids...), err
					mu.Unlock()
					if err != nil {
						return
					}
				}
			})
			stopWriter := func() {
				select {
				case <-quit:
				default:
					close(quit)
				}
				writer.Wait()
			}
			t.Cleanup(stopWriter)

			for round := range 4 {
				hang := round%2 == 0
				c := startChild(t, childSpec{
					DatabaseURL: testenv.DatabaseURL(t), AMQPURL: testenv.AMQPURL(t), Exchange: e.exchange, Table: e.table,
					Name: testenv.Name(t, fmt.Sprintf("child%d", round)), Lease: lease, Schema: outbox.SchemaPlane,
					KeepGoing: !hang, BatchSize: 50,
				})
				claims := 1
				if !hang {
					claims = 3 // killed while its third batch is being published
				}
				var n int
				for range claims {
					if _, err := fmt.Sscanf(c.next(), "claimed %d", &n); err != nil {
						t.Fatal(err)
					}
				}
				c.kill()
				if hang {
					if left := e.count("claimed_at IS NOT NULL AND processed_at IS NULL"); left < n {
						t.Fatalf("round %d: the killed relay claimed %d rows but only %d are left claimed", round, n, left)
					}
				}
			}
			stopWriter()
			if insErr != nil {
				t.Fatal(insErr)
			}
			stranded := e.count("claimed_at IS NOT NULL AND processed_at IS NULL")
			cfg := e.config(testenv.Name(t, "survivor"))
			cfg.Lease, cfg.PublishTimeout = lease, time.Second
			e.start(cfg)
			e.requireAllProcessed(got, inserted, 60*time.Second)
			if n := e.count("claimed_at IS NOT NULL AND processed_at IS NULL"); n != 0 {
				t.Fatalf("%d rows stranded", n)
			}
			t.Logf("%d rows written during 4 kills, %d left claimed by the killed relays, all published; %d duplicates",
				len(inserted), stranded, got.duplicates())
		})
	}
}

// A stop right after a claim on Plane's table publishes nothing and
// unclaims the rows (claimed_at NULL), so that the next relay, or Plane's
// poller, takes them at once; with warren's columns the attempt is given
// back.
func TestPlaneGracefulStopReleasesClaims(t *testing.T) {
	t.Parallel()
	for _, migrated := range []bool{false, true} {
		t.Run(fmt.Sprintf("migrated=%v", migrated), func(t *testing.T) {
			t.Parallel()
			e := newPlaneEnv(t, false, migrated)
			got := consume(t, e.queue)
			ids := e.plane.Insert(30)
			held := newHold(t)
			cfg := e.config(testenv.Name(t, "stopping"))
			cfg.Lease, cfg.Workers = time.Hour, 1
			run := e.start(cfg, held.install)
			held.wait()
			run.cancel()
			held.release()
			if err := run.stop(); err != nil {
				t.Fatal(err)
			}
			if n := e.count("claimed_at IS NULL AND processed_at IS NULL"); n != len(ids) {
				t.Fatalf("%d of %d rows were released", n, len(ids))
			}
			if migrated && e.count("warren_attempts <> 0") != 0 {
				t.Error("the release did not give the attempt back")
			}
			if got.distinct() != 0 {
				t.Fatal("a stopping relay published after its context ended")
			}
			e.start(e.config(testenv.Name(t, "next")))
			e.requireAllProcessed(got, ids, 60*time.Second)
		})
	}
}
