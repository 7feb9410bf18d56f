# warren's developer commands. `make test` is the README's test command and
# what .ci/run runs after scripts/services.sh.

STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
GOVULNCHECK := golang.org/x/vuln/cmd/govulncheck@v1.9.0
# govulncheck's database (its default, named so the probe and the run agree).
VULNDB := https://vuln.go.dev
PKGS := ./...
# The console's browser tests are a module of their own, so that the
# library's go.mod does not carry chromedp to every importer.
BROWSERTEST := cmd/warren/internal/console/browsertest
# The CloudEvents codec's interop tests with the CloudEvents Go SDK are a
# module of their own too, so that the SDK stays a test dependency.
CEINTEROP := cloudevents/interop

.PHONY: build test test-min-go test-unit test-slow reliability-fault lint vulncheck bench services cluster cluster-down screenshots fuzz reliability reliability-build reliability-cdc reliability-cluster cdc-kill

# The command in bin/, stamped with the checkout's version (git describe:
# the latest tag, the commits since, -dirty), which `warren --version`
# prints; without a tag, go build's own.
build:
	go build -ldflags "-X main.stampedVersion=$$(git describe --tags --dirty 2>/dev/null)" -o bin/warren ./cmd/warren

# devtools/bench is a module of its own; its tests check the report's arithmetic.
# The race detector changes allocation counts, so the tests that pin the hot
# path's allocations run again in a normal build.
# Tests on their own queues, tables and slots run in parallel (t.Parallel);
# they wait on brokers and databases more than they compute, so four at a
# time per package, two packages at a time. Those that alarm, stop or
# reconfigure a shared node stay serial and say why.
# The timeout bounds one package's binary, with room for a machine much
# busier than busy.sh makes it.
test:
	go test -race -count=1 -parallel 4 -timeout 30m $(PKGS)
	go test -count=1 -run 'Allocates' . ./consumer
	cd devtools/bench && go test -count=1 ./...
	cd $(BROWSERTEST) && go test -race -count=1 ./...
	cd $(CEINTEROP) && go test -race -count=1 ./...

# The lowest Go that go.mod declares, which every importer's build inherits:
# the unit tier with that toolchain (the go command fetches it from the
# module proxy), so a feature of a later Go fails here, not in a user's build.
GO_MIN := $(shell awk '/^go /{print $$2}' go.mod)
test-min-go:
	GOTOOLCHAIN=go$(GO_MIN) go test -short -count=1 $(PKGS)

# The unit tier: every test that needs no service, in about a minute.
# testenv.RequireServices skips the rest, naming what each needed.
test-unit:
	go test -short -race -count=1 $(PKGS)

# The slow tier: tests that start three-node RabbitMQ clusters or kill
# relays for minutes, kept out of make test by the build tag "slow" and
# named TestCluster… or TestSoak…; CI runs them. One package at a time:
# two clusters at once would share two cores six ways.
SLOW_PKGS := ./consumer ./relay ./relay/cdc ./internal/testenv/localrabbit
test-slow:
	go test -race -count=1 -p 1 -timeout 30m -tags slow -run '^Test(Cluster|Soak)' $(SLOW_PKGS)

lint: vulncheck
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet -tags slow $(PKGS)
	go run $(STATICCHECK) -tags slow $(PKGS)
	cd devtools/bench && go vet ./... && go run $(STATICCHECK) ./...
	cd $(BROWSERTEST) && go vet ./... && go run $(STATICCHECK) ./...
	cd $(CEINTEROP) && go vet ./... && go run $(STATICCHECK) ./...

# Part of lint. govulncheck runs only when its database answers within 5s
# (the probe reads the database's small index, part of its documented API);
# offline, or without curl to probe with, it says so in one line and passes.
# Once the database has answered, the machine is online, and a pinned
# govulncheck that the module proxy cannot serve fails lint: that is a broken
# GOPROXY, GOFLAGS or proxy, which fails staticcheck next anyway, and passing
# would let the security check stop running unnoticed. Vulnerabilities found
# in called code exit 3 and fail.
vulncheck:
	@if ! command -v curl >/dev/null 2>&1; then \
		echo "govulncheck: curl not found, cannot probe the vulnerability database; skipped"; \
	elif ! curl -fsS --max-time 5 -o /dev/null $(VULNDB)/index/db.json 2>/dev/null; then \
		echo "govulncheck: vulnerability database unreachable, skipped"; \
	elif ! go run $(GOVULNCHECK) -version >/dev/null; then \
		echo "govulncheck: the database answers but $(GOVULNCHECK) cannot be fetched or built (GOPROXY=$$(go env GOPROXY)): see above"; \
		exit 1; \
	else \
		set -x; go run $(GOVULNCHECK) -db $(VULNDB) $(PKGS) && \
		(cd devtools/bench && go run $(GOVULNCHECK) -db $(VULNDB) ./...) && \
		(cd $(BROWSERTEST) && go run $(GOVULNCHECK) -db $(VULNDB) ./...) && \
		cd $(CEINTEROP) && go run $(GOVULNCHECK) -db $(VULNDB) ./...; \
	fi

# Every benchmark scenario at its defaults (about 30 minutes on 2 cores,
# a third of it the 1M-message memory run, another the growth scenarios):
# writes devtools/bench/RESULTS.md, ratios.png and growth-*.png. One scenario:
# cd devtools/bench && go run . -run relay
bench:
	cd devtools/bench && go run . -out RESULTS.md

services:
	scripts/services.sh

# A local three-node RabbitMQ cluster on 127.0.0.1:5701-5703 (see README,
# "A local cluster"); cluster-down stops it and deletes its data.
cluster:
	scripts/cluster.sh up

cluster-down:
	scripts/cluster.sh down

# Screenshots of every page of `warren console`, taken by its browser test
# in headless Chromium, into docs/console (the README shows them).
screenshots:
	cd $(BROWSERTEST) && WARREN_CONSOLE_SCREENSHOTS=$(CURDIR)/docs/console go test -count=1 -run '^TestBrowserReplayGroup$$' ./...

# Short fuzzing of the decoders that read hostile input (warren's
# envelope, dead-letter metadata, CloudEvents), of the
# redactor that keeps passwords out of error text, and of the capture
# generator's quoting (column names and spec text installed on the test
# Postgres, each in a transaction rolled back).
fuzz:
	go test -run='^$$' -fuzz=FuzzDecodeEvent -fuzztime=30s .
	go test -run='^$$' -fuzz=FuzzParseMetadata -fuzztime=30s ./dlq/
	go test -run='^$$' -fuzz=FuzzDecode -fuzztime=30s ./cloudevents/
	go test -run='^$$' -fuzz=FuzzRoundTrip -fuzztime=30s ./cloudevents/
	go test -run='^$$' -fuzz=FuzzRedactURL -fuzztime=30s ./internal/redact/
	go test -run='^$$' -fuzz=FuzzGenerateQuotesEverything -fuzztime=30s ./outbox/capture/

# Fault injection on private RabbitMQ, Postgres and Redis instances (never
# the shared ones): kills, broker and database faults and stalls, a memory
# alarm with stops, a broker outage, a Postgres restart, dead letters moved
# back, hostile input, a captured table's schema changed under writes that
# name its parent, a partition and the replica role; fails on any lost
# event, unexplained duplicate, wrong dead letter or stranded outbox row. About 4 minutes. `go run ./devtools/reliability -mode long` is the
# release check that regenerates docs/reliability/RELIABILITY.md.
reliability: reliability-build
	go run ./devtools/reliability -mode short

# The harness and the binaries it runs, compiled once into the build
# cache: the three runs CI starts at once would otherwise each compile the
# same packages, side by side on two cores.
reliability-build:
	go build ./devtools/reliability ./cmd/warren ./examples/webhook/cmd/webhook ./examples/automation/cmd/automation

# One fault kind (or several, comma-separated, name=N for a count) against
# the polling relays, in about a minute: the loop for a change to the relay
# or a consumer. The run prints its seed; SEED= replays that fault
# schedule and workload. An unknown FAULT lists the known ones.
#   make reliability-fault FAULT=kill-relay SEED=42
reliability-fault:
	@test -n "$(FAULT)" || { echo "usage: make reliability-fault FAULT=kill-relay [SEED=N] [RELAY=cdc]"; exit 2; }
	go run ./devtools/reliability -mode short -faults $(FAULT) -fault-phase 15s -relay-mode $(or $(RELAY),poll) $(if $(SEED),-seed $(SEED))

# The same short run with the CDC relays (warren relay run --mode cdc, one
# streaming the slot, one standing by) on a wal_level = logical cluster;
# also checks the slot's lag through a broker outage and a Postgres restart,
# and a transaction of 20 batches whose relay sessions end inside it (the
# slot passes it, each session end's duplicates within the documented bound).
reliability-cdc: reliability-build
	go run ./devtools/reliability -mode short -relay-mode cdc

# The same short run on a private three-node RabbitMQ cluster: every
# process given the three nodes' URLs, quorum queues, and among the faults
# kill -9 of the node leading the queues, its restart, and another node's
# stop_app / start_app, each timed until events flow again; fails on any
# process that exits on a node's loss instead of reconnecting. About
# 4 minutes. `-mode long -broker cluster` writes docs/reliability/RELIABILITY-cluster.md.
reliability-cluster: reliability-build
	go run ./devtools/reliability -mode short -broker cluster

# The kill -9 proof of the CDC relay (issue 18) at full size: 100,000 events
# committed by 8 writers while the streaming relay is killed with SIGKILL
# every 2-4s and its standby takes over; fails on any lost event, broken
# per-entity order, or more duplicates than the unflushed window allows.
# About 3 minutes. make test-slow runs it with 20,000 events.
cdc-kill:
	WARREN_CDC_KILL_EVENTS=100000 go test -count=1 -timeout 30m -v -tags slow -run '^TestSoakKill9WhileWritingLosesNothing$$' ./relay/cdc/
