package dlqtool

import "testing"

// A partitioned consumer's dead letters name a partition queue as their
// origin; they are home, and so is the consumer's own queue. Nothing else
// is, however it starts.
func TestIsHome(t *testing.T) {
	t.Parallel()
	q := &Queue{name: "webhook.dlq", consumer: "webhook"}
	for queue, want := range map[string]bool{
		"webhook": true, "webhook.p0": true, "webhook.p12": true,
		"webhook.p": false, "webhook.px": false, "webhook.p1x": false, "webhook.retry.1s": false,
		"webhook2": false, "automation": false, "automation.p0": false, "": false,
	} {
		if got := q.isHome(queue); got != want {
			t.Errorf("isHome(%q) = %v, want %v", queue, got, want)
		}
	}
}
