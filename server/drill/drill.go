// Package drill runs the drills of kernel/drill (the six fixed scenarios,
// checked against the native kernel's replay and the durable log, the
// same code as on the Workers tier) on the server: through the real HTTP
// path (a listener on 127.0.0.1 serving the server's own handler), each in
// a fresh workspace of its own (named store.DrillPrefix+…, which no real
// workspace can be named), dropped after the drill.
//
// The server calls Run and reaches nothing of it but Host and kernel/drill's
// Workspace;
// it queues the runs (one at a time, every run kept in the store).
package drill

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/leaseplane/leaseplane/kernel/drill"
)

// Names are the drills in the order a run runs them.
var Names = drill.Names

// The drills' types and encodings are kernel/drill's.
type (
	Drill     = drill.Drill
	Result    = drill.Result
	TapeEntry = drill.TapeEntry
	Record    = drill.Record
	Workspace = drill.Workspace
)

// All returns the drills, parsed, in run order.
func All() ([]Drill, error) { return drill.All() }

// ResultsJSON encodes results for the store and the routes.
func ResultsJSON(rs []Result) []byte { return drill.ResultsJSON(rs) }

// Host is what a run needs of the server: kernel/drill's Host but for
// Send, which this package makes over HTTP to Handler. NewWorkspace names
// the workspace store.DrillPrefix+suffix and loads it.
type Host interface {
	// NowMs is the plane's clock; SleepUntil waits on the plane's timers
	// until it reaches ms (ctx's error when ctx ends first).
	NowMs() int64
	SleepUntil(ctx context.Context, ms int64) error
	// Handler is the server's HTTP handler, the drills' way in.
	Handler() http.Handler
	NewWorkspace(ctx context.Context, suffix string, rules []byte) (drill.Workspace, error)
}

// Run runs the drills of run runID in order (only those named in names,
// when it is not empty); progress is called after each drill with the
// results so far. err is for what stops the whole run (ctx ending, the
// plane stopping); a drill that fails is a result.
func Run(ctx context.Context, h Host, runID int64, names []string, progress func([]Result)) ([]Result, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, errors.New("drills: listen on 127.0.0.1: " + err.Error())
	}
	hs := &http.Server{Handler: h.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	defer hs.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	defer tr.CloseIdleConnections()
	e := &host{Host: h, base: "http://" + ln.Addr().String(), client: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
	return drill.Run(ctx, e, runID, names, progress)
}

// host is the server as kernel/drill's Host: its requests go over HTTP to
// the run's listener.
type host struct {
	Host
	base   string // http://127.0.0.1:port of the run's listener
	client *http.Client
}

func (e *host) Send(ctx context.Context, r drill.Request, key string) (int, []byte, error) {
	u := e.base + r.Path
	if r.RawQuery != "" {
		u += "?" + r.RawQuery
	}
	var rd io.Reader
	if r.Body != nil {
		rd = bytes.NewReader(r.Body)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, u, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return resp.StatusCode, b, err
}
