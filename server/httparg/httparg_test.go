package httparg

import (
	"net/url"
	"strings"
	"testing"
)

func TestBearerKey(t *testing.T) {
	for _, c := range []struct {
		header, key string
		ok          bool
	}{
		{"", "", true},
		{"Bearer lp_a_b", "lp_a_b", true},
		{"bearer  lp_a_b ", "lp_a_b", true},
		{"Basic Zm9v", "", false},
		{"Bearer", "", false},
		{"Bearer   ", "", false},
	} {
		key, ok := BearerKey(c.header)
		if key != c.key || ok != c.ok {
			t.Errorf("BearerKey(%q) = %q, %v; want %q, %v", c.header, key, ok, c.key, c.ok)
		}
	}
}

func TestWaitBody(t *testing.T) {
	for _, c := range []struct {
		query, body, err string
	}{
		{"prefix=lock:&limit=10", `{"prefix":"lock:","limit":10}`, ""},
		{"after=a%22b&prefix=x", `{"prefix":"x","after":"a\"b"}`, ""},
		{"prefix=%ff", `{"prefix":"\ufffd"}`, ""},
		{"limit=0", "", "limit must be an integer from 1 to 1000"},
		{"limit=1001", "", "limit must be an integer from 1 to 1000"},
		{"prefix=a&prefix=b", "", "prefix is given more than once"},
		{"page=2", "", `unknown query parameter "page"`},
	} {
		q, err := url.ParseQuery(c.query)
		if err != nil {
			t.Fatal(err)
		}
		body, err := WaitBody(q)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("WaitBody(%s) = %s, %v; want error %q", c.query, body, err, c.err)
			}
			continue
		}
		if err != nil || string(body) != c.body {
			t.Errorf("WaitBody(%s) = %s, %v; want %s", c.query, body, err, c.body)
		}
	}
}
