package inventory

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// Which queues an exchange's events reach, read from its bindings: what
// `warren contracts asyncapi --broker` describes. warren binds each
// consumer's queue (or its partition exchange) to a fanout exchange,
// which routes every event to every queue; an operator may put a topic or
// direct exchange on the way, whose binding keys then choose by routing
// key, the event type.

// Exchange is one exchange as the management API describes it.
type Exchange struct {
	Name, Type string
	Durable    bool
	AutoDelete bool
}

// Hop is one binding on a way from the exchange to a queue: events pass
// from Exchange, of type Type, along a binding with key Key.
type Hop struct {
	Exchange, Type, Key string
}

// Receiver is a queue the exchange's events reach.
type Receiver struct {
	Queue string
	// Paths are the ways events reach the queue, each its bindings in
	// order from the exchange.
	Paths [][]Hop
}

// Receives reports whether an event published with routingKey reaches
// the queue by one of its paths. A hop through an exchange whose routing
// this cannot tell (headers, or a plugin's type other than
// x-consistent-hash) is taken to pass every event; Exact says whether
// there is one.
func (r Receiver) Receives(routingKey string) bool {
	for _, p := range r.Paths {
		if passes(p, routingKey) {
			return true
		}
	}
	return false
}

// Exact reports whether Receives knows, rather than assumes, which events
// reach the queue.
func (r Receiver) Exact() bool {
	for _, p := range r.Paths {
		for _, h := range p {
			if !knownRouting(h.Type) {
				return false
			}
		}
	}
	return true
}

// Filtered reports whether some routing key does not reach the queue: a
// path through a topic or direct exchange, and none that every key passes.
func (r Receiver) Filtered() bool {
	for _, p := range r.Paths {
		if !slices.ContainsFunc(p, choosesByKey) {
			return false
		}
	}
	return true
}

// Route describes the paths for a reader: "warren.events (fanout) →
// router (topic, key invoice.#)".
func (r Receiver) Route() string {
	var ways []string
	for _, p := range r.Paths {
		var hops []string
		for _, h := range p {
			switch h.Type {
			case "fanout", "x-consistent-hash":
				hops = append(hops, fmt.Sprintf("%s (%s)", h.Exchange, h.Type))
			case "topic", "direct":
				hops = append(hops, fmt.Sprintf("%s (%s, key %s)", h.Exchange, h.Type, h.Key))
			default:
				hops = append(hops, fmt.Sprintf("%s (%s: routing it cannot be told from the event type, taken to pass every event)", h.Exchange, h.Type))
			}
		}
		ways = append(ways, strings.Join(hops, " → "))
	}
	return "bound through " + strings.Join(ways, "; and through ")
}

// choosesByKey reports whether a hop lets only some routing keys pass.
func choosesByKey(h Hop) bool {
	return h.Type == "direct" || h.Type == "topic" && h.Key != "#"
}

func knownRouting(exchangeType string) bool {
	switch exchangeType {
	case "fanout", "topic", "direct", "x-consistent-hash":
		return true
	}
	return false
}

func passes(path []Hop, key string) bool {
	for _, h := range path {
		switch h.Type {
		case "direct":
			if key != h.Key {
				return false
			}
		case "topic":
			if !TopicMatch(h.Key, key) {
				return false
			}
		}
	}
	return true
}

// TopicMatch reports whether a topic exchange routes key along a binding
// with pattern: words separated by dots, * one word, # zero or more.
func TopicMatch(pattern, key string) bool {
	p, k := strings.Split(pattern, "."), strings.Split(key, ".")
	// match[i][j]: p[i:] matches k[j:]
	match := make([][]bool, len(p)+1)
	for i := range match {
		match[i] = make([]bool, len(k)+1)
	}
	match[len(p)][len(k)] = true
	for i := len(p) - 1; i >= 0; i-- {
		for j := len(k); j >= 0; j-- {
			switch {
			case p[i] == "#":
				match[i][j] = match[i+1][j] || j < len(k) && match[i][j+1]
			case j < len(k) && (p[i] == "*" || p[i] == k[j]):
				match[i][j] = match[i+1][j+1]
			}
		}
	}
	return match[0][0]
}

// maxExchanges bounds the exchanges a walk of the bindings visits: a
// topology is a few; a management API that answers without end is not
// followed without end.
const maxExchanges = 256

// exchangeJSON and bindingJSON are what the client reads of
// /api/exchanges/{vhost}/{name} and of its bindings.
type exchangeJSON struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Durable    bool   `json:"durable"`
	AutoDelete bool   `json:"auto_delete"`
}

type bindingJSON struct {
	Source          string `json:"source"`
	Destination     string `json:"destination"`
	DestinationType string `json:"destination_type"`
	RoutingKey      string `json:"routing_key"`
}

// Exchange describes the exchange name of the vhost.
func (c *Client) Exchange(ctx context.Context, name string) (Exchange, error) {
	if name == "" {
		return Exchange{}, errors.New("inventory: the default exchange routes by queue name; name the exchange the relays publish to")
	}
	var x exchangeJSON
	if err := c.get(ctx, "api/exchanges/"+url.PathEscape(c.vhost)+"/"+url.PathEscape(name), nil, &x); err != nil {
		var se *statusError
		if errors.As(err, &se) && se.code == http.StatusNotFound {
			return Exchange{}, fmt.Errorf("RabbitMQ's management API at %s: no exchange %q in the vhost %q (or no such vhost)", se.endpoint, name, c.vhost)
		}
		return Exchange{}, err
	}
	if x.Name != name {
		return Exchange{}, fmt.Errorf("RabbitMQ's management API at %s: asked for the exchange %q, answered with %q", c.Endpoint(), name, x.Name)
	}
	return Exchange(x), nil
}

// Receivers returns the queues that events published to exchange reach,
// by name, following its bindings through other exchanges.
func (c *Client) Receivers(ctx context.Context, exchange string) ([]Receiver, error) {
	root, err := c.Exchange(ctx, exchange)
	if err != nil {
		return nil, err
	}
	types := map[string]string{exchange: root.Type}
	byQueue := map[string]*Receiver{}
	visited := 0
	var walk func(x string, path []Hop) error
	walk = func(x string, path []Hop) error {
		if visited++; visited > maxExchanges {
			return fmt.Errorf("RabbitMQ's management API at %s: more than %d exchanges, counted along every way, bound on the way from %q; not followed further", c.Endpoint(), maxExchanges, exchange)
		}
		var bindings []bindingJSON
		if err := c.get(ctx, "api/exchanges/"+url.PathEscape(c.vhost)+"/"+url.PathEscape(x)+"/bindings/source", nil, &bindings); err != nil {
			return err
		}
		slices.SortFunc(bindings, func(a, b bindingJSON) int {
			return strings.Compare(a.DestinationType+"\x00"+a.Destination+"\x00"+a.RoutingKey, b.DestinationType+"\x00"+b.Destination+"\x00"+b.RoutingKey)
		})
		for _, b := range bindings {
			if b.Source != x || b.Destination == "" {
				return fmt.Errorf("RabbitMQ's management API at %s: a binding of the exchange %q reads source %q, destination %q: not a binding of it", c.Endpoint(), x, b.Source, b.Destination)
			}
			hop := append(slices.Clip(path), Hop{Exchange: x, Type: types[x], Key: b.RoutingKey})
			switch b.DestinationType {
			case "queue":
				r := byQueue[b.Destination]
				if r == nil {
					r = &Receiver{Queue: b.Destination}
					byQueue[b.Destination] = r
				}
				r.Paths = append(r.Paths, hop)
			case "exchange":
				// A way back to an exchange already on the path is a
				// loop: the broker delivers a message once per queue,
				// and the loop adds no queue.
				if slices.ContainsFunc(hop, func(h Hop) bool { return h.Exchange == b.Destination }) {
					continue
				}
				if _, known := types[b.Destination]; !known {
					dest, err := c.Exchange(ctx, b.Destination)
					if err != nil {
						return err
					}
					types[b.Destination] = dest.Type
				}
				if err := walk(b.Destination, hop); err != nil {
					return err
				}
			default:
				return fmt.Errorf("RabbitMQ's management API at %s: a binding of %q to %q has the destination type %q, neither a queue nor an exchange", c.Endpoint(), x, b.Destination, b.DestinationType)
			}
		}
		return nil
	}
	if err := walk(exchange, nil); err != nil {
		return nil, err
	}
	out := make([]Receiver, 0, len(byQueue))
	for _, name := range slices.Sorted(maps.Keys(byQueue)) {
		out = append(out, *byQueue[name])
	}
	return out, nil
}
