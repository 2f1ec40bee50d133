package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/leaseplane/leaseplane/kernel/api"
	"github.com/leaseplane/leaseplane/server/store"
)

// TestOpenAPI holds openapi.json to the server: every pattern the server
// registers is in the document with the method it answers, every
// documented operation is answered, and a real request built from the
// document's examples gets a documented status whose body fits the
// documented schema. docs/openapi.json must be the same bytes.
func TestOpenAPI(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatalf("kernel/api/openapi.json is not JSON: %v", err)
	}
	if doc["openapi"] != "3.1.0" {
		t.Errorf("openapi %v, want 3.1.0", doc["openapi"])
	}
	if copy, err := os.ReadFile("../docs/openapi.json"); err != nil || !bytes.Equal(copy, api.OpenAPI) {
		t.Errorf("docs/openapi.json is not a copy of kernel/api/openapi.json (%v): cp kernel/api/openapi.json docs/openapi.json", err)
	}
	paths := doc["paths"].(map[string]any)

	ts := newTestServer(t, t.TempDir())
	operator := ts.newKey(store.RoleOperator, "", ts.clock.Now().UnixMilli())
	patterns := ts.s.Patterns()

	// Every route the server answers is documented, with its method.
	for _, p := range patterns {
		if p == "/api/" || p == "/" {
			continue // the catch-alls answer 404
		}
		if strings.HasSuffix(p, "/") {
			found := false
			for dp := range paths {
				found = found || strings.HasPrefix(dp, p)
			}
			if !found {
				t.Errorf("the server answers routes under %s but kernel/api/openapi.json documents none: add them (and cp kernel/api/openapi.json docs/openapi.json)", p)
			}
			continue
		}
		item, ok := paths[p].(map[string]any)
		if !ok {
			t.Errorf("route %s is answered by the server but missing from kernel/api/openapi.json: add it (and cp kernel/api/openapi.json docs/openapi.json)", p)
			continue
		}
		rec := httptest.NewRecorder()
		ts.s.Handler().ServeHTTP(rec, httptest.NewRequest("DELETE", p, nil))
		method := "GET"
		if rec.Code == http.StatusMethodNotAllowed {
			method = rec.Header().Get("Allow")
		}
		if _, ok := item[strings.ToLower(method)]; !ok {
			t.Errorf("route %s answers %s, which kernel/api/openapi.json does not document", p, method)
		}
	}

	// Every documented operation answers as documented.
	var names []string
	for p := range paths {
		names = append(names, p)
	}
	slices.Sort(names)
	for _, p := range names {
		for method, o := range paths[p].(map[string]any) {
			op := o.(map[string]any)
			if _, mounted := op["x-leaseplane-mounted-by"]; mounted && !slices.Contains(patterns, p) {
				continue // mounted by the binary (cmd/leaseplane), not by package server
			}
			t.Run(strings.ToUpper(method)+" "+p, func(t *testing.T) {
				checkOperation(t, ts, doc, p, strings.ToUpper(method), op, map[string]string{"workspace": ts.key, "operator": operator})
			})
		}
	}
}

func checkOperation(t *testing.T, ts *testServer, doc map[string]any, path, method string, op map[string]any, keys map[string]string) {
	q := url.Values{}
	if params, ok := op["parameters"].([]any); ok {
		for _, pa := range params {
			pm := pa.(map[string]any)
			if ex, ok := pm["example"]; ok && pm["in"] == "query" {
				q.Set(pm["name"].(string), fmt.Sprint(ex))
			}
		}
	}
	target := path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	var body []byte
	if rb, ok := op["requestBody"].(map[string]any); ok {
		c := rb["content"].(map[string]any)["application/json"].(map[string]any)
		body, _ = json.Marshal(c["example"])
	}
	req := httptest.NewRequest(method, target, bytes.NewReader(body))
	if k := keys[fmt.Sprint(op["x-leaseplane-key"])]; k != "" {
		req.Header.Set("Authorization", "Bearer "+k)
	}
	rec := httptest.NewRecorder()
	if op["x-leaseplane-stream"] == true {
		// A stream answers until its client goes: this client goes at the
		// first flush, once the status and the first lines are written.
		ctx, cancel := context.WithCancel(req.Context())
		defer cancel()
		req = req.WithContext(ctx)
		ts.s.Handler().ServeHTTP(flushCancel{rec, cancel}, req)
	} else {
		ts.s.Handler().ServeHTTP(rec, req)
	}
	responses := op["responses"].(map[string]any)
	r, ok := responses[fmt.Sprint(rec.Code)]
	if !ok {
		t.Fatalf("%s %s answered %d, which kernel/api/openapi.json does not document: %s", method, target, rec.Code, clip(rec.Body.Bytes()))
	}
	rm := resolve(doc, r)
	content, _ := rm["content"].(map[string]any)
	ctype := rec.Header().Get("Content-Type")
	switch {
	case content == nil:
	case content["application/json"] != nil && strings.HasPrefix(ctype, "application/json"):
		var v any
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
			t.Fatalf("%s %s: %d body is not JSON: %s", method, target, rec.Code, clip(rec.Body.Bytes()))
		}
		schema := content["application/json"].(map[string]any)["schema"]
		if err := validate(doc, schema, v, "body"); err != nil {
			t.Errorf("%s %s: the %d answer does not fit kernel/api/openapi.json: %v\n%s", method, target, rec.Code, err, clip(rec.Body.Bytes()))
		}
	case content["text/plain"] != nil && strings.HasPrefix(ctype, "text/plain"):
	case content["text/event-stream"] != nil && strings.HasPrefix(ctype, "text/event-stream"):
		if !strings.HasPrefix(rec.Body.String(), "retry: 1000\nevent: ready\n") {
			t.Errorf("%s %s: the stream does not begin with its ready event: %s", method, target, clip(rec.Body.Bytes()))
		}
	default:
		t.Errorf("%s %s: %d answered as %s, documented as %v", method, target, rec.Code, ctype, keysOf(content))
	}
}

// flushCancel ends a streamed request at its first flush.
type flushCancel struct {
	*httptest.ResponseRecorder
	cancel func()
}

func (f flushCancel) Flush() {
	f.ResponseRecorder.Flush()
	f.cancel()
}

func keysOf(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func clip(b []byte) string {
	if len(b) > 400 {
		return string(b[:400]) + "..."
	}
	return string(b)
}

// resolve follows a local $ref.
func resolve(doc map[string]any, v any) map[string]any {
	m, _ := v.(map[string]any)
	for m != nil {
		ref, ok := m["$ref"].(string)
		if !ok {
			return m
		}
		var cur any = doc
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			cur = cur.(map[string]any)[part]
		}
		m, _ = cur.(map[string]any)
	}
	return m
}

// validate checks v against the subset of JSON Schema the document uses:
// $ref, type (one or a list), enum, properties, required, items.
func validate(doc map[string]any, schema, v any, at string) error {
	s := resolve(doc, schema)
	if s == nil {
		return nil
	}
	if t, ok := s["type"]; ok {
		var types []string
		switch tt := t.(type) {
		case string:
			types = []string{tt}
		case []any:
			for _, x := range tt {
				types = append(types, x.(string))
			}
		}
		if !slices.ContainsFunc(types, func(t string) bool { return hasType(t, v) }) {
			return fmt.Errorf("%s: %v is not %v", at, v, types)
		}
	}
	if enum, ok := s["enum"].([]any); ok && !slices.Contains(enum, v) {
		return fmt.Errorf("%s: %v is not one of %v", at, v, enum)
	}
	if m, ok := v.(map[string]any); ok {
		if req, ok := s["required"].([]any); ok {
			for _, r := range req {
				if _, ok := m[r.(string)]; !ok {
					return fmt.Errorf("%s: %s is required", at, r)
				}
			}
		}
		if props, ok := s["properties"].(map[string]any); ok {
			for k, pv := range m {
				if ps, ok := props[k]; ok {
					if err := validate(doc, ps, pv, at+"."+k); err != nil {
						return err
					}
				}
			}
		}
	}
	if a, ok := v.([]any); ok {
		for i, x := range a {
			if err := validate(doc, s["items"], x, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// jsonTypes tell JSON Schema's types apart in a decoded JSON value.
var jsonTypes = map[string]func(v any) bool{
	"object":  func(v any) bool { _, ok := v.(map[string]any); return ok },
	"array":   func(v any) bool { _, ok := v.([]any); return ok },
	"string":  func(v any) bool { _, ok := v.(string); return ok },
	"boolean": func(v any) bool { _, ok := v.(bool); return ok },
	"number":  func(v any) bool { _, ok := v.(float64); return ok },
	"integer": func(v any) bool { f, ok := v.(float64); return ok && f == math.Trunc(f) },
	"null":    func(v any) bool { return v == nil },
}

func hasType(t string, v any) bool {
	is, known := jsonTypes[t]
	return known && is(v)
}

// TestExactRoutes: every path the mux finds by its exact path (the lease
// routes) is one the ServeMux matches to that very pattern, and requests
// on it and on its variants (escaped, unclean, another method, CONNECT,
// a host) are answered as the ServeMux alone answers them: the same
// status and headers, the same body for a refusal, and the same Pattern
// on the request.
func TestExactRoutes(t *testing.T) {
	ts := newTestServer(t, t.TempDir())
	if len(ts.s.mux.exact) != len(api.LeaseRoutes) {
		t.Fatalf("%d exact paths, want the %d lease routes", len(ts.s.mux.exact), len(api.LeaseRoutes))
	}
	for p := range ts.s.mux.exact {
		if _, pattern := ts.s.mux.ServeMux.Handler(httptest.NewRequest("POST", p, nil)); pattern != p {
			t.Errorf("the ServeMux matches %s to %q", p, pattern)
		}
		escaped := strings.Replace(p, "/api/", "/%61pi/", 1)
		for _, rq := range []struct{ method, target string }{
			{"POST", p}, {"GET", p}, {"DELETE", p}, {"POST", p + "?waitUpToMs=0"},
			{"POST", escaped}, {"POST", "/api//" + strings.TrimPrefix(p, "/api/")}, {"POST", p + "/"},
			{"POST", "http://other.example" + p}, {"CONNECT", p},
		} {
			answer := func(h http.Handler) (*httptest.ResponseRecorder, string) {
				r := httptest.NewRequest(rq.method, rq.target, strings.NewReader(`{"resource":"lock:x","actorDid":"did:web:a.example:agent:1"}`))
				r.Header.Set("Authorization", "Bearer "+ts.key)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				return rec, r.Pattern
			}
			fast, fastPattern := answer(ts.s.mux)
			slow, slowPattern := answer(ts.s.mux.ServeMux)
			if fast.Code != slow.Code || !slices.Equal(sortedHeader(fast.Header()), sortedHeader(slow.Header())) || fastPattern != slowPattern {
				t.Errorf("%s %s: %d %v pattern %q, the ServeMux answers %d %v pattern %q", rq.method, rq.target,
					fast.Code, fast.Header(), fastPattern, slow.Code, slow.Header(), slowPattern)
			}
			// A 2xx answer's body tells the state (the first acquire
			// holds what the second is refused), so only refusals compare.
			if f, s := fast.Body.String(), slow.Body.String(); f != s && fast.Code/100 != 2 {
				t.Errorf("%s %s answers %s, the ServeMux %s", rq.method, rq.target, f, s)
			}
		}
	}
}

func sortedHeader(h http.Header) []string {
	var l []string
	for k, v := range h {
		if k != "Content-Length" {
			l = append(l, k+": "+strings.Join(v, ", "))
		}
	}
	slices.Sort(l)
	return l
}
