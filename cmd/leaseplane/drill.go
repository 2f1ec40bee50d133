package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/leaseplane/leaseplane/server/client"
)

// drillRun is a run as GET /api/v1/drills/runs shows it.
type drillRun struct {
	ID            string `json:"id"`
	StartedAtMs   *int64 `json:"startedAtMs"`
	FinishedAtMs  *int64 `json:"finishedAtMs"`
	CancelledAtMs *int64 `json:"cancelledAtMs"`
	Passed        *bool  `json:"passed"`
	Drills        []struct {
		Name     string `json:"name"`
		Passed   bool   `json:"passed"`
		Detail   string `json:"detail"`
		Expected string `json:"expected"`
		Live     string `json:"live"`
	} `json:"drills"`
}

func runDrill(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("drill", flag.ContinueOnError)
	fs.SetOutput(stderr)
	wait := fs.Bool("wait", false, "wait for the run to finish and print each drill's result")
	timeout := fs.Duration("timeout", 5*time.Minute, "with --wait, give up after this long")
	cancel := fs.String("cancel", "", "cancel this queued or running run (run_N) instead of asking for one")
	fs.Usage = func() {
		fmt.Fprintln(stderr, `usage: leaseplane drill [--wait] [--timeout 5m]
       leaseplane drill --cancel run_N

Asks the plane to run its six drills (two agents and one slot, a crashed
holder, a deadlock, a herd of fifty, a stale leaseId, an operator
suspending an agent) in a fresh drill workspace, and prints the run's id.
With --wait it follows the run (the crashed holder takes 30 s) and prints
each drill; a failed drill shows the first answer that differed.
Runs are queued per workspace (at most 4 queued or running); --cancel
ends one of this workspace's queued or running runs.
Needs an operator key.`+clientEnvHelp+`
With --wait, exit 1 also when a drill failed.`)
		printFlags(fs)
	}
	if err := fs.Parse(args); err == flag.ErrHelp {
		return exitOK
	} else if err != nil {
		return exitUsage
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return exitUsage
	}
	c := planeClient()
	ctx := context.Background()
	if *cancel != "" {
		body, _ := json.Marshal(map[string]string{"id": *cancel})
		if _, ok := drillPost(ctx, c, "/api/v1/drills/cancel", body, stderr); !ok {
			return exitRefused
		}
		fmt.Fprintf(stdout, "drill run %s cancelled\n", *cancel)
		return exitOK
	}
	b, ok := drillPost(ctx, c, "/api/v1/drills/run", []byte("{}"), stderr)
	if !ok {
		return exitRefused
	}
	var asked struct{ ID string }
	if err := json.Unmarshal(b, &asked); err != nil || asked.ID == "" {
		fmt.Fprintf(stderr, "leaseplane drill: the plane answered %s\n", b)
		return exitRefused
	}
	fmt.Fprintf(stdout, "drill run %s asked\n", asked.ID)
	if !*wait {
		return exitOK
	}
	deadline := time.Now().Add(*timeout)
	begun, lastSaid := time.Now(), time.Now()
	reported := 0
	fmt.Fprintf(stderr, "leaseplane drill: waiting for run %s (the crashed-holder drill alone takes about 30 s: its lease must lapse)\n", asked.ID)
	for {
		st, b, err := c.Request(ctx, http.MethodGet, "/api/v1/drills/runs?limit=100", nil)
		if err != nil || st != 200 {
			fmt.Fprintf(stderr, "leaseplane drill: reading runs: %d %s %v\n", st, b, err)
			return exitRefused
		}
		var v struct{ Runs []drillRun }
		if err := json.Unmarshal(b, &v); err != nil {
			fmt.Fprintf(stderr, "leaseplane drill: reading runs: %v\n", err)
			return exitRefused
		}
		for _, r := range v.Runs {
			if r.ID != asked.ID {
				continue
			}
			if r.FinishedAtMs != nil {
				return printDrillRun(stdout, r)
			}
			// Progress on stderr: each drill as it finishes, and a line
			// every 5 s while one runs (the crashed holder takes 30 s).
			for ; reported < len(r.Drills); reported++ {
				d := r.Drills[reported]
				verdict := "passed"
				if !d.Passed {
					verdict = "FAILED"
				}
				fmt.Fprintf(stderr, "leaseplane drill: %s %s (%d done)\n", d.Name, verdict, reported+1)
				lastSaid = time.Now()
			}
			if time.Since(lastSaid) >= 5*time.Second {
				what := "starting"
				if r.StartedAtMs != nil {
					what = fmt.Sprintf("%d drills done", len(r.Drills))
				}
				fmt.Fprintf(stderr, "leaseplane drill: run %s: %s, %s so far\n", asked.ID, what, time.Since(begun).Round(time.Second))
				lastSaid = time.Now()
			}
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(stderr, "leaseplane drill: run %s did not finish within %v\n", asked.ID, *timeout)
			return exitTimeout
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func printDrillRun(w io.Writer, r drillRun) int {
	for _, d := range r.Drills {
		verdict := "pass"
		if !d.Passed {
			verdict = "FAIL"
		}
		fmt.Fprintf(w, "%s  %-20s %s\n", verdict, d.Name, d.Detail)
		if !d.Passed && (d.Expected != "" || d.Live != "") {
			fmt.Fprintf(w, "      expected: %s\n      live:     %s\n", d.Expected, d.Live)
		}
	}
	ms := int64(0)
	if r.StartedAtMs != nil {
		ms = *r.FinishedAtMs - *r.StartedAtMs
	}
	if r.CancelledAtMs != nil {
		fmt.Fprintf(w, "drill run %s was cancelled after %d ms\n", r.ID, ms)
		return exitRefused
	}
	if r.Passed != nil && *r.Passed {
		fmt.Fprintf(w, "drill run %s passed in %d ms\n", r.ID, ms)
		return exitOK
	}
	fmt.Fprintf(w, "drill run %s FAILED in %d ms\n", r.ID, ms)
	return exitRefused
}

// drillPost posts body to path and returns the answer of a 200; anything
// else is printed to stderr (ok false).
func drillPost(ctx context.Context, c *client.Client, path string, body []byte, stderr io.Writer) ([]byte, bool) {
	st, b, err := c.Request(ctx, http.MethodPost, path, body)
	if err != nil {
		fmt.Fprintf(stderr, "leaseplane drill: %v\n", err)
		return nil, false
	}
	if st != 200 {
		fmt.Fprintf(stderr, "leaseplane drill: %d %s\n", st, b)
		return nil, false
	}
	return b, true
}
