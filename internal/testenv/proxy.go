package testenv

import (
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards TCP connections to a service so a test can break the
// network between a client and it without touching the shared service:
// SetUp(false) drops its connections and refuses new ones (the service is
// away); Stall(true) keeps connections open but forwards nothing (the
// service stopped reading, as RabbitMQ does to a connection it blocks).
type Proxy struct {
	ln      net.Listener
	target  string
	mu      sync.Mutex
	up      bool
	open    chan struct{} // closed while traffic flows; replaced while stalled
	conns   map[net.Conn]struct{}
	refused atomic.Int64
	wg      sync.WaitGroup
}

// StartProxy listens on a free local port and forwards to target
// (host:port). It stops when t ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	open := make(chan struct{})
	close(open)
	p := &Proxy{ln: ln, target: target, up: true, open: open, conns: map[net.Conn]struct{}{}}
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
		p.wg.Go(func() { p.pipe(server, client) })
		p.wg.Go(func() { p.pipe(client, server) })
	}
}

func (p *Proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			open := p.open
			p.mu.Unlock()
			<-open // hold the bytes while stalled
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Stall stops (true) or resumes (false) forwarding without closing
// anything.
func (p *Proxy) Stall(stalled bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open: // flowing
		if stalled {
			p.open = make(chan struct{})
		}
	default: // stalled
		if !stalled {
			close(p.open)
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
