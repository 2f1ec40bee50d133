package server

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// countingReader counts the reads that reached its end.
type countingReader struct {
	r    io.Reader
	eofs int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err == io.EOF {
		c.eofs++
	}
	return n, err
}

// TestReadBody: a body of declared length is read whole and to its end
// (the body guard needs its EOF to keep the connection); one that ends
// short is refused naming both lengths; one longer than declared, or
// without a length, is read up to the limit, and past it refused with
// http.MaxBytesError.
func TestReadBody(t *testing.T) {
	const max = 16
	for _, c := range []struct {
		body    string
		length  int64 // the declared Content-Length; -1 for none
		want    string
		wantErr string // a part of the error, "" for none
		tooBig  bool
	}{
		{body: "", length: 0, want: ""},
		{body: `{"a":1}`, length: 7, want: `{"a":1}`},
		{body: strings.Repeat("x", max), length: max, want: strings.Repeat("x", max)},
		{body: `{"a"`, length: 7, wantErr: "after 4 of its 7 bytes"},
		{body: `{"a":1}`, length: -1, want: `{"a":1}`},
		{body: strings.Repeat("x", max+1), length: -1, tooBig: true},
		{body: `{"a":1}xx`, length: 7, want: `{"a":1}xx`},
		{body: strings.Repeat("x", max+1), length: max, tooBig: true},
	} {
		cr := &countingReader{r: strings.NewReader(c.body)}
		r := httptest.NewRequest(http.MethodPost, "/", io.NopCloser(cr))
		r.ContentLength = c.length
		got, err := readBody(httptest.NewRecorder(), r, max)
		var mbe *http.MaxBytesError
		switch {
		case c.tooBig:
			if !errors.As(err, &mbe) {
				t.Errorf("%q (length %d): %q, %v; want a MaxBytesError", c.body, c.length, got, err)
			}
		case c.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%q (length %d): %q, %v; want an error with %q", c.body, c.length, got, err, c.wantErr)
			}
		case err != nil || !bytes.Equal(got, []byte(c.want)):
			t.Errorf("%q (length %d): %q, %v; want %q", c.body, c.length, got, err, c.want)
		case cr.eofs == 0:
			t.Errorf("%q (length %d): read without reaching the body's end", c.body, c.length)
		}
	}
}
