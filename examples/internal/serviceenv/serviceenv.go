package serviceenv

import (
	"fmt"
	"log/slog"
	"strconv"

	"github.com/warrenmq/warren/consumer"
)

// ConsumerVars are the variables Consumer reads, for the lists in the
// services' documentation.
var ConsumerVars = []string{"AMQP_URL", "WARREN_QUEUE", "WARREN_EXCHANGE", "WARREN_ADOPT_QUEUE", "WARREN_DLQ", "WARREN_DLX", "WARREN_QUEUE_TYPE"}

// Consumer returns the consumer configuration in getenv (os.Getenv outside
// tests), logging to log: AMQP_URL, WARREN_QUEUE (Config.Name),
// WARREN_EXCHANGE, WARREN_ADOPT_QUEUE (true takes a queue Plane declared as
// it is: Config.AdoptQueue), WARREN_DLQ (Config.DeadLetterQueue),
// WARREN_DLX (Config.DeadLetterExchange) and WARREN_QUEUE_TYPE (classic or
// quorum: Config.QueueType, checked by consumer.New). An unset variable leaves the
// field to the service's or the consumer's default. A WARREN_ADOPT_QUEUE
// that is not a boolean is an error rather than false: read as false, it
// would start the consumer in the mode the operator meant to leave.
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
	return cfg, nil
}
