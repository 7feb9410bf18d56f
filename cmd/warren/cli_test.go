package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// Every command made of verbs picks and explains them the same way: one
// mechanism (subcommands.parse), so the errors and the help agree.
func TestCommandsWithVerbsBehaveAlike(t *testing.T) {
	verbs := map[string][]string{}
	for _, v := range dlqVerbs.verbs {
		verbs["dlq"] = append(verbs["dlq"], v.name)
	}
	for _, v := range outboxVerbs.verbs {
		verbs["outbox"] = append(verbs["outbox"], v.name)
	}
	for _, v := range relayVerbs.verbs {
		verbs["relay"] = append(verbs["relay"], v.name)
	}
	call := func(args ...string) (code int, stdout, stderr string) {
		var out, errOut bytes.Buffer
		env := &cliEnv{stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }}
		code = run(context.Background(), env, args)
		return code, out.String(), errOut.String()
	}
	for cmd, names := range verbs {
		want := strings.Join(names, ", ")
		if code, _, stderr := call(cmd); code != 2 || !strings.Contains(stderr, "missing subcommand ("+want+")") {
			t.Errorf("warren %s: exit %d, stderr %q; want 2 and the verbs listed", cmd, code, stderr)
		}
		if code, _, stderr := call(cmd, "nope"); code != 2 || !strings.Contains(stderr, `unknown subcommand "nope" (want `+want+")") {
			t.Errorf("warren %s nope: exit %d, stderr %q; want 2 and the verbs listed", cmd, code, stderr)
		}
		if code, stdout, _ := call(cmd, "--help"); code != 0 || !strings.Contains(stdout, "Usage: warren "+cmd) {
			t.Errorf("warren %s --help: exit %d, stdout %q", cmd, code, stdout)
		}
		for _, name := range names {
			code, stdout, _ := call(cmd, name, "--help")
			for _, s := range []string{"Usage: warren " + cmd + " " + name + " ", "Flags:\n", "Examples:\n  "} {
				if code != 0 || !strings.Contains(stdout, s) {
					t.Errorf("warren %s %s --help: exit %d, lacks %q:\n%s", cmd, name, code, s, stdout)
				}
			}
			if code, _, stderr := call(cmd, name, "--no-such-flag"); code != 2 || !strings.Contains(stderr, name+": flag provided but not defined: --no-such-flag") {
				t.Errorf("warren %s %s --no-such-flag: exit %d, stderr %q", cmd, name, code, stderr)
			}
		}
	}
}
