package warrenprom_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/warrenprom"
	"github.com/warrenmq/warren/warrenprom/cdcprom"
	"github.com/warrenmq/warren/warrenprom/relayprom"
)

// exported returns the names of every metric family warrenprom, relayprom
// and cdcprom export, with one event through each so every vector has a
// child.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	cm, err := warrenprom.NewConsumerMetrics(reg, warrenprom.ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Connected("c", false)
	cm.Received("c")
	cm.Settled("c", consumer.Settlement{EventType: "t", Disposition: consumer.DeadLettered, Class: "permanent", HandlerDuration: 1})
	dm, err := warrenprom.NewDedupMetrics(reg, warrenprom.DedupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dm.Instrument(testenv.MemoryStore(t), "c")
	if _, err := warrenprom.NewQueueDepths(reg, warrenprom.QueueDepthOptions{}, consumer.TopologyFor(consumer.Config{Name: "c"})); err != nil {
		t.Fatal(err)
	}
	rm, err := relayprom.NewRelayMetrics(reg, relayprom.RelayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rm.OutboxStats("o", outbox.Stats{})
	rm.QueueDepth("o", "q", 0, 0) // the watched queues' gauges, and held_back at 0
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
	}
	// The CDC metrics are read from a relay and its slot at each scrape:
	// their names are in the collector's descriptions.
	cdcm, err := cdcprom.New(prometheus.NewRegistry(), nil, cdcprom.Options{})
	if err != nil {
		t.Fatal(err)
	}
	descs := make(chan *prometheus.Desc, 32)
	cdcm.Describe(descs)
	close(descs)
	for d := range descs {
		name := descName.FindStringSubmatch(d.String())
		if name == nil {
			t.Fatalf("no name in %s", d)
		}
		names[name[1]] = true
	}
	// The queue gauges get children only from a poll.
	names["warren_queue_messages"], names["warren_queue_consumers"] = true, true
	return names
}

var metricName = regexp.MustCompile(`warren_[a-z_]*[a-z]`)

// descName finds the name in a prometheus.Desc's String().
var descName = regexp.MustCompile(`fqName: "([a-z_]+)"`)

// referenced returns the warren metric names a document uses, a
// histogram's _bucket, _count and _sum series under the histogram's name.
func referenced(t *testing.T, path string) map[string]bool {
	t.Helper()
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, m := range metricName.FindAllString(string(doc), -1) {
		if m == "warren_outbox" {
			continue // the default table's name, and warren_outbox_* in prose
		}
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			if strings.HasSuffix(m, "_seconds"+suffix) {
				m = strings.TrimSuffix(m, suffix)
			}
		}
		names[m] = true
	}
	return names
}

// TestDocsUseExportedMetrics keeps the dashboard and the alerts in step
// with the code: every metric they query exists, and the dashboard shows
// every metric there is.
func TestDocsUseExportedMetrics(t *testing.T) {
	have := exported(t)
	dashboard := "../docs/grafana-dashboard.json"
	raw, err := os.ReadFile(dashboard)
	if err != nil {
		t.Fatal(err)
	}
	var parsed struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &parsed); err != nil {
		t.Fatalf("%s is not valid JSON: %v", dashboard, err)
	}
	if len(parsed.Panels) == 0 {
		t.Fatalf("%s has no panels", dashboard)
	}
	for _, doc := range []string{dashboard, "../docs/alerts.md"} {
		for name := range referenced(t, doc) {
			if !have[name] {
				t.Errorf("%s uses %s, which no warren collector exports", doc, name)
			}
		}
	}
	shown := referenced(t, dashboard)
	var missing []string
	for name := range have {
		if !shown[name] {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("the dashboard shows none of %v", missing)
	}
}
