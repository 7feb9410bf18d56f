package outbox_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

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

// ErrorText keeps what a text column stores: valid UTF-8 with no NUL, at
// most MaxErrorText bytes, cut between characters. The CDC relay's own
// cut took 2,000 bytes whatever they ended in, and a dead mark whose
// reason ended inside a character was refused by Postgres, failing the
// settle.
func TestErrorTextIsStorable(t *testing.T) {
	long := strings.Repeat("é", outbox.MaxErrorText) // 2 bytes each
	odd := "x" + long                                // the cut falls inside an é
	for name, in := range map[string]string{
		"short": "no route", "multi-byte at the cut": odd, "even": long,
		"invalid UTF-8": "bad \xff\xfe byte", "NUL": "a\x00b", "4-byte runes": strings.Repeat("😀", outbox.MaxErrorText),
	} {
		got := outbox.ErrorText(in)
		switch {
		case !utf8.ValidString(got):
			t.Errorf("%s: %q is not valid UTF-8", name, got[max(0, len(got)-8):])
		case strings.IndexByte(got, 0) >= 0:
			t.Errorf("%s: %q holds a NUL", name, got)
		case len(got) > outbox.MaxErrorText:
			t.Errorf("%s: %d bytes, more than %d", name, len(got), outbox.MaxErrorText)
		case utf8.ValidString(in) && !strings.Contains(in, "\x00") && len(in) <= outbox.MaxErrorText && got != in:
			t.Errorf("%s: %q changed to %q", name, in, got)
		case len(in) > outbox.MaxErrorText && (!strings.HasSuffix(got, "…") || !strings.HasPrefix(in, strings.TrimSuffix(got, "…"))):
			t.Errorf("%s: %q…%q is not a prefix of the text and the mark", name, got[:8], got[len(got)-8:])
		}
	}
}
