package main

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/server/servertest"
	"github.com/leaseplane/leaseplane/web"
)

func TestSiteUsage(t *testing.T) {
	for _, args := range [][]string{{"site"}, {"site", "a", "b"}, {"site", "--listen", "127.0.0.1:0", "extra"}} {
		var out, errs bytes.Buffer
		if code := run(args, nil, &out, &errs); code != 2 || !strings.Contains(errs.String(), "usage: leaseplane site OUTDIR") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and the usage", args, code, errs.String())
		}
	}
}

func TestSiteWritesPages(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	var out, errs bytes.Buffer
	code := run([]string{"site", dir}, nil, &out, &errs)
	if web.BuildHash() == "" {
		// Without `make wasm` the site would run nothing: it must say so.
		if code != 1 || !strings.Contains(errs.String(), "make wasm") {
			t.Fatalf("site without a kernel: exit %d, stderr %q", code, errs.String())
		}
		return
	}
	if code != 0 {
		t.Fatalf("site: exit %d: %s", code, errs.String())
	}
	for _, f := range []string{"index.html", "playground/index.html", "docs/index.html", "static/leaseplane." + web.BuildHash() + ".wasm"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("site lacks %s", f)
		}
	}
}

// TestServeMountsThePages checks the serve hook: the real server answers
// the pages and the kernel under its hashed name, beside the API.
func TestServeMountsThePages(t *testing.T) {
	s := e2eStart(t, "native", t.TempDir(), servertest.NewClock())
	for _, tc := range []struct{ path, ctype string }{
		{"/playground", "text/html; charset=utf-8"},
		{"/docs", "text/html; charset=utf-8"},
		{"/static/" + "app.css", "text/css; charset=utf-8"},
	} {
		res, err := http.Get(s.url + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != tc.ctype || len(body) == 0 {
			t.Errorf("GET %s: %d %q (%d bytes)", tc.path, res.StatusCode, res.Header.Get("Content-Type"), len(body))
		}
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Get(s.url + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusFound || res.Header.Get("Location") != "/playground" {
		t.Errorf("GET /: %d to %q, want 302 to /playground", res.StatusCode, res.Header.Get("Location"))
	}
}

// TestSitePreviewServesThePages runs `site --listen 127.0.0.1:0` (it
// serves until the process ends) and fetches a page from it.
func TestSitePreviewServesThePages(t *testing.T) {
	out := &servertest.Buffer{}
	go run([]string{"site", "--listen", "127.0.0.1:0"}, nil, out, io.Discard)
	var url string
	for i := 0; i < 200 && url == ""; i++ {
		if _, rest, ok := strings.Cut(out.String(), "serving the pages on "); ok {
			url = strings.TrimSpace(rest)
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if url == "" {
		t.Fatalf("site --listen printed no address: %q", out.String())
	}
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 || !strings.Contains(string(body), `id="example"`) {
		t.Errorf("GET %s: %d, %d bytes without the examples menu", url, res.StatusCode, len(body))
	}
}
