package main

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"time"
)

// sendFailures reads the webhook replicas' logs for POSTs that failed on
// the sender's side — a timeout, a reset connection, a cancelled context —
// rather than being answered with a status. Such a POST may have been
// accepted all the same, and its retry then delivers the event twice: the
// evidence for causeSendFailed. The result maps an event id to, for each
// replica, when it logged such a failure.
func (h *harness) sendFailures() map[string]map[string][]time.Time {
	out := map[string]map[string][]time.Time{}
	h.eachWebhookLogLine(func(replica, line string) bool {
		at, id, ok := sendFailureOf([]byte(line))
		if ok {
			if out[id] == nil {
				out[id] = map[string][]time.Time{}
			}
			out[id][replica] = append(out[id][replica], at)
		}
		return true
	})
	return out
}

// eachWebhookLogLine calls fn with each line of each webhook replica's
// log, and the replica's name, while fn returns true for that replica. A
// missing log is no evidence and is passed over.
func (h *harness) eachWebhookLogLine(fn func(replica, line string) bool) {
	for _, p := range h.procs {
		if p.spec.kind != "webhook" {
			continue
		}
		f, err := os.Open(p.logPath)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() && fn(p.spec.name, sc.Text()) {
		}
		f.Close()
	}
}

// sendFailureOf reads one log line: a handler failure of an event whose
// error holds a POST that got no status back.
func sendFailureOf(line []byte) (at time.Time, eventID string, ok bool) {
	if !strings.Contains(string(line), `"POST `) && !strings.Contains(string(line), `\nPOST `) {
		return time.Time{}, "", false
	}
	var rec struct {
		Time    time.Time `json:"time"`
		EventID string    `json:"event_id"`
		Error   string    `json:"error"`
	}
	if json.Unmarshal(line, &rec) != nil || rec.EventID == "" {
		return time.Time{}, "", false
	}
	// One line per endpoint's error (errors.Join). "POST <url>: 503 …" is
	// an answer; anything else after the URL is a failure to get one.
	for _, e := range strings.Split(rec.Error, "\n") {
		_, after, found := strings.Cut(e, "POST ")
		if !found {
			continue
		}
		_, reason, found := strings.Cut(after, ": ")
		answered := reason == "" || (reason[0] >= '0' && reason[0] <= '9') || strings.HasPrefix(reason, "endpoint answered")
		if found && !answered {
			return rec.Time, rec.EventID, true
		}
	}
	return time.Time{}, "", false
}

// logLinesOf returns what the webhook replicas logged about event id, a
// few lines each, for a failure a fault did not explain.
func (h *harness) logLinesOf(id string) string {
	var out []string
	count := map[string]int{}
	h.eachWebhookLogLine(func(replica, line string) bool {
		if strings.Contains(line, id) {
			if len(line) > 400 {
				line = line[:400] + "…"
			}
			out = append(out, replica+": "+line)
			count[replica]++
		}
		return count[replica] < 8
	})
	if len(out) == 0 {
		return "nothing"
	}
	return "\n    " + strings.Join(out, "\n    ")
}
