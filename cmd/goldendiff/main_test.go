package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const before = `{"steps":[
{"atMs":1000,"op":"acquire","answer":{"ok":true,"lease":{"id":"lease_1","fence":1}},"events":[{"type":"coordination.lease","fence":1}]},
{"atMs":1200,"op":"acquire","answer":{"ok":false,"reason":"lease_held","stampede":{"admitted":["a"],"waitMs":50}},"events":[]},
{"atMs":1300,"op":"wait","answer":{"ok":true,"queues":[]},"events":[]}
],"trust":{"a":1}}
`

// after changes one field of step 2, adds a member to step 1's answer, an
// event to step 3, a step, and the trust.
const after = `{"steps":[
{"atMs":1000,"op":"acquire","answer":{"ok":true,"lease":{"id":"lease_1","fence":1},"held":false},"events":[{"type":"coordination.lease","fence":1}]},
{"atMs":1200,"op":"acquire","answer":{"ok":false,"reason":"lease_held","stampede":{"admitted":["a"],"waitMs":100}},"events":[]},
{"atMs":1300,"op":"wait","answer":{"ok":true,"queues":[]},"events":[{"type":"coordination.expire"}]},
{"atMs":1400,"op":"tick","answer":{"ok":true},"events":[]}
],"trust":{"a":0.5}}
`

func TestTwoFiles(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.golden"), filepath.Join(dir, "b.golden")
	os.WriteFile(a, []byte(before), 0o644)
	os.WriteFile(b, []byte(after), 0o644)
	var out, errb bytes.Buffer
	if code := run([]string{a, b}, &out, &errb); code != 1 {
		t.Fatalf("exit %d, want 1 (they differ); stderr %s", code, errb.String())
	}
	want := b + `
  step 1 (atMs 1000, acquire): answer.held: added: false
  step 2 (atMs 1200, acquire): answer.stampede.waitMs: 50 → 100
  step 3 (atMs 1300, wait): events[0]: added: {"type":"coordination.expire"}
  step 4 (atMs 1400, tick): added: {"answer":{"ok":true},"atMs":1400,"events":[],"op":"tick"}
  trust.a: 1 → 0.5
`
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
	out.Reset()
	if code := run([]string{a, a}, &out, &errb); code != 0 || out.Len() != 0 {
		t.Errorf("a golden against itself: exit %d, output %q; want 0 and nothing", code, out.String())
	}
	// The other way round, step 4 is removed.
	out.Reset()
	run([]string{b, a}, &out, &errb)
	if !strings.Contains(out.String(), `step 4 (atMs 1400, tick): removed: {"answer"`) ||
		!strings.Contains(out.String(), "answer.held: removed (was false)") {
		t.Errorf("b against a:\n%s", out.String())
	}
}

func TestNotATranscript(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.golden"), filepath.Join(dir, "b.golden")
	os.WriteFile(a, []byte(before), 0o644)
	os.WriteFile(b, []byte(`{"trust":{}}`), 0o644)
	var out, errb bytes.Buffer
	if code := run([]string{a, b}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `no "steps" array`) {
		t.Errorf("exit %d, stderr %q; want 2 and a message naming the missing steps", code, errb.String())
	}
}

// TestAgainstACommit compares a repository's working tree with its
// commit: a changed golden, a new one (untracked), a removed one, and a
// changed file that is not a golden, which is not shown.
func TestAgainstACommit(t *testing.T) {
	dir := t.TempDir()
	sh := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	sc := filepath.Join(dir, "kernel", "testdata", "scenarios")
	os.MkdirAll(sc, 0o755)
	write := func(name, s string) { os.WriteFile(filepath.Join(sc, name), []byte(s), 0o644) }
	write("changed.golden", before)
	write("gone.golden", before)
	write("changed.json", `{"steps":[]}`)
	sh("init", "-q")
	sh("add", ".")
	sh("commit", "-qm", "corpus")
	write("changed.golden", after)
	write("changed.json", `{"steps":[{}]}`)
	write("new.golden", after)
	os.Remove(filepath.Join(sc, "gone.golden"))

	wd, _ := os.Getwd()
	t.Cleanup(func() { os.Chdir(wd) })
	os.Chdir(dir)
	var out, errb bytes.Buffer
	if code := run(nil, &out, &errb); code != 1 {
		t.Fatalf("exit %d, want 1; stderr %s", code, errb.String())
	}
	got := out.String()
	for _, want := range []string{
		"kernel/testdata/scenarios/changed.golden\n  step 1 (atMs 1000, acquire): answer.held: added: false\n",
		"kernel/testdata/scenarios/gone.golden\n  golden removed\n",
		"kernel/testdata/scenarios/new.golden\n  new golden: 4 steps\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
	if strings.Contains(got, "changed.json") {
		t.Errorf("a scenario file is shown:\n%s", got)
	}
	if code := run([]string{"-rev", "nosuchrev"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "nosuchrev") {
		t.Errorf("-rev nosuchrev: exit %d, stderr %q; want 2 naming it", code, errb.String())
	}
}
