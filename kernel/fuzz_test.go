package kernel_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/scenario"
)

// stepsFromBytes turns fuzz input into steps: each 4 bytes choose an op,
// an agent, a resource, a mode and how far the clock moves, so the fuzzer
// explores orders of operations rather than JSON syntax.
func stepsFromBytes(data []byte) [][]byte {
	agents := []string{"did:x:a", "did:x:b", "did:x:c", "did:x:d", "did:x:e"}
	resources := []string{"lock:1", "lock:2", "file:3", "file:4"}
	modes := []string{"write", "read", "delete", "read"}
	deltas := []int64{0, 1, 100, 1000, 29999, 30000, 30001, -500}
	now := int64(1000)
	var steps [][]byte
	for i := 0; i+4 <= len(data) && len(steps) < 200; i += 4 {
		op, who, what, when := data[i], data[i+1], data[i+2], data[i+3]
		now = max(0, now+deltas[when%8])
		a := agents[int(who)%len(agents)]
		r := resources[int(what)%len(resources)]
		var s string
		switch op % 10 {
		case 0, 1, 2, 3:
			s = fmt.Sprintf(`{"atMs":%d,"op":"acquire","resource":%q,"actorDid":%q,"mode":%q}`, now, r, a, modes[int(when>>3)%4])
		case 4, 5:
			s = fmt.Sprintf(`{"atMs":%d,"op":"release","resource":%q,"actorDid":%q}`, now, r, a)
		case 6:
			s = fmt.Sprintf(`{"atMs":%d,"op":"release","resource":%q,"actorDid":%q,"leaseId":%q}`, now, r, a, kernel.LeaseID(r, int64(when>>3)%4+1))
		case 7:
			s = fmt.Sprintf(`{"atMs":%d,"op":"tick"}`, now)
		case 8:
			s = fmt.Sprintf(`{"atMs":%d,"op":"suspend","actorDid":%q}`, now, a)
		case 9:
			s = fmt.Sprintf(`{"atMs":%d,"op":"resume","actorDid":%q}`, now, a)
		}
		steps = append(steps, []byte(s))
	}
	return steps
}

// FuzzKernel checks the invariants and brute-force verdicts on command
// sequences the fuzzer builds, then that a snapshot restores to the same
// state.
func FuzzKernel(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 0, 1, 0})
	f.Add([]byte{0, 0, 2, 0, 0, 1, 2, 8, 0, 1, 2, 24, 0, 0, 2, 8})
	f.Add(bytes.Repeat([]byte{0, 1, 2, 3, 4, 5, 6, 7}, 20))
	f.Fuzz(func(t *testing.T, data []byte) {
		rules := kernel.Rules{ReadShared: []string{"file:"}}
		steps := stepsFromBytes(data)
		checkSteps(t, rules, steps)
		m := kernel.New(rules)
		for _, s := range steps {
			m.StepJSON(s)
		}
		snap := m.Snapshot()
		m2, err := kernel.Restore(snap)
		if err != nil {
			t.Fatalf("restore: %v", err)
		}
		if !bytes.Equal(m2.Snapshot(), snap) {
			t.Fatal("snapshot changed across restore")
		}
	})
}

// FuzzDecode feeds arbitrary bytes to the request and step decoders. They
// must never panic; what they accept must be valid JSON whose string fields
// encoding/json reads the same; and every answer must be valid JSON.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"resource":"lock:a","actorDid":"did:x:a"}`,
		`{"resource":"lock:\u00e9","actorDid":"did:x:a","mode":"read","ttlMs":5}`,
		`{"atMs":1,"op":"release","resource":"r","actorDid":"did:x:a","leaseId":"lease_1"}`,
		`{"resource":"a","resource":"b"}`, `[1,2]`, `{"resource":null}`, `{"a":{"b":[1,{"c":2}]}}`,
		`{"resource":"r","actorDid":"did:x:a","mode":"delete","waitUpToMs":0}`, `{"askId":"ask_12"}`, `{"prefix":"a","after":"b","limit":3}`,
		`{"resource":"\ud800"}`, `{"resource":"x\u0000"}`, ` `, `{"atMs":1.5,"op":"tick"}`,
	} {
		f.Add([]byte(s))
	}
	m := kernel.New(kernel.Rules{})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, op := range []kernel.Op{kernel.OpAcquire, kernel.OpRelease, kernel.OpWait, kernel.OpSuspend, kernel.OpCancel} {
			c, err := kernel.DecodeRequest(op, 1, data)
			if err == nil && len(bytes.TrimSpace(data)) > 0 {
				if !json.Valid(data) {
					t.Fatalf("accepted invalid JSON %q", data)
				}
				var std map[string]any
				if err := json.Unmarshal(data, &std); err != nil {
					t.Fatalf("accepted what encoding/json refuses (%v): %q", err, data)
				}
				if v, ok := std["resource"].(string); ok && v != c.Resource {
					t.Fatalf("resource read as %q, encoding/json reads %q", c.Resource, v)
				}
				if v, ok := std["actorDid"].(string); ok && v != c.ActorDid {
					t.Fatalf("actorDid read as %q, encoding/json reads %q", c.ActorDid, v)
				}
			}
			if err == nil {
				// What a host logs for the command decodes to the same command.
				body := c.AppendRequest(nil)
				if back, err := kernel.DecodeRequest(op, 1, body); err != nil || back != c {
					t.Fatalf("AppendRequest of %q gave %s, which decodes to %+v (%v); want %+v", data, body, back, err, c)
				}
			}
			r := m.ApplyJSON(op, 1, data)
			if !json.Valid(r.Answer) || !json.Valid(kernel.AppendEvents(nil, r.Events)) {
				t.Fatalf("answer is not JSON: %s", r.Answer)
			}
			if (err == nil) != (r.Status != 400) {
				t.Fatalf("decode error %v but status %d", err, r.Status)
			}
		}
		if _, err := kernel.DecodeStep(data); err == nil && !json.Valid(data) {
			t.Fatalf("step accepted invalid JSON %q", data)
		}
		_, _ = scenario.Parse(data)
		_, _ = kernel.ParseRules(data)
		_, _ = kernel.Restore(data)
	})
}
