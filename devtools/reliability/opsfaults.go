package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/internal/amqpx"
)

// The faults operators and the broker cause without anything crashing: a
// memory alarm, dead letters moved back by hand, a stalled or absent
// store (the stalls and the outage are in inject).

const (
	// alarmWatermark is a relative vm_memory_high_watermark far below
	// what any node uses (0.0001 of the machine's memory is a few MB), so
	// setting it raises the memory alarm at once. defaultWatermark is
	// RabbitMQ's default, which "back" restores.
	alarmWatermark   = "0.0001"
	defaultWatermark = "0.4"
	// stopBound is what a stop may take beyond the process's grace:
	// closing connections and flushing logs.
	stopBound = 10 * time.Second
	// relayStopGrace is the relay's grace: the --publish-timeout the
	// harness gives it, the longest a publish in flight may wait.
	relayStopGrace = 2 * time.Second
)

// stopRecord is one SIGTERM of a process during a fault.
type stopRecord struct {
	proc    string
	took    time.Duration
	limit   time.Duration // grace + stopBound
	killed  bool          // still running at limit: SIGKILL
	exitErr string        // a non-zero exit after SIGTERM
	err     string        // the signal could not be sent
}

func (s stopRecord) problem() string {
	switch {
	case s.err != "":
		return "could not be stopped: " + s.err
	case s.killed:
		return fmt.Sprintf("still running %v after SIGTERM (its grace plus %v): needed SIGKILL", s.limit, stopBound)
	case s.exitErr != "":
		return fmt.Sprintf("exited after SIGTERM with %s (in %v)", s.exitErr, s.took.Round(time.Millisecond))
	}
	return ""
}

// stopGrace is how long a process may take to stop on SIGTERM.
func stopGrace(kind string) time.Duration {
	if kind == "relay" {
		return relayStopGrace + stopBound
	}
	return consumerGraceForReport + stopBound
}

// consumerGraceForReport is the consumers' ShutdownGrace: the examples
// keep the default.
const consumerGraceForReport = consumer.DefaultShutdownGrace

// memoryAlarm raises the private node's memory alarm, lets publishers run
// into it, stops every relay and consumer with SIGTERM while it holds (a
// deploy during an incident), and lifts it with the restarted processes
// connected. The broker stops reading a blocked connection's socket while
// heartbeats still flow, so only a stop path with deadlines finishes.
func (h *harness) memoryAlarm(ctx context.Context, f *faultRecord) (target, note string, err error) {
	// The receiver fails from 2s before the alarm until the stop: events
	// refused before the alarm come back from the 1s retry tier while it
	// holds (the broker's own dead-lettering is not blocked), are refused
	// again, and the webhook consumers' republish to the next tier runs
	// into the alarm, so their connections are blocked too, as the
	// relays' are.
	h.recv.failFor(2*time.Second + h.mode.alarmHold + 2*time.Second)
	select {
	case <-ctx.Done():
		return "", "", ctx.Err()
	case <-time.After(2 * time.Second):
	}
	where, ctl, err := h.alarmNode(ctx)
	if err != nil {
		return "", "", err
	}
	if err := ctl(ctx, "set_vm_memory_high_watermark", alarmWatermark); err != nil {
		return "", "", err
	}
	// Lifted whatever happens below: a node left in alarm blocks the rest
	// of the run.
	defer func() {
		if lerr := ctl(context.WithoutCancel(ctx), "set_vm_memory_high_watermark", defaultWatermark); lerr != nil {
			err = errors.Join(err, fmt.Errorf("lift the alarm: %w", lerr))
		}
	}()
	note, err = h.confirmBlocked(ctx)
	if err != nil {
		return "", "", err
	}
	if where != "" {
		note = strings.Replace(note, "alarm confirmed", "alarm raised "+where+" confirmed", 1)
	}
	select {
	case <-ctx.Done():
		return "", note, ctx.Err()
	case <-time.After(h.mode.alarmHold):
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, p := range h.procs {
		wg.Go(func() {
			limit := stopGrace(p.spec.kind)
			took, killed, exitErr, err := p.term(limit)
			rec := stopRecord{proc: p.spec.name, took: took, limit: limit, killed: killed, exitErr: exitErr}
			if err != nil {
				rec.err = err.Error()
			}
			mu.Lock()
			defer mu.Unlock()
			f.stops = append(f.stops, rec)
			if killed {
				if f.killed == nil {
					f.killed = map[string]time.Time{}
				}
				f.killed[p.spec.name] = time.Now()
			}
		})
	}
	wg.Wait()
	slices.SortFunc(f.stops, func(a, b stopRecord) int { return strings.Compare(a.proc, b.proc) })
	// The supervisor restarts them; each connects while the alarm holds
	// (connecting is allowed, publishing is not). One that publishes is
	// blocked at once and says so in its health, not ready until the alarm
	// lifts; the recovery measured after the lift shows they all resume.
	restarted := time.Now()
	for _, p := range h.procs {
		if err := p.waitUp(ctx, time.Minute); err != nil {
			return "", note, fmt.Errorf("after the stop: %w", err)
		}
	}
	f.readyAgain = time.Since(restarted)
	var slowest stopRecord
	for _, s := range f.stops {
		if s.took > slowest.took {
			slowest = s
		}
	}
	return fmt.Sprintf("held %v before the stop; slowest stop %s %v", h.mode.alarmHold, slowest.proc, slowest.took.Round(time.Millisecond)), note, nil
}

// confirmBlocked waits until the broker blocks a publishing connection, so
// the fault is known to be in force. Its connection is closed with a
// deadline: the broker no longer reads it.
func (h *harness) confirmBlocked(ctx context.Context) (string, error) {
	conn, err := amqpx.Dial(ctx, h.amqpURL(), amqpx.DialOptions{Name: "reliability alarm probe", Timeout: 5 * time.Second})
	if err != nil {
		return "", err
	}
	defer amqpx.CloseConnection(conn, time.Second)
	blocked := conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	ch, err := conn.Channel()
	if err != nil {
		return "", err
	}
	// An unroutable message to the default exchange: harmless, and what
	// makes the broker block this connection. It blocks in the library
	// until the alarm ends or the connection is closed.
	h.bg.Go(func() {
		ch.Publish("", "reliability.alarm-probe.nowhere", false, false, amqp.Publishing{Body: []byte("x")})
	})
	select {
	case b := <-blocked:
		if !b.Active {
			return "", fmt.Errorf("connection unblocked before it was blocked")
		}
		// The note names no time: the report counts identical notes.
		return fmt.Sprintf("alarm confirmed: a publishing connection was blocked (%s)", b.Reason), nil
	case <-time.After(15 * time.Second):
		return "", fmt.Errorf("set_vm_memory_high_watermark %s did not block a publishing connection within 15s", alarmWatermark)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// movedPrefix marks the ids of the dead letters the harness moves back.
const movedPrefix = "moved"

// moveDeadLetters puts dead letters into the webhook's DLQ as RabbitMQ
// writes them when a message expires in the webhook queue (x-death names
// that queue, reason expired), arranges for the receiver to refuse each
// once, and moves them back to the webhook queue the way operators do:
// with `warren dlq export` then `warren dlq import --to webhook` (and a
// purge of the exported copies), or as a shovel or the management UI's
// "move messages" does, consuming from the DLQ and republishing with every
// header kept. Each must then be delivered: the refusal sends it through a
// retry tier, whose expiry dead-letters it back to the webhook queue, and
// RabbitMQ drops a message as a cycle there if its x-death still names
// that queue.
func (h *harness) moveDeadLetters(ctx context.Context, shovel bool) (target string, ids []string, err error) {
	h.movedBatches++
	how := "import"
	if shovel {
		how = "shovel"
	}
	for n := range 3 {
		ids = append(ids, fmt.Sprintf("%s-%s-%s-%d-%d", h.runID, movedPrefix, how, h.movedBatches, n))
	}
	conn, err := amqpx.Dial(ctx, h.amqpURL(), amqpx.DialOptions{Name: "reliability dead-letter mover", Timeout: 5 * time.Second})
	if err != nil {
		return "", nil, err
	}
	defer amqpx.CloseConnection(conn, 5*time.Second)
	pub, err := amqpx.NewPublisher(ctx, conn, len(ids))
	if err != nil {
		return "", nil, err
	}
	defer pub.Close()
	dlqName := dlq.QueueName(webhookQueue)
	died := time.Now().Add(-time.Minute)
	for _, id := range ids {
		msg := jsonMessage(id, mustJSON(validEvent(id, "workitem.updated")))
		msg.Headers = amqp.Table{
			"x-death": []any{amqp.Table{
				"count": int64(1), "reason": "expired", "queue": webhookQueue, "time": died,
				"exchange": exchange, "routing-keys": []any{""},
			}},
			"x-first-death-queue": webhookQueue, "x-first-death-reason": "expired", "x-first-death-exchange": exchange,
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := pub.Publish(pctx, "", dlqName, msg)
		cancel()
		if err != nil {
			return "", nil, fmt.Errorf("put dead letter %s into %s: %w", id, dlqName, err)
		}
	}
	// Recorded before the move: from now on, each is expected once at the
	// receiver, whatever the move does.
	h.moved = append(h.moved, ids...)
	h.recv.failOnce(ids...)
	if shovel {
		err = shovelBack(ctx, conn, pub, dlqName, webhookQueue, ids)
	} else {
		err = h.importBack(ctx, ids)
	}
	if err != nil {
		return "", ids, err
	}
	return fmt.Sprintf("%d dead letters, x-death naming %s", len(ids), webhookQueue), ids, nil
}

// importBack runs the CLI as an operator would: export the dead letters,
// import the file into their origin queue, then purge the DLQ's copies.
func (h *harness) importBack(ctx context.Context, ids []string) error {
	file := filepath.Join(h.dir, fmt.Sprintf("dead-letters-%d.jsonl", h.movedBatches))
	idList := strings.Join(ids, ",")
	for _, args := range [][]string{
		{"dlq", "export", "--queue", webhookQueue, "--id", idList, "--output", file},
		{"dlq", "import", "--queue", webhookQueue, "--to", webhookQueue, "--yes", file},
		{"dlq", "purge", "--queue", webhookQueue, "--id", idList, "--yes"},
	} {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		cmd := exec.CommandContext(cctx, filepath.Join(h.dir, "bin", "warren"), append(args, "--amqp-url", h.amqpURL())...)
		cmd.Env = cleanEnv()
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			return fmt.Errorf("warren %s: %w: %s", strings.Join(args[:2], " "), err, strings.TrimSpace(string(out)))
		}
	}
	if data, err := os.ReadFile(file); err != nil || strings.Count(string(data), "\n") != len(ids) {
		return fmt.Errorf("warren dlq export wrote %d lines, want %d (%v)", strings.Count(string(data), "\n"), len(ids), err)
	}
	return nil
}

// shovelBack moves the dead letters with these ids from dlqName to queue
// as a shovel does: consume, republish with the properties and headers
// as they are (plus the x-shovelled record a shovel adds), ack after the
// confirm. Other dead letters are left in place (unacked, then requeued).
func shovelBack(ctx context.Context, conn *amqp.Connection, pub *amqpx.Publisher, dlqName, queue string, ids []string) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close() // requeues what was not moved
	deliveries, err := ch.Consume(dlqName, "reliability-shovel", false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume %s: %w", dlqName, err)
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	timeout := time.After(30 * time.Second)
	for len(want) > 0 {
		var d amqp.Delivery
		var ok bool
		select {
		case d, ok = <-deliveries:
			if !ok {
				return fmt.Errorf("consumer on %s closed with %d dead letters not moved", dlqName, len(want))
			}
		case <-timeout:
			return fmt.Errorf("%d dead letters not found in %s within 30s", len(want), dlqName)
		case <-ctx.Done():
			return ctx.Err()
		}
		if !want[d.MessageId] {
			continue
		}
		msg := amqp.Publishing{
			Headers: d.Headers, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
			DeliveryMode: d.DeliveryMode, Priority: d.Priority, CorrelationId: d.CorrelationId, ReplyTo: d.ReplyTo,
			Expiration: d.Expiration, MessageId: d.MessageId, Timestamp: d.Timestamp, Type: d.Type,
			UserId: d.UserId, AppId: d.AppId, Body: d.Body,
		}
		if msg.Headers == nil {
			msg.Headers = amqp.Table{}
		}
		msg.Headers["x-shovelled"] = []any{amqp.Table{"shovel-name": "reliability", "src-queue": dlqName, "dest-queue": queue}}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := pub.Publish(pctx, "", queue, msg)
		cancel()
		if err != nil {
			return fmt.Errorf("shovel %s to %s: %w", d.MessageId, queue, err)
		}
		// Acked only after the broker confirmed the copy in queue.
		if err := d.Ack(false); err != nil {
			return fmt.Errorf("ack %s in %s: %w", d.MessageId, dlqName, err)
		}
		delete(want, d.MessageId)
	}
	return nil
}
