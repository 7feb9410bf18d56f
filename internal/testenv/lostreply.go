package testenv

import (
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
)

// LostReply is a TCP proxy that lets one request reach the service and
// loses the service's reply to it: the request is carried out, and the
// client sees its connection drop before it learns the outcome. That is
// the ambiguous failure client libraries answer by retrying, and the one a
// test cannot produce by killing connections, which also loses the request.
//
// Every connection is forwarded unchanged until the client sends bytes
// that request matches; from then on the proxy withholds what the service
// sends on that connection and asks verdict about it. Only the first reply
// judged lost, across all connections, is lost; after that the proxy
// forwards everything.
type LostReply struct {
	ln      net.Listener
	target  string
	request func(sent []byte) bool
	verdict func(withheld []byte) (pass int, lose bool)
	lost    atomic.Bool
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

// StartLostReply listens on a free local port and forwards to target
// (host:port) until t ends.
//
// request is given each chunk the client sends (with the end of the
// previous chunk before it, so a marker split between two reads is still
// seen) and says whether it carries the request whose reply should be
// lost. verdict is given the service's bytes withheld since then and says
// how many leading bytes are a reply to something else, to forward (pass,
// say a "no such script" error that the client answers by sending the
// request again), or that the reply to lose has arrived (lose: the proxy
// drops the withheld bytes and closes both sides). Returning (0, false)
// waits for more bytes.
func StartLostReply(t testing.TB, target string, request func(sent []byte) bool, verdict func(withheld []byte) (pass int, lose bool)) *LostReply {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &LostReply{ln: ln, target: target, request: request, verdict: verdict, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// Addr is the proxy's host:port.
func (p *LostReply) Addr() string { return p.ln.Addr().String() }

// URL returns serviceURL with its host replaced by the proxy's.
func (p *LostReply) URL(t testing.TB, serviceURL string) string {
	t.Helper()
	u, err := url.Parse(serviceURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.Addr()
	return u.String()
}

// Lost says whether the proxy has lost its reply yet.
func (p *LostReply) Lost() bool { return p.lost.Load() }

func (p *LostReply) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		p.conns[client], p.conns[server] = struct{}{}, struct{}{}
		p.mu.Unlock()
		var armed atomic.Bool
		p.wg.Go(func() { p.requests(client, server, &armed) })
		p.wg.Go(func() { p.replies(client, server, &armed) })
	}
}

func (p *LostReply) forget(client, server net.Conn) {
	client.Close()
	server.Close()
	p.mu.Lock()
	delete(p.conns, client)
	delete(p.conns, server)
	p.mu.Unlock()
}

// requests forwards the client's bytes. The connection is armed before the
// matching request is written, so its reply cannot overtake the arming.
func (p *LostReply) requests(client, server net.Conn, armed *atomic.Bool) {
	defer p.forget(client, server)
	const keep = 256 // bytes of the previous chunk shown to request
	buf := make([]byte, keep+32<<10)
	kept := 0
	for {
		n, err := client.Read(buf[kept:])
		if n > 0 {
			chunk := buf[kept : kept+n]
			if !p.lost.Load() && p.request(buf[:kept+n]) {
				armed.Store(true)
			}
			if _, err := server.Write(chunk); err != nil {
				return
			}
			tail := buf[max(0, kept+n-keep) : kept+n]
			kept = copy(buf, tail)
		}
		if err != nil {
			return
		}
	}
}

// replies forwards the service's bytes, withholding them while armed until
// verdict decides.
func (p *LostReply) replies(client, server net.Conn, armed *atomic.Bool) {
	defer p.forget(client, server)
	buf := make([]byte, 32<<10)
	var withheld []byte
	for {
		n, err := server.Read(buf)
		if n > 0 {
			out := buf[:n]
			if armed.Load() {
				withheld = append(withheld, out...)
				out = nil
				for len(withheld) > 0 {
					if p.lost.Load() { // another connection lost its reply: forward all
						out, withheld = withheld, nil
						break
					}
					pass, lose := p.verdict(withheld)
					if lose && p.lost.CompareAndSwap(false, true) {
						return // the deferred forget closes both sides, unanswered
					}
					if pass == 0 {
						break
					}
					if _, err := client.Write(withheld[:pass]); err != nil {
						return
					}
					withheld = withheld[pass:]
				}
			}
			if len(out) > 0 {
				if _, err := client.Write(out); err != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}
