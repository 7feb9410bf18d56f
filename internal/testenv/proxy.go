package testenv

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards TCP connections to a service so a test can break the
// network between a client and it without touching the shared service:
// SetUp(false) drops its connections and refuses new ones (the service is
// away); Stall(true) keeps connections open but forwards nothing;
// StopReading(true) holds only what clients send, as a service that stopped
// reading (see [Proxy.StopReading]).
type Proxy struct {
	ln      net.Listener
	target  string
	amqp    bool // client bytes are AMQP frames (StartAMQPProxy)
	mu      sync.Mutex
	up      bool
	gates   [2]chan struct{} // toServer, toClient: closed while traffic flows that way; replaced while held
	conns   map[net.Conn]struct{}
	refused atomic.Int64
	wg      sync.WaitGroup
	// onMethod, if set, sees each AMQP method a client sends before the
	// proxy passes it on (see [Proxy.OnClientMethod]).
	onMethod atomic.Pointer[func(class, method uint16)]
}

const (
	toServer = 0
	toClient = 1
)

// StartProxy listens on a free local port and forwards to target
// (host:port). It stops when t ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	return startProxy(t, target, false, nil)
}

// StartTLSProxy is StartProxy behind TLS, as a broker with an amqps
// listener: it presents a certificate for 127.0.0.1 made for the test, and
// returns the file (in t's temporary directory) holding it in PEM, which a
// client is to trust.
func StartTLSProxy(t testing.TB, target string) (*Proxy, string) {
	t.Helper()
	cert, caFile, _ := SelfSignedCert(t)
	return startProxy(t, target, false, &tls.Config{Certificates: []tls.Certificate{cert}}), caFile
}

// StartAMQPProxy is StartProxy for an AMQP broker: it reads what clients
// send frame by frame, so that StopReading can still let their heartbeats
// through.
func StartAMQPProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	return startProxy(t, target, true, nil)
}

func startProxy(t testing.TB, target string, amqp bool, tlsConfig *tls.Config) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if tlsConfig != nil {
		ln = tls.NewListener(ln, tlsConfig)
	}
	p := &Proxy{ln: ln, target: target, amqp: amqp, up: true, conns: map[net.Conn]struct{}{}}
	for i := range p.gates {
		p.gates[i] = make(chan struct{})
		close(p.gates[i])
	}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		ln.Close()
		p.Stall(false)
		p.SetUp(false)
		p.wg.Wait()
	})
	return p
}

// URL returns serviceURL with its host replaced by the proxy's.
func (p *Proxy) URL(t testing.TB, serviceURL string) string {
	t.Helper()
	u, err := url.Parse(serviceURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.ln.Addr().String()
	return u.String()
}

// Refused counts connections refused while down.
func (p *Proxy) Refused() int64 { return p.refused.Load() }

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if !p.up {
			p.mu.Unlock()
			p.refused.Add(1)
			client.Close()
			continue
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			client.Close()
			continue
		}
		p.conns[client], p.conns[server] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(server, client, toClient) })
		if p.amqp {
			p.wg.Go(func() { p.pipeAMQP(client, server) })
		} else {
			p.wg.Go(func() { p.pipe(client, server, toServer) })
		}
	}
}

// wait blocks while traffic in direction dir is held.
func (p *Proxy) wait(dir int) {
	p.mu.Lock()
	open := p.gates[dir]
	p.mu.Unlock()
	<-open
}

// pipe copies src to dst, which is direction dir.
func (p *Proxy) pipe(src, dst net.Conn, dir int) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.wait(dir)
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// AMQP 0-9-1 frame types.
const (
	methodFrame    = 1
	heartbeatFrame = 8
)

// AMQP 0-9-1 class and method ids, for [Proxy.OnClientMethod].
const (
	BasicClass   = 60
	BasicConsume = 20
	BasicCancel  = 30
	BasicAck     = 80
)

// OnClientMethod, on a proxy from StartAMQPProxy, calls f with the class
// and method id of every method frame a client sends, before the proxy
// passes the frame on: a test can act at an exact step of a client's
// conversation with the broker (take messages away before a consume
// reaches it, or StopReading from one method on), which no timing can do.
// f runs on the proxy's reader of that connection, so it must not wait on
// the same client. A nil f stops the calls.
func (p *Proxy) OnClientMethod(f func(class, method uint16)) {
	if f == nil {
		p.onMethod.Store(nil)
		return
	}
	p.onMethod.Store(&f)
}

// pipeAMQP copies a client's AMQP frames to the server. Heartbeat frames
// are written at once, even while the server is not reading; the others in
// order, each once the gate is open. (A heartbeat overtaking other frames
// is harmless: it belongs to no channel.) When the client goes, frames the
// server never got are dropped and the server's side closed, as the
// server would drop what it never read.
func (p *Proxy) pipeAMQP(client, server net.Conn) {
	held := make(chan []byte, 8192)
	quit := make(chan struct{}) // closed when the client is gone
	var writeMu sync.Mutex
	write := func(b []byte) error {
		writeMu.Lock()
		defer writeMu.Unlock()
		_, err := server.Write(b)
		return err
	}
	var writer sync.WaitGroup
	writer.Go(func() {
		failed := false
		for f := range held {
			if failed {
				continue // drain, so the reader never blocks
			}
			if !p.passes(toServer, quit) {
				continue
			}
			if write(f) != nil {
				failed = true
				client.Close() // ends the reader
			}
		}
	})
	defer server.Close()
	defer client.Close()
	defer writer.Wait()
	defer close(held)
	defer close(quit)

	r := bufio.NewReaderSize(client, 64<<10)
	header := make([]byte, 8) // "AMQP" 0 0 9 1
	if _, err := io.ReadFull(r, header); err != nil {
		return
	}
	held <- header
	for {
		head := make([]byte, 7) // type, channel, size
		if _, err := io.ReadFull(r, head); err != nil {
			return
		}
		frame := make([]byte, 7+int(binary.BigEndian.Uint32(head[3:]))+1) // + payload + frame-end
		copy(frame, head)
		if _, err := io.ReadFull(r, frame[7:]); err != nil {
			return
		}
		if frame[0] == heartbeatFrame {
			if write(frame) != nil {
				return
			}
			continue
		}
		if f := p.onMethod.Load(); f != nil && frame[0] == methodFrame && len(frame) >= 7+4 {
			(*f)(binary.BigEndian.Uint16(frame[7:]), binary.BigEndian.Uint16(frame[9:]))
		}
		held <- frame
	}
}

// passes waits until traffic in direction dir flows (true) or quit is
// closed while it is held (false).
func (p *Proxy) passes(dir int, quit <-chan struct{}) bool {
	p.mu.Lock()
	open := p.gates[dir]
	p.mu.Unlock()
	select {
	case <-open:
		return true
	default:
	}
	select {
	case <-open:
		return true
	case <-quit:
		return false
	}
}

// Stall stops (true) or resumes (false) forwarding both ways without
// closing anything.
func (p *Proxy) Stall(stalled bool) {
	p.hold(toServer, stalled)
	p.hold(toClient, stalled)
}

// StopReading holds (true) or resumes (false) what clients send, while
// what the service sends still flows: what RabbitMQ does to a connection
// it blocks during a memory or disk alarm. Its heartbeats keep arriving,
// so the client's own read deadline never fires; on a proxy from
// StartAMQPProxy the client's heartbeats still get through too, as
// RabbitMQ does not time out a connection it blocked. Only closing the
// connection ends a wait for the broker's reply.
func (p *Proxy) StopReading(stopped bool) { p.hold(toServer, stopped) }

func (p *Proxy) hold(dir int, held bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gates[dir]: // flowing
		if held {
			p.gates[dir] = make(chan struct{})
		}
	default: // held
		if !held {
			close(p.gates[dir])
		}
	}
}

// SetUp brings the proxy up or down; down drops every connection.
func (p *Proxy) SetUp(up bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.up = up
	if !up {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}
