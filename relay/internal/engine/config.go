package engine

import (
	"cmp"
	"fmt"
	"maps"
	"strings"
	"time"
	"unicode"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/cloudevents"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/outbox"
)

// Shared is the settings both relays have and check alike: where rows
// come from (HasDatabase: a Pool or a DatabaseURL; Table), what makes the
// message (Format, MaxMessageBytes), where it goes (AMQPURL, Exchange),
// how the relay names itself (Name), its retry bounds, and the durations
// each relay bounds its waits with, by field name.
type Shared struct {
	HasDatabase        bool
	Table              string
	AMQPURL            string
	Exchange           string
	Name               string
	Format             warren.Format
	CloudEvents        *cloudevents.Encoder
	PlaneProperties    bool
	MaxMessageBytes    int
	RetryMin, RetryMax time.Duration
	StatsInterval      time.Duration // negative: no Stats, nothing to check
	Durations          map[string]time.Duration
}

// PublisherDefaults is p with both relays' defaults for what it leaves
// empty: the relay's name, this host, Plane's envelope version and source.
func PublisherDefaults(p warren.PublisherInfo, name, source string) warren.PublisherInfo {
	p.Name = cmp.Or(p.Name, name)
	p.Instance = cmp.Or(p.Instance, amqpx.Hostname())
	p.Version = cmp.Or(p.Version, warren.PlaneEnvelopeVersion)
	p.Source = cmp.Or(p.Source, source)
	return p
}

// Problems returns what is wrong with s, after defaults, one line per
// problem; none when it is valid. A relay that took a Format or a
// MaxMessageBytes no event can satisfy would make every event dead at
// once, and an Exchange the broker refuses would end every session: both
// are refused before the relay starts.
func (s Shared) Problems() []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if !s.HasDatabase {
		add("one of Pool and DatabaseURL is required")
	}
	if err := outbox.ValidateTable(s.Table); err != nil {
		add("Table: %v", err)
	}
	if err := amqpx.CheckURL(s.AMQPURL); err != nil {
		add("AMQPURL: %v", err)
	}
	if s.RetryMax < s.RetryMin {
		add("RetryMax (%v) must not be below RetryMin (%v)", s.RetryMax, s.RetryMin)
	}
	durations := maps.Clone(s.Durations) // the caller's map stays as it gave it
	if durations == nil {
		durations = map[string]time.Duration{}
	}
	durations["RetryMin"], durations["RetryMax"] = s.RetryMin, s.RetryMax
	if s.StatsInterval > 0 { // negative: no Stats; zero: unset, defaulted before
		durations["StatsInterval"] = s.StatsInterval
	}
	if _, err := warren.ParseFormat(string(s.Format)); err != nil {
		add("Format: %v", err)
	}
	if s.CloudEvents != nil {
		if err := s.CloudEvents.Validate(); err != nil {
			add("CloudEvents: %v", err)
		}
		// A CloudEvent is the whole message: it has no envelope format,
		// and Plane's properties would strip its headers.
		if s.Format == warren.FormatPlane {
			add("CloudEvents replaces the envelope: Format %q cannot go with it", s.Format)
		}
		if s.PlaneProperties {
			add("CloudEvents cannot go with PlaneProperties, which publishes no headers and the content type application/json")
		}
	}
	switch {
	case strings.HasPrefix(s.Exchange, "amq."):
		add("Exchange %q uses the broker's reserved prefix amq.", s.Exchange)
	case len(s.Exchange) > 255:
		add("Exchange must be at most 255 bytes, got %d", len(s.Exchange))
	case strings.IndexFunc(s.Exchange, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0:
		add("Exchange %q must not contain spaces or control characters", s.Exchange)
	}
	if strings.IndexFunc(s.Name, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 || len(s.Name) > 200 {
		add("Name must be printable and at most 200 bytes")
	}
	if s.MaxMessageBytes < 1 {
		add("MaxMessageBytes must be positive, got %d", s.MaxMessageBytes)
	}
	for name, d := range durations {
		if d < time.Millisecond {
			add("%s must be at least 1ms, got %v", name, d)
		}
	}
	return problems
}
