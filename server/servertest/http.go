package servertest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Send sends req with http.DefaultClient and returns the response and its
// whole body (closed); the test fails when the request gets no response.
func Send(t testing.TB, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read the body: %v", req.Method, req.URL, err)
	}
	return resp, body
}

// Buffer is a bytes.Buffer safe for one writer and readers at once, such
// as a server's output read while it runs.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// ReadServeStart reads what `leaseplane serve` prints when it starts, up
// to the line that gives its URL ("export LEASEPLANE_URL=..."): the URL
// ("" when the output ends first) and the key a first start prints before
// it ("export LEASEPLANE_KEY=...", "" on a later start).
func ReadServeStart(out io.Reader) (url, key string) {
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if k, ok := strings.CutPrefix(line, "export LEASEPLANE_KEY="); ok {
			key = k
		}
		if u, ok := strings.CutPrefix(line, "export LEASEPLANE_URL="); ok {
			return u, key
		}
	}
	return "", key
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary is the leaseplane binary, built once per test process into a
// temporary folder.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "leaseplane-test-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "leaseplane")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/leaseplane/leaseplane/cmd/leaseplane").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/leaseplane: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}
