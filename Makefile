# sluice — make run | make test | make build | make bench | make lint | make soak
SHELL := /bin/bash
GO ?= go
MODS := proto shared services/reader services/router services/flusher services/indexer services/publisher services/sluice test
PKGS := github.com/sluice-cdc/sluice/...
SERVICES := reader router flusher indexer publisher
CONFIG ?= deploy/demo.yaml
DURATION ?= 30m
TEST_TIMEOUT ?= 40m
# The packages whose tests switch safety rules off (the end-to-end negative
# controls and their positive twins) are built with the sluice_unsafe tag,
# the only build that reads the SLUICE_UNSAFE_* switches (services/reader
# and services/flusher unsafe.go); production builds never set it. The
# switches' own tests (TestUnsafe*) run last, under the tag.
UNSAFE_PKGS := github.com/sluice-cdc/sluice/test/e2e
# The Postgres versions besides the default (Debian's 15) that the reader's
# tests and the end-to-end oracle run against (test/pgversions.sh; the
# server binaries from deploy/fetch-postgres.sh). make test-pg PG=17 runs
# one.
PG_VERSIONS := 14 16 17 18
PG ?= $(PG_VERSIONS)

.PHONY: all build libchdb s3server ops-tools pg-bins run test test-pg bench lint tidy-check model soak bigtx jaeger trace screenshots clean

all: build

libchdb:
	@./deploy/fetch-libchdb.sh >/dev/null

# A real S3 server (versitygw, built once from its Go module) for the S3 pack
# store's contract suite, and the tools test/ops validates deploy/ with.
s3server:
	@./deploy/fetch-s3server.sh >/dev/null

ops-tools:
	@./deploy/fetch-ops-tools.sh

# Postgres 13 (unsupported) for the reader's refusal test, and every
# supported version the per-version tests run on, fetched at once; cached,
# so no download when they are there.
pg-bins:
	@pids=(); for v in 13 $(PG_VERSIONS); do ./deploy/fetch-postgres.sh $$v >/dev/null & pids+=($$v:$$!); done; \
	  ok=1; for p in "$${pids[@]}"; do wait $${p#*:} || { echo "fetching the Postgres $${p%%:*} server binaries failed (deploy/fetch-postgres.sh $${p%%:*})"; ok=0; }; done; \
	  [ $$ok -eq 1 ]

build: libchdb
	@mkdir -p bin
	$(GO) build -o bin/sluice ./services/sluice
	@for s in $(SERVICES); do $(GO) build -o bin/$$s ./services/$$s/cmd/$$s || exit 1; done
	@echo "built: bin/sluice $(addprefix bin/,$(SERVICES))"

# sluice dev with the demo, its traces recorded into a Jaeger started on
# loopback ports beside it and drawn by its web UI (deploy/run-dev.sh:
# built in the background the first time; JAEGER=off for none).
run: build
	./deploy/run-dev.sh $(CONFIG)

# Jaeger (for TestTraceEndToEnd) is fetched beside lint and model: on a
# fresh machine its module downloads overlap their work.
test: libchdb s3server ops-tools pg-bins
	@command -v initdb >/dev/null || test -x "$$(pg_config --bindir 2>/dev/null)/initdb" || { echo "Postgres server binaries are missing: apt-get install postgresql (or run .ci/run)"; exit 1; }
	@log=$$(mktemp); ./deploy/fetch-jaeger.sh >"$$log" 2>&1 & jpid=$$!; \
	  if ! { $(MAKE) lint && $(MAKE) model; }; then kill $$jpid 2>/dev/null; rm -f "$$log"; exit 1; fi; \
	  if ! wait $$jpid; then echo "fetching Jaeger failed:"; tail -20 "$$log"; rm -f "$$log"; exit 1; fi; \
	  tail -1 "$$log"; rm -f "$$log"
	@# The end-to-end package (built with the unsafe switches its negative
	@# controls need) is the longest: it runs beside every other package,
	@# and so do the per-version tests (Postgres 14, 16, 17, 18, one after
	@# another; test/pgversions.sh), which mostly wait on their servers.
	@# Both use one sluice binary, built beside the other packages' tests;
	@# their output is printed when they end.
	@bin=$$(mktemp -d); trap 'rm -rf "$$bin"' EXIT; e2e="$$bin/e2e.out"; pgv="$$bin/pgversions.out"; \
	  ( $(GO) build -tags sluice_unsafe -o "$$bin/sluice" ./services/sluice >"$$e2e" 2>&1 || { echo "building sluice failed" >>"$$e2e"; exit 1; }; \
	    SLUICE_BIN="$$bin/sluice" ./test/pgversions.sh $(PG_VERSIONS) >"$$pgv" 2>&1 & ppid=$$!; \
	    SLUICE_BIN="$$bin/sluice" $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -tags sluice_unsafe $(UNSAFE_PKGS) >"$$e2e" 2>&1; erc=$$?; \
	    wait $$ppid; prc=$$?; [ $$erc -eq 0 ] && [ $$prc -eq 0 ] ) & bpid=$$!; \
	  $(GO) test -count=1 -timeout $(TEST_TIMEOUT) $$($(GO) list $(PKGS) | grep -vxF $(UNSAFE_PKGS)); rc=$$?; \
	  wait $$bpid; brc=$$?; cat "$$e2e"; [ -f "$$pgv" ] && cat "$$pgv"; \
	  [ $$rc -eq 0 ] && [ $$brc -eq 0 ]
	$(GO) test -count=1 -tags sluice_unsafe -run '^TestUnsafe' ./services/reader/ ./services/flusher/

# The reader's tests and the end-to-end oracle against other Postgres
# versions (default: all of PG_VERSIONS; make test-pg PG=17 for one).
test-pg: libchdb
	./test/pgversions.sh $(PG)

# The headline figures of every issue, each with the iteration count its
# benchmark wants; output in bench.out. The machine is shared and noisy:
# compare ratios measured in one run.
bench: libchdb
	@rm -f bench.out
	$(GO) test -run '^$$' -bench 'Reader' -benchtime 1x -timeout 30m ./services/reader/ | tee -a bench.out
	$(GO) test -run '^$$' -bench 'Split' -benchtime 10x -count 3 -benchmem ./services/router/internal/split/ | tee -a bench.out
	$(GO) test -run '^$$' -bench 'Fanout' -benchtime 1x -timeout 30m ./services/flusher/internal/delivery/ | tee -a bench.out
	$(GO) test -run '^$$' -bench 'PutMany' -benchtime 5x -count 2 ./shared/packstore/ | tee -a bench.out
	$(GO) test -run '^$$' -bench '.' -benchtime 20x ./shared/catalog/ | tee -a bench.out
	SLUICE_BENCH_HISTORY=1 $(GO) test -run '^$$' -bench '^BenchmarkHistory$$' -benchtime 1x -timeout 90m ./shared/catalog/ | tee -a bench.out
	$(GO) test -run '^$$' -bench 'EndToEnd' -benchtime 1x -timeout 60m ./test/bench/ | tee -a bench.out
	@# 100,000 tenants with the services as processes: the flusher's own RSS
	@# against delivery.memory_budget plus its fixed overhead.
	SLUICE_BENCH_MODE=multi SLUICE_BENCH_TENANTS=100000 $(GO) test -run '^$$' -bench 'EndToEnd' -benchtime 1x -timeout 30m ./test/bench/ | tee -a bench.out
	SLUICE_E2E_RECOVERY=1 $(GO) test -count=1 -run 'TestRecoveryAfterKill' -v -timeout 20m ./test/e2e/ 2>&1 | grep -E '^(---|ok|FAIL)|recovery_test' | tee -a bench.out

lint: tidy-check
	@out=$$(gofmt -l $(MODS)); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

# Every module stands on its own: its go.mod and go.sum are tidy and it builds
# without go.work (local modules come in through relative replace directives).
tidy-check:
	@for m in $(MODS); do \
	  ( cd $$m && GOWORK=off $(GO) mod tidy -diff >/dev/null ) || { echo "go mod tidy would change $$m (run: cd $$m && GOWORK=off go mod tidy)"; exit 1; }; \
	  ( cd $$m && GOWORK=off $(GO) build ./... ) || { echo "$$m does not build with GOWORK=off"; exit 1; }; \
	done

# The flusher protocol's model checker: every interleaving of the small
# configuration with the production core, then every mutant (each must be
# caught). SLUICE_MODEL=large explores the large configuration; -trace
# (MODEL_FLAGS=-trace) prints each mutant's shortest counterexample.
model:
	@$(GO) run ./services/flusher/cmd/model $(MODEL_FLAGS)

soak: build
	SLUICE_SOAK_DURATION=$(DURATION) $(GO) test -count=1 -timeout 0 -run 'Soak' ./test/...

# Jaeger v2 (built once from its module into ~/.cache/sluice/bin, ~7 minutes
# of CPU the first time, reused afterwards) for TestTraceEndToEnd, which
# follows one source transaction through all five services in it. `make
# test` fetches it, so the test runs in CI (with CI set it fails rather
# than skip when the binary is missing); `make trace` runs that test alone.
jaeger:
	@./deploy/fetch-jaeger.sh >/dev/null

trace: build jaeger
	$(GO) test -count=1 -run 'TestTraceEndToEnd' -v ./test/e2e/

# The UI screenshots in docs/ (headless Chromium over a demo): the status
# page with 300 tenants, the charts, a destination page, a backfill and a
# resync beside a halted table, a trace in the UI's trace view (with Jaeger).
screenshots: build jaeger
	cd test && SLUICE_BIN=$(CURDIR)/bin/sluice SLUICE_UI_TENANTS=300 SLUICE_UI_SCREENSHOT=$(CURDIR)/docs/ui.png \
		SLUICE_UI_SCREENSHOT_DIR=$(CURDIR)/docs $(GO) test -count=1 -run 'TestStatusPage|TestMotion|TestBackfillProgress|TestResyncProgress|TestActions|TestTraceView' -v ./ui/

# The reader's 2 GB transaction under a fixed heap bound (needs ~10 GB of disk;
# SLUICE_BIG_TX_MB=1024 scales it down).
bigtx:
	cd services/reader && SLUICE_BIG_TX=1 $(GO) test -run 'TestBigTransaction' -v -count=1 -timeout 40m .

clean:
	rm -rf bin bench.out
