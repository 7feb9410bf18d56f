package outboxsql

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// ErrorText keeps what a text column stores: valid UTF-8 with no NUL, at
// most MaxErrorText bytes, cut between characters. The CDC relay's own
// cut took 2,000 bytes whatever they ended in, and a dead mark whose
// reason ended inside a character was refused by Postgres, failing the
// settle.
func TestErrorTextIsStorable(t *testing.T) {
	long := strings.Repeat("é", MaxErrorText) // 2 bytes each
	odd := "x" + long                         // the cut falls inside an é
	for name, in := range map[string]string{
		"short": "no route", "multi-byte at the cut": odd, "even": long,
		"invalid UTF-8": "bad \xff\xfe byte", "NUL": "a\x00b", "4-byte runes": strings.Repeat("😀", MaxErrorText),
	} {
		got := ErrorText(in)
		switch {
		case !utf8.ValidString(got):
			t.Errorf("%s: %q is not valid UTF-8", name, got[max(0, len(got)-8):])
		case strings.IndexByte(got, 0) >= 0:
			t.Errorf("%s: %q holds a NUL", name, got)
		case len(got) > MaxErrorText:
			t.Errorf("%s: %d bytes, more than %d", name, len(got), MaxErrorText)
		case utf8.ValidString(in) && !strings.Contains(in, "\x00") && len(in) <= MaxErrorText && got != in:
			t.Errorf("%s: %q changed to %q", name, in, got)
		case len(in) > MaxErrorText && (!strings.HasSuffix(got, "…") || !strings.HasPrefix(in, strings.TrimSuffix(got, "…"))):
			t.Errorf("%s: %q…%q is not a prefix of the text and the mark", name, got[:8], got[len(got)-8:])
		}
	}
}
