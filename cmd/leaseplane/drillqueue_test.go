package main

// Drill runs against the real binary: each workspace has a queue of its
// own, served in turn, with a bound, and an operator may cancel a run.
// The order is read from the runs' records; the only clock is the
// watchdog against a hang.

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/server/servertest"
)

// drillClient talks to the plane at url from the local address ip with
// key.
type drillClient struct {
	t   *testing.T
	url string
	key string
	hc  *http.Client
}

func newDrillClient(t *testing.T, url, ip, key string) *drillClient {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: watchdog}
	return &drillClient{t: t, url: url, key: key, hc: &http.Client{Timeout: watchdog, Transport: &http.Transport{DialContext: d.DialContext}}}
}

func (c *drillClient) do(method, path, body string) (int, map[string]any) {
	c.t.Helper()
	req, _ := http.NewRequest(method, c.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+c.key)
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		c.t.Fatalf("%s %s: %d %s is not a JSON object", method, path, resp.StatusCode, b)
	}
	return resp.StatusCode, m
}

// ask asks for a run: its id, or "" with the refusal.
func (c *drillClient) ask() (id string, status int, refusal map[string]any) {
	c.t.Helper()
	st, m := c.do("POST", "/api/v1/drills/run", "{}")
	if st != 200 {
		return "", st, m
	}
	return m["id"].(string), st, nil
}

// drillRec is a run as GET /api/v1/drills/runs lists it.
type drillRec struct {
	ID                                       string
	StartedAtMs, FinishedAtMs, CancelledAtMs *int64
	Passed                                   *bool
}

func (c *drillClient) runs() map[string]drillRec {
	c.t.Helper()
	req, _ := http.NewRequest("GET", c.url+"/api/v1/drills/runs?limit=100", nil)
	req.Header.Set("Authorization", "Bearer "+c.key)
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct{ Runs []drillRec }
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != 200 {
		c.t.Fatalf("drills/runs: %d %v", resp.StatusCode, err)
	}
	out := map[string]drillRec{}
	for _, r := range v.Runs {
		out[r.ID] = r
	}
	return out
}

// until polls the runs until done says so, or fails at the watchdog.
func (c *drillClient) until(what string, done func(map[string]drillRec) bool) map[string]drillRec {
	c.t.Helper()
	end := time.Now().Add(2 * watchdog)
	for {
		rs := c.runs()
		if done(rs) {
			return rs
		}
		if time.Now().After(end) {
			c.t.Fatalf("waiting for %s: the runs are %+v", what, rs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func allFinished(ids []string) func(map[string]drillRec) bool {
	return func(rs map[string]drillRec) bool {
		for _, id := range ids {
			if rs[id].FinishedAtMs == nil {
				return false
			}
		}
		return true
	}
}

// TestDrillsFairAcrossWorkspaces: workspace A's operator, from 127.0.0.2,
// asks for six runs at once; workspace B's, from 127.0.0.1, then asks
// for one. A gets its bound (4 runs queued or running) and a 429
// limit_exceeded naming it for the rest; B's run is the next to start
// once A's first ends, before A's backlog: at most one of A's runs starts
// before it.
func TestDrillsFairAcrossWorkspaces(t *testing.T) {
	data := t.TempDir()
	c := startChildBin(t, servertest.TestBinary(t), data, "--test-drills", "two-agents-one-slot")
	a := newDrillClient(t, c.url, "127.0.0.2", keysCLI(t, "create", "--data", data, "--workspace", "attacker", "--new-workspace", "--operator"))
	b := newDrillClient(t, c.url, "127.0.0.1", keysCLI(t, "create", "--data", data, "--workspace", "tenant", "--new-workspace", "--operator"))

	var aIDs []string
	refused := 0
	for range 6 {
		id, st, ref := a.ask()
		switch {
		case st == 200:
			aIDs = append(aIDs, id)
		case st == 429 && ref["reason"] == "limit_exceeded" && ref["limit"] == "drillRuns" && strings.Contains(fmt.Sprint(ref["error"]), "this workspace"):
			refused++
		default:
			t.Fatalf("A's drill run: %d %v", st, ref)
		}
	}
	t.Logf("A asked for 6 runs: %d queued, %d refused 429", len(aIDs), refused)
	if len(aIDs) != 4 || refused != 2 {
		t.Errorf("A's six asks: %d queued and %d refused; want 4 queued (the bound per workspace) and 2 refused", len(aIDs), refused)
	}
	bID, st, ref := b.ask()
	if st != 200 {
		t.Fatalf("B's drill run, with A's backlog queued: %d %v", st, ref)
	}
	aRuns := a.until("A's runs to finish", allFinished(aIDs))
	bRuns := b.until("B's run to finish", allFinished([]string{bID}))
	bStart := *bRuns[bID].StartedAtMs
	before, after := 0, 0
	for _, id := range aIDs {
		if *aRuns[id].StartedAtMs < bStart {
			before++
		} else {
			after++
		}
	}
	t.Logf("B's run started after %d of A's runs and before %d", before, after)
	if before > 1 {
		t.Errorf("B's run waited behind %d of A's runs (of %d); want at most 1: the one running when B asked", before, len(aIDs))
	}
	if *bRuns[bID].Passed != true {
		t.Errorf("B's run did not pass: %+v", bRuns[bID])
	}

	// Once A's backlog is done, A may queue again.
	if id, st, ref := a.ask(); st != 200 {
		t.Errorf("A's run after its backlog finished: %d %v", st, ref)
	} else {
		a.until("A's later run", allFinished([]string{id}))
	}
}

// TestDrillCancel: an operator cancels its workspace's queued run (it never
// starts) and its running one (it stops: the crashed-holder drill, 30 s
// long, would still be waiting for its lease to lapse); the run queued
// behind them then runs. A finished run, another workspace's run, a
// workspace key and a malformed id are refused.
func TestDrillCancel(t *testing.T) {
	data := t.TempDir()
	c := startChildBin(t, servertest.TestBinary(t), data, "--test-drills", "crashed-holder")
	a := newDrillClient(t, c.url, "127.0.0.2", keysCLI(t, "create", "--data", data, "--workspace", "attacker", "--new-workspace", "--operator"))
	b := newDrillClient(t, c.url, "127.0.0.1", keysCLI(t, "create", "--data", data, "--workspace", "tenant", "--new-workspace", "--operator"))
	bWorkspaceKey := newDrillClient(t, c.url, "127.0.0.1", keysCLI(t, "create", "--data", data, "--workspace", "tenant"))

	running, _, _ := a.ask()
	queued, _, _ := a.ask()
	bRun, _, _ := b.ask()
	if running == "" || queued == "" || bRun == "" {
		t.Fatalf("asking for runs: %q %q %q", running, queued, bRun)
	}
	cancel := func(cl *drillClient, id string) (int, map[string]any) {
		return cl.do("POST", "/api/v1/drills/cancel", `{"id":"`+id+`"}`)
	}
	// Not B's to cancel, and not with a workspace key.
	if st, m := cancel(b, queued); st != 404 || m["reason"] != "not_found" {
		t.Errorf("B's operator cancelling A's run: %d %v, want 404 not_found", st, m)
	}
	if st, m := cancel(bWorkspaceKey, bRun); st != 403 || m["reason"] != "forbidden" {
		t.Errorf("cancel with a workspace key: %d %v, want 403 forbidden", st, m)
	}
	if st, m := b.do("POST", "/api/v1/drills/cancel", `{"id":"7"}`); st != 400 || !strings.Contains(fmt.Sprint(m["error"]), "run_N") {
		t.Errorf("cancel of id 7: %d %v, want 400 naming the form run_N", st, m)
	}

	// The queued one: cancelled, never started.
	if st, m := cancel(a, queued); st != 200 {
		t.Errorf("cancelling the queued run %s: %d %v", queued, st, m)
	}
	// The running one, once it has started.
	a.until(running+" to start", func(rs map[string]drillRec) bool { return rs[running].StartedAtMs != nil })
	if st, m := cancel(a, running); st != 200 {
		t.Errorf("cancelling the running run %s: %d %v", running, st, m)
	}
	rs := a.until("the cancelled runs to end", allFinished([]string{running, queued}))
	for _, id := range []string{running, queued} {
		if r := rs[id]; r.CancelledAtMs == nil || r.Passed != nil {
			t.Errorf("run %s after its cancel: %+v, want cancelledAtMs set and no verdict", id, r)
		}
	}
	if rs[queued].StartedAtMs != nil {
		t.Errorf("the cancelled queued run %s started: %+v", queued, rs[queued])
	}
	if st, m := cancel(a, running); st != 409 || !strings.Contains(fmt.Sprint(m["error"]), "already") {
		t.Errorf("cancelling %s again: %d %v, want 409 saying it has already ended", running, st, m)
	}
	// B's run, queued behind them, now runs; cancel it too, once started,
	// from the terminal (leaseplane drill --cancel).
	b.until(bRun+" to start", func(rs map[string]drillRec) bool { return rs[bRun].StartedAtMs != nil })
	t.Setenv("LEASEPLANE_URL", c.url)
	t.Setenv("LEASEPLANE_KEY", b.key)
	if code, out, errOut := cli(t, "drill", "--cancel", bRun); code != 0 || out != "drill run "+bRun+" cancelled\n" {
		t.Errorf("leaseplane drill --cancel %s: exit %d %q %q", bRun, code, out, errOut)
	}
	if code, _, errOut := cli(t, "drill", "--cancel", bRun); code != 1 || !strings.Contains(errOut, "409") {
		t.Errorf("leaseplane drill --cancel %s again: exit %d %q, want 1 and the 409", bRun, code, errOut)
	}
	b.until("B's run to end", allFinished([]string{bRun}))
	t.Logf("cancelled %s while running and %s while queued (workspace A), then %s while running (workspace B)", running, queued, bRun)
}
