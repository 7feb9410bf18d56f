package redact

import (
	"cmp"
	"slices"
	"strings"
)

// minValueLen is the shortest secret [Values] masks: shorter ones would
// blank out ordinary words.
const minValueLen = 3

// Values returns text with every occurrence of each of secrets replaced by
// "xxxxx": for text that may quote values known to be secret (a password,
// a token, the parts of a URL), wherever they appear in it. Secrets
// shorter than three characters are left alone. Longer secrets are
// replaced first, so that a short secret inside a longer one cannot mask
// part of it and leave the rest in view.
func Values(text string, secrets ...string) string {
	longestFirst := slices.SortedFunc(slices.Values(secrets), func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	for _, secret := range longestFirst {
		if len(secret) >= minValueLen {
			text = strings.ReplaceAll(text, secret, mask)
		}
	}
	return text
}
