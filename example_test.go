package warren_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/warrenmq/warren"
)

// A handler decodes the payload it cares about and reports through its error
// what should happen to the message.
func ExampleHandlerFunc() {
	h := warren.HandlerFunc(func(ctx context.Context, m *warren.Message) error {
		var item struct {
			State string `json:"state"`
		}
		if err := m.Event.Payload.DecodeData(&item); err != nil {
			return warren.Permanent(err) // a payload we cannot read will not get better
		}
		if item.State == "" {
			return warren.Skip("no state change")
		}
		fmt.Printf("%s moved %s to %s\n", m.Event.InitiatorType, m.Event.EntityID, item.State)
		return nil
	})

	ev, _ := warren.DecodeEvent([]byte(`{"event_id":"1","event_type":"workitem.updated","entity_id":"ISSUE-7",` +
		`"initiator_type":"USER","payload":{"data":{"state":"done"}}}`))
	err := h.Handle(context.Background(), &warren.Message{Event: ev})
	fmt.Println(warren.Classify(err))
	// Output:
	// USER moved ISSUE-7 to done
	// done 0s
}

func ExampleClassify() {
	rateLimited := warren.RetryAfter(30*time.Second, errors.New("429 Too Many Requests"))
	outcome, delay := warren.Classify(rateLimited)
	fmt.Println(outcome, delay)

	outcome, _ = warren.Classify(warren.Permanent(errors.New("410 Gone")))
	fmt.Println(outcome)
	// Output:
	// retry 30s
	// permanent
}

func ExampleDecodeEvent() {
	_, err := warren.DecodeEvent([]byte(`{"event_id":"","event_type":"workitem.created"}`))
	fmt.Println(err)
	fmt.Println(errors.Is(err, warren.ErrInvalidEvent))
	// Output:
	// invalid event: event_id is missing or empty
	// true
}
