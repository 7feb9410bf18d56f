package amqpx

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/warrenmq/warren/dlq"
)

// Wire encodings, written out by hand so that the tests do not trust the
// code they test.

func u32(n int) []byte { return binary.BigEndian.AppendUint32(nil, uint32(n)) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func shortstr(s string) []byte { return cat([]byte{byte(len(s))}, []byte(s)) }

func longstrOf(b []byte) []byte { return cat(u32(len(b)), b) }

// entry is a table entry: a name, a type octet, a value.
func entry(name string, typ byte, value []byte) []byte {
	return cat(shortstr(name), []byte{typ}, value)
}

func str(name, v string) []byte { return entry(name, 'S', longstrOf([]byte(v))) }

// tableOf is a field table, length included.
func tableOf(entries ...[]byte) []byte { return longstrOf(cat(entries...)) }

// nest is a table entry holding levels tables, each in the one before.
func nest(levels int) []byte {
	inner := tableOf(str("leaf", "x"))
	for range levels - 1 {
		inner = tableOf(entry("n", 'F', inner))
	}
	return entry("n", 'F', inner)
}

// many is n entries "k0", "k1", … of type I.
func many(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = entry("k"+strings.Repeat("x", i%3)+string(rune('a'+i%26)), 'I', u32(i))
	}
	return out
}

// frameOf is a frame: type, channel, size, payload, frame end.
func frameOf(typ byte, channel uint16, payload []byte) []byte {
	return cat([]byte{typ}, binary.BigEndian.AppendUint16(nil, channel), u32(len(payload)), payload, []byte{frameEnd})
}

const (
	deliveryMode, messageID, timestamp = 0x1000, 0x0080, 0x0040
)

// contentHeader is a basic class content-header frame on channel 1 for a
// 5-byte body with a content type, the headers given, delivery mode 2, a
// message id and a timestamp.
func contentHeader(headers []byte) []byte {
	flags := uint16(flagContentType | flagHeaders | deliveryMode | messageID | timestamp)
	payload := cat([]byte{0, 60, 0, 0}, []byte{0, 0, 0, 0, 0, 0, 0, 5}, binary.BigEndian.AppendUint16(nil, flags),
		shortstr("application/json"), headers, []byte{2}, shortstr("ev-1"), []byte{0, 0, 0, 0, 0x65, 0x00, 0x00, 0x00})
	return frameOf(frameHeader, 1, payload)
}

// marked is headers with the entries kept and the marker saying why.
func marked(why string, kept ...[]byte) []byte {
	value := "warren cannot handle these headers (" + why + "); it removed the entries at fault"
	return tableOf(append(kept, str(dlq.HeaderUnreadable, value))...)
}

// filterHeader leaves alone what amqp091-go reads, and rewrites what it
// refuses so that it reads it: the entries it refuses go, the others and
// every other property stay, and the marker says why.
func TestFilterHeaderReplacesWhatTheClientRefuses(t *testing.T) {
	t.Parallel()
	app := str("x-app", "kept")
	array := func(n int) []byte {
		elems := make([]byte, 0, n*2)
		for range n {
			elems = append(elems, 'b', 1)
		}
		return entry("arr", 'A', longstrOf(elems))
	}
	for _, tc := range []struct {
		name    string
		headers []byte
		want    []byte // nil: unchanged
	}{
		{"readable", tableOf(app, str("traceparent", "00-1"), entry("t", 'T', make([]byte, 8)), entry("d", 'D', make([]byte, 5)), entry("v", 'V', nil)), nil},
		{"nested 32 deep", tableOf(app, nest(32)), nil},
		{"nested 33 deep", tableOf(app, nest(33), str("after", "kept")), marked("nested deeper than 32 levels", app, str("after", "kept"))},
		{"nested in an array", tableOf(entry("a", 'A', longstrOf(cat([]byte{'F'}, tableOf(nest(32))))), app), marked("nested deeper than 32 levels", app)},
		{"8192 entries", tableOf(many(8192)...), nil},
		{"8193 entries", tableOf(many(8193)...), marked("a table with more than 8192 entries")},
		{"8193 entries nested", tableOf(app, entry("t", 'F', tableOf(many(8193)...))), marked("a table with more than 8192 entries", app)},
		{"array of 8192", tableOf(array(8192), app), nil},
		{"array of 8193", tableOf(array(8193), app), marked("an array with more than 8192 elements", app)},
		{"unknown type", tableOf(app, entry("z", 'Z', u32(0))), marked(`a field of unknown type 'Z'`)},
		{"field past its table", tableOf(app, entry("s", 'S', u32(100))), marked("a field runs past the end of its table or array")},
		// No room is kept below frame_max: the consumer's copies make
		// their own (dlq.Fit).
		{"up to frame_max", tableOf(str("big", strings.Repeat("x", frameMax-len(contentHeader(tableOf(str("big", ""))))))), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := filterHeader(contentHeader(tc.headers), frameMax)
			if want := tc.want; want == nil && got != nil || want != nil && !bytes.Equal(got, contentHeader(want)) {
				t.Errorf("filterHeader:\n got %q\nwant %q", got, contentHeader(want))
			}
			if got != nil && filterHeader(got, frameMax) != nil {
				t.Error("the rewritten frame is not readable")
			}
		})
	}
}

// When the property list is broken outside the headers (the broker never
// sends one), or keeping the other properties would make the frame too
// large, only the marker is left.
func TestFilterHeaderKeepsOnlyTheMarkerWhenItMust(t *testing.T) {
	t.Parallel()
	only := func(why string) []byte {
		payload := cat([]byte{0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5}, binary.BigEndian.AppendUint16(nil, flagHeaders), marked(why))
		return frameOf(frameHeader, 1, payload)
	}
	bad := contentHeader(tableOf(entry("z", 'Z', nil))) // smaller than the marker
	want := only(`a field of unknown type 'Z'`)
	// A frame_max that holds the marker alone.
	if got := filterHeader(bad, len(want)+10); !bytes.Equal(got, want) {
		t.Errorf("too large: got %q, want %q", got, want)
	}
	truncated := bad[:len(bad)-6] // the timestamp cut short
	truncated = frameOf(frameHeader, 1, truncated[frameHdrSize:])
	if got, want := filterHeader(truncated, frameMax), only("the property list is malformed"); !bytes.Equal(got, want) {
		t.Errorf("malformed: got %q, want %q", got, want)
	}
}

// chunks is a connection that returns its data a few bytes at a time, in
// reads of the sizes given, in turn, as a socket may.
type chunks struct {
	net.Conn
	data  []byte
	sizes []int
	i     int
}

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.sizes[c.i%len(c.sizes)])], c.data)
	c.i++
	c.data = c.data[n:]
	return n, nil
}

// The filter hands on every frame as it came, however the reads split
// them, except the content headers it rewrites; it reads frame_max from
// connection.tune and rewrites a content header larger than it, of any
// size (three times the frame_max warren asks for here: the broker's
// x-death grows a header near frame_max past twice it), to the marker
// alone, holding no more than its read buffer.
func TestFrameFilterStream(t *testing.T) {
	t.Parallel()
	tune := func(frameMax int) []byte {
		return frameOf(frameMethod, 0, cat([]byte{0, 10, 0, 30, 0, 0}, u32(frameMax), []byte{0, 10}))
	}
	deliver := frameOf(frameMethod, 1, cat([]byte{0, 60, 0, 60}, shortstr("ctag"), make([]byte, 10), shortstr("ex"), shortstr("rk")))
	good := contentHeader(tableOf(str("a", "b")))
	bad := contentHeader(tableOf(str("a", "b"), nest(40)))
	large := contentHeader(tableOf(str("pad", strings.Repeat("p", 9000)))) // over the tuned 8192
	huge := contentHeader(tableOf(str("pad", strings.Repeat("p", 3*frameMax))))
	tooLarge := func(frame []byte) []byte {
		return contentHeader(marked(fmt.Sprintf("a content header of %d bytes, over the frame_max of 8192 bytes", len(frame))))
	}
	// Large, but not for its headers: no headers flag.
	malformed := frameOf(frameHeader, 1, cat([]byte{0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0}, make([]byte, 10000)))
	malformedFixed := frameOf(frameHeader, 1, cat([]byte{0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5}, binary.BigEndian.AppendUint16(nil, flagHeaders), marked("the property list is malformed")))
	body := frameOf(3, 1, bytes.Repeat([]byte("b"), 70000))
	heartbeat := frameOf(8, 0, nil)
	in := cat(tune(8192), deliver, good, body, deliver, bad, heartbeat, large, huge, body, deliver, bad, malformed, body)
	fixed := filterHeader(bad, 8192)
	want := cat(tune(8192), deliver, good, body, deliver, fixed, heartbeat, tooLarge(large), tooLarge(huge), body, deliver, fixed, malformedFixed, body)
	for _, sizes := range [][]int{{1}, {3, 7, 1}, {4096}, {1 << 20}, {5, 40000, 2}} {
		for _, readSize := range []int{1, 7, 4096, 1 << 17} {
			f := newFrameFilter(&chunks{data: in, sizes: sizes})
			var got []byte
			p := make([]byte, readSize)
			for {
				n, err := f.Read(p)
				got = append(got, p[:n]...)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("socket reads %v, client reads of %d: the stream differs (%d bytes, want %d)", sizes, readSize, len(got), len(want))
			}
			if len(f.buf) > readBufSize {
				t.Errorf("buffered %d bytes", len(f.buf))
			}
		}
	}
}

// Whatever the content header, the filter neither panics nor hands on a
// rewritten frame the client would refuse.
func FuzzFilterHeader(f *testing.F) {
	f.Add(contentHeader(tableOf(str("a", "b")))[frameHdrSize:])
	f.Add(contentHeader(tableOf(nest(34)))[frameHdrSize:])
	f.Add(contentHeader(tableOf(entry("z", 'Z', nil)))[frameHdrSize:])
	f.Fuzz(func(t *testing.T, payload []byte) {
		frame := frameOf(frameHeader, 1, payload)
		out := filterHeader(frame, frameMax)
		if out == nil {
			return
		}
		if len(out) > frameMax || int(binary.BigEndian.Uint32(out[3:7])) != len(out)-frameHdrSize-1 || out[len(out)-1] != frameEnd {
			t.Fatalf("bad frame %q", out)
		}
		if filterHeader(out, frameMax) != nil {
			t.Fatalf("rewritten %q is still refused", out)
		}
	})
}

// BenchmarkFrameFilter measures what the filter adds to reading a
// delivery: 1000 deliveries as the broker sends them (basic.deliver, a
// content header with the headers warren's relay sets, a 600-byte body)
// read as amqp091-go reads them (a 4 KiB bufio.Reader, frame by frame),
// through the filter and straight from the socket. ns/op is per delivery.
//
//	go test -run '^$' -bench FrameFilter -benchmem ./internal/amqpx/
func BenchmarkFrameFilter(b *testing.B) {
	deliver := frameOf(frameMethod, 1, cat([]byte{0, 60, 0, 60}, shortstr("ctag-1"), make([]byte, 9), shortstr("warren.events"), shortstr("workitem.updated")))
	header := contentHeader(tableOf(str("x-warren-initiator-type", "USER"), str("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")))
	body := frameOf(3, 1, bytes.Repeat([]byte("b"), 600))
	const deliveries = 1000
	stream := bytes.Repeat(cat(deliver, header, body), deliveries)
	for _, side := range []struct {
		name string
		wrap func(net.Conn) net.Conn
	}{
		{"direct", func(c net.Conn) net.Conn { return c }},
		{"filtered", func(c net.Conn) net.Conn { return newFrameFilter(c) }},
	} {
		b.Run(side.name, func(b *testing.B) {
			b.SetBytes(int64(len(stream) / deliveries))
			var hdr [frameHdrSize]byte
			payload := make([]byte, 4096)
			for i := 0; i < b.N; i += deliveries {
				r := bufio.NewReader(side.wrap(&chunks{data: stream, sizes: []int{64 << 10}}))
				for {
					if _, err := io.ReadFull(r, hdr[:]); err == io.EOF {
						break
					} else if err != nil {
						b.Fatal(err)
					}
					if _, err := io.ReadFull(r, payload[:binary.BigEndian.Uint32(hdr[3:])+1]); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
