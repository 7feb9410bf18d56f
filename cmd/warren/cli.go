package main

// Helpers every verb of the command shares: flags, help text layout, and
// printing for humans and scripts.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/term"
)

// flagSet is a flag.FlagSet that keeps its flags in the order they were
// defined (for help), names their arguments, accepts flags after
// positional arguments, and prints nothing itself.
type flagSet struct {
	fs    *flag.FlagSet
	order []flagDoc
}

type flagDoc struct{ name, arg, usage, def string }

func newFlagSet() *flagSet {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{fs: fs}
}

func (f *flagSet) doc(name, arg, usage, def string) {
	f.order = append(f.order, flagDoc{name, arg, usage, def})
}

func (f *flagSet) String(p *string, name, arg, usage, def string) {
	f.fs.StringVar(p, name, def, usage)
	f.doc(name, arg, usage, def)
}

func (f *flagSet) Int(p *int, name, arg, usage string, def int) {
	f.fs.IntVar(p, name, def, usage)
	f.doc(name, arg, usage, fmt.Sprint(def))
}

func (f *flagSet) Float(p *float64, name, arg, usage string, def float64) {
	f.fs.Float64Var(p, name, def, usage)
	f.doc(name, arg, usage, fmt.Sprint(def))
}

func (f *flagSet) Bool(p *bool, name, usage string) {
	f.fs.BoolVar(p, name, false, usage)
	f.doc(name, "", usage, "")
}

func (f *flagSet) Var(v flag.Value, name, arg, usage string) {
	f.fs.Var(v, name, usage)
	f.doc(name, arg, usage, "")
}

// parse parses args, allowing flags and positional arguments in any order
// ("--" ends the flags), and returns the positional ones.
func (f *flagSet) parse(args []string) ([]string, error) {
	var positional []string
	for {
		if err := f.fs.Parse(args); err != nil {
			if err == flag.ErrHelp {
				return nil, err
			}
			// The flag package names flags with one dash; warren's
			// help uses two.
			msg := strings.NewReplacer("flag -", "flag --", ": -", ": --").Replace(err.Error())
			return nil, errors.New(msg)
		}
		args = f.fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		if args[0] == "--" {
			return append(positional, args[1:]...), nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

func (f *flagSet) isSet(name string) bool {
	set := false
	f.fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == name })
	return set
}

func (f *flagSet) printDefaults(w io.Writer) {
	width := 0
	for _, d := range f.order {
		width = max(width, len(flagSynopsis(d)))
	}
	for _, d := range f.order {
		line := d.usage
		if d.def != "" && d.def != "0" {
			line += fmt.Sprintf(" (default %s)", d.def)
		}
		// Usage text wraps under itself, clear of the flag column.
		text := strings.ReplaceAll(wrap(line, max(30, 78-width-4)), "\n", "\n"+strings.Repeat(" ", width+4))
		fmt.Fprintf(w, "  %-*s  %s\n", width, flagSynopsis(d), text)
	}
}

func flagSynopsis(d flagDoc) string {
	if d.arg == "" {
		return "--" + d.name
	}
	return "--" + d.name + " " + d.arg
}

func fileIsTerminal(v any) bool {
	f, ok := v.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// wrap breaks text into lines of at most width columns, keeping blank
// lines between paragraphs.
func wrap(text string, width int) string {
	var out []string
	for _, para := range strings.Split(text, "\n\n") {
		var line string
		var lines []string
		for _, word := range strings.Fields(para) {
			if line != "" && len(line)+1+len(word) > width {
				lines = append(lines, line)
				line = ""
			}
			if line != "" {
				line += " "
			}
			line += word
		}
		if line != "" {
			lines = append(lines, line)
		}
		out = append(out, strings.Join(lines, "\n"))
	}
	return strings.Join(out, "\n\n")
}

func isHelp(arg string) bool {
	return arg == "-h" || arg == "--help" || arg == "help" || arg == "-help"
}

// listFlag collects a repeatable, comma-separated flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item == "" {
			return errors.New("empty value")
		}
		*l = append(*l, item)
	}
	return nil
}

// ageFlag is a duration that also accepts whole or fractional days ("7d").
type ageFlag time.Duration

func (a *ageFlag) String() string { return time.Duration(*a).String() }

func (a *ageFlag) Set(v string) error {
	var d time.Duration
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err != nil || n != n || n > 1e5 {
			return fmt.Errorf("not an age like 90s, 30m, 2h or 7d")
		}
		d = time.Duration(n * float64(24*time.Hour))
	} else {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			return fmt.Errorf("not an age like 90s, 30m, 2h or 7d")
		}
	}
	if d <= 0 {
		return errors.New("an age must be positive")
	}
	*a = ageFlag(d)
	return nil
}

// sizeFlag is a number of bytes, given as a whole number with an optional
// binary unit: 1048576, 1024KiB, 64MiB, 1GiB.
type sizeFlag int64

// maxSize bounds a sizeFlag: what a line or a message can sensibly be.
const maxSize = 16 << 30

func (s *sizeFlag) String() string { return strconv.FormatInt(int64(*s), 10) }

func (s *sizeFlag) Set(v string) error {
	unit := int64(1)
	for suffix, u := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30} {
		if n, ok := strings.CutSuffix(v, suffix); ok {
			v, unit = n, u
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 || n > maxSize/unit {
		return fmt.Errorf("not a size like 16777216, 16384KiB or 16MiB, at most 16GiB")
	}
	*s = sizeFlag(n * unit)
	return nil
}

// confirm asks question on env.stderr and reads the answer from stdin: an
// error unless it is y or yes. Every verb that changes things (dlq's,
// outbox's) asks through it.
func confirm(ctx context.Context, env *cliEnv, stdin io.Reader, question string) error {
	fmt.Fprintf(env.stderr, "%s [y/N] ", question)
	// Ctrl-C at the prompt reaches the process as SIGINT, which ends ctx;
	// the read of the terminal cannot be cancelled and would wait for
	// Enter, so the answer races ctx. Nothing has been changed yet.
	answer, err := interruptible(ctx, func() (string, error) { return readAnswer(stdin) })
	if ctx.Err() != nil {
		fmt.Fprintln(env.stderr) // end the prompt's line
		return errInterrupted
	}
	if err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
		return errors.New("cancelled; nothing was changed")
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// clean makes text from a message safe to print on a terminal: control
// characters, bidirectional overrides and invalid UTF-8 are shown escaped
// instead of being interpreted.
func clean(s string) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r):
			b.WriteString(strings.Trim(strconv.QuoteRune(r), "'"))
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// cleanLines is clean for multi-line text: newlines and tabs stay.
func cleanLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		parts := strings.Split(l, "\t")
		for j, p := range parts {
			parts[j] = clean(p)
		}
		lines[i] = strings.Join(parts, "\t")
	}
	return strings.Join(lines, "\n")
}

// cell is clean text cut to max runes, for a table column.
func cell(s string, max int) string {
	s = clean(s)
	if s == "" {
		return "-"
	}
	if utf8.RuneCountInString(s) > max {
		s = string([]rune(s)[:max-1]) + "…"
	}
	return s
}

func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}

// age is how long ago t was, compactly ("-" when unknown).
func age(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "in the future"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm ago", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

func when(t, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	return fmt.Sprintf("%s (%s)", t.UTC().Format(time.RFC3339), age(t, now))
}

// subcommand is one verb of a command that has several (warren dlq ls,
// warren outbox stats): its help, its flags, which fill the command's
// options O, and its run, which gets the command's call C once the command
// has connected.
type subcommand[O, C any] struct {
	name     string
	args     string // what follows the flags in the synopsis
	summary  string
	about    string // the help's description paragraph
	examples []string
	flags    func(fs *flagSet, o *O) // nil: the command's common flags only
	// changes marks subcommands that alter what they operate on: the
	// command asks for confirmation first.
	changes bool
	run     func(ctx context.Context, c C) error
}

// subcommands is a command made of verbs: the table each command declares,
// and the one way every such command picks a verb and parses its flags.
type subcommands[O, C any] struct {
	command  string                  // the command's name, as in "warren dlq"
	synopsis string                  // what every verb's usage line shows before [flags]
	common   func(fs *flagSet, o *O) // the flags every verb takes
	usage    func(w io.Writer)       // the command's help, listing the verbs; nil: the plain list
	verbs    []subcommand[O, C]
}

// parsedVerb is a verb with its flags parsed.
type parsedVerb[O, C any] struct {
	verb *subcommand[O, C]
	opts *O
	fs   *flagSet // to ask which flags were set
	args []string // the positional arguments
}

// parse finds the verb args[0] names and parses the rest of args into its
// options. With no arguments or an unknown verb it returns a usage error
// listing the verbs; for a help request it prints the command's or the
// verb's usage and returns flag.ErrHelp.
func (s *subcommands[O, C]) parse(env *cliEnv, args []string) (*parsedVerb[O, C], error) {
	names := make([]string, len(s.verbs))
	for i := range s.verbs {
		names[i] = s.verbs[i].name
	}
	if len(args) == 0 {
		return nil, usagef("missing subcommand (%s)", strings.Join(names, ", "))
	}
	if isHelp(args[0]) {
		s.printUsage(env.stdout)
		return nil, flag.ErrHelp
	}
	i := slices.Index(names, args[0])
	if i < 0 {
		return nil, usagef("unknown subcommand %q (want %s)", args[0], strings.Join(names, ", "))
	}
	p := &parsedVerb[O, C]{verb: &s.verbs[i], opts: new(O), fs: newFlagSet()}
	if s.common != nil {
		s.common(p.fs, p.opts)
	}
	if p.verb.flags != nil {
		p.verb.flags(p.fs, p.opts)
	}
	var err error
	p.args, err = p.fs.parse(args[1:])
	if errors.Is(err, flag.ErrHelp) {
		s.printVerbUsage(env.stdout, p.verb, p.fs)
		return nil, err
	}
	if err != nil {
		return nil, usagef("%s: %v", p.verb.name, err)
	}
	return p, nil
}

func (s *subcommands[O, C]) printUsage(w io.Writer) {
	if s.usage != nil {
		s.usage(w)
		return
	}
	fmt.Fprintf(w, "Usage: warren %s <subcommand> [flags]\n\nSubcommands:\n", s.command)
	for _, v := range s.verbs {
		fmt.Fprintf(w, "  %-8s %s\n", v.name, v.summary)
	}
	fmt.Fprintf(w, "\nRun 'warren %s <subcommand> --help' for a subcommand's flags.\n", s.command)
}

func (s *subcommands[O, C]) printVerbUsage(w io.Writer, v *subcommand[O, C], fs *flagSet) {
	fmt.Fprintf(w, "Usage: warren %s %s", s.command, v.name)
	if s.synopsis != "" {
		fmt.Fprintf(w, " %s", s.synopsis)
	}
	fmt.Fprint(w, " [flags]")
	if v.args != "" {
		fmt.Fprintf(w, " %s", v.args)
	}
	fmt.Fprintf(w, "\n\n%s\n\nFlags:\n", wrap(v.about, 78))
	fs.printDefaults(w)
	fmt.Fprintln(w, "\nExamples:")
	for _, e := range v.examples {
		fmt.Fprintf(w, "  %s\n", e)
	}
}
