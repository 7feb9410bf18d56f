package inventory

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/redact"
)

// Queue is one queue as the management API last saw it.
type Queue struct {
	Name      string
	Type      string // classic, quorum, stream
	Messages  int    // ready + unacknowledged
	Ready     int
	Unacked   int // delivered to a consumer, not yet settled: in flight
	Consumers int
	// OldestAt is the timestamp property of the message at the queue's
	// head: warren's relays set it to the event's creation time, so now
	// minus OldestAt is how far behind the queue's consumers are in time.
	// Zero when the broker reports none: an empty queue, a message
	// without a timestamp, or a quorum queue (RabbitMQ reports it for
	// classic queues only).
	OldestAt time.Time
	// Rates in messages a second, averaged by the broker over its last
	// sampling window; zero when it has no sample yet.
	PublishRate, DeliverRate, AckRate float64
	// How it was declared.
	Durable, AutoDelete, Exclusive bool
}

// Consumer is one warren consumer's queues.
type Consumer struct {
	Name string
	// Queue is the consumer's queue; with partitions it is the zero Queue
	// (Name empty) and Partitions holds them, in partition order.
	Queue      Queue
	Partitions []Queue
	DLQ        Queue
	Retry      []Queue // the retry tiers, shortest delay first
}

// Depth is the messages waiting in the consumer's queue or partitions.
func (c Consumer) Depth() int {
	n := c.Queue.Messages
	for _, p := range c.Partitions {
		n += p.Messages
	}
	return n
}

// Client reads one vhost of one broker (any node of a cluster: each
// answers for all of them).
type Client struct {
	bases []*url.URL // management API roots, one per node, with credentials
	vhost string
	http  *http.Client
}

// New returns a Client for the vhost named by amqpURLs (a comma-separated
// list of nodes, as every warren AMQP setting takes). managementURL is the
// management API's root (http://user:pass@host:15672/); when empty, each
// node's is taken to be http://host:15672/ with the AMQP URL's user and
// password (https and 15671 for amqps).
func New(amqpURLs, managementURL string) (*Client, error) {
	urls := amqpx.SplitURLs(amqpURLs)
	if len(urls) == 0 {
		return nil, errors.New("inventory: no AMQP URL")
	}
	first, err := url.Parse(urls[0])
	if err != nil {
		return nil, fmt.Errorf("inventory: %w", redact.Error(err, urls[0]))
	}
	c := &Client{
		vhost: cmp.Or(strings.TrimPrefix(first.Path, "/"), "/"),
		// Bounded: a management API that stopped answering must not hang
		// a page or a command.
		http: &http.Client{Timeout: 10 * time.Second, CheckRedirect: refuseRedirects},
	}
	if v, err := url.PathUnescape(c.vhost); err == nil {
		c.vhost = v
	}
	if managementURL != "" {
		base, err := url.Parse(managementURL)
		if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
			return nil, fmt.Errorf("inventory: management URL %s: want http://host:port/", redact.URL(managementURL))
		}
		if base.User == nil {
			base.User = first.User
		}
		c.bases = []*url.URL{base}
		return c, nil
	}
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("inventory: %w", redact.Error(err, raw))
		}
		scheme, port := "http", "15672"
		if u.Scheme == "amqps" {
			scheme, port = "https", "15671"
		}
		user := u.User
		if user == nil {
			user = url.UserPassword("guest", "guest") // the AMQP client's default too
		}
		c.bases = append(c.bases, &url.URL{Scheme: scheme, User: user, Host: net.JoinHostPort(u.Hostname(), port), Path: "/"})
	}
	return c, nil
}

// Vhost is the vhost the client reads.
func (c *Client) Vhost() string { return c.vhost }

// Endpoint is the management API the client reads first, password masked.
func (c *Client) Endpoint() string { return c.bases[0].Redacted() }

// queueJSON is the part of /api/queues/{vhost} the client reads.
type queueJSON struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Messages   int    `json:"messages"`
	Ready      int    `json:"messages_ready"`
	Unacked    int    `json:"messages_unacknowledged"`
	Consumers  int    `json:"consumers"`
	Durable    bool   `json:"durable"`
	AutoDelete bool   `json:"auto_delete"`
	Exclusive  bool   `json:"exclusive"`
	// HeadTimestamp is in seconds since the epoch; RabbitMQ sends "" or
	// leaves it out when there is none.
	HeadTimestamp any `json:"head_message_timestamp"`
	Stats         struct {
		Publish struct {
			Rate float64 `json:"rate"`
		} `json:"publish_details"`
		Deliver struct {
			Rate float64 `json:"rate"`
		} `json:"deliver_get_details"`
		Ack struct {
			Rate float64 `json:"rate"`
		} `json:"ack_details"`
	} `json:"message_stats"`
}

// Queues lists every queue of the vhost, by name.
func (c *Client) Queues(ctx context.Context) ([]Queue, error) {
	var raw []queueJSON
	if err := c.get(ctx, "api/queues/"+url.PathEscape(c.vhost), url.Values{
		"columns": {"name,type,messages,messages_ready,messages_unacknowledged,consumers,head_message_timestamp,message_stats,durable,auto_delete,exclusive"},
	}, &raw); err != nil {
		return nil, err
	}
	qs := make([]Queue, len(raw))
	for i, q := range raw {
		qs[i] = Queue{
			Name: q.Name, Type: q.Type,
			Messages: q.Messages, Ready: q.Ready, Unacked: q.Unacked, Consumers: q.Consumers,
			PublishRate: q.Stats.Publish.Rate, DeliverRate: q.Stats.Deliver.Rate, AckRate: q.Stats.Ack.Rate,
			Durable: q.Durable, AutoDelete: q.AutoDelete, Exclusive: q.Exclusive,
		}
		// Seconds since the epoch, up to the year 9999: anything else (a
		// producer's milliseconds, a value past int64) is not a time.
		if ts, ok := q.HeadTimestamp.(float64); ok && ts > 0 && ts < 253402300800 {
			qs[i].OldestAt = time.Unix(int64(ts), 0)
		}
	}
	slices.SortFunc(qs, func(a, b Queue) int { return strings.Compare(a.Name, b.Name) })
	return qs, nil
}

// Consumers finds warren's consumers in the vhost: one per queue named
// N.dlq, by name.
func (c *Client) Consumers(ctx context.Context) ([]Consumer, error) {
	qs, err := c.Queues(ctx)
	if err != nil {
		return nil, err
	}
	return Classify(qs), nil
}

// Classify groups queues into warren consumers by the names warren gives
// them; queues that belong to no consumer are left out.
func Classify(qs []Queue) []Consumer {
	byName := make(map[string]*Consumer)
	var names []string
	for _, q := range qs {
		if dlq.IsQueueName(q.Name) {
			name := strings.TrimSuffix(q.Name, ".dlq")
			byName[name] = &Consumer{Name: name, DLQ: q}
			names = append(names, name)
		}
	}
	for _, q := range qs {
		name, role, ok := owner(q.Name, byName)
		if !ok {
			continue
		}
		c := byName[name]
		switch role {
		case "queue":
			c.Queue = q
		case "partition":
			c.Partitions = append(c.Partitions, q)
		case "retry":
			c.Retry = append(c.Retry, q)
		}
	}
	slices.Sort(names)
	out := make([]Consumer, 0, len(names))
	for _, name := range names {
		c := byName[name]
		slices.SortFunc(c.Partitions, func(a, b Queue) int { return partitionIndex(a.Name) - partitionIndex(b.Name) })
		slices.SortFunc(c.Retry, func(a, b Queue) int { return cmp.Compare(tierDelay(a.Name), tierDelay(b.Name)) })
		out = append(out, *c)
	}
	return out
}

// owner says which consumer a queue belongs to and as what: N itself,
// N.p<i> (a partition), N.retry.* (a retry tier). The longest consumer
// name that matches wins, so consumers a and a.b do not steal each
// other's queues.
func owner(queue string, consumers map[string]*Consumer) (name, role string, ok bool) {
	if _, ok := consumers[queue]; ok {
		return queue, "queue", true
	}
	for i := len(queue) - 1; i > 0; i-- {
		if queue[i] != '.' {
			continue
		}
		prefix, rest := queue[:i], queue[i+1:]
		if _, ok := consumers[prefix]; !ok {
			continue
		}
		switch {
		case strings.HasPrefix(rest, "retry."):
			return prefix, "retry", true
		case len(rest) > 1 && rest[0] == 'p' && isDigits(rest[1:]):
			return prefix, "partition", true
		}
	}
	return "", "", false
}

func isDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// tierDelay is the delay a retry tier's name (N.retry.5s) gives, so tiers
// list shortest first; zero for a name that gives none.
func tierDelay(name string) time.Duration {
	d, _ := time.ParseDuration(name[strings.LastIndex(name, ".")+1:])
	return d
}

func partitionIndex(name string) int {
	n, _ := strconv.Atoi(name[strings.LastIndex(name, ".p")+2:])
	return n
}

// get reads path from the first node whose management API answers.
func (c *Client) get(ctx context.Context, path string, query url.Values, into any) error {
	var errs []error
	for _, base := range c.bases {
		err := c.getOne(ctx, base, path, query, into)
		if err == nil {
			return nil
		}
		var refused *statusError
		if errors.As(err, &refused) || errors.Is(err, errRedirect) || errors.Is(err, errTooLarge) {
			return err // the API answered: another node would say the same
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("RabbitMQ's management API did not answer (%w); enable it with `rabbitmq-plugins enable rabbitmq_management` (scripts/services.sh does) or give its address with --management-url", errors.Join(errs...))
}

// statusError is a management API answer other than 200.
type statusError struct {
	endpoint string
	code     int
	body     string
}

func (e *statusError) Error() string {
	switch e.code {
	case http.StatusUnauthorized:
		return fmt.Sprintf("RabbitMQ's management API at %s refused the credentials (the user needs the management, monitoring or administrator tag)", e.endpoint)
	case http.StatusNotFound:
		return fmt.Sprintf("RabbitMQ's management API at %s: no such vhost (%s)", e.endpoint, e.body)
	}
	return fmt.Sprintf("RabbitMQ's management API at %s answered %d: %s", e.endpoint, e.code, e.body)
}

func (c *Client) getOne(ctx context.Context, base *url.URL, path string, query url.Values, into any) error {
	u := base.JoinPath(path)
	u.RawQuery = query.Encode()
	u.User = nil
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	if base.User != nil {
		pass, _ := base.User.Password()
		req.SetBasicAuth(base.User.Username(), pass)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return redact.Error(err, base.String())
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return &statusError{endpoint: base.Redacted(), code: resp.StatusCode, body: strings.TrimSpace(string(body))}
	}
	body := &limitedReader{r: resp.Body, left: maxAnswer}
	if err := json.NewDecoder(body).Decode(into); err != nil {
		if body.over {
			return fmt.Errorf("RabbitMQ's management API at %s: reading %s: %w: over %d MiB, more than any this client reads", base.Redacted(), path, errTooLarge, maxAnswer>>20)
		}
		// A proxy's or a login page's HTML is not the API's answer:
		// say what came, not only where the JSON broke.
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			return fmt.Errorf("RabbitMQ's management API at %s: reading %s: the answer is %q, not the API's JSON (is it the management API's address?): %w", base.Redacted(), path, ct, err)
		}
		return fmt.Errorf("RabbitMQ's management API at %s: reading %s: %w", base.Redacted(), path, err)
	}
	return nil
}

// maxAnswer bounds what one answer of the management API is read to: a
// vhost's queues listed with the columns asked for are about 1 KiB each,
// so 10,000 queues fit many times over, and an API (or what answers in
// its place) that sends without end does not fill the memory.
const maxAnswer = 64 << 20

// limitedReader reads r until left bytes have been read, then fails,
// noting that it did.
type limitedReader struct {
	r    io.Reader
	left int64
	over bool
}

var errTooLarge = errors.New("answer too large")

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		l.over = true
		return 0, errTooLarge
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

// refuseRedirects stops at a redirect: the management API answers its
// own paths, so a redirect is a proxy or the wrong address, and following
// it would send the credentials (same host) or a request without them
// (another host) where nobody asked.
func refuseRedirects(req *http.Request, via []*http.Request) error {
	return fmt.Errorf("%w to %s; give the address it answers at (--management-url)", errRedirect, redact.URL(req.URL.String()))
}

var errRedirect = errors.New("RabbitMQ's management API redirects")
