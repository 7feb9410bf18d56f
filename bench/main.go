package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"runtime/pprof"
	"slices"
	"time"
)

// variant is one way of doing a scenario's work. run processes the backlog
// it was given and reports messages per second.
type variant struct {
	name     string
	baseline bool // a raw-client variant; the best baseline is the ratio's denominator
	run      func(ctx context.Context, env *env) (float64, error)
}

type scenario struct {
	name     string
	about    string
	variants []variant
}

type env struct {
	amqpURL  string
	messages int
}

func main() {
	rounds := flag.Int("rounds", 5, "rounds per scenario; variants alternate within each round")
	messages := flag.Int("messages", 50000, "backlog size per measurement")
	filter := flag.String("run", "", "regexp selecting scenarios by name")
	variantFilter := flag.String("variant", "", "regexp selecting variants by name (for profiling one side)")
	out := flag.String("out", "", "write the markdown report here (default: stdout only)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run here")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatal(err)
		}
		defer pprof.StopCPUProfile()
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	e := &env{amqpURL: envOr("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), messages: *messages}
	re, err := regexp.Compile(*filter)
	if err != nil {
		fatal(err)
	}
	vre, err := regexp.Compile(*variantFilter)
	if err != nil {
		fatal(err)
	}

	var results []result
	for _, s := range scenarios() {
		if !re.MatchString(s.name) {
			continue
		}
		s.variants = slices.DeleteFunc(s.variants, func(v variant) bool { return !vre.MatchString(v.name) })
		fmt.Fprintf(os.Stderr, "== %s (%d rounds × %d variants, %d messages each)\n", s.name, *rounds, len(s.variants), *messages)
		r := result{scenario: s}
		r.samples = make([][]float64, len(s.variants))
		for round := range *rounds {
			// Alternate the order each round so neither side always runs
			// on a warmer (or more fragmented) broker.
			order := make([]int, len(s.variants))
			for i := range order {
				order[i] = i
			}
			if round%2 == 1 {
				slices.Reverse(order)
			}
			for _, i := range order {
				v := s.variants[i]
				rate, err := v.run(ctx, e)
				if err != nil {
					pprof.StopCPUProfile()
					fatal(fmt.Errorf("%s / %s: %w", s.name, v.name, err))
				}
				r.samples[i] = append(r.samples[i], rate)
				fmt.Fprintf(os.Stderr, "   round %d  %-44s %9.0f msg/s\n", round+1, v.name, rate)
			}
		}
		results = append(results, r)
	}
	report := renderReport(results, *rounds, *messages, time.Now())
	fmt.Print(report)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(report), 0o644); err != nil {
			fatal(err)
		}
	}
}

func scenarios() []scenario {
	return []scenario{consumeScenario()}
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}
