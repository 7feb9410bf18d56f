package amqpx

import (
	"cmp"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"net"

	"github.com/warrenmq/warren/dlq"
)

// What amqp091-go v1.16.0 refuses in a field table (read.go: maxFieldDepth,
// maxContainerElements). RabbitMQ has no such limits.
const (
	maxFieldDepth        = 32
	maxContainerElements = 8192
)

// frameMax is the frame_max warren asks for (amqp091-go's default, and
// RabbitMQ's): the negotiated value is never larger, so no frame the client
// accepts is larger.
const frameMax = 128 << 10

// maxTail bounds the properties after the headers table (delivery mode,
// priority, timestamp and eight short strings: 2,058 bytes at most) and
// the end octet, which the filter reads of a content header larger than
// the client accepts.
const maxTail = 4 << 10

const (
	frameMethod  = 1
	frameHeader  = 2
	frameHdrSize = 7    // type, channel, size
	frameEnd     = 0xCE // the octet after every frame's payload
	// A content header's payload starts with class, weight, body size and
	// the property flags.
	propsStart = 14
	// frameFilter's read buffer: a socket read fills it with as many frames
	// as are waiting, as the client's own 4 KiB bufio did.
	readBufSize = 32 << 10
)

// The property flags amqp091-go reads, in the order the properties follow
// them (types.go).
const (
	flagContentType     = 0x8000
	flagContentEncoding = 0x4000
	flagHeaders         = 0x2000
)

// tailProps are the properties after the headers, in order, with their
// wire size: 0 for a short string.
var tailProps = [...]struct {
	flag uint16
	size int
}{
	{0x1000, 1}, // delivery mode
	{0x0800, 1}, // priority
	{0x0400, 0}, // correlation id
	{0x0200, 0}, // reply to
	{0x0100, 0}, // expiration
	{0x0080, 0}, // message id
	{0x0040, 8}, // timestamp
	{0x0020, 0}, // type
	{0x0010, 0}, // user id
	{0x0008, 0}, // app id
	{0x0004, 0}, // reserved
}

// frameFilter is the connection amqp091-go reads: every frame passes
// through it unchanged except a content-header frame the client would
// refuse: one larger than frame_max, or whose property list it cannot
// read. amqp091-go fails the connection at it; the broker requeues the
// delivery at the head of its queue and delivers it again to the next
// connection, for ever, and nothing behind it is ever read. frameFilter
// rewrites that frame instead: the header entries at fault (all of them in
// a frame too large) become one [dlq.HeaderUnreadable] entry saying why,
// every other property and the body are kept, so the consumer can
// dead-letter the message (confirm, then ack) and the dead-letter tools
// can read it.
//
// Beyond its 32 KiB read buffer it holds at most one content header of
// frame_max bytes (it reads the negotiated value from connection.tune): a
// larger one it reads as it streams in, keeping only the properties around
// the headers table (see oversized). Other frames pass through as they
// arrive, a large body straight into the client's buffer.
type frameFilter struct {
	net.Conn
	buf   []byte // buf[r:w]: read from Conn, not yet handed on
	r, w  int
	pass  int    // bytes of the current frame to hand on as they are
	out   []byte // a rewritten frame, not yet all handed on
	limit int    // the largest frame the client accepts
}

func newFrameFilter(conn net.Conn) *frameFilter {
	return &frameFilter{Conn: conn, buf: make([]byte, readBufSize), limit: frameMax}
}

// ConnectionState is the TLS state of the connection under the filter
// (zero for amqp), which amqp091-go's Connection.ConnectionState reports.
func (f *frameFilter) ConnectionState() tls.ConnectionState {
	if c, ok := f.Conn.(interface{ ConnectionState() tls.ConnectionState }); ok {
		return c.ConnectionState()
	}
	return tls.ConnectionState{}
}

// Read hands on the frames read from the connection, rewritten where the
// client could not read them.
func (f *frameFilter) Read(p []byte) (int, error) {
	for {
		switch {
		case len(f.out) > 0:
			n := copy(p, f.out)
			f.out = f.out[n:]
			return n, nil
		case f.pass > 0 && f.w > f.r:
			n := copy(p[:min(len(p), f.pass)], f.buf[f.r:f.w])
			f.r += n
			f.pass -= n
			return n, nil
		case f.pass >= len(f.buf):
			// Nothing buffered, and a long rest of a frame (a body)
			// to come: it goes straight into the caller's buffer.
			n, err := f.Conn.Read(p[:min(len(p), f.pass)])
			f.pass -= n
			return n, err
		case f.pass > 0:
			if err := f.fill(1); err != nil {
				return 0, err
			}
		default:
			if err := f.next(); err != nil {
				return 0, err
			}
		}
	}
}

// next reads the header of the next frame and decides how it is handed on.
func (f *frameFilter) next() error {
	if err := f.fill(frameHdrSize); err != nil {
		return err
	}
	h := f.buf[f.r : f.r+frameHdrSize]
	typ, channel := h[0], binary.BigEndian.Uint16(h[1:3])
	total := int(binary.BigEndian.Uint32(h[3:7])) + frameHdrSize + 1
	// Only content headers and channel 0's methods (connection.tune) are
	// read, within frame_max; a larger method frame passes unread for the
	// client to refuse (the broker never sends one).
	if typ == frameHeader && total > f.limit {
		return f.oversized(total)
	}
	if typ == frameMethod && (channel != 0 || total > f.limit) || typ != frameHeader && typ != frameMethod {
		f.pass = total
		return nil
	}
	if err := f.fill(total); err != nil { // moves buf: h is stale
		return err
	}
	frame := f.buf[f.r : f.r+total]
	switch {
	case frame[total-1] != frameEnd:
		// The client refuses it as it refuses any malformed frame.
	case typ == frameMethod:
		f.tune(frame[frameHdrSize : total-1])
	default:
		if rewritten := filterHeader(frame, f.limit); rewritten != nil {
			f.out, f.r = rewritten, f.r+total
			return nil
		}
	}
	f.pass = total
	return nil
}

// tune takes the frame_max of a connection.tune: the client then refuses
// frames larger than the smaller of it and frameMax (0: no limit), never
// less than AMQP's minimum, 4096 (connection.go: negotiateFrameSize).
func (f *frameFilter) tune(payload []byte) {
	const classConnection, methodTune = 10, 30
	if len(payload) < 10 || binary.BigEndian.Uint16(payload) != classConnection || binary.BigEndian.Uint16(payload[2:]) != methodTune {
		return
	}
	if server := int(binary.BigEndian.Uint32(payload[6:])); server > 0 {
		const frameMinSize = 4096
		f.limit = min(frameMax, max(server, frameMinSize))
	}
}

// oversized hands on, in place of a content-header frame of total bytes,
// more than the client accepts, that frame with a headers table of only
// [dlq.HeaderUnreadable], every other property kept. The broker sends one
// of any size when its own dead-lettering grows headers that were near
// frame_max: x-death copies every CC routing key, so 128 KiB of CC
// becomes more than 256 KiB. It is read in bounded memory: the properties
// before the headers (two short strings), the table's length, then the
// table discarded as it streams in, then the properties after it (at most
// maxTail).
func (f *frameFilter) oversized(total int) error {
	// total > f.limit >= 4096 (see tune): the head is in this frame.
	const headLen = frameHdrSize + propsStart + 2*256 + 4
	if err := f.fill(headLen); err != nil {
		return err
	}
	head := f.buf[f.r : f.r+headLen]
	flags := binary.BigEndian.Uint16(head[frameHdrSize+12:])
	hdrStart, ok := skipShortstrs(head[frameHdrSize:], propsStart, flags, flagContentType, flagContentEncoding)
	table, tail := 0, 0
	if ok && flags&flagHeaders != 0 {
		table = int(binary.BigEndian.Uint32(head[frameHdrSize+hdrStart:]))
		tail = total - frameHdrSize - hdrStart - 4 - table
	}
	if tail < 1 || tail > maxTail {
		// The headers are not what makes the frame large: the property
		// list is malformed (the broker never sends one).
		fixed := append(append([]byte(nil), head[:frameHdrSize+propsStart]...), frameEnd)
		f.out = rewriteHeader(fixed, "the property list is malformed", nil, nil)
		return f.discard(total)
	}
	// The frame without the table: its head with an empty table, then its
	// tail.
	small := make([]byte, 0, frameHdrSize+hdrStart+4+tail)
	small = append(small, head[:frameHdrSize+hdrStart]...)
	small = binary.BigEndian.AppendUint32(small, 0)
	binary.BigEndian.PutUint32(small[3:], uint32(cap(small)-frameHdrSize-1))
	f.r += frameHdrSize + hdrStart + 4
	if err := f.discard(table); err != nil {
		return err
	}
	if err := f.fill(tail); err != nil {
		return err
	}
	small = append(small, f.buf[f.r:f.r+tail]...)
	f.r += tail
	l := propList{flags: flags, hdrStart: hdrStart, hdrEnd: hdrStart + 4}
	switch {
	case small[len(small)-1] != frameEnd:
		f.out = small // the client refuses it, as any malformed frame
	case !skipTailOK(small, &l):
		f.out = rewriteHeader(small, "the property list is malformed", nil, nil)
	default:
		why := fmt.Sprintf("a content header of %d bytes, over the frame_max of %d bytes", total, f.limit)
		f.out = rewriteHeader(small, why, nil, &l)
	}
	return nil
}

// skipTailOK sets l.end to where the properties of frame after its headers
// end, reporting whether they are well formed.
func skipTailOK(frame []byte, l *propList) bool {
	var ok bool
	l.end, ok = skipTail(frame[frameHdrSize:len(frame)-1], l.hdrEnd, l.flags)
	return ok
}

// discard reads and drops the next n bytes of the connection, through buf.
func (f *frameFilter) discard(n int) error {
	for n > 0 {
		if err := f.fill(1); err != nil {
			return err
		}
		k := min(n, f.w-f.r)
		f.r += k
		n -= k
	}
	return nil
}

// fill reads until n bytes are buffered, moving what is buffered to the
// front of buf, or growing it, to make room: n is at most frame_max.
func (f *frameFilter) fill(n int) error {
	if f.w-f.r >= n {
		return nil
	}
	if f.r == f.w {
		f.r, f.w = 0, 0
	}
	if len(f.buf)-f.r < n {
		buf := f.buf
		if len(buf) < n {
			buf = make([]byte, n)
		}
		f.w = copy(buf, f.buf[f.r:f.w])
		f.r, f.buf = 0, buf
	}
	for f.w-f.r < n {
		m, err := f.Conn.Read(f.buf[f.w:])
		f.w += m
		if err != nil && f.w-f.r < n {
			return err
		}
	}
	return nil
}

// filterHeader returns nil when amqp091-go can read the content-header
// frame (of at most limit bytes, the negotiated frame_max), else the frame
// rewritten so that it can: with the header entries at fault replaced by
// [dlq.HeaderUnreadable] and every other property kept, or, when the
// property list is broken outside the headers (the broker never sends
// one), with that header alone. There is no room kept below frame_max for
// warren's record: the consumer's copies make their own (dlq.Fit).
func filterHeader(frame []byte, limit int) []byte {
	payload := frame[frameHdrSize : len(frame)-1]
	if len(payload) < propsStart {
		return nil // no body size to keep: the client refuses the frame
	}
	l := propList{flags: binary.BigEndian.Uint16(payload[12:])}
	var ok bool
	if l.hdrStart, ok = skipShortstrs(payload, propsStart, l.flags, flagContentType, flagContentEncoding); !ok {
		return rewriteHeader(frame, "the property list is malformed", nil, nil)
	}
	l.hdrEnd = l.hdrStart
	why := ""
	var kept []byte // the entries the client reads, when it refuses others
	if l.flags&flagHeaders != 0 {
		n, table, ok := longstr(payload, l.hdrStart)
		if !ok {
			return rewriteHeader(frame, "the headers table runs past the end of the frame", nil, nil)
		}
		l.hdrEnd = l.hdrStart + 4 + n
		if why = checkTable(table, 0, nil); why != "" {
			checkTable(table, 0, &kept)
		}
	}
	if l.end, ok = skipTail(payload, l.hdrEnd, l.flags); !ok {
		return rewriteHeader(frame, "the property list is malformed", nil, nil)
	}
	if why == "" {
		return nil
	}
	if out := rewriteHeader(frame, why, kept, &l); len(out) <= limit {
		return out
	}
	if out := rewriteHeader(frame, why, nil, &l); len(out) <= limit {
		return out
	}
	return rewriteHeader(frame, why, nil, nil)
}

// propList is where the properties of a content header's payload are: its
// flags, the headers table in [hdrStart, hdrEnd), and end, where the last
// property ends.
type propList struct {
	flags                 uint16
	hdrStart, hdrEnd, end int
}

// rewriteHeader builds frame with a headers table of the entries kept
// followed by a [dlq.HeaderUnreadable] entry saying why, keeping the other
// properties where keep says; with keep nil, keeping none.
func rewriteHeader(frame []byte, why string, kept []byte, keep *propList) []byte {
	payload := frame[frameHdrSize : len(frame)-1]
	var flags uint16
	var before, after []byte
	if keep != nil {
		flags, before, after = keep.flags, payload[propsStart:keep.hdrStart], payload[keep.hdrEnd:keep.end]
	}
	flags |= flagHeaders
	value := "warren cannot handle these headers (" + why + "); it removed the entries at fault"
	table := make([]byte, 0, len(kept)+1+len(dlq.HeaderUnreadable)+1+4+len(value))
	table = append(table, kept...)
	table = append(table, byte(len(dlq.HeaderUnreadable)))
	table = append(table, dlq.HeaderUnreadable...)
	table = append(table, 'S')
	table = binary.BigEndian.AppendUint32(table, uint32(len(value)))
	table = append(table, value...)

	size := propsStart + len(before) + 4 + len(table) + len(after)
	out := make([]byte, 0, frameHdrSize+size+1)
	out = append(out, frame[:3]...) // type and channel
	out = binary.BigEndian.AppendUint32(out, uint32(size))
	out = append(out, payload[:12]...) // class, weight, body size
	out = binary.BigEndian.AppendUint16(out, flags)
	out = append(out, before...)
	out = binary.BigEndian.AppendUint32(out, uint32(len(table)))
	out = append(out, table...)
	out = append(out, after...)
	return append(out, frameEnd)
}

// skipShortstrs skips, from off, the short strings of the properties of
// which flags has each of props set.
func skipShortstrs(p []byte, off int, flags uint16, props ...uint16) (int, bool) {
	for _, prop := range props {
		if flags&prop == 0 {
			continue
		}
		if off >= len(p) || off+1+int(p[off]) > len(p) {
			return 0, false
		}
		off += 1 + int(p[off])
	}
	return off, true
}

// skipTail skips the properties after the headers, returning where they
// end: what the client reads after that (a padding) it ignores.
func skipTail(p []byte, off int, flags uint16) (int, bool) {
	for _, prop := range tailProps {
		if flags&prop.flag == 0 {
			continue
		}
		if prop.size == 0 {
			var ok bool
			if off, ok = skipShortstrs(p, off, prop.flag, prop.flag); !ok {
				return 0, false
			}
			continue
		}
		if off += prop.size; off > len(p) {
			return 0, false
		}
	}
	return off, true
}

// longstr reads the 32-bit length at off and returns it with the bytes it
// covers; not ok when they run past p.
func longstr(p []byte, off int) (int, []byte, bool) {
	if off+4 > len(p) {
		return 0, nil, false
	}
	n := binary.BigEndian.Uint32(p[off:])
	if uint64(n) > uint64(len(p)-off-4) {
		return 0, nil, false
	}
	return int(n), p[off+4 : off+4+int(n)], true
}

// fixedSize is the wire size of each fixed-size field type amqp091-go reads.
var fixedSize = [256]int8{'t': 1, 'B': 1, 'b': 1, 's': 2, 'u': 2, 'I': 4, 'i': 4, 'f': 4,
	'l': 8, 'd': 8, 'T': 8, 'D': 5} // and 'V', void, 0

// checkTable returns why amqp091-go would refuse the field table t (its
// entries, without their length) at nesting depth, or "" when it reads
// it. It refuses what the client refuses, and, on entry counts, a little
// more: the client counts distinct names, this counts entries. With kept
// set, it goes on past the entries the client refuses and appends the
// others to *kept; it leaves *kept nil when the table itself is refused.
func checkTable(t []byte, depth int, kept *[]byte) string {
	if depth > maxFieldDepth {
		return fmt.Sprintf("nested deeper than %d levels", maxFieldDepth)
	}
	why := ""
	for off, n := 0, 0; off < len(t); n++ {
		end, bad := checkEntry(t, off, n, depth)
		switch {
		case bad == "":
			if kept != nil {
				*kept = append(*kept, t[off:end]...)
			}
		case kept == nil || end == 0:
			if kept != nil {
				*kept = nil
			}
			return bad
		default:
			why = cmp.Or(why, bad) // the entries after it can still be read
		}
		off = end
	}
	return why
}

// checkEntry checks the n-th entry of table t, at off, and returns where
// it ends: 0 when the table itself is refused (too many entries), or the
// end cannot be found.
func checkEntry(t []byte, off, n, depth int) (int, string) {
	if n == maxContainerElements {
		return 0, fmt.Sprintf("a table with more than %d entries", maxContainerElements)
	}
	if off += 1 + int(t[off]); off >= len(t) {
		return 0, "a table entry runs past the end of its table"
	}
	return checkField(t, off, depth)
}

// checkArray is checkTable for an array's elements.
func checkArray(a []byte, depth int) string {
	if depth > maxFieldDepth {
		return fmt.Sprintf("nested deeper than %d levels", maxFieldDepth)
	}
	for off, n := 0, 0; off < len(a); n++ {
		if n == maxContainerElements {
			return fmt.Sprintf("an array with more than %d elements", maxContainerElements)
		}
		var why string
		if off, why = checkField(a, off, depth); why != "" {
			return why
		}
	}
	return ""
}

// checkField checks the field (type octet and value) at off in a container
// at depth, and returns where it ends.
func checkField(c []byte, off, depth int) (int, string) {
	const overrun = "a field runs past the end of its table or array"
	typ := c[off]
	off++
	switch typ {
	case 'S', 'x', 'F', 'A':
		n, body, ok := longstr(c, off)
		switch {
		case !ok:
			return 0, overrun
		case typ == 'F':
			return off + 4 + n, checkTable(body, depth+1, nil)
		case typ == 'A':
			return off + 4 + n, checkArray(body, depth+1)
		}
		return off + 4 + n, ""
	case 't', 'B', 'b', 's', 'u', 'I', 'i', 'f', 'l', 'd', 'T', 'D', 'V':
		if off += int(fixedSize[typ]); off > len(c) {
			return 0, overrun
		}
		return off, ""
	}
	return 0, fmt.Sprintf("a field of unknown type %q", typ)
}
