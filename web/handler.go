package web

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/a-h/templ"

	"github.com/leaseplane/leaseplane/kernel"
)

// ServerLinks are the URLs of the pages as Handler serves them.
var ServerLinks = Links{Static: "/static/", Playground: "/playground", Docs: "/docs", Home: "/playground", Operator: "/operator"}

// siteLinks are relative URLs for pages written to DIR/playground/ and
// DIR/docs/ by WriteSite.
var siteLinks = Links{Static: "../static/", Playground: "../playground/", Docs: "../docs/", Home: "../playground/"}

func newPage(title, current string, l Links, scripts ...string) (Page, error) {
	a, err := staticAssets()
	if err != nil {
		return Page{}, err
	}
	return Page{Title: title, Current: current, Links: l, Assets: a, Scripts: scripts, Version: kernel.Version, Build: BuildHash()}, nil
}

var kernelScripts = []string{"kernel.js"}

// renderKernelPage writes a page that runs the kernel, with the timeline
// and ledger views and its own script; content makes its body.
func renderKernelPage(ctx context.Context, w *bytes.Buffer, l Links, title, current, script string,
	content func(Page) (templ.Component, error)) error {
	p, err := newPage(title, current, l, append(kernelScripts, "timeline.js", "ledger.js", script)...)
	if err != nil {
		return err
	}
	c, err := content(p)
	if err != nil {
		return err
	}
	return c.Render(ctx, w)
}

// RenderPlayground writes the playground page with links l.
func RenderPlayground(ctx context.Context, w *bytes.Buffer, l Links) error {
	return renderKernelPage(ctx, w, l, "Playground", "playground", "playground.js", func(p Page) (templ.Component, error) {
		ex, err := Corpus()
		def, _ := ExampleByName(ReferenceExamples[0])
		return playgroundPage(p, PlaygroundData{Examples: ex, Default: def}), err
	})
}

// RenderDocs writes the docs page with links l.
func RenderDocs(ctx context.Context, w *bytes.Buffer, l Links) error {
	return renderKernelPage(ctx, w, l, "Docs", "docs", "docs.js", func(p Page) (templ.Component, error) {
		d, err := DocsData()
		return docsPage(p, DocsPageData{Docs: d, LeaseTTLMs: kernel.LeaseTTLMs, WaiterTTLMs: kernel.WaiterTTLMs, DeadlockKeepMs: kernel.DeadlockKeepMs,
			MaxAdmitted: kernel.MaxAdmitted, BaseWaitMs: kernel.BaseWaitMs, MaxWaitMs: kernel.MaxWaitMs}), err
	})
}

// RenderOperator writes the operator's page: the workspace's queues, a
// live feed of its lease events drawn as a timeline, the latest drill run
// and the open cases, read from the plane with an operator key the person
// gives (operator.js); it runs no kernel.
func RenderOperator(ctx context.Context, w *bytes.Buffer, l Links) error {
	p, err := newPage("Operator", "operator", l, "timeline.js", "operator.js")
	if err != nil {
		return err
	}
	p.NoKernel = true
	return operatorPage(p).Render(ctx, w)
}

// pageHandler renders a page once (its content is fixed for a binary),
// gzips it once, and serves it with an ETag, so a revalidation costs a 304.
// runsKernel says whether the page runs the kernel, so that its headers
// preload it (the operator's page does not, and preloads nothing).
func pageHandler(render func(context.Context, *bytes.Buffer, Links) error, runsKernel bool) http.HandlerFunc {
	var (
		once sync.Once
		page []byte
		gzpg []byte // page gzipped, made with it
		etag string
		err  error
	)
	return func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() {
			var buf bytes.Buffer
			if err = render(context.Background(), &buf, ServerLinks); err == nil {
				page = buf.Bytes()
				sum := sha256.Sum256(page)
				etag = hex.EncodeToString(sum[:8])
				var z bytes.Buffer
				zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
				zw.Write(page)
				zw.Close()
				gzpg = z.Bytes()
			}
		})
		if err != nil {
			http.Error(w, "web: rendering the page failed: "+err.Error(), http.StatusInternalServerError)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Vary", "Accept-Encoding")
		if u := kernelPreload(); u != "" && runsKernel {
			// The browser fetches the kernel as soon as the headers arrive,
			// before the page's first script can ask for it.
			h.Set("Link", u)
		}
		// Either encoding revalidates: both carry the same page once decoded.
		if strings.Contains(r.Header.Get("If-None-Match"), `"`+etag) {
			h.Set("ETag", `"`+etag+`"`)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		body, tag := page, etag
		if _, gz := acceptedEncodings(r.Header.Get("Accept-Encoding")); gz {
			h.Set("Content-Encoding", "gzip")
			body, tag = gzpg, etag+".gz"
		}
		h.Set("ETag", `"`+tag+`"`)
		h.Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	}
}

// kernelPreload is the Link header value that preloads boot.js and the
// browser kernel (as=fetch, crossorigin: the same request as boot.js's
// fetch), so both are on their way before the page's head is parsed;
// empty without a kernel.
var kernelPreload = sync.OnceValue(func() string {
	a, err := staticAssets()
	if err != nil || BuildHash() == "" {
		return ""
	}
	return "<" + a.url(ServerLinks.Static, BootFile) + ">; rel=preload; as=script, " +
		"<" + a.url(ServerLinks.Static, WasmFile) + ">; rel=preload; as=fetch; crossorigin"
})

func staticHandler(w http.ResponseWriter, r *http.Request) {
	a, err := staticAssets()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	serveAsset(w, r, a, strings.TrimPrefix(r.URL.Path, "/static/"))
}

// SetSecurityHeaders sets the headers every page and static file is
// served with: the Content-Security-Policy, no framing (frame-ancestors
// 'none', and X-Frame-Options for older browsers), no Referer sent to
// other sites, no content sniffing.
func SetSecurityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
}

// Handler serves the pages and their static files, and redirects / to
// the playground; every answer carries SetSecurityHeaders. leaseplane
// serve mounts it at / beside the API.
func Handler() http.Handler {
	// The kernel's gzip is made once per process: make it ahead of the
	// first visitor's request, as soon as the process is idle, or when a
	// first request comes here, whichever is first (warmWhen).
	asked := make(chan struct{})
	var askedOnce sync.Once
	go func() {
		if a, err := staticAssets(); err == nil {
			t := time.NewTicker(idleTick)
			defer t.Stop()
			warmWhen(a, t.C, idleSince(processCPU, time.Now), asked)
		}
	}()
	mux := http.NewServeMux()
	mux.Handle("GET /playground", pageHandler(RenderPlayground, true))
	mux.Handle("GET /docs", pageHandler(RenderDocs, true))
	mux.Handle("GET /operator", pageHandler(RenderOperator, false))
	mux.HandleFunc("GET /static/", staticHandler)
	mux.Handle("GET /{$}", http.RedirectHandler(ServerLinks.Playground, http.StatusFound))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		askedOnce.Do(func() { close(asked) })
		SetSecurityHeaders(w.Header())
		mux.ServeHTTP(w, r)
	})
}

// idleTick is how often warmWhen asks whether the process is idle, and
// idleTicks how many ticks in a row it must be (a second).
const (
	idleTick  = 200 * time.Millisecond
	idleTicks = 5
)

// warmWhen makes a's gzip variants (warmGzip) once idle has reported the
// process idle on idleTicks ticks in a row, or once asked is closed (a
// first request for a page or an asset), whichever comes first. The gzip
// of the two WebAssembly builds is about 0.4 s of CPU: a server that
// agents load from its first second (as the load bench does) does not
// spend it beside their requests until it is idle or a browser asks.
func warmWhen(a *assets, ticks <-chan time.Time, idle func() bool, asked <-chan struct{}) {
	quiet := 0
wait:
	for quiet < idleTicks {
		select {
		case <-asked:
			break wait
		case <-ticks:
			if idle() {
				quiet++
			} else {
				quiet = 0
			}
		}
	}
	a.warmGzip()
}

// idleSince returns a function that reports whether the process used
// (by cpu, its CPU time so far) less than a quarter of a core since the
// previous call (since now, for the first). Where the process's CPU time
// cannot be read (cpu gives 0), it always reports idle: the gzip is made
// at the first tick.
func idleSince(cpu func() time.Duration, clock func() time.Time) func() bool {
	prev, wall := cpu(), clock()
	return func() bool {
		now, at := cpu(), clock()
		used, span := now-prev, at.Sub(wall)
		prev, wall = now, at
		return now == 0 || used < span/4
	}
}

// WriteSite writes the playground and the docs as static files under dir:
// index.html, playground/index.html, docs/index.html and static/ with
// every asset under its hashed name (and the wasm's .gz beside it, for
// hosts that serve precompressed files). All links are relative,
// so dir works from any static host and under any path.
func WriteSite(dir string) error {
	a, err := staticAssets()
	if err != nil {
		return err
	}
	if !a.has(WasmFile) {
		return errors.New("web: the browser kernel is not embedded in this binary: run make wasm, then rebuild")
	}
	write := func(rel string, b []byte) error {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("web: writing the site: %w", err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return fmt.Errorf("web: writing the site: %w", err)
		}
		return nil
	}
	ctx := context.Background()
	for _, pg := range []struct {
		rel    string
		render func(context.Context, *bytes.Buffer, Links) error
	}{{"playground/index.html", RenderPlayground}, {"docs/index.html", RenderDocs}} {
		var buf bytes.Buffer
		if err := pg.render(ctx, &buf, siteLinks); err != nil {
			return err
		}
		if err := write(pg.rel, buf.Bytes()); err != nil {
			return err
		}
	}
	index := `<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>leaseplane</title>` +
		`<meta http-equiv="refresh" content="0; url=playground/"></head>` +
		`<body><p><a href="playground/">Playground</a> · <a href="docs/">Docs</a></p></body></html>` + "\n"
	if err := write("index.html", []byte(index)); err != nil {
		return err
	}
	for _, n := range a.names() {
		as := a.byName[n]
		if err := write("static/"+as.hashed, as.raw); err != nil {
			return err
		}
		if n == WasmFile {
			if err := write("static/"+as.hashed+".gz", as.gzipped()); err != nil {
				return err
			}
		}
	}
	return nil
}

// playgroundFragment is the URL fragment that opens l's scenario in the
// playground: a corpus example by name, anything else as base64url JSON.
func playgroundFragment(l LiveExample) string {
	if ex, ok := ExampleByName(l.ID); ok && ex.JSON == l.Scenario {
		return "#example=" + l.ID
	}
	return "#json=" + base64.RawURLEncoding.EncodeToString([]byte(l.Scenario))
}

// scenarioRows sizes a scenario textarea: its lines, at most 16.
func scenarioRows(s string) int {
	n := strings.Count(s, "\n") + 1
	return min(max(n, 3), 16)
}
