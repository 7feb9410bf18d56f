package dlqtool

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/dlq"
)

// PeekOptions select the messages [Queue.Peek] returns.
type PeekOptions struct {
	Filter Filter
	// Limit is the most messages to return. 0 means all that match.
	Limit int
	// Progress, if set, is called after each message looked at.
	Progress func(Progress)
	// Each, if set, is handed each matching message in place of Peek
	// returning it: for a reader that keeps only part of each (a page
	// that shows no bodies), whose memory is then what it keeps, not the
	// queue's bytes. m is valid only during the call.
	Each func(m *Message)
}

// Peek returns the messages that match, head of the queue first, and
// leaves the queue as it was: same messages, same order. It reads only the
// messages present when it starts.
func (q *Queue) Peek(ctx context.Context, opts PeekOptions) ([]Message, error) {
	if err := opts.Filter.Validate(); err != nil {
		return nil, err
	}
	if opts.Limit < 0 {
		return nil, errNegativeLimit
	}
	var out []Message
	var p Progress
	now := time.Now()
	err := q.scan(ctx, prefetchFor(opts.Filter, opts.Limit, false), &p, opts.Progress, func(_ *amqp.Delivery, m *Message) (bool, error) {
		if opts.Filter.Match(m, now) {
			if opts.Each != nil {
				opts.Each(m)
			} else {
				out = append(out, *m)
			}
			p.Matched++
			p.Done++
		}
		return opts.Limit == 0 || p.Matched < opts.Limit, nil
	})
	return out, err
}

// Group is one row of [Stats]: how many dead messages share a key, and
// when the oldest and newest of them died.
type Group struct {
	Key    string    `json:"key"`
	Count  int       `json:"count"`
	Oldest time.Time `json:"oldest,omitzero"`
	Newest time.Time `json:"newest,omitzero"`
	// Example is, in ByError, the error text of the group's first message
	// as it was, for the particulars the key replaced.
	Example string `json:"example,omitempty"`
}

// Stats answers "what broke, and how much": the matching messages counted
// by error class, by event type and by failure signature, largest group
// first. ByError's key is [dlq.Signature] of the class and error: the error
// text with ids, numbers, hosts and the like replaced by placeholders, so
// that one failure met by 4,000 different messages is one group, not
// 4,000. Messages without a class or type count under the empty key.
// ByField counts the messages whose error named the field that failed
// (dlq.HeaderErrorField: a contract broken, data that did not decode), by
// contract and field, "workitem.updated@1.0 payload.data.state"; the
// others are not in it.
type Stats struct {
	Queue   string  `json:"queue"`
	Total   int     `json:"total"`
	ByClass []Group `json:"by_class"`
	ByType  []Group `json:"by_type"`
	ByError []Group `json:"by_error"`
	ByField []Group `json:"by_field"`
}

// StatsOptions select the messages [Queue.Stats] counts.
type StatsOptions struct {
	Filter   Filter
	Progress func(Progress)
}

// Stats reads every message present when it starts, without changing the
// queue, and counts the ones that match.
func (q *Queue) Stats(ctx context.Context, opts StatsOptions) (Stats, error) {
	if err := opts.Filter.Validate(); err != nil {
		return Stats{}, err
	}
	byClass, byType, byError, byField := grouper{}, grouper{}, grouper{}, grouper{}
	st := Stats{Queue: q.name}
	var p Progress
	now := time.Now()
	err := q.scan(ctx, 0, &p, opts.Progress, func(_ *amqp.Delivery, m *Message) (bool, error) {
		if opts.Filter.Match(m, now) {
			p.Matched++
			p.Done++
			st.Total++
			died := m.Metadata.LastFailure
			byClass.add(string(m.Metadata.Class), died, "")
			byType.add(m.EventType, died, "")
			byError.add(dlq.Signature(m.Metadata.Class, m.Metadata.Error), died, m.Metadata.Error)
			if md := m.Metadata; md.Field != "" {
				byField.add(fieldKey(md.Contract, md.Field), died, "")
			}
		}
		return true, nil
	})
	st.ByClass, st.ByType, st.ByError, st.ByField = byClass.sorted(), byType.sorted(), byError.sorted(), byField.sorted()
	return st, err
}

// fieldKey is a ByField group's key: the contract and the field, each
// array index in the field's path as <n>, as dlq.Signature writes numbers,
// so that one failure met at label_ids.0 and label_ids.5 is one group.
func fieldKey(contract, field string) string {
	parts := strings.Split(field, ".")
	for i, p := range parts {
		if p != "" && strings.Trim(p, "0123456789") == "" {
			parts[i] = "<n>"
		}
	}
	return strings.TrimSpace(contract + " " + strings.Join(parts, "."))
}

type grouper map[string]*Group

func (g grouper) add(key string, died time.Time, example string) {
	row := g[key]
	if row == nil {
		row = &Group{Key: key, Example: example}
		g[key] = row
	}
	row.Count++
	if !died.IsZero() {
		if row.Oldest.IsZero() || died.Before(row.Oldest) {
			row.Oldest = died
		}
		if died.After(row.Newest) {
			row.Newest = died
		}
	}
}

func (g grouper) sorted() []Group {
	out := make([]Group, 0, len(g))
	for _, row := range g {
		out = append(out, *row)
	}
	slices.SortFunc(out, func(a, b Group) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Key, b.Key))
	})
	return out
}
