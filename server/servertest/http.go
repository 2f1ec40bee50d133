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

// built is one build of the leaseplane binary.
type built struct {
	once sync.Once
	path string
	err  error
}

var product, withFaults built

// TestFaultsTag is the build tag that gives serve its test-only flags
// (--test-fault, --test-drills).
const TestFaultsTag = "leaseplane_testfaults"

// Binary is the leaseplane binary as go build makes it (no test faults),
// built once per test process into a temporary folder.
func Binary(t testing.TB) string {
	t.Helper()
	return product.build(t)
}

// TestBinary is the leaseplane binary built with TestFaultsTag, whose
// serve takes --test-fault and --test-drills; built once per test process.
func TestBinary(t testing.TB) string {
	t.Helper()
	return withFaults.build(t, "-tags", TestFaultsTag)
}

func (b *built) build(t testing.TB, flags ...string) string {
	t.Helper()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "leaseplane-test-bin")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, "leaseplane")
		args := append(append([]string{"build"}, flags...), "-o", b.path, "github.com/leaseplane/leaseplane/cmd/leaseplane")
		out, err := exec.Command("go", args...).CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}
