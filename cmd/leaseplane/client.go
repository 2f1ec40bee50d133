package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/server"
	"github.com/leaseplane/leaseplane/server/client"
)

// Exit statuses of the client verbs (lease, release, wait, exec). exec
// exits with its command's own status once the command has run.
const (
	exitOK        = 0
	exitRefused   = 1 // refused (lease_held, stale_lease, unauthorized, ...)
	exitUsage     = 2
	exitDeadlock  = 3 // acquiring would close a wait cycle
	exitSuspended = 4 // the operator suspended the agent
	exitTimeout   = 5 // exec --timeout ran out while waiting
	exitLost      = 6 // exec lost the lease while the command ran; the command was stopped
	exitNoPlane   = 7 // the plane could not be reached (no answer at all)
	exitNoStart   = 127
)

// defaultURL is where the client verbs look for the plane without
// LEASEPLANE_URL.
const defaultURL = "http://127.0.0.1:8080"

// requestTimeout bounds one HTTP exchange of the client verbs: a held
// lease request (--wait, exec) takes up to 30 s at the plane.
const requestTimeout = client.MaxWaitUpTo + 15*time.Second

// planeClient builds a client from LEASEPLANE_URL and LEASEPLANE_KEY.
func planeClient() *client.Client {
	url := os.Getenv("LEASEPLANE_URL")
	if url == "" {
		url = defaultURL
	}
	return client.New(url, os.Getenv("LEASEPLANE_KEY"), &http.Client{Timeout: requestTimeout})
}

// parseInterleaved parses flags that may come before or after positional
// arguments (the standard flag package stops at the first positional).
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

const clientEnvHelp = `
The plane is LEASEPLANE_URL (default ` + defaultURL + `); the Bearer key is LEASEPLANE_KEY.
Exit status: 0 granted/ok, 1 refused, 2 usage, 3 deadlock, 4 suspended, 7 the plane could not be reached.`

// parseResourceVerb parses the arguments of a verb that takes one
// RESOURCE and --as DID, plus the flags that define adds. ok is false when
// the verb must exit with status (usage errors, or -h).
func parseResourceVerb(name, usageLine, summary string, args []string, stderr io.Writer, define func(*flag.FlagSet)) (resource, as string, status int, ok bool) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	asFlag := fs.String("as", "", "the agent's DID (default: the agent an agent key names; required with a workspace key)")
	define(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: "+usageLine)
		fmt.Fprintln(stderr, summary)
		printFlags(fs)
		fmt.Fprintln(stderr, clientEnvHelp)
	}
	pos, status, ok := parsePositional(fs, args, 1, "exactly one RESOURCE (and --as DID with a workspace key)")
	if !ok {
		return "", "", status, false
	}
	as, status, ok = resolveAs(name, *asFlag, stderr)
	return pos[0], as, status, ok
}

// needKey says how to set LEASEPLANE_KEY when it is empty; ok is false
// then, and the verb exits 2.
func needKey(verb string, stderr io.Writer) (ok bool) {
	if os.Getenv("LEASEPLANE_KEY") != "" {
		return true
	}
	fmt.Fprintf(stderr, "leaseplane %s: LEASEPLANE_KEY is not set: export the key leaseplane serve printed on its first start\n"+
		"  (export LEASEPLANE_KEY=lp_...), or make one with: leaseplane keys create --data DIR --workspace NAME [--agent DID]\n", verb)
	return false
}

// resolveAs is the agent a verb acts as: --as when given, else the agent
// an agent key names (asked of the plane: GET /api/v1/whoami).
func resolveAs(verb, as string, stderr io.Writer) (string, int, bool) {
	if !needKey(verb, stderr) {
		return "", exitUsage, false
	}
	if as != "" {
		return as, 0, true
	}
	c := planeClient()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	status, body, err := c.Request(ctx, http.MethodGet, server.RouteWhoami, nil)
	if err != nil {
		fmt.Fprintln(stderr, unreachable(verb, c.BaseURL(), err))
		return "", exitNoPlane, false
	}
	var who struct {
		OK       bool   `json:"ok"`
		Role     string `json:"role"`
		ActorDid string `json:"actorDid"`
		Reason   string `json:"reason"`
		Error    string `json:"error"`
	}
	if json.Unmarshal(body, &who) != nil || !who.OK {
		fmt.Fprintf(stderr, "leaseplane %s: the plane refused the key (HTTP %d %s: %s)\n", verb, status, who.Reason, who.Error)
		return "", exitRefused, false
	}
	if who.ActorDid == "" {
		fmt.Fprintf(stderr, "leaseplane %s: --as DID is required: LEASEPLANE_KEY is %s key, which may act as any agent (an agent key names its agent itself)\n",
			verb, withArticle(who.Role))
		return "", exitUsage, false
	}
	return who.ActorDid, 0, true
}

// withArticle puts "a" or "an" before a word: "an agent", "a workspace".
func withArticle(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "an " + word
	}
	return "a " + word
}

// unreachable explains a failed exchange with the plane at url, saying
// what to do when nothing listens there.
func unreachable(verb, url string, err error) string {
	msg := fmt.Sprintf("leaseplane %s: cannot reach the plane at %s: %v", verb, url, err)
	if errors.Is(err, syscall.ECONNREFUSED) {
		msg += "\n  nothing listens there: is the plane running? Start it with leaseplane serve (or make run), or set LEASEPLANE_URL to its address"
	}
	return msg
}

func runLease(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var mode, receipt *string
	var wait *time.Duration
	resource, as, status, ok := parseResourceVerb("lease",
		"leaseplane lease RESOURCE --as DID [--mode read|write|delete] [--wait DURATION] [--receipt FILE]",
		"Acquires RESOURCE, or renews the lease the agent holds on it, and prints the answer JSON.\n"+
			"With --wait, lease_held is not the answer until the time is up: the plane holds the request\n"+
			"(30 s at most per request) and answers as soon as the resource is the agent's.",
		args, stderr, func(fs *flag.FlagSet) {
			mode = fs.String("mode", "", "read, write or delete (default write)")
			wait = fs.Duration("wait", 0, "wait up to this long for the lease, e.g. 10s or 2m (default: answer at once)")
			receipt = fs.String("receipt", "", "save the grant's signed receipt (c2sp.org/tlog-proof@v1) to FILE")
		})
	if !ok {
		return status
	}
	if *wait < 0 {
		fmt.Fprintf(stderr, "leaseplane lease: --wait %s is negative\n", *wait)
		return exitUsage
	}
	body, _ := json.Marshal(client.AcquireRequest{Resource: resource, ActorDid: as, Mode: *mode})
	var st int
	var a *client.Answer
	if *wait > 0 {
		st, a = leaseWaiting(body, *wait, stdout, stderr)
	} else {
		st, a = callAndPrintAnswer("lease", kernel.OpAcquire, body, stdout, stderr)
	}
	if st == exitOK && *receipt != "" && a != nil && a.Lease != nil {
		if err := saveReceipt(planeClient(), a.Lease.ID, *receipt); err != nil {
			fmt.Fprintf(stderr, "leaseplane lease: the lease is granted, but its receipt was not saved: %v\n", err)
			return exitRefused
		}
	}
	return st
}

func runRelease(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var lease *string
	resource, as, status, ok := parseResourceVerb("release",
		"leaseplane release RESOURCE --as DID [--lease ID]",
		"Releases the agent's lease on RESOURCE (and its place in the queue) and prints the answer JSON.",
		args, stderr, func(fs *flag.FlagSet) {
			lease = fs.String("lease", "", "release only this lease id (refused stale_lease when it is not live)")
		})
	if !ok {
		return status
	}
	body, _ := json.Marshal(client.ReleaseRequest{Resource: resource, ActorDid: as, LeaseID: *lease})
	return callAndPrint("release", kernel.OpRelease, body, stdout, stderr)
}

func runWait(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("wait", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: leaseplane wait")
		fmt.Fprintln(stderr, "Prints the queues (holders and waiters of every busy resource) and the deadlocks of the last 30 s.")
		fmt.Fprintln(stderr, clientEnvHelp)
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return usageStatus(err)
	}
	if len(pos) != 0 {
		fmt.Fprintf(stderr, "leaseplane wait: takes no arguments, got %q\n", pos)
		return exitUsage
	}
	if !needKey("wait", stderr) {
		return exitUsage
	}
	return callAndPrint("wait", kernel.OpWait, nil, stdout, stderr)
}

// callAndPrint sends one request, prints the answer body on stdout and, on
// a refusal, one line on stderr; it returns the exit status.
func callAndPrint(verb string, op kernel.Op, body []byte, stdout, stderr io.Writer) int {
	st, _ := callAndPrintAnswer(verb, op, body, stdout, stderr)
	return st
}

// callAndPrintAnswer is callAndPrint that also returns the decoded answer
// (nil when there is none).
func callAndPrintAnswer(verb string, op kernel.Op, body []byte, stdout, stderr io.Writer) (int, *client.Answer) {
	c := planeClient()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	status, answer, err := c.Call(ctx, op, body)
	if err != nil {
		fmt.Fprintln(stderr, unreachable(verb, c.BaseURL(), err))
		return exitNoPlane, nil
	}
	return printAnswer(verb, status, answer, stdout, stderr)
}

// leaseWaiting asks for a lease in requests the plane holds (waitUpToMs)
// until it is granted, refused otherwise than lease_held, or wait has
// passed; it prints the last answer as callAndPrintAnswer does.
func leaseWaiting(body []byte, wait time.Duration, stdout, stderr io.Writer) (int, *client.Answer) {
	c := planeClient()
	deadline := time.Now().Add(wait)
	for {
		left := time.Until(deadline)
		ctx, cancel := context.WithTimeout(context.Background(), left+requestTimeout)
		status, answer, err := c.CallWaiting(ctx, body, left)
		cancel()
		if err != nil {
			fmt.Fprintln(stderr, unreachable("lease", c.BaseURL(), err))
			return exitNoPlane, nil
		}
		// A plane holds one request 30 s at most: ask again while time is left.
		if a, derr := decodeAnswer(status, answer); derr == nil && a.Reason == kernel.ReasonLeaseHeld && time.Until(deadline) > 0 {
			continue
		}
		return printAnswer("lease", status, answer, stdout, stderr)
	}
}

// printAnswer prints an answer body on stdout and, on a refusal, one line
// on stderr; it returns the exit status and the decoded answer.
func printAnswer(verb string, status int, answer []byte, stdout, stderr io.Writer) (int, *client.Answer) {
	stdout.Write(answer)
	if len(answer) > 0 && answer[len(answer)-1] != '\n' {
		fmt.Fprintln(stdout)
	}
	a, derr := decodeAnswer(status, answer)
	if derr != nil {
		fmt.Fprintf(stderr, "leaseplane %s: HTTP %d with an answer that is not the plane's JSON: %v\n", verb, status, derr)
		return exitRefused, nil
	}
	if status == http.StatusOK && a.OK {
		return exitOK, a
	}
	return refusalExit(verb, a, stderr), a
}

// heldBy says what stands in the way of a lease_held answer: the holder,
// or, when no lease conflicts, the claims of the waiters ahead.
func heldBy(a *client.Answer) string {
	if a.Holder != "" {
		return "held by " + a.Holder
	}
	if len(a.Claimants) > 0 {
		return "not held, but waiters ahead have claims on it (" + strings.Join(a.Claimants, ", ") + ")"
	}
	return "waiters ahead have claims on it"
}

// refusalExit prints a refusal on stderr and maps it to an exit status.
func refusalExit(verb string, a *client.Answer, stderr io.Writer) int {
	switch a.Reason {
	case kernel.ReasonDeadlock:
		fmt.Fprintf(stderr, "leaseplane %s: %v\n", verb, &client.RefusedError{Op: kernel.OpAcquire, Answer: a})
		return exitDeadlock
	case kernel.ReasonSuspended:
		fmt.Fprintf(stderr, "leaseplane %s: %v\n", verb, &client.RefusedError{Op: kernel.OpAcquire, Answer: a})
		return exitSuspended
	case kernel.ReasonLeaseHeld:
		wait := int64(0)
		if a.Stampede != nil {
			wait = a.Stampede.WaitMs
		}
		fmt.Fprintf(stderr, "leaseplane %s: refused lease_held: %s; retry in %d ms\n", verb, heldBy(a), wait)
		return exitRefused
	}
	fmt.Fprintf(stderr, "leaseplane %s: refused %s\n", verb, a.Refusal())
	return exitRefused
}

func decodeAnswer(status int, answer []byte) (*client.Answer, error) {
	a := &client.Answer{Status: status, Raw: answer}
	t := strings.TrimSpace(string(answer))
	if !strings.HasPrefix(t, "{") {
		return nil, fmt.Errorf("%q", clipString(t, 120))
	}
	if err := json.Unmarshal([]byte(t), a); err != nil {
		return nil, err
	}
	return a, nil
}

func clipString(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// usageStatus is the exit status after a flag parsing error: 0 for -h.
func usageStatus(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitUsage
}
