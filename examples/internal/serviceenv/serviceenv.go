package serviceenv

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/warrenmq/warren/consumer"
)

// ConsumerVars are the variables Consumer reads, for the lists in the
// services' documentation.
var ConsumerVars = []string{"AMQP_URL", "WARREN_QUEUE", "WARREN_EXCHANGE", "WARREN_ADOPT_QUEUE", "WARREN_DLQ", "WARREN_DLX", "WARREN_QUEUE_TYPE", "WARREN_RETRY_DELAYS"}

// Consumer returns the consumer configuration in getenv (os.Getenv outside
// tests), logging to log: AMQP_URL, WARREN_QUEUE (Config.Name),
// WARREN_EXCHANGE, WARREN_ADOPT_QUEUE (true takes a queue Plane declared as
// it is: Config.AdoptQueue), WARREN_DLQ (Config.DeadLetterQueue),
// WARREN_DLX (Config.DeadLetterExchange) and WARREN_QUEUE_TYPE (classic or
// quorum: Config.QueueType, checked by consumer.New) and WARREN_RETRY_DELAYS
// (the retry tiers, e.g. "1s,10s,1m,10m": Config.RetryDelays). An unset
// variable leaves the field to the service's or the consumer's default. A
// WARREN_ADOPT_QUEUE that is not a boolean is an error rather than false:
// read as false, it would start the consumer in the mode the operator
// meant to leave; a WARREN_RETRY_DELAYS that does not parse is an error
// too, rather than the defaults the operator meant to change.
func Consumer(getenv func(string) string, log *slog.Logger) (consumer.Config, error) {
	cfg := consumer.Config{
		URL:                getenv("AMQP_URL"),
		Name:               getenv("WARREN_QUEUE"),
		Exchange:           getenv("WARREN_EXCHANGE"),
		DeadLetterQueue:    getenv("WARREN_DLQ"),
		DeadLetterExchange: getenv("WARREN_DLX"),
		QueueType:          consumer.QueueType(getenv("WARREN_QUEUE_TYPE")),
		Logger:             log,
	}
	if v := getenv("WARREN_ADOPT_QUEUE"); v != "" {
		adopt, err := strconv.ParseBool(v)
		if err != nil {
			return consumer.Config{}, fmt.Errorf("WARREN_ADOPT_QUEUE=%q is not true or false", v)
		}
		cfg.AdoptQueue = adopt
	}
	if v := getenv("WARREN_RETRY_DELAYS"); v != "" {
		delays, err := retryDelays(v)
		if err != nil {
			return consumer.Config{}, fmt.Errorf("WARREN_RETRY_DELAYS=%q: %w", v, err)
		}
		cfg.RetryDelays = delays
	}
	return cfg, nil
}

// retryDelays reads comma-separated durations; consumer.New checks that
// they ascend.
func retryDelays(v string) ([]time.Duration, error) {
	var out []time.Duration
	for part := range strings.SplitSeq(v, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}
