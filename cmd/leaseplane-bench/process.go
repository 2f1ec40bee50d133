package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The default leaseplane target is `leaseplane serve` as its own process,
// as users run it: the binary built from this repository, a temporary
// data folder, a free loopback port (--addr 127.0.0.1:0), and the key its
// first start prints.

// buildServer builds the leaseplane binary from the repository's root
// module (the one this module's replace points at, found with go list
// from the working directory) into dir, and returns its path.
func buildServer(dir string) (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/leaseplane/leaseplane").Output()
	root := strings.TrimSpace(string(out))
	if err != nil || root == "" {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%v: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("finding the repository (go list -m github.com/leaseplane/leaseplane, run from cmd/leaseplane-bench; or give --server-binary): %v", err)
	}
	bin := filepath.Join(dir, "leaseplane")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/leaseplane")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/leaseplane in %s: %v\n%s", root, err, out)
	}
	return bin, nil
}

// processPlane is `leaseplane serve` in a process of its own.
type processPlane struct {
	planeConn
	label  string
	dir    string // the data folder and the server's log
	cmd    *exec.Cmd
	exited chan struct{}
	log    string // the server's stderr, in dir
}

// serveReady is how long a starting server may take to print its URL.
const serveReady = 60 * time.Second

// openProcessPlane starts bin serve on a fresh data folder and reads the
// key and URL its first start prints. cpuProfile, when set, is passed as
// serve's --cpuprofile: the server writes its CPU profile there when it
// stops.
func openProcessPlane(bin, engineName string, o planeOpts, cpuProfile string) (*processPlane, error) {
	dir, err := os.MkdirTemp("", "leaseplane-bench-serve-")
	if err != nil {
		return nil, err
	}
	args := []string{"serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(dir, "data"), "--engine", engineName}
	args = append(args, o.heldCaps()...)
	if o.noLedger {
		args = append(args, "--no-ledger")
	}
	if cpuProfile != "" {
		args = append(args, "--cpuprofile", cpuProfile)
	}
	logPath := filepath.Join(dir, "serve.log")
	logf, err := os.Create(logPath)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("starting %s serve: %w", bin, err)
	}
	p := &processPlane{label: planeLabel(engineName, o.noLedger, false), dir: dir, cmd: cmd, exited: make(chan struct{}), log: logPath}
	type start struct{ url, key string }
	started := make(chan start, 1)
	go func() {
		var s start
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			if k, ok := strings.CutPrefix(line, "export LEASEPLANE_KEY="); ok {
				s.key = k
			}
			if u, ok := strings.CutPrefix(line, "export LEASEPLANE_URL="); ok && s.url == "" {
				s.url = u
				started <- s
			}
		}
		if s.url == "" {
			started <- s
		}
		io.Copy(io.Discard, stdout)
		cmd.Wait()
		close(p.exited)
	}()
	var s start
	select {
	case s = <-started:
	case <-time.After(serveReady):
	}
	if s.url == "" || s.key == "" {
		p.stop()
		err := fmt.Errorf("%s serve printed no URL and key within %s; its log: %s", bin, serveReady, p.tail())
		os.RemoveAll(dir)
		return nil, err
	}
	p.planeConn = o.conn(s.url, s.key)
	return p, nil
}

func (t *processPlane) name() string   { return t.label }
func (t *processPlane) daemonPID() int { return t.cmd.Process.Pid }

// stop asks the server to stop (SIGTERM: it drains, commits and writes
// its profile) and kills it when it has not within 30 s.
func (t *processPlane) stop() error {
	t.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-t.exited:
	case <-time.After(30 * time.Second):
		t.cmd.Process.Kill()
		<-t.exited
		return errors.New("the server did not stop within 30 s of SIGTERM; killed")
	}
	if st := t.cmd.ProcessState; st != nil && !st.Success() {
		return fmt.Errorf("the server exited with %v; its log: %s", st, t.tail())
	}
	return nil
}

// tail is the end of the server's log.
func (t *processPlane) tail() string {
	b, _ := os.ReadFile(t.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

func (t *processPlane) close() error {
	t.closeIdle()
	err := t.stop()
	os.RemoveAll(t.dir)
	return err
}
