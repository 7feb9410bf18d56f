# warren's developer commands. `make test` is the README's test command and
# what .ci/run runs after scripts/services.sh.

STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
GOVULNCHECK := golang.org/x/vuln/cmd/govulncheck@v1.9.0
# govulncheck's database (its default, named so the probe and the run agree).
VULNDB := https://vuln.go.dev
PKGS := ./...

.PHONY: test lint vulncheck bench services cluster cluster-down screenshots fuzz reliability reliability-cdc reliability-cluster cdc-kill

# devtools/bench is a module of its own; its tests check the report's arithmetic.
# The race detector changes allocation counts, so the tests that pin the hot
# path's allocations run again in a normal build.
# The timeout bounds one package's binary: consumer's, with three clusters
# of three RabbitMQ nodes started by its tests, took 18 minutes on two
# cores kept busy (busy.sh) beside a reliability run, and 6 without busy.sh.
test:
	go test -race -count=1 -timeout 30m $(PKGS)
	go test -count=1 -run 'Allocates' . ./consumer
	cd devtools/bench && go test -count=1 ./...

lint: vulncheck
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet $(PKGS)
	go run $(STATICCHECK) $(PKGS)
	cd devtools/bench && go vet ./... && go run $(STATICCHECK) ./...

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
		cd devtools/bench && go run $(GOVULNCHECK) -db $(VULNDB) ./...; \
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
	WARREN_CONSOLE_SCREENSHOTS=$(CURDIR)/docs/console go test -count=1 -run '^TestBrowserReplayGroup$$' ./internal/console/

# Short fuzzing of the decoders that read hostile input, and of the
# redactor that keeps passwords out of error text.
fuzz:
	go test -run='^$$' -fuzz=FuzzDecodeEvent -fuzztime=30s .
	go test -run='^$$' -fuzz=FuzzParseMetadata -fuzztime=30s ./dlq/
	go test -run='^$$' -fuzz=FuzzRedactURL -fuzztime=30s ./internal/redact/

# Fault injection on private RabbitMQ, Postgres and Redis instances (never
# the shared ones): kills, broker and database faults and stalls, a memory
# alarm with stops, a broker outage, a Postgres restart, dead letters moved
# back, hostile input; fails on any lost event, unexplained duplicate, wrong
# dead letter or stranded outbox row. About 4 minutes. `go run ./devtools/reliability -mode long` is the
# release check that regenerates RELIABILITY.md.
reliability:
	go run ./devtools/reliability -mode short

# The same short run with the CDC relays (warren relay run --mode cdc, one
# streaming the slot, one standing by) on a wal_level = logical cluster;
# also checks the slot's lag through a broker outage and a Postgres restart.
reliability-cdc:
	go run ./devtools/reliability -mode short -relay-mode cdc

# The same short run on a private three-node RabbitMQ cluster: every
# process given the three nodes' URLs, quorum queues, and among the faults
# kill -9 of the node leading the queues, its restart, and another node's
# stop_app / start_app, each timed until events flow again; fails on any
# process that exits on a node's loss instead of reconnecting. About
# 4 minutes. `-mode long -broker cluster` writes RELIABILITY-cluster.md.
reliability-cluster:
	go run ./devtools/reliability -mode short -broker cluster

# The kill -9 proof of the CDC relay (issue 18) at full size: 100,000 events
# committed by 8 writers while the streaming relay is killed with SIGKILL
# every 2-4s and its standby takes over; fails on any lost event, broken
# per-entity order, or more duplicates than the unflushed window allows.
# About 3 minutes. The normal suite runs it with 20,000 events.
cdc-kill:
	WARREN_CDC_KILL_EVENTS=100000 go test -count=1 -timeout 30m -v -run '^TestKill9WhileWritingLosesNothing$$' ./relay/cdc/
