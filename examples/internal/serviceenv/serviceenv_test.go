package serviceenv_test

import (
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/examples/internal/serviceenv"
)

func env(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

// Each variable lands in its field, and the consumer built from the
// result takes the queue as it is and names its DLQ and DLX from them.
func TestConsumerReadsTheEnvironment(t *testing.T) {
	cfg, err := serviceenv.Consumer(env(map[string]string{
		"AMQP_URL":            "amqp://u:p@broker:5672/",
		"WARREN_QUEUE":        "plane.event_stream.webhook",
		"WARREN_EXCHANGE":     "plane.event_stream",
		"WARREN_ADOPT_QUEUE":  "true",
		"WARREN_DLQ":          "webhook.dlq",
		"WARREN_DLX":          "plane.event_stream.dlq",
		"WARREN_QUEUE_TYPE":   "quorum",
		"WARREN_RETRY_DELAYS": "500ms, 5s,2m",
	}), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	c, err := consumer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	got, topo := c.Config(), c.Topology()
	if got.URL != "amqp://u:p@broker:5672/" || !got.AdoptQueue || got.QueueType != consumer.Quorum {
		t.Errorf("config %+v: want the URL, AdoptQueue and quorum queues", got)
	}
	if topo.Queue != "plane.event_stream.webhook" || topo.Exchange != "plane.event_stream" || topo.DLQ != "webhook.dlq" || topo.DLX != "plane.event_stream.dlq" {
		t.Errorf("topology %+v: want the names from the environment", topo)
	}
	var tiers []string
	for _, r := range topo.Retry {
		tiers = append(tiers, r.Queue)
	}
	if want := "plane.event_stream.webhook.retry.500ms plane.event_stream.webhook.retry.5s plane.event_stream.webhook.retry.2m"; strings.Join(tiers, " ") != want {
		t.Errorf("retry tiers %v, want %s", tiers, want)
	}
}

// Retry delays that do not parse stop the service, naming the variable,
// rather than leaving the tiers the operator meant to change.
func TestConsumerRefusesBadRetryDelays(t *testing.T) {
	_, err := serviceenv.Consumer(env(map[string]string{"WARREN_RETRY_DELAYS": "1s,ten"}), nil)
	if err == nil || !strings.Contains(err.Error(), "WARREN_RETRY_DELAYS") {
		t.Fatalf("err = %v, want one naming WARREN_RETRY_DELAYS", err)
	}
}

// Unset, every field is left to the defaults; "false" is false.
func TestConsumerDefaults(t *testing.T) {
	cfg, err := serviceenv.Consumer(env(map[string]string{"WARREN_ADOPT_QUEUE": "false"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.URL != "" || cfg.Name != "" || cfg.Exchange != "" || cfg.AdoptQueue || cfg.DeadLetterQueue != "" || cfg.DeadLetterExchange != "" || cfg.QueueType != "" || cfg.RetryDelays != nil {
		t.Errorf("config %+v, want zero values", cfg)
	}
}

// A WARREN_ADOPT_QUEUE that is not a boolean stops the service, rather
// than starting it in the mode the operator meant to leave.
func TestConsumerRefusesABadAdoptQueue(t *testing.T) {
	_, err := serviceenv.Consumer(env(map[string]string{"WARREN_ADOPT_QUEUE": "yes please"}), nil)
	if err == nil || !strings.Contains(err.Error(), "WARREN_ADOPT_QUEUE") {
		t.Fatalf("err = %v, want one naming WARREN_ADOPT_QUEUE", err)
	}
}

// The services' documentation lists every variable they read.
func TestServiceDocsListTheVariables(t *testing.T) {
	for _, path := range []string{"../../webhook/cmd/webhook/main.go", "../../automation/cmd/automation/main.go", "../../../README.md"} {
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range serviceenv.ConsumerVars {
			if !strings.Contains(string(text), v) {
				t.Errorf("%s does not mention %s", path, v)
			}
		}
	}
}
