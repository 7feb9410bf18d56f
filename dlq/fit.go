package dlq

import (
	"fmt"
	"slices"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// HeaderDropped marks a copy warren re-published (a retry, a deferral, a
// dead letter, a replay) without the producer's header entries, because
// with warren's record they would have been more than the AMQP client
// reads back (see [Fit]); its value says what was dropped. Unlike
// [HeaderUnreadable] it does not make the message undecodable: the body
// and warren's record are whole, and the handler runs.
const HeaderDropped = "x-warren-dropped-headers"

// The limits of amqp091-go's (v1.16.0) frame reader (read.go's
// maxFieldDepth and maxContainerElements): a delivery past them fails the
// connection (warren's connections replace such a table with
// [HeaderUnreadable]), and the broker does not check them.
const (
	maxHeaderDepth = 32
	// MaxHeaderEntries is the most entries amqp091-go reads in one table
	// or array.
	MaxHeaderEntries = 8192
)

// The room [Fit] leaves below frame_max and [MaxHeaderEntries] for what is
// added to a copy after it is published: the broker's x-death and
// x-first/last-death-* on a retry tier's hop back (one death: every copy
// is published without them, see [StripDeaths]; the queue names are at
// most 255 bytes each, so well under 2 KiB and 8 entries), a replay's
// origin and count, and the properties other than the headers (seven short
// strings of at most 256 bytes, 1.8 KiB). The same 8 KiB the frame filter
// used to keep below frame_max on the way in.
const (
	fitBytesMargin   = 8 << 10
	fitEntriesMargin = 64
	// maxHistoryEntry bounds one history entry Fit keeps: the longest
	// warren writes is the error text, MaxErrorLen and truncate's mark,
	// with 4 bytes of length.
	maxHistoryEntry = MaxErrorLen + len("…(truncated)") + 4
)

// MaxRecordBytes bounds the encoded size of warren's record in a copy's
// headers (every header [Stamp] and [StripDeaths] write, at the longest
// each may be: the error text at MaxErrorLen, the contract and field at
// 256 bytes, names at AMQP's 255). A producer that leaves it free below
// what Fit keeps, as warren's do, never has its headers dropped by a
// retry or a dead letter.
const MaxRecordBytes = 6 << 10

// Fit returns headers as warren may re-publish them in a copy of a
// message: unchanged when their encoding leaves fitBytesMargin below
// frameMax (the connection's negotiated frame_max; 0 is no limit) and
// fitEntriesMargin below [MaxHeaderEntries]. Otherwise only warren's record
// (every header this package writes) is kept, with [HeaderDropped] saying
// which entries were dropped.
//
// A producer may send headers up to frame_max, and amqp091-go reads up to
// 8,192 entries; the consumer's copy adds its record, and the broker adds
// x-death on a retry tier's hop. Sent whole, such a copy comes back over
// what the client reads: the frame filter replaces its headers with
// [HeaderUnreadable], the record is lost and the consumer dead-letters a
// readable event as undecodable. Dropping the producer's entries at the
// write keeps the event and its record.
func Fit(headers amqp.Table, frameMax int) amqp.Table {
	size, err := FieldSize(headers, 0)
	if err == nil && len(headers)+fitEntriesMargin <= MaxHeaderEntries && (frameMax <= 0 || size+fitBytesMargin <= frameMax) {
		return headers
	}
	out := amqp.Table{}
	var dropped []string
	for name, v := range headers {
		// A history entry is kept only at the size warren writes it: a
		// producer can set these names too (Stamp keeps a first failure or
		// origin already there), and one kept at any size would leave the
		// copy over frame_max, a connection the broker closes at every
		// attempt, the message back at the head of its queue for ever.
		if n, err := FieldSize(v, 1); err == nil && n <= maxHistoryEntry && slices.Contains(historyHeaders, name) {
			out[name] = v
		} else {
			dropped = append(dropped, name)
		}
	}
	slices.Sort(dropped)
	out[HeaderDropped] = truncate(fmt.Sprintf(
		"warren dropped %d header entries when it re-published this message (%d entries, %d bytes encoded with its record: over what an AMQP client reads back within a frame_max of %d bytes or %d entries): %s",
		len(dropped), len(headers), size, frameMax, MaxHeaderEntries, strings.Join(dropped, ", ")), 1024)
	return out
}

// FieldSize is the encoded size of an AMQP field value (without its type
// octet) at nesting depth, or why amqp091-go cannot write it or read it
// back (nested more than 32 deep, more than [MaxHeaderEntries] in a
// container).
func FieldSize(v any, depth int) (int, error) {
	switch x := v.(type) {
	case nil:
		return 0, nil
	case bool, int8, uint8:
		return 1, nil
	case int16, uint16:
		return 2, nil
	case int32, uint32, float32:
		return 4, nil
	case int, int64, float64, time.Time:
		return 8, nil
	case amqp.Decimal:
		return 5, nil
	case string:
		return 4 + len(x), nil
	case []byte:
		return 4 + len(x), nil
	case []any:
		if err := checkContainer(len(x), depth); err != nil {
			return 0, err
		}
		size := 4
		for i, e := range x {
			n, err := FieldSize(e, depth+1)
			if err != nil {
				return 0, fmt.Errorf("[%d]: %w", i, err)
			}
			size += 1 + n
		}
		return size, nil
	case amqp.Table:
		if err := checkContainer(len(x), depth); err != nil {
			return 0, err
		}
		size := 4
		for k, e := range x {
			if len(k) > 255 {
				return 0, fmt.Errorf("name %.40q… is %d bytes, and AMQP holds at most 255", k, len(k))
			}
			n, err := FieldSize(e, depth+1)
			if err != nil {
				return 0, fmt.Errorf("%q: %w", k, err)
			}
			size += 1 + len(k) + 1 + n
		}
		return size, nil
	}
	return 0, fmt.Errorf("value of type %T, which AMQP has no field for", v)
}

func checkContainer(entries, depth int) error {
	switch {
	case depth > maxHeaderDepth:
		return fmt.Errorf("nested more than %d deep, which a consumer's client (amqp091-go) cannot read", maxHeaderDepth)
	case entries > MaxHeaderEntries:
		return fmt.Errorf("holds %d entries, more than a consumer's client (amqp091-go) reads (%d)", entries, MaxHeaderEntries)
	}
	return nil
}
