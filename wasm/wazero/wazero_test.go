package wazero_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/scenario"
	"github.com/leaseplane/leaseplane/wasm/wazero"
)

var (
	factoryOnce sync.Once
	factory     *wazero.Factory
	factoryErr  error
)

func wasmFactory(t testing.TB) *wazero.Factory {
	t.Helper()
	factoryOnce.Do(func() {
		// The cache `leaseplane replay --engine wasm` uses; TestCacheDir
		// covers a cold one.
		dir, err := os.UserCacheDir()
		if err == nil {
			dir = filepath.Join(dir, "leaseplane", "wazero")
		}
		factory, factoryErr = wazero.NewFactory(context.Background(), wazero.Options{CacheDir: dir})
	})
	if factoryErr != nil {
		t.Fatalf("NewFactory: %v", factoryErr)
	}
	return factory
}

func TestName(t *testing.T) {
	if got := wasmFactory(t).Name(); got != "wasm" {
		t.Fatalf("Name() = %q, want wasm", got)
	}
}

// TestCorpus replays every corpus scenario through both engines and
// compares the transcripts byte for byte.
func TestCorpus(t *testing.T) {
	files, err := filepath.Glob("../../kernel/testdata/scenarios/*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no corpus scenarios found under kernel/testdata/scenarios")
	}
	f := wasmFactory(t)
	for _, name := range files {
		t.Run(filepath.Base(name), func(t *testing.T) {
			in, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			want, werr := scenario.Replay(kernel.Native, in)
			got, gerr := scenario.Replay(f, in)
			if (werr == nil) != (gerr == nil) || werr != nil && werr.Error() != gerr.Error() {
				t.Fatalf("errors differ: native %v, wasm %v", werr, gerr)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("transcripts differ\nnative:\n%s\nwasm:\n%s", want, got)
			}
		})
	}
}

// pair drives a native and a wasm engine with the same calls.
type pair struct {
	t      *testing.T
	native kernel.Engine
	wasm   kernel.Engine
}

func newPair(t *testing.T, rules string) *pair {
	n, err := kernel.Native.New([]byte(rules))
	if err != nil {
		t.Fatalf("native New(%s): %v", rules, err)
	}
	w, err := wasmFactory(t).New([]byte(rules))
	if err != nil {
		t.Fatalf("wasm New(%s): %v", rules, err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &pair{t, n, w}
}

func (p *pair) same(what string, a, b kernel.Result) {
	p.t.Helper()
	if a.Status != b.Status || a.RetryAfterSec != b.RetryAfterSec || a.Changed != b.Changed ||
		!bytes.Equal(a.Answer, b.Answer) || !reflect.DeepEqual(a.Events, b.Events) {
		p.t.Fatalf("%s: results differ\nnative %d %d %v %s %s %+v\nwasm   %d %d %v %s %s %+v", what,
			a.Status, a.RetryAfterSec, a.Changed, a.Answer, kernel.AppendEvents(nil, a.Events), a.Events,
			b.Status, b.RetryAfterSec, b.Changed, b.Answer, kernel.AppendEvents(nil, b.Events), b.Events)
	}
}

func (p *pair) state(what string) {
	p.t.Helper()
	na, nok, _ := p.native.NextAlarm()
	wa, wok, err := p.wasm.NextAlarm()
	if err != nil || na != wa || nok != wok {
		p.t.Fatalf("%s: NextAlarm native (%d,%v) wasm (%d,%v,%v)", what, na, nok, wa, wok, err)
	}
	ns, _ := p.native.Snapshot()
	ws, err := p.wasm.Snapshot()
	if err != nil || !bytes.Equal(ns, ws) {
		p.t.Fatalf("%s: Snapshot native %s wasm %s (%v)", what, ns, ws, err)
	}
	nt, _ := p.native.Trust()
	wt, err := p.wasm.Trust()
	if err != nil || !bytes.Equal(nt, wt) {
		p.t.Fatalf("%s: Trust native %s wasm %s (%v)", what, nt, wt, err)
	}
}

// TestApplyLikeNative sends REST bodies, valid and not, through both.
func TestApplyLikeNative(t *testing.T) {
	p := newPair(t, `{"readShared":["file:"]}`)
	p.state("empty")
	const a, b = "did:web:acme.example:agent:a", "did:web:acme.example:agent:b"
	for i, c := range []struct {
		op   kernel.Op
		now  int64
		body string
	}{
		{kernel.OpAcquire, 1000, `{"resource":"lock:x","actorDid":"` + a + `"}`},
		{kernel.OpAcquire, 1500, `{"resource":"lock:x","actorDid":"` + b + `"}`},
		{kernel.OpAcquire, 1600, `{"resource":"lock:y","actorDid":"` + b + `"}`},
		{kernel.OpAcquire, 1700, `{"resource":"lock:y","actorDid":"` + a + `"}`},
		{kernel.OpWait, 1800, `{}`},
		{kernel.OpAcquire, 1900, `{"resource":"file:r","actorDid":"` + a + `","mode":"read"}`},
		{kernel.OpAcquire, 1900, `{"resource":"file:r","actorDid":"` + b + `","mode":"read"}`},
		{kernel.OpRelease, 2000, `{"resource":"lock:x","actorDid":"` + a + `"}`},
		{kernel.OpRelease, 2000, `{"resource":"lock:x","actorDid":"` + a + `","leaseId":"nope"}`},
		{kernel.OpSuspend, 2100, `{"actorDid":"` + b + `"}`},
		{kernel.OpAcquire, 2200, `{"resource":"lock:z","actorDid":"` + b + `"}`},
		{kernel.OpResume, 2300, `{"actorDid":"` + b + `"}`},
		{kernel.OpTick, 40000, `{}`},
		{kernel.OpAcquire, 40000, `{"resource":"","actorDid":"x"}`},
		{kernel.OpAcquire, 40000, `not json`},
		{kernel.OpAcquire, 40000, ``},
		{kernel.OpAcquire, 40000, `{"resource":"lock:x","actorDid":"` + a + `","extra":1}`},
		{"launch", 40000, `{}`},
		{"", 40000, `{}`},
		{kernel.OpAcquire, 40000, `{"resource":"lock:` + strings.Repeat("w", 10000) + `","actorDid":"` + a + `"}`},
	} {
		what := strconv.Itoa(i) + " " + string(c.op) + " " + c.body
		if len(what) > 80 {
			what = what[:80]
		}
		nr, _ := p.native.Apply(c.op, c.now, []byte(c.body))
		wr, err := p.wasm.Apply(c.op, c.now, []byte(c.body))
		if err != nil {
			t.Fatalf("%s: wasm Apply: %v", what, err)
		}
		p.same(what, nr, wr)
		p.state(what)
	}
}

// TestApplyRandomLikeNative sends the steps of random scenarios as REST
// bodies through Apply (the server's path: decoded on the host, applied
// in the guest), every third one as a scenario step instead, and compares
// each result and the next alarm with the native engine's.
func TestApplyRandomLikeNative(t *testing.T) {
	for seed := range int64(200) {
		s, err := scenario.Parse(scenario.Random(seed))
		if err != nil {
			t.Fatal(err)
		}
		p := newPair(t, string(s.Rules))
		for i, step := range s.Steps {
			what := "seed " + strconv.FormatInt(seed, 10) + " step " + strconv.Itoa(i) + " " + string(step)
			var nr, wr kernel.Result
			if i%3 == 1 {
				c := kernel.DecodeStepCommand(step)
				nrd, _ := p.native.Step(c)
				wrd, err := p.wasm.Step(c)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if !reflect.DeepEqual(nrd, wrd) {
					t.Fatalf("%s: Ready differs\nnative %+v\nwasm   %+v", what, nrd, wrd)
				}
				continue
			}
			if i%3 == 2 {
				nr, _ = p.native.StepJSON(step)
				wr, err = p.wasm.StepJSON(step)
			} else {
				op, now, body := restCall(t, step)
				nr, _ = p.native.Apply(op, now, body)
				wr, err = p.wasm.Apply(op, now, body)
			}
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			p.same(what, nr, wr)
			na, nok, _ := p.native.NextAlarm()
			wa, wok, err := p.wasm.NextAlarm()
			if err != nil || na != wa || nok != wok {
				t.Fatalf("%s: NextAlarm native (%d,%v) wasm (%d,%v,%v)", what, na, nok, wa, wok, err)
			}
		}
		p.state("seed " + strconv.FormatInt(seed, 10))
	}
}

// TestCommandFields guards Engine.Apply's layout of a kernel.Command
// (kernel.PutRecord, which lp_step_command reads): a new field must be
// carried across the boundary too.
func TestCommandFields(t *testing.T) {
	if n := reflect.TypeFor[kernel.Command]().NumField(); n != 15 {
		t.Fatalf("kernel.Command has %d fields; Engine.Step and lp_step_command carry 15: carry the new ones and update this test", n)
	}
}

// restCall turns a scenario step into the op, time and REST body of the
// same command.
func restCall(t *testing.T, step []byte) (kernel.Op, int64, []byte) {
	t.Helper()
	var op kernel.Op
	var now int64
	body := []byte{'{'}
	err := kernel.ScanObject(step, func(name string, raw []byte) error {
		switch name {
		case "op":
			s, err := kernel.Unquote(raw)
			op = kernel.Op(s)
			return err
		case "atMs":
			now, _ = kernel.IntLiteral(raw)
			return nil
		}
		if len(body) > 1 {
			body = append(body, ',')
		}
		body = append(kernel.AppendQuote(body, name), ':')
		body = append(body, raw...)
		return nil
	})
	if err != nil {
		t.Fatalf("step %s: %v", step, err)
	}
	return op, now, append(body, '}')
}

// TestRestoreLikeNative snapshots a busy machine, restores it in both
// engines and continues.
func TestRestoreLikeNative(t *testing.T) {
	in := scenario.Random(42)
	s, err := scenario.Parse(in)
	if err != nil {
		t.Fatal(err)
	}
	p := newPair(t, string(s.Rules))
	for i, step := range s.Steps {
		nr, _ := p.native.StepJSON(step)
		wr, err := p.wasm.StepJSON(step)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		p.same("step "+strconv.Itoa(i), nr, wr)
		if i == len(s.Steps)/2 {
			snap, err := p.wasm.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			w2, err := wasmFactory(t).Restore(snap)
			if err != nil {
				t.Fatalf("wasm Restore: %v", err)
			}
			n2, err := kernel.Native.Restore(snap)
			if err != nil {
				t.Fatalf("native Restore: %v", err)
			}
			p.wasm.Close()
			p.wasm, p.native = w2, n2
		}
		p.state("step " + strconv.Itoa(i))
	}
}

// TestRefusals checks that bad rules and snapshots fail with the native
// engine's message, and that a closed engine refuses calls.
func TestRefusals(t *testing.T) {
	f := wasmFactory(t)
	for _, rules := range []string{`{"bogus":1}`, `[`, `{"readShared":"x"}`} {
		_, nerr := kernel.Native.New([]byte(rules))
		_, werr := f.New([]byte(rules))
		if nerr == nil || werr == nil || nerr.Error() != werr.Error() {
			t.Errorf("New(%s): native %v, wasm %v", rules, nerr, werr)
		}
	}
	for _, snap := range []string{``, `{}`, `{"v":99}`, `nonsense`} {
		_, nerr := kernel.Native.Restore([]byte(snap))
		_, werr := f.Restore([]byte(snap))
		if nerr == nil || werr == nil || nerr.Error() != werr.Error() {
			t.Errorf("Restore(%s): native %v, wasm %v", snap, nerr, werr)
		}
	}
	e, err := f.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.StepJSON([]byte(`{"atMs":1,"op":"tick"}`)); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Step after Close: %v, want an error saying closed", err)
	}
	if _, _, err := e.NextAlarm(); err == nil {
		t.Fatal("NextAlarm after Close: no error")
	}
}

// TestConcurrentEngines runs engines on many goroutines at once, one
// shared by all of them (serialised by its lock) and one each.
func TestConcurrentEngines(t *testing.T) {
	f := wasmFactory(t)
	shared, err := f.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := scenario.Random(int64(1000 + g))
			want, err := scenario.Replay(kernel.Native, in)
			if err != nil {
				errs <- err
				return
			}
			got, err := scenario.Replay(f, in)
			if err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(got, want) {
				errs <- &mismatch{in}
			}
			actor := "did:web:acme.example:agent:g" + strconv.Itoa(g)
			for i := range 50 {
				if _, err := shared.Apply(kernel.OpAcquire, int64(i), []byte(`{"resource":"lock:s","actorDid":"`+actor+`"}`)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

type mismatch struct{ scenario []byte }

func (m *mismatch) Error() string { return "transcripts differ for " + string(m.scenario) }

// TestCacheDir compiles into an on-disk cache and reuses it.
func TestCacheDir(t *testing.T) {
	dir := t.TempDir()
	for range 2 {
		f, err := wazero.NewFactory(context.Background(), wazero.Options{CacheDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		out, err := scenario.Replay(f, []byte(`{"steps":[{"atMs":1,"op":"tick"}]}`))
		if err != nil || !bytes.HasPrefix(out, []byte(`{"steps":[`)) {
			t.Fatalf("Replay: %s %v", out, err)
		}
		if err := f.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		t.Fatalf("cache dir %s is empty after compiling (%v)", dir, err)
	}
}
