package dlq

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// Signature is the failure signature of a dead message: its class and its
// error text with what varies from one message to the next (ids, UUIDs,
// numbers, hosts, addresses, durations, quoted values) replaced by
// placeholders, so that 4,000 timeouts to 4,000 different work items are one
// signature. `warren dlq stats` and the console group by it.
//
// It is a grouping key for people, not an identity: two different bugs
// whose messages differ only in a number share a signature, and that is
// what an operator looking at "the same timeout, 4,000 times" wants.
func Signature(class Class, errText string) string {
	text := NormalizeError(errText)
	switch {
	case class == "" && text == "":
		return "(unclassified)"
	case class == "":
		return text
	case text == "":
		return string(class)
	}
	return string(class) + ": " + text
}

// normalizers rewrite the parts of an error text that name one message's
// particulars. The order matters: a UUID or a URL is replaced whole
// before its digits could be taken for numbers.
var normalizers = []struct {
	re   *regexp.Regexp
	with string
}{
	// Quoted values: an event id, a key, a path.
	{regexp.MustCompile(`"[^"\n]{0,200}"`), `"…"`},
	{regexp.MustCompile(`'[^'\n]{0,200}'`), `'…'`},
	{regexp.MustCompile(`\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b`), "<uuid>"},
	{regexp.MustCompile(`\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s"']*[^\s"':,.;)]`), "<url>"},
	{regexp.MustCompile(`\[[0-9a-fA-F:]*:[0-9a-fA-F:]+\](:\d+)?`), "<host>"},
	{regexp.MustCompile(`\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b`), "<host>"},
	{regexp.MustCompile(`\b[a-zA-Z0-9-]+(\.[a-zA-Z0-9-]+)*\.[a-zA-Z]{2,}:\d+\b`), "<host>"},
	// Durations as Go prints them (1.5s, 300ms, 2m30s, 1h0m0s) and as
	// people write them (30 seconds).
	{regexp.MustCompile(`\b(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+\b`), "<duration>"},
	{regexp.MustCompile(`\b\d+(\.\d+)? ?(milliseconds?|seconds?|minutes?|hours?)\b`), "<duration>"},
	// The JSON type a value had, as schema validators say it ("got
	// boolean, want string"): one message's particular, where the field
	// and what it wants are the failure (contract.Violation).
	{regexp.MustCompile(`\bgot (null|boolean|number|integer|string|array|object)\b`), "got <type>"},
	// Long hex strings: hashes, trace ids, ObjectIDs.
	{regexp.MustCompile(`\b[0-9a-fA-F]*[0-9][0-9a-fA-F]*[a-fA-F][0-9a-fA-F]*\b|\b[0-9a-fA-F]*[a-fA-F][0-9a-fA-F]*[0-9][0-9a-fA-F]*\b`), "<hex>"},
	// Any number left, alone or ending a word (order-1234, id=42), but
	// not a status code: "HTTP 503" and "HTTP 404" are different failures.
	{regexp.MustCompile(`(?i)((status|code|http)( code)?[\s:=]*)?\d+(\.\d+)?`), "<n>"},
}

// NormalizeError is [Signature]'s treatment of an error text alone: the
// text with its particulars replaced by placeholders, spaces collapsed.
func NormalizeError(text string) string {
	text = strings.Join(strings.Fields(text), " ")
	for _, n := range normalizers {
		if n.with == "<n>" {
			text = replaceNumbers(n.re, text)
			continue
		}
		text = n.re.ReplaceAllStringFunc(text, func(m string) string {
			// A short hex-looking word is more often a word (cafe, add,
			// bed) or a small code than an id: only 8 hex digits or more
			// are taken for one.
			if n.with == "<hex>" && len(m) < 8 {
				return m
			}
			return n.with
		})
	}
	return text
}

// replaceNumbers replaces the numbers re finds with "<n>", except status
// codes: one named as such ("HTTP 503", "status=404"), and an HTTP status
// followed by its reason phrase ("503 Service Unavailable", as a webhook's
// error says it): a 503 and a 400 are different failures.
func replaceNumbers(re *regexp.Regexp, text string) string {
	var b strings.Builder
	last := 0
	for _, loc := range re.FindAllStringIndex(text, -1) {
		m := text[loc[0]:loc[1]]
		b.WriteString(text[last:loc[0]])
		last = loc[1]
		if !unicode.IsDigit(rune(m[0])) || isStatusWithReason(m, text[loc[1]:]) {
			b.WriteString(m)
			continue
		}
		b.WriteString("<n>")
	}
	b.WriteString(text[last:])
	return b.String()
}

// isStatusWithReason reports whether number is an HTTP status code that
// rest begins with the reason phrase of.
func isStatusWithReason(number, rest string) bool {
	code, err := strconv.Atoi(number)
	if err != nil || code < 100 || code > 599 || len(number) != 3 {
		return false
	}
	reason := http.StatusText(code)
	return reason != "" && strings.HasPrefix(rest, " "+reason)
}
