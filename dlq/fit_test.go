package dlq

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Fit keeps headers that leave room below frame_max and the client's entry
// limit, and otherwise keeps warren's record alone, saying what it dropped.
func TestFitDropsTheProducersEntriesOnlyWhenTheyWouldNotComeBack(t *testing.T) {
	const frameMax = 128 << 10
	record := Stamp(nil, Failure{Err: "boom", At: time.Now(), Queue: "q", Consumer: "c"}, 1, ClassPermanent)
	with := func(extra amqp.Table) amqp.Table {
		h := amqp.Table{}
		for k, v := range record {
			h[k] = v
		}
		for k, v := range extra {
			h[k] = v
		}
		return h
	}
	size := func(h amqp.Table) int { n, _ := FieldSize(h, 0); return n }
	recordSize := size(record)
	entries := func(n int) amqp.Table {
		h := amqp.Table{}
		for i := range n {
			h[fmt.Sprintf("k%05d", i)] = int32(i)
		}
		return h
	}
	// "big" is a long string: 1 + 3 + 1 + 4 bytes of name and type around it.
	pad := func(room int) amqp.Table {
		return amqp.Table{"big": strings.Repeat("x", frameMax-fitBytesMargin-recordSize-9-room)}
	}
	for _, tc := range []struct {
		name    string
		headers amqp.Table
		fits    bool
	}{
		{"small", with(amqp.Table{"traceparent": "00-1"}), true},
		{"at the room", with(pad(0)), true},
		{"a byte over", with(pad(-1)), false},
		{"entries at the limit", with(entries(MaxHeaderEntries - fitEntriesMargin - len(record))), true},
		{"an entry over", with(entries(MaxHeaderEntries - fitEntriesMargin - len(record) + 1)), false},
		{"a value the client cannot write", with(amqp.Table{"ch": make(chan int)}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Fit(tc.headers, frameMax)
			if tc.fits {
				if len(got) != len(tc.headers) {
					t.Fatalf("changed: %d entries of %d", len(got), len(tc.headers))
				}
				return
			}
			if len(got) != len(record)+1 {
				t.Errorf("kept %d entries, want the record's %d and the marker", len(got), len(record))
			}
			for k, v := range record {
				if got[k] != v {
					t.Errorf("record entry %s: %v, want %v", k, got[k], v)
				}
			}
			why, _ := got[HeaderDropped].(string)
			if !strings.HasPrefix(why, fmt.Sprintf("warren dropped %d header entries", len(tc.headers)-len(record))) || len(why) > 1100 {
				t.Errorf("marker %.200q", why)
			}
			if n := size(got); n > 8<<10 {
				t.Errorf("the fitted headers take %d bytes", n)
			}
			if _, unreadable := got[HeaderUnreadable]; unreadable {
				t.Error("marked unreadable")
			}
		})
	}
	if h := with(pad(-1)); len(Fit(h, 0)) != len(h) {
		t.Error("with no frame_max (0) the size was bounded")
	}
}

// A producer can set warren's history headers itself, and a consumer keeps
// some of them (a first failure, an origin, a first death). Fit must not
// keep one at a size warren never writes: the copy would be over
// frame_max, the broker would close the connection at every attempt, and
// the message would come back to the head of its queue for ever.
func TestFitDropsAForgedHistoryHeaderOfAnySize(t *testing.T) {
	const frameMax = 128 << 10
	forged := amqp.Table{HeaderOriginRoutingKey: strings.Repeat("k", 127<<10)}
	h := Stamp(forged, Failure{Err: "boom", At: time.Now(), Queue: "q", Consumer: "c"}, 1, ClassPermanent)
	out := Fit(h, frameMax)
	size, err := FieldSize(out, 0)
	if err != nil || size+fitBytesMargin > frameMax {
		t.Fatalf("Fit left %d bytes (%v), over frame_max %d less its %d-byte margin", size, err, frameMax, fitBytesMargin)
	}
	if _, kept := out[HeaderOriginRoutingKey]; kept {
		t.Error("the forged 127 KiB origin routing key was kept")
	}
	if out[HeaderErrorClass] != string(ClassPermanent) || out[HeaderError] != "boom" {
		t.Errorf("warren's own record was not kept: %v", out)
	}
	if !strings.Contains(out[HeaderDropped].(string), HeaderOriginRoutingKey) {
		t.Errorf("%s does not name the dropped entry: %v", HeaderDropped, out[HeaderDropped])
	}
}

// The record a copy carries is within MaxRecordBytes at the longest each
// of its headers may be, whatever the failure and the names say: what a
// producer leaves free for it (amqpx.MaxContentHeader) is enough, so a
// retry never drops the producer's headers (a binary CloudEvent's whole
// event) to make room.
func TestTheLongestRecordFitsMaxRecordBytes(t *testing.T) {
	long := strings.Repeat("ü", 100_000)
	f := Failure{Err: long, Contract: long, Field: long, At: time.Date(2026, 12, 7, 8, 0, 0, 123456789, time.UTC),
		Queue: long, Exchange: long, RoutingKey: long, Consumer: long, Host: long}
	h := Stamp(amqp.Table{}, f, math.MaxInt32, ClassPermanent)
	h[HeaderFirstDeathReason], h[HeaderFirstDeathQueue] = "delivery_limit", strings.Repeat("q", 255)
	h[HeaderFirstDeathTime] = f.At.Format(time.RFC3339Nano)
	h[HeaderReplays] = int32(math.MaxInt32)
	for _, name := range historyHeaders {
		if _, ok := h[name]; !ok {
			t.Errorf("the record lacks %s: this test must set every history header", name)
		}
	}
	size, err := FieldSize(h, 0)
	if err != nil {
		t.Fatal(err)
	}
	if size > MaxRecordBytes {
		t.Errorf("the longest record takes %d bytes, more than MaxRecordBytes (%d)", size, MaxRecordBytes)
	}
	t.Logf("the longest record: %d of %d bytes", size, MaxRecordBytes)
}
