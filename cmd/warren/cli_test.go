package main

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// Every command made of verbs picks and explains them the same way: one
// mechanism (subcommands.parse), so the errors and the help agree.
func TestCommandsWithVerbsBehaveAlike(t *testing.T) {
	t.Parallel()
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
	for _, v := range contractsVerbs.verbs {
		verbs["contracts"] = append(verbs["contracts"], v.name)
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

// A build stamped as make build stamps it reports that version; built
// with VCS stamping (go build's default in a clone; off on some machines
// through GOFLAGS=-buildvcs=false, and go does not stamp a build in a git
// worktree), the version also names the revision the build recorded.
func TestVersionNamesTheStampAndTheRevision(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "warren")
	const stamp = "v0.1.0-3-gabc1234"
	if out, err := exec.Command(goTool, "build", "-buildvcs=true", "-ldflags", "-X main.stampedVersion="+stamp, "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -buildvcs=true: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, "--version").Output(); err != nil || !strings.HasPrefix(string(out), "warren "+stamp+" ") {
		t.Errorf("warren --version printed %q (%v), want it to begin with warren %s", out, err, stamp)
	}
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var revision string
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" {
			revision = s.Value
		}
	}
	if revision == "" {
		t.Skip("go build recorded no revision here (a source tree without .git, or a git worktree)")
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := " revision " + revision; !strings.Contains(string(out), want) {
		t.Errorf("warren --version printed %q, want it to contain %q", out, want)
	}
}

// The CDC relay's own flags are refused in the polling mode, where they
// would be ignored.
func TestRelayCDCFlagsNeedCDCMode(t *testing.T) {
	t.Parallel()
	for _, flag := range [][]string{{"--slot", "s"}, {"--drop-slot"}, {"--nack-timeout", "10s"}} {
		var out, errOut bytes.Buffer
		env := &cliEnv{stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }}
		args := append([]string{"relay", "run", "--database-url", "postgres://127.0.0.1:1/x"}, flag...)
		if code := run(context.Background(), env, args); code != 2 || !strings.Contains(errOut.String(), "need --mode cdc") {
			t.Errorf("warren %s: exit %d, stderr %q; want 2 saying it needs --mode cdc", strings.Join(args, " "), code, errOut.String())
		}
	}
	// The hold's marks without a queue to hold on would be ignored.
	for _, flag := range [][]string{{"--high-water", "5"}, {"--low-water", "3"}} {
		var out, errOut bytes.Buffer
		env := &cliEnv{stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }}
		args := append([]string{"relay", "run", "--database-url", "postgres://127.0.0.1:1/x"}, flag...)
		if code := run(context.Background(), env, args); code != 2 || !strings.Contains(errOut.String(), "need --hold-back-queue") {
			t.Errorf("warren %s: exit %d, stderr %q; want 2 saying it needs --hold-back-queue", strings.Join(args, " "), code, errOut.String())
		}
	}
}

// 'warren --version' and 'warren version' print the module version (or
// "(devel)"), the revision the binary was built from, and the Go version.
// The revision shows only when the build stamped it (not under
// -buildvcs=false; this worktree's builds were not stamped either); then it is the
// checkout's.
func TestVersion(t *testing.T) {
	t.Parallel()
	want := regexp.MustCompile(`^warren (v\S+|\(devel\))( revision [0-9a-f]{40}( \(modified\))?)? ` + regexp.QuoteMeta(runtime.Version()) + ` \S+/\S+\n$`)
	for _, arg := range []string{"--version", "version"} {
		r := ok(t, arg)
		if !want.MatchString(r.stdout) {
			t.Errorf("warren %s printed %q, want it to match %s", arg, r.stdout, want)
		}
		head, err := exec.Command("git", "rev-parse", "HEAD").Output()
		if strings.Contains(r.stdout, " revision ") && err == nil && !strings.Contains(r.stdout, " revision "+strings.TrimSpace(string(head))) {
			t.Errorf("warren %s printed %q, not the checkout's revision %s", arg, r.stdout, head)
		}
	}
}
