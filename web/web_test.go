package web

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/a-h/templ"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/scenario"
)

func render(t *testing.T, c templ.Component) string {
	t.Helper()
	var b bytes.Buffer
	if err := c.Render(context.Background(), &b); err != nil {
		t.Fatalf("render: %v", err)
	}
	return b.String()
}

func testPage(t *testing.T, build string) Page {
	t.Helper()
	a, err := loadAssets(fakeStatic())
	if err != nil {
		t.Fatal(err)
	}
	if err := a.addCorpus(); err != nil {
		t.Fatal(err)
	}
	a.addBoot()
	return Page{Title: "T", Current: "playground", Links: ServerLinks, Assets: a, Scripts: []string{"kernel.js"}, Version: kernel.Version, Build: build}
}

var fakeWasm = bytes.Repeat([]byte("\x00asm fake kernel "), 400)

func gz(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

func fakeStatic() fstest.MapFS {
	return fstest.MapFS{
		"static/leaseplane.wasm": {Data: fakeWasm},
		"static/app.css":         {Data: []byte("body { color: red; }\n")},
		"static/kernel.js":       {Data: []byte("// js\n")},
		"static/boot.js":         {Data: []byte("// boot\n")},
		"static/wasm_exec.js":    {Data: []byte("// go\n")},
		"static/glue.js":         {Data: []byte("// glue\n")},
	}
}

func TestLayoutNamesHashedAssetsAndKernel(t *testing.T) {
	p := testPage(t, "abc123")
	html := render(t, layout(p))
	a := p.Assets
	for _, want := range []string{
		`href="/static/` + a.byName["app.css"].hashed + `"`,
		`src="/static/` + a.byName["kernel.js"].hashed + `"`,
		`data-wasm="/static/` + a.byName[WasmFile].hashed + `"`,
		`kernel ` + kernel.Version,
		`href="/docs"`,
		`aria-current="page"`,
		`<title>T · leaseplane</title>`,
		`href="#main"`,
	} {
		if !strings.Contains(html, want) {
			t.Errorf("layout lacks %s", want)
		}
	}
	if strings.Contains(html, "role=\"alert\"") {
		t.Error("layout shows the missing-kernel banner although a kernel is embedded")
	}
	// The kernel's start is the head's inline script (headBoot), which
	// names the module and the boot file (wasm_exec.js, glue.js and boot.js
	// as one file) it inserts; it comes before the stylesheet, which would
	// hold a script after it until the stylesheet arrived, and before the
	// deferred scripts. It is the page's only script without a src, and
	// the policy allows it by its hash.
	boot := a.byName[BootFile]
	if boot == nil || string(boot.raw) != "// go\n\n// glue\n\n// boot\n\n" {
		t.Fatalf("the boot file is not wasm_exec.js, glue.js and boot.js in order: %v", boot)
	}
	k := strings.Index(html, `<script data-wasm="/static/`+a.byName[WasmFile].hashed+`" data-boot="/static/`+boot.hashed+`">`+headBoot+`</script>`)
	css, deferred := strings.Index(html, `rel="stylesheet"`), strings.Index(html, "<script defer")
	if k < 0 || css < 0 || k > css || k > deferred {
		t.Errorf("the kernel's start (at %d) should come before the stylesheet (at %d) and the deferred scripts (at %d)", k, css, deferred)
	}
	if n := strings.Count(html, "<script"); n != strings.Count(html, "<script defer src=")+1 {
		t.Errorf("%d script elements, want the inline start and deferred scripts only", n)
	}
	sum := sha256.Sum256([]byte(headBoot))
	if h := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"; !strings.Contains(cspMeta, "script-src 'self' 'wasm-unsafe-eval' "+h+";") || !strings.Contains(html, strings.ReplaceAll(h, "'", "&#39;")) {
		t.Errorf("the policy does not allow the inline start by its hash %s: %s", h, cspMeta)
	}
	if strings.Contains(html, a.byName["wasm_exec.js"].hashed) || strings.Contains(html, a.byName["glue.js"].hashed) {
		t.Error("the page loads wasm_exec.js or glue.js besides the boot file")
	}
	nobuild := render(t, layout(testPage(t, "")))
	if !strings.Contains(nobuild, "make wasm") || strings.Contains(nobuild, `data-wasm="/static`) {
		t.Error("without a kernel the layout should say to run make wasm and name no wasm URL")
	}
}

func TestPlaygroundHTML(t *testing.T) {
	ex, err := Corpus()
	if err != nil {
		t.Fatal(err)
	}
	def, _ := ExampleByName("two-release-agents")
	html := render(t, playgroundPage(testPage(t, "abc"), PlaygroundData{Examples: ex, Default: def}))
	opts := regexp.MustCompile(`<option value="([a-z0-9-]+)"`).FindAllStringSubmatch(html, -1)
	if len(opts) != len(ex) {
		t.Fatalf("examples menu has %d options, corpus has %d", len(opts), len(ex))
	}
	for i, r := range ReferenceExamples {
		if opts[i][1] != r {
			t.Errorf("menu option %d = %s, want reference example %s", i, opts[i][1], r)
		}
	}
	if !strings.Contains(html, `<option value="two-release-agents" selected>`) {
		t.Error("the default example is not selected")
	}
	for _, want := range []string{`id="run"`, `id="json"`, `id="timeline"`, `id="verdicts"`, `id="events"`, `id="trust"`, `id="transcript"`, `id="share"`, "<kbd>Enter</kbd>", `href="/docs"`} {
		if !strings.Contains(html, want) {
			t.Errorf("playground lacks %s", want)
		}
	}
	// The page carries the default example only; the menu's scenarios are
	// a hashed static file that the menu names.
	for _, e := range ex {
		if e.Name != def.Name && e.Description != "" && strings.Contains(html, templ.EscapeString(e.Description)) {
			t.Errorf("the playground page carries the example %s besides the default", e.Name)
		}
	}
	p := testPage(t, "abc")
	as := p.Assets.byName[CorpusFile]
	if as == nil || !strings.Contains(html, `<select id="example" data-corpus="/static/`+as.hashed+`"`) {
		t.Fatal("the examples menu does not name the corpus file by its hashed name")
	}
	if as.ctype != "application/json" {
		t.Errorf("corpus file served as %q", as.ctype)
	}
	var got []Example
	if err := json.Unmarshal(as.raw, &got); err != nil {
		t.Fatalf("corpus file: %v", err)
	}
	if len(got) != len(ex) || got[2].Name != "breaking-a-deadlock" || got[2].JSON != ex[2].JSON || got[2].Description != ex[2].Description {
		t.Errorf("corpus file does not carry the corpus: %d entries", len(got))
	}
	// The textarea carries the default scenario, escaped.
	if !strings.Contains(html, "lock:deploy/production") || strings.Contains(html, `"title": "Two release agents"`) {
		t.Error("the JSON editor does not hold the default scenario HTML-escaped")
	}
}

func TestRunDisabledWithoutKernel(t *testing.T) {
	ex, _ := Corpus()
	html := render(t, playgroundPage(testPage(t, ""), PlaygroundData{Examples: ex, Default: ex[0]}))
	if !regexp.MustCompile(`<button type="button" id="run" class="primary" disabled`).MatchString(html) {
		t.Error("Run should be disabled when the binary has no kernel")
	}
}

// TestCorpusCopyIsCurrent fails when kernel/testdata/scenarios changed
// and web/corpus was not regenerated.
func TestCorpusCopyIsCurrent(t *testing.T) {
	src, _ := filepath.Glob("../kernel/testdata/scenarios/*.json")
	dst, _ := filepath.Glob("corpus/*.json")
	if len(src) == 0 {
		t.Fatal("no scenarios in ../kernel/testdata/scenarios")
	}
	if len(src) != len(dst) {
		t.Fatalf("web/corpus has %d scenarios, kernel/testdata/scenarios %d: run make generate", len(dst), len(src))
	}
	for _, s := range src {
		a, _ := os.ReadFile(s)
		b, err := os.ReadFile(filepath.Join("corpus", filepath.Base(s)))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("web/corpus/%s differs from the kernel's: run make generate", filepath.Base(s))
		}
	}
}

// TestDocsClaimsHoldInTheKernel runs every claim the docs' prose makes
// against the native kernel: docs that drift from the kernel fail here.
func TestDocsClaimsHoldInTheKernel(t *testing.T) {
	d, err := DocsData()
	if err != nil {
		t.Fatal(err)
	}
	var lives []LiveExample
	lives = append(lives, d.Examples...)
	for _, r := range d.Recipes {
		lives = append(lives, r.Live)
	}
	if len(lives) != 7 {
		t.Fatalf("want 5 examples (the four reference ones and the held herd) and 2 recipes, got %d live examples", len(lives))
	}
	for _, l := range lives {
		tr, err := scenario.Replay(kernel.Native, []byte(l.Scenario))
		if err != nil {
			t.Fatalf("%s: %v", l.ID, err)
		}
		var parsed struct {
			Steps []struct {
				Answer json.RawMessage `json:"answer"`
			} `json:"steps"`
		}
		if err := json.Unmarshal(tr, &parsed); err != nil {
			t.Fatal(err)
		}
		for _, c := range l.Checks {
			checkClaim(t, l.ID, parsed.Steps[c.Step].Answer, c)
		}
		for _, s := range l.Shown {
			if want := Pretty(parsed.Steps[s.Index].Answer); s.Answer != want {
				t.Errorf("%s step %d: shown answer\n%s\nkernel says\n%s", l.ID, s.Index, s.Answer, want)
			}
		}
		if len(l.Checks) == 0 || len(l.Shown) == 0 {
			t.Errorf("%s: a live example must show answers and make checked claims", l.ID)
		}
	}
	statuses := map[string]int{}
	for _, x := range d.Exchanges {
		for _, c := range x.Checks {
			checkClaim(t, x.Title, []byte(compactJSON(x.Shown.Answer)), c)
		}
		statuses[x.Title] = x.Shown.Status
	}
	for title, want := range map[string]int{"Granted": 200, "Held by another agent": 409, "Would close a wait cycle": 409,
		"Suspended agent": 403, "Invalid request": 400, "Stale lease id": 409, "Released": 200} {
		if statuses[title] != want {
			t.Errorf("REST example %q answers %d, the reference table says %d", title, statuses[title], want)
		}
	}
}

func compactJSON(s string) string {
	var b bytes.Buffer
	json.Compact(&b, []byte(s))
	return b.String()
}

func checkClaim(t *testing.T, where string, answer []byte, c Check) {
	t.Helper()
	got, err := Lookup(answer, c.Path)
	if err != nil {
		t.Errorf("%s step %d: %v in %s", where, c.Step, err, answer)
		return
	}
	if compactJSON(string(got)) != compactJSON(c.Want) {
		t.Errorf("%s step %d: %s = %s, the docs say %s", where, c.Step, c.Path, got, c.Want)
	}
}

func TestDocsHTML(t *testing.T) {
	var b bytes.Buffer
	if err := RenderDocs(context.Background(), &b, ServerLinks); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	for _, id := range []string{"what", "recorded", "how", "examples", "guarantees", "limits", "rest", "mcp", "recipes",
		"two-release-agents", "crashed-holder", "breaking-a-deadlock", "thundering-herd", "take-and-release", "queue-for-the-slot"} {
		if !strings.Contains(html, `id="`+id+`"`) {
			t.Errorf("docs lack the section #%s", id)
		}
	}
	if n := strings.Count(html, "data-live"); n < 6*2 {
		t.Errorf("docs have %d data-live markers, want the six live examples", n)
	}
	if n := strings.Count(html, `role="tab" `); n != 10 {
		t.Errorf("docs have %d code tabs, want 5 per recipe (curl, fetch, requests, the Python and the TypeScript client)", n)
	}
	for _, want := range []string{"curl -sS", "fetch(", "import os, requests", "import leaseplane", "from &#34;leaseplane&#34;",
		"plane.lease(", "plane.withLease(", "Retry-After: 1", "coordination.lease.acquire",
		`&#34;waitingOn&#34;: &#34;db:billing/customers&#34;`, `#example=breaking-a-deadlock`, "#json="} {
		if !strings.Contains(html, want) {
			t.Errorf("docs lack %q", want)
		}
	}
	// Each live example carries the answers it must reproduce.
	re := regexp.MustCompile(`(?s)<script id="([a-z-]+)-expected" type="application/json">(.*?)</script>`)
	ms := re.FindAllStringSubmatch(html, -1)
	if len(ms) != 7 {
		t.Fatalf("docs carry %d expected-answer scripts, want 7", len(ms))
	}
	for _, m := range ms {
		var ex []expectedAnswer
		if err := json.Unmarshal([]byte(m[2]), &ex); err != nil || len(ex) == 0 {
			t.Errorf("%s: expected answers do not parse: %v", m[1], err)
		}
	}
}

func TestAcceptedEncodings(t *testing.T) {
	for _, tc := range []struct {
		h      string
		br, gz bool
	}{
		{"", false, false},
		{"gzip", false, true},
		{"gzip, deflate, br", true, true},
		{"br;q=0, gzip", false, true},
		{"br;q=0.5", true, false},
		{"*", true, true},
		{"*, br;q=0", false, true},
		{"identity", false, false},
		{"GZIP ; q=1.0", false, true},
	} {
		br, gz := acceptedEncodings(tc.h)
		if br != tc.br || gz != tc.gz {
			t.Errorf("Accept-Encoding %q: br=%v gzip=%v, want %v %v", tc.h, br, gz, tc.br, tc.gz)
		}
	}
}

func TestServeAsset(t *testing.T) {
	a, err := loadAssets(fakeStatic())
	if err != nil {
		t.Fatal(err)
	}
	w := a.byName[WasmFile]
	get := func(path, ae, inm string) *http.Response {
		r := httptest.NewRequest("GET", "/static/"+path, nil)
		if ae != "" {
			r.Header.Set("Accept-Encoding", ae)
		}
		if inm != "" {
			r.Header.Set("If-None-Match", inm)
		}
		rec := httptest.NewRecorder()
		serveAsset(rec, r, a, path)
		return rec.Result()
	}
	for _, tc := range []struct {
		name, path, ae, enc, cache string
		body                       []byte
	}{
		{"gzip, also when brotli is offered", w.hashed, "gzip, deflate, br", "gzip", "public, max-age=31536000, immutable", nil},
		{"gzip", w.hashed, "gzip", "gzip", "public, max-age=31536000, immutable", nil},
		{"identity", w.hashed, "", "", "public, max-age=31536000, immutable", fakeWasm},
		{"plain name revalidates", WasmFile, "br", "", "no-cache", fakeWasm},
	} {
		res := get(tc.path, tc.ae, "")
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/wasm" {
			t.Errorf("%s: %d %s", tc.name, res.StatusCode, res.Header.Get("Content-Type"))
		}
		if res.Header.Get("Content-Encoding") != tc.enc || res.Header.Get("Cache-Control") != tc.cache || res.Header.Get("Vary") != "Accept-Encoding" {
			t.Errorf("%s: encoding %q cache %q vary %q", tc.name, res.Header.Get("Content-Encoding"), res.Header.Get("Cache-Control"), res.Header.Get("Vary"))
		}
		if tc.enc == "gzip" {
			zr, err := gzip.NewReader(bytes.NewReader(body))
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			body, _ = io.ReadAll(zr)
			tc.body = fakeWasm
		}
		if !bytes.Equal(body, tc.body) {
			t.Errorf("%s: wrong body (%d bytes)", tc.name, len(body))
		}
	}
	if e := get(w.hashed, "gzip", "").Header.Get("ETag"); e != `"`+w.hash+`.gz"` {
		t.Errorf("gzip ETag %s, want the hash with .gz", e)
	}
	if res := get(w.hashed, "br", `"`+w.hash+`.gz"`); res.StatusCode != http.StatusNotModified {
		t.Errorf("If-None-Match with the hash: %d, want 304", res.StatusCode)
	}
	if res := get("leaseplane.0000.wasm", "", ""); res.StatusCode != http.StatusNotFound {
		t.Errorf("unknown asset: %d, want 404", res.StatusCode)
	}
	// A CSS file is gzipped on first use too.
	res := get(a.byName["app.css"].hashed, "gzip", "")
	if res.Header.Get("Content-Encoding") != "gzip" || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/css") {
		t.Errorf("css: %q %q", res.Header.Get("Content-Encoding"), res.Header.Get("Content-Type"))
	}
}

// A .gz left in static/ (by an older make wasm) is never served: gzip is
// always made from the embedded bytes.
func TestStrayGzipIsNotServed(t *testing.T) {
	fs := fakeStatic()
	fs["static/leaseplane.wasm.gz"] = &fstest.MapFile{Data: gz([]byte("an older kernel"))}
	a, err := loadAssets(fs)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(a.byName[WasmFile].gzipped()))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(zr)
	if !bytes.Equal(got, fakeWasm) {
		t.Error("a .gz that does not decode to the .wasm was served")
	}
}

func TestHandlerRoutes(t *testing.T) {
	h := Handler()
	for _, tc := range []struct {
		method, path string
		status       int
		ctype        string
	}{
		{"GET", "/playground", 200, "text/html; charset=utf-8"},
		{"GET", "/docs", 200, "text/html; charset=utf-8"},
		{"GET", "/", 302, ""},
		{"GET", "/static/nope.js", 404, ""},
		{"POST", "/playground", 405, ""},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
		if rec.Code != tc.status || (tc.ctype != "" && rec.Header().Get("Content-Type") != tc.ctype) {
			t.Errorf("%s %s: %d %q, want %d %q", tc.method, tc.path, rec.Code, rec.Header().Get("Content-Type"), tc.status, tc.ctype)
		}
	}
}

func TestPagesRevalidate(t *testing.T) {
	h := Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/docs", nil))
	etag := rec.Header().Get("ETag")
	if etag == "" || rec.Header().Get("Cache-Control") != "no-cache" {
		t.Fatalf("docs: ETag %q, Cache-Control %q", etag, rec.Header().Get("Cache-Control"))
	}
	r := httptest.NewRequest("GET", "/docs", nil)
	r.Header.Set("If-None-Match", etag)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != http.StatusNotModified || rec.Body.Len() != 0 {
		t.Errorf("revalidating the docs: %d with %d bytes, want 304 and none", rec.Code, rec.Body.Len())
	}
}

// TestPagesGzip: a page goes gzipped to a client that accepts it (the same
// bytes once decoded), plain to one that does not, and either ETag
// revalidates.
func TestPagesGzip(t *testing.T) {
	h := Handler()
	get := func(ae, inm string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/playground", nil)
		if ae != "" {
			r.Header.Set("Accept-Encoding", ae)
		}
		if inm != "" {
			r.Header.Set("If-None-Match", inm)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec
	}
	plain, zipped := get("", ""), get("gzip, br", "")
	if plain.Header().Get("Content-Encoding") != "" || zipped.Header().Get("Content-Encoding") != "gzip" {
		t.Fatalf("Content-Encoding %q without Accept-Encoding, %q with gzip", plain.Header().Get("Content-Encoding"), zipped.Header().Get("Content-Encoding"))
	}
	if zipped.Header().Get("Vary") != "Accept-Encoding" || zipped.Body.Len() >= plain.Body.Len()/2 {
		t.Errorf("gzipped page: Vary %q, %d bytes against %d plain", zipped.Header().Get("Vary"), zipped.Body.Len(), plain.Body.Len())
	}
	zr, err := gzip.NewReader(zipped.Body)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(zr); !bytes.Equal(b, plain.Body.Bytes()) {
		t.Error("the gzipped page is not the page")
	}
	if get("gzip;q=0", "").Header().Get("Content-Encoding") != "" {
		t.Error("gzip;q=0 got a gzipped page")
	}
	for _, tag := range []string{plain.Header().Get("ETag"), zipped.Header().Get("ETag")} {
		if rec := get("gzip", tag); rec.Code != http.StatusNotModified {
			t.Errorf("If-None-Match %s: %d, want 304", tag, rec.Code)
		}
	}
	if plain.Header().Get("ETag") == zipped.Header().Get("ETag") {
		t.Error("the two encodings share an ETag")
	}
}

func TestWriteSiteLinksResolve(t *testing.T) {
	if BuildHash() == "" {
		// WriteSite must refuse: a site without its kernel runs nothing.
		if err := WriteSite(t.TempDir()); err == nil || !strings.Contains(err.Error(), "make wasm") {
			t.Fatalf("WriteSite without a kernel: %v, want an error naming make wasm", err)
		}
		return
	}
	dir := t.TempDir()
	if err := WriteSite(dir); err != nil {
		t.Fatal(err)
	}
	ref := regexp.MustCompile(`(?:href|src|data-wasm)="([^"#]+)"`)
	for _, page := range []string{"playground/index.html", "docs/index.html", "index.html"} {
		b, err := os.ReadFile(filepath.Join(dir, page))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ref.FindAllStringSubmatch(string(b), -1) {
			u := m[1]
			if strings.HasPrefix(u, "data:") || strings.HasPrefix(u, "http") {
				continue
			}
			if strings.HasPrefix(u, "/") {
				t.Errorf("%s links %s absolutely: a static site must use relative links", page, u)
				continue
			}
			target := filepath.Join(dir, filepath.Dir(page), filepath.FromSlash(u))
			if strings.HasSuffix(u, "/") {
				target = filepath.Join(target, "index.html")
			}
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s links %s, which the site lacks", page, u)
			}
		}
	}
}

func TestLiveExampleComponent(t *testing.T) {
	l := LiveExample{ID: "x-demo", Title: "Demo <1>", Lead: "lead & more", Scenario: `{"steps": [{"atMs": 1, "op": "wait"}]}`, Show: []int{0}}
	if err := l.fill(); err != nil {
		t.Fatal(err)
	}
	html := render(t, liveExample(testPage(t, "abc"), l, true))
	for _, want := range []string{
		`<section class="live" id="x-demo" data-live>`,
		`<h3>Demo &lt;1&gt;</h3>`,
		`<p>lead &amp; more</p>`,
		`<textarea id="x-demo-scenario" class="code" data-scenario`,
		`<script id="x-demo-expected" type="application/json">`,
		`href="/playground#json=`,
		`step 1 · wait at 1 ms`,
		`<strong class="st ok">200</strong>`,
	} {
		if !strings.Contains(html, want) {
			t.Errorf("live example lacks %s", want)
		}
	}
	if strings.Contains(render(t, liveExample(testPage(t, "abc"), l, false)), "<h3>") {
		t.Error("a live example without heading rendered one")
	}
}

func TestExchangeComponent(t *testing.T) {
	x := Exchange{Route: "POST /r", Title: "Held", Setup: []string{`{"atMs":1,"op":"acquire","resource":"r:x","actorDid":"did:web:a"}`},
		Step: `{"atMs":2,"op":"acquire","resource":"r:x","actorDid":"did:web:b"}`}
	if err := x.fill(); err != nil {
		t.Fatal(err)
	}
	html := render(t, exchange(x, false))
	for _, want := range []string{`<details class="exchange">`, "409 Conflict", "Retry-After: 1", `&#34;resource&#34;: &#34;r:x&#34;`, `&#34;reason&#34;: &#34;lease_held&#34;`} {
		if !strings.Contains(html, want) {
			t.Errorf("exchange lacks %s", want)
		}
	}
	if !strings.Contains(render(t, exchange(x, true)), `<details class="exchange" open>`) {
		t.Error("an open exchange is not open")
	}
}

// TestPagePreloadsKernel: a page answer carries a Link header that
// preloads the embedded kernel under its hashed URL, as the fetch in the
// page's head asks for it; without a kernel there is none, nor on the
// operator's page.
func TestPagePreloadsKernel(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	res, err := http.Get(srv.URL + "/playground")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	link := res.Header.Get("Link")
	a, err := staticAssets()
	if err != nil {
		t.Fatal(err)
	}
	if BuildHash() == "" {
		if link != "" {
			t.Errorf("no kernel embedded, yet Link: %s", link)
		}
		return
	}
	u := a.url(ServerLinks.Static, WasmFile)
	if want := "<" + a.url(ServerLinks.Static, BootFile) + ">; rel=preload; as=script, <" + u + ">; rel=preload; as=fetch; crossorigin"; link != want {
		t.Errorf("Link: %q, want %q", link, want)
	}
	if !bytes.Contains(body, []byte(`"`+u+`"`)) {
		t.Errorf("the page does not fetch the preloaded URL %s", u)
	}
	// The operator's page runs no kernel: it preloads none.
	res, err = http.Get(srv.URL + "/operator")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if l := res.Header.Get("Link"); l != "" {
		t.Errorf("the operator's page preloads %s", l)
	}
}

// TestWarmGzip: warmGzip (which Handler starts) makes the gzip of the
// kernel and of every other compressible asset ahead of any request, and
// of nothing else; the bytes are those a request is served.
func TestWarmGzip(t *testing.T) {
	a, err := loadAssets(fakeStatic())
	if err != nil {
		t.Fatal(err)
	}
	a.add("icon.png", []byte("\x89PNG"))
	a.warmGzip()
	for n, as := range a.byName {
		made := as.gz != nil
		if want := compressible(as.ctype); made != want {
			t.Errorf("%s (%s): gzip made %v, want %v", n, as.ctype, made, want)
		}
	}
	zr, err := gzip.NewReader(bytes.NewReader(a.byName[WasmFile].gz))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(zr); err != nil || !bytes.Equal(b, fakeWasm) {
		t.Errorf("the kernel's gzip does not decode to the kernel (%v)", err)
	}
}

// TestWarmWhen: Handler's warming makes the gzip once the process has
// been idle on idleTicks ticks in a row, and not before (a busy tick starts
// the count again); or at once when a request came, however busy the
// process.
func TestWarmWhen(t *testing.T) {
	a, err := loadAssets(fakeStatic())
	if err != nil {
		t.Fatal(err)
	}
	// busy, idle, busy, then idle: made at the last of idleTicks idle ticks.
	seq := append([]bool{false, true, false}, slices.Repeat([]bool{true}, idleTicks)...)
	ticks := make(chan time.Time, len(seq)+2)
	for range cap(ticks) {
		ticks <- time.Time{}
	}
	calls := 0
	warmWhen(a, ticks, func() bool {
		if a.byName[WasmFile].gz != nil {
			t.Errorf("the gzip was made before tick %d", calls+1)
		}
		calls++
		return seq[calls-1]
	}, nil)
	if calls != len(seq) || len(ticks) != 2 {
		t.Errorf("idle asked %d times, %d ticks left; want %d and 2", calls, len(ticks), len(seq))
	}
	if a.byName[WasmFile].gz == nil {
		t.Errorf("idle on %d ticks in a row, the kernel's gzip was not made", idleTicks)
	}

	b, err := loadAssets(fakeStatic())
	if err != nil {
		t.Fatal(err)
	}
	asked := make(chan struct{})
	close(asked)
	warmWhen(b, nil, func() bool { t.Error("idle asked after a request came"); return false }, asked)
	if b.byName[WasmFile].gz == nil {
		t.Error("a request came, the kernel's gzip was not made")
	}
}

// TestIdleSince: idle while the process used less than a quarter of a
// core since the last look, on a fake clock and CPU time; always idle
// where the CPU time is not read.
func TestIdleSince(t *testing.T) {
	var cpu time.Duration
	var wall time.Time
	idle := idleSince(func() time.Duration { return cpu }, func() time.Time { return wall })
	for i, step := range []struct {
		cpu, wall time.Duration
		idle      bool
	}{
		{cpu: 150 * time.Millisecond, wall: 200 * time.Millisecond, idle: false},
		{cpu: 40 * time.Millisecond, wall: 200 * time.Millisecond, idle: true},
		{cpu: 60 * time.Millisecond, wall: 200 * time.Millisecond, idle: false},
		{cpu: 0, wall: 200 * time.Millisecond, idle: true},
	} {
		cpu += step.cpu
		wall = wall.Add(step.wall)
		if got := idle(); got != step.idle {
			t.Errorf("step %d: %v of CPU in %v: idle %v, want %v", i, step.cpu, step.wall, got, step.idle)
		}
	}
	unread := idleSince(func() time.Duration { return 0 }, time.Now)
	if !unread() {
		t.Error("with no CPU time to read, not idle")
	}
}
