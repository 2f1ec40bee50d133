//go:build external

package parity

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/scenario"
	"github.com/leaseplane/leaseplane/wasm/wazero"
)

const (
	root      = "../.."
	staticDir = root + "/web/static"
	nodeRun   = root + "/wasm/js/parity.js"
)

// outcome is one host's replay: the transcript, or the error's message.
type outcome struct {
	transcript []byte
	err        string
}

func (o outcome) String() string {
	if o.err != "" {
		return "error: " + o.err
	}
	return string(o.transcript)
}

func (o outcome) equal(p outcome) bool {
	return o.err == p.err && bytes.Equal(o.transcript, p.transcript)
}

func replay(f kernel.Factory, in []byte) outcome {
	out, err := scenario.Replay(f, in)
	if err != nil {
		return outcome{err: err.Error()}
	}
	return outcome{transcript: out}
}

// node is a running parity.js: scenarios in, outcomes out, in order.
type node struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr bytes.Buffer
}

func startNode(t testing.TB) *node {
	t.Helper()
	for _, f := range []string{"leaseplane.wasm", "wasm_exec.js", "glue.js"} {
		if _, err := os.Stat(filepath.Join(staticDir, f)); err != nil {
			t.Fatalf("the Node host needs web/static/%s: run make wasm (%v)", f, err)
		}
	}
	n := &node{cmd: exec.Command("node", nodeRun, staticDir)}
	n.cmd.Stderr = &n.stderr
	var err error
	if n.stdin, err = n.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := n.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	n.stdout = bufio.NewReaderSize(out, 1<<20)
	if err := n.cmd.Start(); err != nil {
		t.Fatalf("starting node: %v", err)
	}
	return n
}

func (n *node) send(in []byte) error {
	line, err := json.Marshal(string(in))
	if err != nil {
		return err
	}
	_, err = n.stdin.Write(append(line, '\n'))
	return err
}

func (n *node) receive() (outcome, error) {
	line, err := n.stdout.ReadBytes('\n')
	if err != nil {
		return outcome{}, fmt.Errorf("reading from node: %v; its stderr: %s", err, n.stderr.String())
	}
	var reply struct {
		T *string `json:"t"`
		E *string `json:"e"`
	}
	if err := json.Unmarshal(line, &reply); err != nil {
		return outcome{}, fmt.Errorf("node replied %q: %v", line, err)
	}
	switch {
	case reply.T != nil:
		return outcome{transcript: []byte(*reply.T)}, nil
	case reply.E != nil:
		return outcome{err: *reply.E}, nil
	}
	return outcome{}, fmt.Errorf("node replied %q: neither t nor e", line)
}

// one replays a single scenario in Node (used while shrinking).
func (n *node) one(in []byte) (outcome, error) {
	if err := n.send(in); err != nil {
		return outcome{}, err
	}
	return n.receive()
}

func (n *node) close() error {
	n.stdin.Close()
	if err := n.cmd.Wait(); err != nil {
		return fmt.Errorf("node: %v; stderr: %s", err, n.stderr.String())
	}
	return nil
}

// runSeed is the run's seed: LEASEPLANE_PARITY_SEED, or the clock.
func runSeed(t *testing.T) int64 {
	if s := os.Getenv("LEASEPLANE_PARITY_SEED"); s != "" {
		seed, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("LEASEPLANE_PARITY_SEED=%q: not an integer", s)
		}
		return seed
	}
	return time.Now().UnixNano() & (1<<62 - 1)
}

func randomCount(t *testing.T) int {
	if s := os.Getenv("LEASEPLANE_PARITY_N"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			t.Fatalf("LEASEPLANE_PARITY_N=%q: not a count", s)
		}
		return n
	}
	return 10000
}

type input struct {
	name string // a corpus file, or "random seed N"
	seed int64  // the scenario's seed, for random ones
	data []byte
}

// TestParity replays the corpus and the random scenarios on every host.
func TestParity(t *testing.T) {
	seed, count := runSeed(t), randomCount(t)
	t.Logf("parity: seed %d (reproduce with LEASEPLANE_PARITY_SEED=%d), %d random scenarios", seed, seed, count)

	files, err := filepath.Glob(root + "/kernel/testdata/scenarios/*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no corpus scenarios under kernel/testdata/scenarios")
	}
	var inputs []input
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, input{name: filepath.Base(f), data: b})
	}
	for i := range count {
		s := seed + int64(i)
		inputs = append(inputs, input{name: "random seed " + strconv.FormatInt(s, 10), seed: s, data: scenario.Random(s)})
	}

	wz, err := wazero.NewFactory(context.Background(), wazero.Options{CacheDir: cacheDir()})
	if err != nil {
		t.Fatalf("wazero: %v", err)
	}
	defer wz.Close(context.Background())

	// Node works through the batch in its own process while this one
	// replays natively and under wazero.
	nd := startNode(t)
	sendErr := make(chan error, 1)
	go func() {
		w := bufio.NewWriterSize(nd.stdin, 1<<20)
		for _, in := range inputs {
			line, _ := json.Marshal(string(in.data))
			if _, err := w.Write(append(line, '\n')); err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- w.Flush()
	}()
	var nodeOut []outcome
	var nodeErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		for range inputs {
			o, err := nd.receive()
			if err != nil {
				nodeErr = err
				return
			}
			nodeOut = append(nodeOut, o)
		}
	})

	nativeOut := make([]outcome, len(inputs))
	wasmOut := make([]outcome, len(inputs))
	for i, in := range inputs {
		nativeOut[i] = replay(kernel.Native, in.data)
		wasmOut[i] = replay(wz, in.data)
	}
	wg.Wait()
	if err := <-sendErr; err != nil {
		t.Fatalf("writing to node: %v", err)
	}
	if nodeErr != nil {
		t.Fatal(nodeErr)
	}

	failures := 0
	for i, in := range inputs {
		n, w, j := nativeOut[i], wasmOut[i], nodeOut[i]
		if n.equal(w) && n.equal(j) {
			continue
		}
		failures++
		if failures > 3 {
			continue // the first ones, shrunk, are enough to act on
		}
		t.Errorf("parity: %s differs between hosts (run seed %d)\n%s", in.name, seed, diffReport(n, w, j))
		t.Errorf("parity: shrunk scenario for %s:\n%s", in.name, shrink(t, wz, nd, in.data))
	}
	if err := nd.close(); err != nil {
		t.Error(err)
	}
	if failures > 0 {
		t.Fatalf("parity: %d of %d scenarios differ; run seed %d (LEASEPLANE_PARITY_SEED=%d)", failures, len(inputs), seed, seed)
	}
	t.Logf("parity: %d corpus and %d random scenarios gave the same bytes natively, under wazero and under Node", len(files), count)
}

func diffReport(n, w, j outcome) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "native:\n%s\n", n)
	if !n.equal(w) {
		fmt.Fprintf(&b, "wazero:\n%s\n", w)
	} else {
		b.WriteString("wazero: same as native\n")
	}
	if !n.equal(j) {
		fmt.Fprintf(&b, "node:\n%s\n", j)
	} else {
		b.WriteString("node: same as native\n")
	}
	return b.String()
}

// shrink makes a smaller scenario on which the hosts still disagree, using
// the same Node process, which the batch left idle.
func shrink(t *testing.T, wz kernel.Factory, nd *node, in []byte) []byte {
	return scenario.Shrink(in, func(s []byte) bool {
		n := replay(kernel.Native, s)
		j, err := nd.one(s)
		if err != nil {
			t.Fatalf("shrinking: %v", err)
		}
		return !n.equal(replay(wz, s)) || !n.equal(j)
	})
}

// cacheDir is where `leaseplane replay --engine wasm` keeps compiled code
// too, so a run after the first skips the seconds of compiling.
func cacheDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "leaseplane", "wazero")
}
