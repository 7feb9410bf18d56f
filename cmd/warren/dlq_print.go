package main

// How a dead letter and a DLQ's statistics are printed.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/warrenmq/warren/dlqtool"
)

// printMessage prints m, read from the dead-letter queue of the queue
// home, which is where a replay sends it.
func printMessage(w io.Writer, m *dlqtool.Message, home string, now time.Time) error {
	md := m.Metadata
	fmt.Fprintf(w, "── message at position %d ──\n", m.Position)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "  %s\t%s\n", k, v)
		}
	}
	row("event id", clean(m.EventID))
	row("event type", clean(m.EventType))
	row("class", clean(string(md.Class)))
	row("contract", clean(md.Contract))
	row("field", clean(md.Field))
	row("error", clean(md.Error))
	row("attempts", strconv.Itoa(md.Attempts))
	row("first failure", when(md.FirstFailure, now))
	row("last failure", when(md.LastFailure, now))
	row("origin queue", clean(md.OriginQueue))
	if md.OriginExchange != "" || md.OriginRoutingKey != "" {
		row("origin", fmt.Sprintf("exchange %q, routing key %q", md.OriginExchange, md.OriginRoutingKey))
	}
	replaysTo := clean(home)
	if origin := m.Origin(); origin != "" && origin != home {
		// The headers may be a producer's forgery; the replay ignores them.
		replaysTo += fmt.Sprintf(" (not %s, which its headers name as its origin)", clean(origin))
	}
	row("replays to", replaysTo)
	row("consumer", clean(md.Consumer))
	row("host", clean(md.Host))
	if md.Replays > 0 {
		row("replays", strconv.Itoa(md.Replays))
	}
	if fd := md.FirstDeath; fd.Reason != "" {
		// Kept by dlq.StripDeaths when the message was moved back from a
		// DLQ or retried: the x-death it came from is gone.
		v := fmt.Sprintf("%s from queue %s", clean(fd.Reason), clean(fd.Queue))
		if !fd.Time.IsZero() {
			v += " at " + when(fd.Time, now)
		}
		row("first broker death", v)
	}
	for i, d := range md.Deaths {
		row(fmt.Sprintf("x-death[%d]", i), fmt.Sprintf("%s from queue %s ×%d at %s (exchange %q, keys %q)",
			clean(d.Reason), clean(d.Queue), d.Count, when(d.Time, now), d.Exchange, d.RoutingKeys))
	}
	for _, p := range md.Problems {
		row("problem", clean(p))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w, "  properties:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, p := range []struct{ k, v string }{
		{"content_type", m.ContentType}, {"content_encoding", m.ContentEncoding},
		{"delivery_mode", nonZero(m.DeliveryMode)}, {"priority", nonZero(m.Priority)},
		{"correlation_id", m.CorrelationId}, {"reply_to", m.ReplyTo}, {"expiration", m.Expiration},
		{"message_id", m.MessageId}, {"timestamp", when(m.Timestamp, now)}, {"type", m.Type},
		{"user_id", m.UserId}, {"app_id", m.AppId},
	} {
		if p.v != "" {
			fmt.Fprintf(tw, "    %s\t%s\n", p.k, clean(p.v))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(m.Headers) > 0 {
		fmt.Fprintln(w, "  headers:")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		keys := make([]string, 0, len(m.Headers))
		for k := range m.Headers {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(tw, "    %s\t%s\n", clean(k), clean(dlqtool.HeaderText(m.Headers[k])))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "  body (%d bytes):\n", len(m.Body))
	fmt.Fprintln(w, indent(bodyText(m.Body), "    "))
	return nil
}

func bodyText(body []byte) string {
	if !utf8.Valid(body) {
		return fmt.Sprintf("(not UTF-8; hex) %x", body)
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, body, "", "  ") == nil {
		return cleanLines(pretty.String())
	}
	return cleanLines(string(body))
}

// printStats prints one DLQ's groups for a human.
func (c *dlqCall) printStats(st dlqtool.Stats) error {
	w := c.env.stdout
	fmt.Fprintf(w, "%s: %d dead messages", st.Queue, st.Total)
	if !c.filter.IsZero() {
		fmt.Fprint(w, " matching the filters")
	}
	fmt.Fprintln(w)
	now := time.Now()
	for _, by := range strings.Split(c.opts.by, ",") {
		var title string
		var groups []dlqtool.Group
		switch strings.TrimSpace(by) {
		case "class":
			title, groups = "CLASS", st.ByClass
		case "type":
			title, groups = "EVENT TYPE", st.ByType
		case "error":
			title, groups = "ERROR SIGNATURE", st.ByError
		case "field":
			if len(st.ByField) == 0 {
				continue // no error named a field: no section
			}
			title, groups = "CONTRACT AND FIELD", st.ByField
		}
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "%s\tCOUNT\tOLDEST\tNEWEST", title)
		if title == "ERROR SIGNATURE" {
			// The signature hides the particulars (which id, which
			// host); one real error of the group shows them.
			fmt.Fprint(tw, "\tEXAMPLE")
		}
		fmt.Fprintln(tw)
		shown := groups
		if c.opts.top > 0 && len(shown) > c.opts.top {
			shown = shown[:c.opts.top]
		}
		for _, g := range shown {
			key := c.cell(g.Key, 60)
			if g.Key == "" {
				key = "(none)"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s", key, g.Count, age(g.Oldest, now), age(g.Newest, now))
			if title == "ERROR SIGNATURE" {
				fmt.Fprintf(tw, "\t%s", c.cell(g.Example, 60))
			}
			fmt.Fprintln(tw)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if more := len(groups) - len(shown); more > 0 {
			fmt.Fprintf(w, "… and %d more (--top 0 shows all)\n", more)
		}
	}
	return nil
}
