package dlqtool_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/dlqtool"
	"github.com/warrenmq/warren/internal/amqpx"
)

func ExampleFilter_Match() {
	f := dlqtool.Filter{TypePrefixes: []string{"workitem."}, Classes: []dlq.Class{dlq.ClassExhausted}, NewerThan: 24 * time.Hour}
	now := time.Now()
	for _, typ := range []string{"workitem.updated", "cycle.created"} {
		var m dlqtool.Message
		m.EventType = typ
		m.Metadata = dlq.Metadata{Class: dlq.ClassExhausted, LastFailure: now.Add(-time.Hour)}
		fmt.Println(typ, f.Match(&m, now))
	}
	// Output:
	// workitem.updated true
	// cycle.created false
}

func ExampleReadMessages() {
	export := `{"properties":{"message_id":"e1","type":"workitem.created","delivery_mode":2},"headers":{"x-warren-error-class":"permanent","x-warren-attempts":{"type":"int32","value":1}},"body":"{\"event_id\":\"e1\"}"}
{"properties":{"message_id":"e2"},"body_encoding":"base64","body":"/w=="}
`
	msgs, err := dlqtool.ReadMessages(strings.NewReader(export))
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range msgs {
		fmt.Printf("%s type=%q class=%q body=%q\n", m.EventID, m.EventType, m.Metadata.Class, m.Body)
	}
	fmt.Printf("attempts header: %T\n", msgs[0].Headers[dlq.HeaderAttempts])
	// Output:
	// e1 type="workitem.created" class="permanent" body="{\"event_id\":\"e1\"}"
	// e2 type="" class="" body="\xff"
	// attempts header: int32
}

// Replay after a fix: send the work-item events that failed permanently
// back to the webhook consumer's queue, at most 50 a second.
func ExampleQueue_Replay() {
	ctx := context.Background()
	conn, consumer, cleanup := exampleSetup(ctx)
	defer cleanup()

	q, err := dlqtool.Open(ctx, conn, consumer) // the DLQ is consumer + ".dlq"
	if err != nil {
		log.Fatal(err)
	}
	res, err := q.Replay(ctx, dlqtool.ReplayOptions{
		Filter: dlqtool.Filter{TypePrefixes: []string{"workitem."}, Classes: []dlq.Class{dlq.ClassPermanent}},
		Rate:   50,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("replayed %d of %d; %d went to the consumer's queue\n", res.Done, res.Total, res.Queues[consumer])
	left, _ := q.Count(ctx)
	fmt.Println("left in the DLQ:", left)
	// Output:
	// replayed 2 of 4; 2 went to the consumer's queue
	// left in the DLQ: 2
}

func ExampleQueue_Stats() {
	ctx := context.Background()
	q, cleanup := exampleQueue(ctx)
	defer cleanup()
	st, err := q.Stats(ctx, dlqtool.StatsOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("total", st.Total)
	for _, g := range st.ByClass {
		fmt.Println(g.Key, g.Count)
	}
	// Output:
	// total 4
	// permanent 3
	// exhausted 1
}

func ExampleQueue_Export() {
	ctx := context.Background()
	q, cleanup := exampleQueue(ctx)
	defer cleanup()
	var export strings.Builder
	n, err := q.Export(ctx, &export, dlqtool.ExportOptions{Filter: dlqtool.Filter{EventIDs: []string{"e3"}}})
	if err != nil {
		log.Fatal(err)
	}
	msgs, err := dlqtool.ReadMessages(strings.NewReader(export.String()))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(n, msgs[0].EventID, msgs[0].Metadata.Class, msgs[0].Metadata.Error)
	// Output:
	// 1 e3 exhausted timeout after 3 attempts
}

// ImportFile publishes an export file back, one line at a time, after
// checking every line: a damaged file publishes nothing.
func ExampleQueue_ImportFile() {
	ctx := context.Background()
	q, cleanup := exampleQueue(ctx)
	defer cleanup()
	var export strings.Builder
	if _, err := q.Export(ctx, &export, dlqtool.ExportOptions{}); err != nil {
		log.Fatal(err)
	}
	res, err := q.ImportFile(ctx, strings.NewReader(export.String()), dlqtool.ImportOptions{
		Checked: func(n int) error { fmt.Println("checked", n); return nil },
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("imported", res.Done)
	_, err = q.ImportFile(ctx, strings.NewReader(export.String()+"{not json\n"), dlqtool.ImportOptions{})
	fmt.Println(errors.Is(err, dlqtool.ErrBadExport))
	// Output:
	// checked 4
	// imported 4
	// true
}

// exampleSetup declares a consumer's queue and DLQ under a fresh name and
// fills the DLQ with four dead messages; cleanup deletes both.
func exampleSetup(ctx context.Context) (*amqp.Connection, string, func()) {
	url := os.Getenv("AMQP_URL")
	if url == "" {
		url = amqpx.DefaultURL
	}
	conn, err := amqpx.Dial(ctx, url, amqpx.DialOptions{Name: "dlq example"})
	if err != nil {
		log.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		log.Fatal(err)
	}
	var b [4]byte
	rand.Read(b[:])
	consumer := "wt_example_" + hex.EncodeToString(b[:])
	for _, q := range []string{consumer, dlq.QueueName(consumer)} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			log.Fatal(err)
		}
	}
	for i, d := range []struct {
		typ   string
		class dlq.Class
		err   string
	}{
		{"workitem.updated", dlq.ClassPermanent, "410 Gone"},
		{"cycle.created", dlq.ClassPermanent, "410 Gone"},
		{"workitem.created", dlq.ClassExhausted, "timeout after 3 attempts"},
		{"workitem.deleted", dlq.ClassPermanent, "410 Gone"},
	} {
		headers := dlq.Stamp(nil, dlq.Failure{Err: d.err, At: time.Now(), Queue: consumer, Consumer: consumer}, 3, d.class)
		msg := amqp.Publishing{MessageId: fmt.Sprintf("e%d", i+1), Type: d.typ, Headers: headers, Body: []byte("{}")}
		if err := ch.PublishWithContext(ctx, "", dlq.QueueName(consumer), false, false, msg); err != nil {
			log.Fatal(err)
		}
	}
	for {
		if q, err := ch.QueueDeclarePassive(dlq.QueueName(consumer), true, false, false, false, nil); err == nil && q.Messages == 4 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	return conn, consumer, func() {
		ch.QueueDelete(consumer, false, false, false)
		ch.QueueDelete(dlq.QueueName(consumer), false, false, false)
		conn.Close()
	}
}

// exampleQueue opens the dead-letter queue exampleSetup fills (as
// ExampleQueue_Replay shows); cleanup deletes it.
func exampleQueue(ctx context.Context) (*dlqtool.Queue, func()) {
	conn, consumer, cleanup := exampleSetup(ctx)
	q, err := dlqtool.Open(ctx, conn, consumer)
	if err != nil {
		cleanup()
		log.Fatal(err)
	}
	return q, cleanup
}

// An export whose messages name another consumer's queue as their origin
// goes into this consumer's DLQ only when the target is named.
func ExampleQueue_Import() {
	ctx := context.Background()
	q, cleanup := exampleQueue(ctx)
	defer cleanup()
	line, err := json.Marshal(dlqtool.Message{Publishing: amqp.Publishing{
		MessageId: "b1", Body: []byte("{}"),
		Headers: dlq.Stamp(nil, dlq.Failure{Err: "declined", At: time.Now(), Queue: "billing", Consumer: "billing"}, 1, dlq.ClassPermanent),
	}})
	if err != nil {
		log.Fatal(err)
	}
	msgs, err := dlqtool.ReadMessages(bytes.NewReader(line))
	if err != nil {
		log.Fatal(err)
	}
	_, err = q.Import(ctx, msgs, dlqtool.ImportOptions{})
	fmt.Println(errors.Is(err, dlqtool.ErrForeignOrigin))
	res, err := q.Import(ctx, msgs, dlqtool.ImportOptions{To: q.Name()})
	fmt.Println(res.Done, err)
	// Output:
	// true
	// 1 <nil>
}
