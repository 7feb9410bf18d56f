package dlq_test

import (
	"testing"

	"github.com/warrenmq/warren/dlq"
)

func TestSignatureGroupsWhatVaries(t *testing.T) {
	same := [][]string{
		{
			`webhook: POST https://hooks.example.com/a/1?x=2: context deadline exceeded (Client.Timeout exceeded after 10s)`,
			`webhook: POST https://hooks.example.com/b/77: context deadline exceeded (Client.Timeout exceeded after 9.5s)`,
		},
		{
			`work item 5b1c2e0a-8f7d-4c1e-9a2b-3c4d5e6f7a8b: dial tcp 10.0.3.7:5432: connect: connection refused`,
			`work item 0e7d6c5b-4a39-4281-8f0e-1d2c3b4a5968: dial tcp 10.0.9.12:5432: connect: connection refused`,
		},
		{`order 1234 not found`, `order 98765 not found`},
		{`project "alpha" is archived`, `project "beta-2" is archived`},
		{`issue deadbeefcafe0001 locked by 3fa9c2e1d4b5a6c7`, `issue 0123456789abcdef locked by aaaaaaaa11111111`},
		{`timed out after 1m30s`, `timed out after 450ms`},
		{`retry in 30 seconds`, `retry in 2 minutes`},
		{`  spaced   out 1 `, `spaced out 2`},
		{`dial db.internal.example.com:5432: refused`, `dial cache-2.example.org:6379: refused`},
		// A number that is not followed by its status's reason phrase is
		// a number.
		{`failed after 503 tries`, `failed after 400 tries`},
		// A contract violation: the field and what it wants, whatever
		// JSON type the value had.
		{`contract item@1.0: payload.data.name: got number, want string`, `contract item@1.0: payload.data.name: got boolean, want string`},
	}
	for _, pair := range same {
		a, b := dlq.Signature(dlq.ClassExhausted, pair[0]), dlq.Signature(dlq.ClassExhausted, pair[1])
		if a != b {
			t.Errorf("different signatures for errors that differ only in particulars:\n  %q -> %q\n  %q -> %q", pair[0], a, pair[1], b)
		}
	}

	different := [][]string{
		{`webhook returned HTTP 503`, `webhook returned HTTP 404`},
		{`status code 500`, `status code 400`},
		{`order not found`, `customer not found`},
		{`add bed to cafe`, `add cab to cafe`}, // short hex-looking words are words
	}
	for _, pair := range different {
		a, b := dlq.Signature(dlq.ClassPermanent, pair[0]), dlq.Signature(dlq.ClassPermanent, pair[1])
		if a == b {
			t.Errorf("one signature %q for different failures %q and %q", a, pair[0], pair[1])
		}
	}
	// A status code stays in the signature, named as one or followed by its
	// reason phrase (the webhook sender's own words), so the operator
	// reads which status failed.
	for text, want := range map[string]string{
		`POST https://hooks.example/x: 503 Service Unavailable`: `POST <url>: 503 Service Unavailable`,
		`webhook returned HTTP 404`:                             `webhook returned HTTP 404`,
		`upstream said 400 Bad Request: bad field`:              `upstream said 400 Bad Request: bad field`,
	} {
		if got := dlq.NormalizeError(text); got != want {
			t.Errorf("NormalizeError(%q) = %q, want %q", text, got, want)
		}
	}
	if dlq.Signature(dlq.ClassPermanent, "x") == dlq.Signature(dlq.ClassExhausted, "x") {
		t.Error("the class is not part of the signature")
	}
}

func TestSignatureShape(t *testing.T) {
	for _, c := range []struct {
		class dlq.Class
		text  string
		want  string
	}{
		{dlq.ClassExhausted, `order 42: dial tcp 10.0.0.1:5432: i/o timeout after 5s`, `exhausted: order <n>: dial tcp <host>: i/o timeout after <duration>`},
		{dlq.ClassExpired, "", "expired"},
		{"", "boom 7", "boom <n>"},
		{"", "", "(unclassified)"},
		{dlq.ClassPermanent, `GET https://u:secret@example.com/x: HTTP 410`, `permanent: GET <url>: HTTP 410`},
	} {
		if got := dlq.Signature(c.class, c.text); got != c.want {
			t.Errorf("Signature(%q, %q) = %q, want %q", c.class, c.text, got, c.want)
		}
	}
}

func FuzzSignature(f *testing.F) {
	f.Add("order 42 failed after 3s at 10.0.0.1:80")
	f.Fuzz(func(t *testing.T, text string) {
		once := dlq.NormalizeError(text)
		if again := dlq.NormalizeError(once); again != once {
			t.Fatalf("not idempotent: %q -> %q -> %q", text, once, again)
		}
	})
}
