# leaseplane: `make run` serves the plane and its playground; `make check` is the
# inner loop (Go alone); `make test` runs every test.
# Each target installs what it needs (Go modules, npm packages, Debian's chromium).

GO      ?= go
BIN     := bin/leaseplane
# FUZZTIME, when set (10s, 5m), runs every fuzz target that long instead
# of its count of inputs below.
FUZZTIME ?=

.PHONY: install check-install golden-diff check check-fmt check-worker test-python deps-python test-js check-tree test-long all build run test test-go test-bench-tool test-fuzz parity test-node test-browser deps-node deps-browser \
        wasm check-wasm test-fresh static test-static release bench deps-bench check-imports check-module generate check-generated clean worker worker-dev test-worker bench-worker

all: build

# build needs Go alone: the WebAssembly kernels it embeds are committed
# (make wasm rebuilds them). VERSION is stamped into `leaseplane version`.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

build:
	$(GO) build -trimpath -ldflags='$(LDFLAGS)' -o $(BIN) ./cmd/leaseplane

# install puts the binary, version stamped, in $(go env GOPATH)/bin (or
# GOBIN), so that `leaseplane ...` works as the README types it.
install:
	$(GO) install -trimpath -ldflags='$(LDFLAGS)' ./cmd/leaseplane
	@echo "installed $$(GOBIN=$${GOBIN:-$$($(GO) env GOPATH)/bin}; echo $$GOBIN)/leaseplane ($(VERSION))"

# check-install installs into a temporary GOBIN and checks the stamp.
check-install:
	@d=$$(mktemp -d) && GOBIN=$$d $(MAKE) --no-print-directory install >/dev/null && \
	  $$d/leaseplane --version | grep -q -- '$(VERSION)' || { echo "make install: the installed binary does not say version $(VERSION)"; rm -rf $$d; exit 1; }; \
	  echo "make install: $$($$d/leaseplane --version | head -1)"; rm -rf $$d

# static is the binary the Dockerfile ships: no cgo, so it runs on an empty
# base image (SQLite is pure Go). test-static builds and runs it.
STATIC := bin/leaseplane-static
static:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w $(LDFLAGS)' -o $(STATIC) ./cmd/leaseplane

test-static: static
	.ci/static-binary $(STATIC)

# release cross-builds the binary for each OS and architecture into
# bin/release, named with VERSION, with SHA256SUMS.
RELEASE_TARGETS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64
release:
	@rm -rf bin/release && mkdir -p bin/release
	@for t in $(RELEASE_TARGETS); do \
	  os=$${t%/*}; arch=$${t#*/}; ext=; [ $$os = windows ] && ext=.exe; \
	  out=bin/release/leaseplane-$(VERSION)-$$os-$$arch$$ext; echo "$$out"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags='-s -w $(LDFLAGS)' -o $$out ./cmd/leaseplane || exit 1; \
	done
	cd bin/release && sha256sum leaseplane-* > SHA256SUMS

# run serves on ADDR with its state in DATA (LEASEPLANE_ADDR and
# LEASEPLANE_DATA do the same for the binary): make run ADDR=127.0.0.1:18080 DATA=/tmp/lp
ADDR ?= 127.0.0.1:8080
DATA ?= ./data
run: build
	./$(BIN) serve --addr $(ADDR) --data $(DATA)

# The WebAssembly kernels are committed, the way OPA commits opa.wasm, so
# that `go install` and `go build` work with Go alone; check-wasm (part of
# make test) rebuilds them and fails when the bytes differ. After any change
# to kernel/ or wasm/: make wasm, and commit the four files.
#
# ledger.wasm is the signed ledger's verifier for browsers (wasm/ledgerjs),
# a module of its own that only the pages that check or seal a ledger load:
# x/mod's note and tlog bring fmt and reflection, which would take the
# browser kernel past its size budget.
#
# The bytes depend only on the sources and the toolchain: -trimpath, no
# build id, and the toolchain pinned by go.mod's toolchain line (GOTOOLCHAIN
# fetches it when the local Go differs).
WASM_JS     := web/static/leaseplane.wasm
WASM_EXEC   := web/static/wasm_exec.js
WASM_WASIP1 := wasm/wazero/leaseplane-wasip1.wasm
WASM_LEDGER := web/static/ledger.wasm
WASM_FILES  := $(WASM_JS) $(WASM_EXEC) $(WASM_WASIP1) $(WASM_LEDGER)
WASM_TOOLCHAIN := $(shell sed -n 's/^toolchain //p' go.mod)
WASM_GO = GOTOOLCHAIN=$(WASM_TOOLCHAIN) GOFLAGS=-buildvcs=false $(GO)
# Sign-extension and saturating float-to-int instructions (every current
# browser, Node and wazero have them): about 30% faster kernel code.
GOWASM := satconv,signext
# WASM_BUILD names the browser build (leaseplane.version().build): a hash of
# the kernel's sources, the Go version and GOWASM (wasm/internal/buildhash),
# the same on every machine.
WASM_BUILD = $(shell $(WASM_GO) run ./wasm/internal/buildhash "$$($(WASM_GO) env GOVERSION)" $(GOWASM))

# build-wasm DIR writes the four files under DIR.
define build-wasm
	@mkdir -p $(1)/web/static $(1)/wasm/wazero
	GOOS=js GOARCH=wasm GOWASM=$(GOWASM) $(WASM_GO) build -trimpath -ldflags='-s -w -buildid= -X main.build=$(WASM_BUILD)' -o $(1)/$(WASM_JS) ./wasm/js
	cp "$$($(WASM_GO) env GOROOT)/lib/wasm/wasm_exec.js" $(1)/$(WASM_EXEC)
	GOOS=wasip1 GOARCH=wasm GOWASM=$(GOWASM) $(WASM_GO) build -buildmode=c-shared -trimpath -ldflags='-s -w -buildid=' -o $(1)/$(WASM_WASIP1) ./wasm/wasip1
	GOOS=js GOARCH=wasm GOWASM=$(GOWASM) $(WASM_GO) build -trimpath -ldflags='-s -w -buildid=' -o $(1)/$(WASM_LEDGER) ./wasm/ledgerjs
endef

wasm:
	$(call build-wasm,.)
	@chmod a-x $(WASM_JS) $(WASM_LEDGER)

# check-tree: no tracked file is a build output (an executable or a wasm
# module) but the committed kernels above.
check-tree:
	.ci/build-outputs $(WASM_FILES)

# check-wasm rebuilds the kernels aside and compares them with the
# committed files.
check-wasm:
	@rm -rf bin/wasm-check
	$(call build-wasm,bin/wasm-check)
	@fail=0; for f in $(WASM_FILES); do \
	  cmp -s bin/wasm-check/$$f $$f || { echo "check-wasm: $$f is not what its sources build: run make wasm and commit"; fail=1; }; \
	done; \
	if git rev-parse --git-dir >/dev/null 2>&1 && test -n "$$(git status --porcelain -- $(WASM_FILES))"; then \
	  git status --short -- $(WASM_FILES); echo "check-wasm: the built kernels are not committed: run make wasm and commit"; fail=1; \
	fi; exit $$fail

# The Node suites run last, so that a passing run ends with node --test's
# summary (# pass N, # fail 0), which a CI runner recognises; a failing
# one ends with make's error.
test: check-tree check-wasm check-worker check-generated check-module check-install test-go test-fuzz parity test-fresh test-static test-node test-python test-js test-browser test-worker

# check is the inner loop: gofmt, vet and every Go test that needs Go and
# the kernel corpus alone (no apt, no npm; Go modules are fetched), in a
# few minutes. Tests that run a program outside Go (Node, Chromium, workerd,
# Redis, etcd) carry the build tag `external`: without it they are not
# compiled (so they cannot skip quietly), and make test sets it and installs
# what they need.
GO_FILES = $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './node_modules/*')
check-fmt:
	@bad=$$(gofmt -l $(GO_FILES)); \
	  test -z "$$bad" || { echo "gofmt: not formatted (run gofmt -w): $$bad"; exit 1; }

check: check-tree check-fmt
	$(GO) vet ./...
	$(GO) test -count=1 ./...
	cd $(BENCH_TOOL) && $(GO) vet ./... && $(GO) test -count=1 ./...

# test-go is check's Go tests with the tag `external` set, but for the
# parity run, which has its own target (it prints its seed).
test-go: check-fmt test-bench-tool
	$(GO) vet -tags external ./...
	$(GO) test -tags external -count=1 $$($(GO) list ./... | grep -v '/wasm/parity$$')

# The load tool is a module of its own (cmd/leaseplane-bench/go.mod), so
# that go-redis and etcd's client stay out of the product; its tests drive
# a real redis-server and etcd (tag external). It requires the root module
# by a replace, so a new dependency of the root module needs a `go mod tidy`
# there too.
BENCH_TOOL := cmd/leaseplane-bench
test-bench-tool: deps-bench
	@cd $(BENCH_TOOL) && $(GO) mod tidy -diff >/dev/null || { echo "$(BENCH_TOOL)/go.mod is not tidy (a dependency of the root module changed?): run cd $(BENCH_TOOL) && go mod tidy, and commit it"; exit 1; }
	cd $(BENCH_TOOL) && $(GO) vet -tags external ./... && $(GO) test -tags external -count=1 ./...

deps-bench:
	test -x /usr/bin/redis-server -a -x /usr/bin/etcd || (apt-get update && apt-get install -y --no-install-recommends redis-server etcd-server)

# check-module: go.mod and go.sum are exactly what the imports need, and
# the binary builds for Windows and macOS too (nothing Unix-only on its
# portable path).
check-module:
	$(GO) mod tidy -diff
	GOOS=windows GOARCH=amd64 $(GO) build -o /dev/null ./cmd/leaseplane
	GOOS=darwin GOARCH=arm64 $(GO) build -o /dev/null ./cmd/leaseplane

# A short run of every fuzz target (go test runs one target per invocation).
# make test gives each a count of inputs (about 10 s each on an idle
# 2-core machine), not a duration: Go 1.26's fuzzing coordinator can report
# "context deadline exceeded" as a failure when a -fuzztime duration ends
# while a worker is busy (golang/go#75804, fixed in Go 1.27), which a loaded
# machine hits; a count has no deadline, so load only makes it slower.
fuzz = $(GO) test -run '^$$' -fuzz '^$(1)$$' -fuzztime $(or $(FUZZTIME),$(2)) $(3)
test-fuzz:
	$(call fuzz,FuzzKernel,10000x,./kernel)
	$(call fuzz,FuzzDecode,200000x,./kernel)
	$(call fuzz,FuzzRequest,15000x,./server)
	$(call fuzz,FuzzToolArguments,40000x,./server/mcp)

# test-long: the linearizability check (server/lincheck) for ten minutes
# with 32 clients, the plane SIGKILLed every 3 s on average and a commit
# failpoint on, then every fuzz target for ten minutes. Figures:
# docs/SECURITY.md. LINCHECK_TIME and LONG_FUZZTIME change the lengths.
LINCHECK_TIME ?= 10m
LONG_FUZZTIME ?= 10m
test-long:
	$(GO) test -count=1 -timeout 0 -v -run '^TestLinearizableUnderKillsAndFailedCommits$$' ./server/lincheck \
		-args -lincheck.duration $(LINCHECK_TIME) -lincheck.clients 32 -lincheck.kill-every 3s
	$(MAKE) test-fuzz FUZZTIME=$(LONG_FUZZTIME)

# test-fresh: a fresh clone with HOME and GOPATH temporary and no Node on
# PATH: go install ./cmd/leaseplane, make check-wasm and make run work.
test-fresh:
	.ci/fresh-clone

# The dependency rules of docs/ARCHITECTURE.md (also part of test-go).
check-imports:
	$(GO) test -count=1 .

# parity: corpus + >= 10,000 random scenarios through native, wazero and Node.
# A new seed each run (printed); LEASEPLANE_PARITY_SEED=N reproduces a run.
# The package's tests run Node, so they carry the tag external.
parity:
	$(GO) test -tags external -count=1 -v ./wasm/parity

test-node:
	node --test wasm/js/leaseplane.test.js
	test -d node_modules/@modelcontextprotocol/sdk || npm ci
	node --test server/mcp/mcp.test.mjs

# test-python installs the Python client (server/client/python, standard
# library only) into a fresh virtual environment the way users without a
# package index do (Debian's python3-venv, python3-wheel and setuptools,
# --no-build-isolation), then runs its unittest suite against the built
# binary's `leaseplane serve`.
PYVENV := bin/pyvenv
PYTHON := /usr/bin/python3
deps-python:
	$(PYTHON) -c 'import venv, ensurepip, setuptools, wheel' 2>/dev/null || \
		(apt-get update && apt-get install -y python3-venv python3-wheel python3-setuptools)

test-python: build deps-python
	rm -rf $(PYVENV) && $(PYTHON) -m venv --system-site-packages $(PYVENV)
	rm -rf bin/pyclient && cp -r server/client/python bin/pyclient   # the build's files stay out of the tree
	$(PYVENV)/bin/pip install --quiet --no-index --no-build-isolation ./bin/pyclient
	cd server/client/python/tests && PYTHONDONTWRITEBYTECODE=1 LEASEPLANE_BIN=$(CURDIR)/$(BIN) \
		$(CURDIR)/$(PYVENV)/bin/python -m unittest -v

# test-js runs the JavaScript client's tests (server/client/js) with node's
# test runner against the built binary's `leaseplane serve`.
test-js: build
	LEASEPLANE_BIN=$(CURDIR)/$(BIN) node --test server/client/js/test/

# test-browser drives Debian's chromium with playwright-core through the
# playground and the docs, served by `leaseplane serve` and as a static site,
# and runs the docs' recipes (curl and jq, Node, Python requests, and the
# Python and TypeScript clients from server/client) as printed.
test-browser:
	test -x /usr/bin/chromium || (apt-get update && apt-get install -y chromium)
	{ command -v jq && command -v curl && python3 -c 'import requests'; } >/dev/null 2>&1 || \
		(apt-get update && apt-get install -y jq curl python3 python3-requests)
	test -d node_modules/playwright-core -a -d node_modules/axe-core || npm ci
	node --test web/browser/*.test.mjs

# golden-diff prints, for each golden transcript that differs between REV
# (default HEAD) and the working tree, the steps and the fields that
# changed (cmd/goldendiff): read it before committing goldens.
REV ?= HEAD
golden-diff:
	@$(GO) run ./cmd/goldendiff -rev $(REV) || test $$? -eq 1

# generate writes templ's *_templ.go and web/corpus (a copy of the scenario
# corpus that package web embeds); both are committed.
generate:
	cd web && $(GO) generate ./...

# check-generated regenerates and fails when the result differs from the commit.
check-generated: generate
	@git diff --exit-code --stat -- web/corpus 'web/*_templ.go' || { echo "check-generated: generated files are stale: run make generate and commit them"; exit 1; }
	@test -z "$$(git status --porcelain --untracked-files=all -- web/corpus 'web/*_templ.go')" || { git status --short -- web/corpus 'web/*_templ.go'; echo "check-generated: new generated files are not committed: run make generate and commit them"; exit 1; }

# bench: the kernel's benchmarks, then the server load (docs/BENCHMARKS.md
# "Server load"): `leaseplane serve` as its own process against Redis
# (go-redis) and etcd (clientv3 concurrency.Mutex), spread, contended and
# queue (held and polled), each figure the median of BENCH_RUNS runs
# (about 5 minutes for 3). On a quiet machine only: figures taken while
# other work runs are not comparable. BENCH_FLAGS adds flags, such as
# --engines native,wasm or --cpuprofile server.prof.
BENCH_RUNS ?= 3
BENCH_FLAGS ?=
bench: deps-bench
	$(GO) test -run '^$$' -bench . -benchmem ./kernel
	cd $(BENCH_TOOL) && $(GO) run . --clients 64 --duration 5s --runs $(BENCH_RUNS) $(BENCH_FLAGS)

# worker builds the Cloudflare Workers tier into bin/worker (docs/WORKERS.md):
# the Go front worker (cmd/worker, GOOS=js, with syumai/workers' glue),
# the Durable Object (cmd/worker/*.mjs), the kernel's wasip1 build and
# kernel/ledger's (cmd/worker/ledger). Its wasm is a build output, never
# committed, but reproducible like make wasm's: the pinned toolchain,
# -trimpath, no build id (check-worker builds it twice and compares).
WORKER := bin/worker
define build-worker
	@mkdir -p $(dir $(1))
	rm -rf $(1)
	$(WASM_GO) run github.com/syumai/workers/cmd/workers-assets-gen -mode=go -o $(1)
	rm $(1)/worker.mjs $(1)/runtime.mjs # front.mjs is the entry: one Go runtime for many requests
	GOOS=js GOARCH=wasm $(WASM_GO) build -trimpath -ldflags='-s -w -buildid=' -o $(1)/app.wasm ./cmd/worker
	GOOS=wasip1 GOARCH=wasm GOWASM=$(GOWASM) $(WASM_GO) build -buildmode=c-shared -trimpath -ldflags='-s -w -buildid=' -o $(1)/ledger.wasm ./cmd/worker/ledger
	cp wasm/wazero/leaseplane-wasip1.wasm $(1)/kernel.wasm
	cp $(addprefix cmd/worker/,index.mjs front.mjs workspace.mjs kernel.mjs ledger.mjs book.mjs respond.mjs replay.mjs routes.mjs drills.mjs events.mjs) $(1)/
endef
worker:
	$(call build-worker,$(WORKER))

# check-worker builds the worker twice aside, the second time from a copy
# of the tree at another path with an empty build cache, and fails on any
# byte of difference between the two.
check-worker:
	@rm -rf bin/worker-check && mkdir -p bin/worker-check/src
	$(call build-worker,bin/worker-check/a)
	git ls-files -z --cached --others --exclude-standard | xargs -0 sh -c 'for f; do test -e "$$f" && printf "%s\0" "$$f"; done' _ | tar --null -T - -cf - | tar -xf - -C bin/worker-check/src
	cache=$$(mktemp -d) && GOCACHE=$$cache $(MAKE) -s -C bin/worker-check/src worker WORKER=$(CURDIR)/bin/worker-check/b; rc=$$?; rm -rf $$cache; exit $$rc
	@diff -r bin/worker-check/a bin/worker-check/b >/dev/null || { diff -rq bin/worker-check/a bin/worker-check/b; echo "check-worker: two builds of the worker differ: it is not reproducible"; exit 1; }
	@echo "check-worker: two builds, the second from another path with an empty build cache, are the same bytes ($$(ls bin/worker-check/a | wc -l) files)"
	@rm -rf bin/worker-check/src

# worker-dev runs the worker in a local workerd (Miniflare) on PORT, with
# its storage in ./data/worker, makes a workspace and prints its key. A busy
# port is refused before anything is built.
PORT ?= 8787
worker-dev:
	node cmd/worker/portfree.mjs $(PORT)
	$(MAKE) worker
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
# front worker and to the object directly; workerd's CPU per request; the two kernel builds an object
# could host (docs/BENCHMARKS.md, "Workers").
bench-worker: worker
	test -d node_modules/miniflare || npm ci
	WRANGLER_SEND_METRICS=false node cmd/worker/bench.mjs
	WRANGLER_SEND_METRICS=false node cmd/worker/bench-cpu.mjs
	node cmd/worker/bench-kernels.mjs

clean:
	rm -rf bin
