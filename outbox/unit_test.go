package outbox_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/warrenmq/warren/outbox"
)

func TestValidateTable(t *testing.T) {
	for name, ok := range map[string]bool{
		"warren_outbox":            true,
		"_x":                       true,
		"o2":                       true,
		strings.Repeat("a", 48):    true,
		strings.Repeat("a", 49):    false,
		"":                         false,
		"Outbox":                   false,
		"2outbox":                  false,
		"public.outbox":            false,
		"out box":                  false,
		`x"; DROP TABLE users; --`: false,
		"outbox\x00":               false,
		"ünïcode":                  false,
	} {
		if err := outbox.ValidateTable(name); (err == nil) != ok {
			t.Errorf("ValidateTable(%q) = %v, want ok=%v", name, err, ok)
		}
		if _, err := outbox.New(name); name != "" && (err == nil) != ok {
			t.Errorf("New(%q) = %v, want ok=%v", name, err, ok)
		} else if err != nil && !errors.Is(err, outbox.ErrInvalidConfig) {
			t.Errorf("New(%q) error %v does not wrap ErrInvalidConfig", name, err)
		}
	}
	ob, err := outbox.New("")
	if err != nil || ob.Name() != outbox.DefaultTable || ob.Channel() != "warren."+outbox.DefaultTable {
		t.Errorf("New(\"\") = %v, %v", ob, err)
	}
}
