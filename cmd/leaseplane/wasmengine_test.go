package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// TestReplayWasmEngine runs `leaseplane replay --engine wasm` on every
// corpus scenario and compares its output with the native engine's.
func TestReplayWasmEngine(t *testing.T) {
	t.Setenv("LEASEPLANE_WASM_CACHE", filepath.Join(t.TempDir(), "cache"))
	files, err := filepath.Glob("../../kernel/testdata/scenarios/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus scenarios (%v)", err)
	}
	for _, f := range files {
		var nout, nerr, wout, werr bytes.Buffer
		ncode := run([]string{"replay", f}, nil, &nout, &nerr)
		wcode := run([]string{"replay", "--engine", "wasm", f}, nil, &wout, &werr)
		if ncode != 0 || wcode != 0 {
			t.Fatalf("%s: exit native %d (%s), wasm %d (%s)", f, ncode, nerr.String(), wcode, werr.String())
		}
		if !bytes.Equal(nout.Bytes(), wout.Bytes()) {
			t.Fatalf("%s: outputs differ\nnative:\n%s\nwasm:\n%s", f, nout.String(), wout.String())
		}
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"replay", "--engine", "wasm", "-"}, strings.NewReader(`{"steps":1}`), &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "steps") {
		t.Fatalf("a bad scenario: exit %d, stderr %q; want 1 and a message about steps", code, errOut.String())
	}
}
