// Package web renders the playground and the docs with templ, and serves
// them with their static assets: hand-written JavaScript and CSS, and the
// GOOS=js kernel that `make wasm` builds into static/ (leaseplane.wasm and
// Go's wasm_exec.js, both committed; gzip is made in memory on first use).
//
// The pages run the kernel in the browser: after a page has loaded it
// makes no request. Two assets are made when the binary starts rather
// than kept in static/: kernel-boot.js (BootFile: wasm_exec.js, glue.js
// and boot.js as one script, which the page's inline head script,
// headboot.js, inserts once it has started the kernel's fetch and compile)
// and corpus.json (CorpusFile: the examples
// menu's scenarios, which the playground fetches after its first verdict,
// so that the page carries only its default example). Handler serves them from the binary (the wasm chosen
// by Accept-Encoding, assets named by a hash of their bytes and cached as
// immutable); WriteSite writes the same pages as static files that work
// from any static host.
//
// The examples menu and the docs' live examples come from the scenario
// corpus. go:embed cannot reach ../kernel/testdata, so `go generate`
// copies the corpus into corpus/ (see generate.go) and `make
// check-generated` fails when the copy or the templ output is stale. The
// example responses in the docs are computed by the native kernel when a
// page is rendered, and tests check that the prose around them agrees.
// The recipes' code lives in recipes/ as files: the docs print them and
// the browser tests (browser/, `make test-browser`) run them against a
// real `leaseplane serve`.
//
// web imports the kernel and templ only; the server mounts Routes.
package web
