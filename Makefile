# leaseplane: `make run` serves the plane and its playground; `make test` runs every test.
# Each target installs what it needs (Go modules, npm packages, Debian's chromium).

GO      ?= go
BIN     := bin/leaseplane
FUZZTIME ?= 10s

.PHONY: all build run test test-go test-bench-tool test-fuzz parity test-node test-browser deps-node deps-browser \
        wasm bench deps-bench check-imports generate check-generated clean worker worker-dev test-worker bench-worker

all: build

build: wasm
	$(GO) build -o $(BIN) ./cmd/leaseplane

run: build
	./$(BIN) serve --addr 127.0.0.1:8080 --data ./data

# wasm builds the browser kernel (web/static) and the wasip1 kernel (wasm/wazero).
# WASM_BUILD is a short hash of the kernel's sources and the Go version: it
# changes whenever the kernel code does (leaseplane.version().build).
WASM_BUILD = $(shell { $(GO) version; echo $(GOWASM); cat go.mod kernel/*.go kernel/scenario/*.go wasm/js/*.go; } | sha256sum | cut -c1-12)
WASM_LDFLAGS = -s -w -X main.build=$(WASM_BUILD)
# Sign-extension and saturating float-to-int instructions (every current
# browser, Node and wazero have them): about 30% faster kernel code.
GOWASM := satconv,signext

# The .wasm file (and so its mtime) and the slow brotli pass are only
# replaced when the build's bytes change.
wasm:
	@mkdir -p bin web/static wasm/wazero/run-make-wasm
	GOOS=js GOARCH=wasm GOWASM=$(GOWASM) $(GO) build -trimpath -ldflags='$(WASM_LDFLAGS)' -o bin/leaseplane.wasm.new ./wasm/js
	@if cmp -s bin/leaseplane.wasm.new web/static/leaseplane.wasm && \
	    test web/static/leaseplane.wasm.gz -nt web/static/leaseplane.wasm -a web/static/leaseplane.wasm.br -nt web/static/leaseplane.wasm; then \
	  rm bin/leaseplane.wasm.new; echo "web/static/leaseplane.wasm: unchanged"; \
	else \
	  mv bin/leaseplane.wasm.new web/static/leaseplane.wasm && node wasm/js/compress.js web/static/leaseplane.wasm; \
	fi
	cmp -s "$$($(GO) env GOROOT)/lib/wasm/wasm_exec.js" web/static/wasm_exec.js || cp "$$($(GO) env GOROOT)/lib/wasm/wasm_exec.js" web/static/wasm_exec.js
	GOOS=wasip1 GOARCH=wasm GOWASM=$(GOWASM) $(GO) build -buildmode=c-shared -trimpath -ldflags='-s -w' -o wasm/wazero/run-make-wasm/leaseplane-wasip1.wasm ./wasm/wasip1

test: wasm check-generated test-go test-fuzz parity test-node test-browser test-worker
	@echo "make test: all suites passed"

# test-go leaves the parity run to its own target, which prints its seed.
test-go: test-bench-tool
	$(GO) vet ./...
	$(GO) test -count=1 $$($(GO) list ./... | grep -v '/wasm/parity$$')

# The load tool is a module of its own (cmd/leaseplane-bench/go.mod), so
# that go-redis and etcd's client stay out of the product; its tests drive
# a real redis-server and etcd.
BENCH_TOOL := cmd/leaseplane-bench
test-bench-tool: wasm deps-bench
	cd $(BENCH_TOOL) && $(GO) mod tidy -diff && $(GO) vet ./... && $(GO) test -count=1 ./...

deps-bench:
	test -x /usr/bin/redis-server -a -x /usr/bin/etcd || (apt-get update && apt-get install -y --no-install-recommends redis-server etcd-server)

# A short run of every fuzz target (go test runs one target per invocation).
test-fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzKernel$$' -fuzztime $(FUZZTIME) ./kernel
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./kernel
	$(GO) test -run '^$$' -fuzz '^FuzzRequest$$' -fuzztime $(FUZZTIME) ./server

# The dependency rules of DESIGN.md (also part of test-go).
check-imports:
	$(GO) test -count=1 -run 'TestDependencyRules|TestOnlyCmdReadsEnvironment' .

# parity: corpus + >= 10,000 random scenarios through native, wazero and Node.
# A new seed each run (printed); LEASEPLANE_PARITY_SEED=N reproduces a run.
parity: wasm
	$(GO) test -count=1 -v -run '^TestParity$$' ./wasm/parity

test-node: wasm
	node --test wasm/js/leaseplane.test.js
	test -d node_modules/@modelcontextprotocol/sdk || npm ci
	node --test server/mcp/mcp.test.mjs

# test-browser drives Debian's chromium with playwright-core through the
# playground and the docs, served by `leaseplane serve` and as a static site,
# and runs the docs' recipes (curl and jq, Node, Python requests) as printed.
test-browser: wasm
	test -x /usr/bin/chromium || (apt-get update && apt-get install -y chromium)
	{ command -v jq && command -v curl && python3 -c 'import requests'; } >/dev/null 2>&1 || \
		(apt-get update && apt-get install -y jq curl python3 python3-requests)
	test -d node_modules/playwright-core -a -d node_modules/axe-core || npm ci
	node --test web/browser/*.test.mjs

# generate writes templ's *_templ.go and web/corpus (a copy of the scenario
# corpus that package web embeds); both are committed.
generate:
	cd web && $(GO) generate ./...

# check-generated regenerates and fails when the result differs from the commit.
check-generated: generate
	@git diff --exit-code --stat -- web/corpus 'web/*_templ.go' || { echo "check-generated: generated files are stale: run make generate and commit them"; exit 1; }
	@test -z "$$(git status --porcelain --untracked-files=all -- web/corpus 'web/*_templ.go')" || { git status --short -- web/corpus 'web/*_templ.go'; echo "check-generated: new generated files are not committed: run make generate and commit them"; exit 1; }

bench: wasm deps-bench
	$(GO) test -run '^$$' -bench . -benchmem ./kernel
# Server load: both engines against Redis (go-redis) and etcd (clientv3
# concurrency.Mutex), three workloads (docs/BENCHMARKS.md "Server load").
	cd $(BENCH_TOOL) && $(GO) run . --clients 64 --duration 5s --engines native,wasm

# worker builds the Cloudflare Workers tier into bin/worker (docs/WORKERS.md):
# the Go front worker (cmd/worker, GOOS=js, with syumai/workers' glue),
# the Durable Object (cmd/worker/*.mjs), the kernel's wasip1 build and
# kernel/ledger's (cmd/worker/ledger).
WORKER := bin/worker
worker: wasm
	@mkdir -p bin
	rm -rf $(WORKER)
	$(GO) run github.com/syumai/workers/cmd/workers-assets-gen -mode=go -o $(WORKER)
	GOOS=js GOARCH=wasm $(GO) build -trimpath -ldflags='-s -w' -o $(WORKER)/app.wasm ./cmd/worker
	GOOS=wasip1 GOARCH=wasm GOWASM=$(GOWASM) $(GO) build -buildmode=c-shared -trimpath -ldflags='-s -w' -o $(WORKER)/ledger.wasm ./cmd/worker/ledger
	cp wasm/wazero/run-make-wasm/leaseplane-wasip1.wasm $(WORKER)/kernel.wasm
	cp cmd/worker/index.mjs cmd/worker/workspace.mjs cmd/worker/kernel.mjs cmd/worker/ledger.mjs $(WORKER)/

# worker-dev runs the worker in a local workerd (Miniflare) on PORT, with
# its storage in ./data/worker, makes a workspace and prints its key.
PORT ?= 8787
worker-dev: worker
	test -d node_modules/miniflare || npm ci
	WRANGLER_SEND_METRICS=false node cmd/worker/dev.mjs --port $(PORT) --data ./data/worker

# test-worker: the REST suite, restarts and parity (corpus + seeded random
# scenarios, expected bytes from the native kernel) against the worker in
# workerd, offline.
WORKER_PARITY_N ?= 1000
test-worker: worker build
	test -d node_modules/miniflare || npm ci
	$(GO) run ./cmd/worker/paritygen -n $(WORKER_PARITY_N) -o bin/worker-parity.jsonl
	WRANGLER_SEND_METRICS=false LEASEPLANE_WORKER_PARITY=bin/worker-parity.jsonl node --test --test-concurrency=1 cmd/worker/test/

# bench-worker: request latency and throughput in Miniflare, through the
# front worker and to the object directly (docs/BENCHMARKS.md).
bench-worker: worker
	test -d node_modules/miniflare || npm ci
	WRANGLER_SEND_METRICS=false node cmd/worker/bench.mjs

clean:
	rm -rf bin web/static/leaseplane.wasm web/static/wasm_exec.js web/static/leaseplane.wasm.gz web/static/leaseplane.wasm.br wasm/wazero/run-make-wasm
