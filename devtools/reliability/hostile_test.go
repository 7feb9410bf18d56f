package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/dlq"
)

// TestHostileExpectationsMatchTheDecoder checks each hostile case's
// expected fate against warren.DecodeEvent, so that a run's verdict rests
// on expectations that hold for the code under test: a body expected to be
// undecodable must fail to decode with the expected text, and a body
// expected to be delivered must decode.
func TestHostileExpectationsMatchTheDecoder(t *testing.T) {
	// Rejected by the consumer before decoding, by property or size.
	beforeDecode := map[string]bool{"wrong-content-type": true, "gzip-encoding": true, "huge-body": true}
	seen := map[string]bool{}
	for _, hc := range hostileCases() {
		if seen[hc.name] {
			t.Fatalf("case %s listed twice", hc.name)
		}
		seen[hc.name] = true
		id := hostileID("test", 1, hc.name, 0, hc.copies)
		msg := hc.build(id)
		if msg.MessageId != id {
			t.Errorf("%s: message_id %q, want %q (the DLQ check finds messages by it)", hc.name, msg.MessageId, id)
		}
		_, err := warren.DecodeEvent(msg.Body)
		switch {
		case hc.webhook.class == dlq.ClassUndecodable && !beforeDecode[hc.name]:
			if !errors.Is(err, warren.ErrInvalidEvent) {
				t.Errorf("%s: DecodeEvent error %v, want one wrapping ErrInvalidEvent", hc.name, err)
			} else if !strings.Contains(err.Error(), hc.webhook.errSubstr) {
				t.Errorf("%s: DecodeEvent error %q does not contain %q", hc.name, err, hc.webhook.errSubstr)
			}
		case err != nil:
			t.Errorf("%s: body must decode (the consumer rejects it for another reason, or handles it), got %v", hc.name, err)
		}
		if hc.name == "huge-body" && len(msg.Body) <= hostileBodyLimit {
			t.Errorf("huge-body is %d bytes, not over the %d-byte limit", len(msg.Body), hostileBodyLimit)
		}
		if hc.webhook != hc.automation && hc.webhook.class == dlq.ClassUndecodable {
			t.Errorf("%s: an undecodable message is undecodable for every consumer", hc.name)
		}
	}
}

func TestHostileIDsAreUniquePerCopy(t *testing.T) {
	ids := map[string]bool{}
	for _, hc := range hostileCases() {
		for n := range max(hc.copies, 1) {
			id := hostileID("run", 2, hc.name, n, hc.copies)
			if ids[id] {
				t.Fatalf("id %s repeats", id)
			}
			ids[id] = true
		}
	}
}
