# warren's developer commands. `make test` is the README's test command and
# what .ci/run runs after scripts/services.sh.

STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
PKGS := ./...

.PHONY: test lint bench services fuzz reliability

# devtools/bench is a module of its own; its tests check the report's arithmetic.
test:
	go test -race -count=1 -timeout 12m $(PKGS)
	cd devtools/bench && go test -count=1 ./...

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet $(PKGS)
	go run $(STATICCHECK) $(PKGS)
	cd devtools/bench && go vet ./... && go run $(STATICCHECK) ./...

# Every benchmark scenario at its defaults (about 20 minutes on 2 cores,
# half of it the 1M-message memory run):
# writes devtools/bench/RESULTS.md and ratios.png. One scenario:
# cd devtools/bench && go run . -run relay
bench:
	cd devtools/bench && go run . -out RESULTS.md

services:
	scripts/services.sh

# Short fuzzing of the decoders that read hostile input, and of the
# redactor that keeps passwords out of error text.
fuzz:
	go test -run='^$$' -fuzz=FuzzDecodeEvent -fuzztime=30s .
	go test -run='^$$' -fuzz=FuzzParseMetadata -fuzztime=30s ./dlq/
	go test -run='^$$' -fuzz=FuzzRedactURL -fuzztime=30s ./internal/redact/

# Fault injection on private RabbitMQ, Postgres and Redis instances (never
# the shared ones): kills, broker and database faults and stalls, a memory
# alarm with stops, dead letters moved back, hostile input; fails
# on any lost event, unexplained duplicate, wrong dead letter or stranded
# outbox row. About 4 minutes. `go run ./devtools/reliability -mode long` is the
# release check that regenerates RELIABILITY.md.
reliability:
	go run ./devtools/reliability -mode short
