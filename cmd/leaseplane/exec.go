package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/server/client"
)

// The clock and signals of exec; tests replace them to drive renewal and
// signal forwarding without real waits.
var (
	execNow        = time.Now
	execSleep      func(ctx context.Context, d time.Duration) error // nil: real timers
	execRenewEvery = client.DefaultRenewEvery
	execSignals    = func() (<-chan os.Signal, func()) {
		ch := make(chan os.Signal, 4)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
		return ch, func() { signal.Stop(ch) }
	}
)

// execKillGrace is how long a command that lost its lease has between
// SIGTERM and SIGKILL; tests shorten it.
var execKillGrace = 10 * time.Second

const execHelp = `usage: leaseplane exec RESOURCE --as DID [--mode M] [--timeout DUR] -- CMD ARGS...

Runs CMD while holding a lease on RESOURCE, like etcdctl lock or consul lock:
  - waits for the lease until --timeout, if given, without polling: the plane
    holds each request (up to 30 s) and answers as soon as the lease is free
    for this agent;
  - stops at once on deadlock (naming the holder and the resource it waits on)
    and on suspended;
  - renews the lease every 10 s while CMD runs (a lease lapses 30 s after its
    last renewal);
  - passes LEASEPLANE_FENCE (the fencing token), LEASEPLANE_LEASE_ID and
    LEASEPLANE_RESOURCE to CMD;
  - forwards SIGINT and SIGTERM to CMD;
  - releases the lease when CMD ends, and exits with CMD's status (128+N when
    CMD was killed by signal N).
If the lease is lost while CMD runs (revoked by an operator's suspend,
expired, a renewal refused, or the plane unreachable until the lease
lapsed), CMD gets SIGTERM (SIGKILL 10 s later). exec watches the plane's
events stream, so a revocation stops CMD at once, not at the next renewal.

The plane is LEASEPLANE_URL (default ` + defaultURL + `); the Bearer key is LEASEPLANE_KEY.

Exit status before or without CMD's own:
  1  refused (unauthorized, invalid_request, ...)
  2  usage
  3  deadlock
  4  suspended
  5  --timeout ran out while waiting
  6  the lease was lost while CMD ran (CMD was stopped)
  7  the plane could not be reached before CMD started
  127  CMD could not be started
  130/143  interrupted (SIGINT/SIGTERM) while waiting for the lease`

// splitExecArgs separates exec's own arguments from the command: at the
// first "--", or else at the first positional after RESOURCE.
func splitExecArgs(fs *flag.FlagSet, args []string) (resource string, cmd []string, err error) {
	for i, a := range args {
		if a == "--" {
			pos, err := parseInterleaved(fs, args[:i])
			if err != nil {
				return "", nil, err
			}
			if len(pos) != 1 {
				return "", nil, fmt.Errorf("want exactly one RESOURCE before --, got %q", pos)
			}
			return pos[0], args[i+1:], nil
		}
	}
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			return "", nil, err
		}
		rest = fs.Args()
		if len(rest) == 0 {
			return resource, nil, nil
		}
		if resource != "" {
			return resource, rest, nil
		}
		resource, rest = rest[0], rest[1:]
	}
}

func runExec(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	fs.SetOutput(stderr)
	as := fs.String("as", "", "the agent's DID (default: the agent an agent key names; required with a workspace key)")
	mode := fs.String("mode", "", "read, write or delete (default write)")
	timeout := fs.Duration("timeout", 0, "give up waiting for the lease after this long (0: wait without limit)")
	receipt := fs.String("receipt", "", "save the grant's signed receipt (c2sp.org/tlog-proof@v1) to FILE before the command starts")
	fs.Usage = func() {
		fmt.Fprintln(stderr, execHelp)
		fmt.Fprintln(stderr, "\nflags:")
		printFlags(fs)
	}
	resource, argv, err := splitExecArgs(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		fmt.Fprintf(stderr, "leaseplane exec: %v\n", err)
		return exitUsage
	}
	if resource == "" || len(argv) == 0 {
		fmt.Fprintln(stderr, "leaseplane exec: want RESOURCE (and --as DID with a workspace key) and a command after --")
		fs.Usage()
		return exitUsage
	}
	if *timeout < 0 {
		fmt.Fprintf(stderr, "leaseplane exec: --timeout %s is negative\n", *timeout)
		return exitUsage
	}
	actor, status, ok := resolveAs("exec", *as, stderr)
	if !ok {
		return status
	}
	*as = actor
	logf := func(format string, a ...any) {
		fmt.Fprintf(stderr, "leaseplane exec: "+format+"\n", a...)
	}
	h := &client.Holder{
		Client:     planeClient(),
		Req:        client.AcquireRequest{Resource: resource, ActorDid: *as, Mode: *mode},
		Timeout:    *timeout,
		RenewEvery: execRenewEvery,
		Now:        execNow,
		Sleep:      execSleep,
		Logf:       logf,
	}

	sigs, stopSigs := execSignals()
	defer stopSigs()
	// Until the command starts, a signal stops the wait; after, it goes to
	// the command.
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	started := make(chan *os.Process, 1)
	sigDone := make(chan struct{})
	var waitSig os.Signal
	go func() {
		defer close(sigDone)
		var proc *os.Process
		for {
			select {
			case p := <-started:
				proc = p
			case s, ok := <-sigs:
				if !ok {
					return
				}
				if proc == nil {
					waitSig = s
					cancel(fmt.Errorf("interrupted by %v", s))
					return
				}
				proc.Signal(s)
			case <-ctx.Done():
				return
			}
		}
	}()

	childStatus := -1
	stopped := false // the loss is printed once, when the command is stopped for it
	err = h.Run(ctx, func(wctx context.Context, l *client.Lease) error {
		if *receipt != "" {
			// A receipt that cannot be had does not hold the command back.
			if err := saveReceipt(h.Client, l.ID, *receipt); err != nil {
				logf("the receipt of %s was not saved: %v", l.ID, err)
			}
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
		cmd.Env = append(os.Environ(),
			"LEASEPLANE_FENCE="+strconv.FormatInt(l.Fence, 10),
			"LEASEPLANE_LEASE_ID="+l.ID,
			"LEASEPLANE_RESOURCE="+l.Resource,
		)
		if err := cmd.Start(); err != nil {
			return &startError{err}
		}
		started <- cmd.Process
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		var werr error
		select {
		case werr = <-exited:
		case <-wctx.Done():
			logf("%v; stopping the command", context.Cause(wctx))
			stopped = true
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case werr = <-exited:
			case <-time.After(execKillGrace):
				cmd.Process.Kill()
				werr = <-exited
			}
		}
		childStatus = exitStatus(cmd.ProcessState, werr)
		return nil
	})
	cancel(nil)
	<-sigDone

	var re *client.RefusedError
	var te *client.TimeoutError
	var le *client.LostError
	var se *startError
	switch {
	case err == nil:
		return childStatus
	case errors.As(err, &se):
		logf("cannot start %q: %v", argv[0], se.err)
		return exitNoStart
	case errors.As(err, &le):
		if !stopped {
			logf("%v", le)
		}
		if childStatus > 0 {
			logf("the command exited with status %d after it was stopped", childStatus)
		}
		return exitLost
	case errors.As(err, &te):
		logf("%v", te)
		return exitTimeout
	case errors.As(err, &re):
		logf("%v", re)
		switch re.Reason() {
		case kernel.ReasonDeadlock:
			return exitDeadlock
		case kernel.ReasonSuspended:
			return exitSuspended
		}
		if childStatus >= 0 {
			// The command ran; only the final release was refused.
			return childStatus
		}
		return exitRefused
	case waitSig != nil:
		logf("interrupted by %v while waiting for %s", waitSig, resource)
		if s, ok := waitSig.(syscall.Signal); ok {
			return 128 + int(s)
		}
		return exitRefused
	}
	if childStatus < 0 && errors.Is(err, syscall.ECONNREFUSED) {
		logf("%s", strings.TrimPrefix(unreachable("exec", h.Client.BaseURL(), err), "leaseplane exec: "))
	} else {
		logf("%v", err)
	}
	if childStatus >= 0 {
		return childStatus
	}
	// Neither a refusal nor the command's: no answer came from the plane.
	return exitNoPlane
}

type startError struct{ err error }

func (e *startError) Error() string { return "starting the command: " + e.err.Error() }

// exitStatus is a finished command's status as a shell reports it.
func exitStatus(ps *os.ProcessState, err error) int {
	if ps == nil {
		return exitRefused
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
