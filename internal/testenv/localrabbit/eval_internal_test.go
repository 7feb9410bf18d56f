package localrabbit

import "testing"

// erlBinary writes every byte as a number, so no character of a
// permission expression or password needs quoting.
func TestErlBinary(t *testing.T) {
	for in, want := range map[string]string{
		"":         "<<>>",
		`a"\`:      "<<97,34,92>>",
		"é\n":      "<<195,169,10>>",
		"^(x|y)$.": "<<94,40,120,124,121,41,36,46>>",
	} {
		if got := erlBinary(in); got != want {
			t.Errorf("erlBinary(%q) = %s, want %s", in, got, want)
		}
	}
}
