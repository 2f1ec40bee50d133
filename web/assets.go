package web

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"mime"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
)

//go:embed static
var staticFS embed.FS

// WasmFile is the name of the browser kernel in static/.
const WasmFile = "leaseplane.wasm"

// asset is one static file: its bytes, its gzip variant and the hashed
// name pages refer to it by.
type asset struct {
	name   string // static/ name, e.g. app.css
	hashed string // e.g. app.3f2a9c01d4e5.css
	hash   string
	ctype  string
	raw    []byte

	gzOnce sync.Once
	gz     []byte // made on first use
}

// assets indexes static/ by name and by hashed name.
type assets struct {
	byName   map[string]*asset
	byHashed map[string]*asset
}

var (
	loadOnce   sync.Once
	loaded     *assets
	loadErr    error
	extraTypes = map[string]string{
		".wasm": "application/wasm",
		".js":   "text/javascript; charset=utf-8",
		".css":  "text/css; charset=utf-8",
		".svg":  "image/svg+xml",
		".json": "application/json",
	}
)

func staticAssets() (*assets, error) {
	loadOnce.Do(func() {
		loaded, loadErr = loadAssets(staticFS)
		if loadErr == nil {
			loadErr = loaded.addCorpus()
		}
		if loadErr == nil {
			loaded.addBoot()
		}
	})
	return loaded, loadErr
}

// CorpusFile is the examples menu's scenarios as one JSON file among the
// static assets (an array of Example), made from the embedded corpus. The
// playground page carries only the default example; it fetches this file,
// by its hashed name (so a browser keeps it), after its first verdict or
// when an example is picked, so the page stays small.
const CorpusFile = "corpus.json"

// addCorpus adds CorpusFile to a.
func (a *assets) addCorpus() error {
	ex, err := Corpus()
	if err != nil {
		return err
	}
	b, err := json.Marshal(ex)
	if err != nil {
		return fmt.Errorf("web: encoding the corpus: %w", err)
	}
	a.add(CorpusFile, b)
	return nil
}

// BootFile is the script at the head of every page that runs the kernel:
// Go's wasm_exec.js, glue.js and boot.js as one file, so that one request
// (preloaded by the page's Link header) brings all the kernel's start needs.
const BootFile = "kernel-boot.js"

// addBoot adds BootFile to a when a has its three parts.
func (a *assets) addBoot() {
	var b []byte
	for _, n := range []string{"wasm_exec.js", "glue.js", "boot.js"} {
		as := a.byName[n]
		if as == nil {
			return
		}
		b = append(append(b, as.raw...), '\n')
	}
	a.add(BootFile, b)
}

// add indexes a file's bytes under name and its hashed name.
func (a *assets) add(n string, raw []byte) {
	sum := sha256.Sum256(raw)
	h := hex.EncodeToString(sum[:6])
	ext := path.Ext(n)
	ct := extraTypes[ext]
	if ct == "" {
		ct = mime.TypeByExtension(ext)
	}
	if ct == "" {
		ct = "application/octet-stream"
	}
	as := &asset{name: n, hash: h, hashed: strings.TrimSuffix(n, ext) + "." + h + ext, ctype: ct, raw: raw}
	a.byName[n] = as
	a.byHashed[as.hashed] = as
}

func loadAssets(fsys fs.FS) (*assets, error) {
	a := &assets{byName: map[string]*asset{}, byHashed: map[string]*asset{}}
	entries, err := fs.ReadDir(fsys, "static")
	if err != nil {
		return nil, fmt.Errorf("web: reading embedded static/: %w", err)
	}
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || strings.HasSuffix(n, ".gz") || strings.HasSuffix(n, ".br") {
			continue
		}
		raw, err := fs.ReadFile(fsys, "static/"+n)
		if err != nil {
			return nil, fmt.Errorf("web: reading static/%s: %w", n, err)
		}
		a.add(n, raw)
	}
	return a, nil
}

// gzipped returns the gzip variant, compressing on first use.
//
// static/ holds no precompressed files: the built kernel is committed, and
// a committed .gz or .br would double every kernel change's diff and need a
// compressor that is not Go's standard library (Go has no brotli encoder).
// Handler makes it as the server starts (warmGzip), and every browser
// accepts it. It is made at gzip's default level, not its best: for the
// two builds (5.9 MB) the best level took twice the CPU (0.9 s against
// 0.41 s, docs/BENCHMARKS.md "Server load") for 0.4 % fewer bytes, CPU that
// a fresh server spends beside its first requests.
func (as *asset) gzipped() []byte {
	as.gzOnce.Do(func() {
		var buf bytes.Buffer
		w, _ := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
		w.Write(as.raw)
		w.Close()
		as.gz = buf.Bytes()
	})
	return as.gz
}

// warmGzip makes the gzip variant of every compressible asset, the
// kernel and its boot script first.
func (a *assets) warmGzip() {
	for _, n := range append([]string{WasmFile, BootFile}, a.names()...) {
		if as := a.byName[n]; as != nil && compressible(as.ctype) {
			as.gzipped()
		}
	}
}

// url is the asset's hashed URL under prefix (which ends in a slash).
func (a *assets) url(prefix, name string) string {
	if as, ok := a.byName[name]; ok {
		return prefix + as.hashed
	}
	return prefix + name
}

// has reports whether static/ holds name.
func (a *assets) has(name string) bool { _, ok := a.byName[name]; return ok }

// names lists the assets in name order.
func (a *assets) names() []string {
	return slices.Sorted(maps.Keys(a.byName))
}

// BuildHash is the hash of the embedded browser kernel, which names its
// URL; empty when the binary was built without `make wasm`.
func BuildHash() string {
	a, err := staticAssets()
	if err != nil {
		return ""
	}
	if as, ok := a.byName[WasmFile]; ok {
		return as.hash
	}
	return ""
}

// acceptedEncodings returns whether br and gzip are acceptable per an
// Accept-Encoding header (q=0 refuses; * counts for both).
func acceptedEncodings(h string) (br, gz bool) {
	star := false
	seenBr, seenGz := false, false
	for _, part := range strings.Split(h, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, params, _ := strings.Cut(part, ";")
		name = strings.ToLower(strings.TrimSpace(name))
		ok := true
		for _, p := range strings.Split(params, ";") {
			k, v, found := strings.Cut(strings.TrimSpace(p), "=")
			if found && strings.EqualFold(strings.TrimSpace(k), "q") {
				if q, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && q <= 0 {
					ok = false
				}
			}
		}
		switch name {
		case "br":
			br, seenBr = ok, true
		case "gzip", "x-gzip":
			gz, seenGz = ok, true
		case "*":
			star = ok
		}
	}
	if !seenBr {
		br = star
	}
	if !seenGz {
		gz = star
	}
	return br, gz
}

// serveAsset writes a static file: by its hashed name it is immutable for
// a year; by its plain name it must be revalidated (ETag is the hash).
func serveAsset(w http.ResponseWriter, r *http.Request, a *assets, file string) {
	as, immutable := a.byHashed[file]
	if !immutable {
		as = a.byName[file]
	}
	if as == nil {
		http.Error(w, fmt.Sprintf("no static file %q", file), http.StatusNotFound)
		return
	}
	h := w.Header()
	h.Set("Content-Type", as.ctype)
	h.Set("Vary", "Accept-Encoding")
	h.Set("X-Content-Type-Options", "nosniff")
	if immutable {
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		h.Set("Cache-Control", "no-cache")
	}
	// Each encoding is its own representation with its own ETag; any of
	// them revalidates, since all carry the same bytes once decoded.
	if inm := r.Header.Get("If-None-Match"); inm != "" && strings.Contains(inm, `"`+as.hash) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	body, etag := as.raw, as.hash
	if _, gz := acceptedEncodings(r.Header.Get("Accept-Encoding")); gz && compressible(as.ctype) {
		h.Set("Content-Encoding", "gzip")
		body, etag = as.gzipped(), as.hash+".gz"
	}
	h.Set("ETag", `"`+etag+`"`)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if r.Method == http.MethodHead {
		return
	}
	w.Write(body)
}

func compressible(ctype string) bool {
	return strings.HasPrefix(ctype, "text/") || ctype == "application/wasm" ||
		strings.HasPrefix(ctype, "application/json") || ctype == "image/svg+xml"
}
