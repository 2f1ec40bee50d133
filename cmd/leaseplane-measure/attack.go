package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaseplane/leaseplane/cmd/internal/keyless"
)

// attack runs the three phases of `leaseplane-measure attack`.
func attack(c *client, sockets, addrs int, dur, pace time.Duration, heldKey, holderKey string, held, pid int) {
	heldAgent := ""
	if heldKey != "" {
		heldAgent = agentOf(c, heldKey)
	}
	tenant := func(what string) {
		for _, keep := range []bool{true, false} {
			d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}}
			tc := &client{base: c.base, key: c.key, hc: &http.Client{Timeout: 2 * time.Minute,
				Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: !keep}}}
			var lat []time.Duration
			body := `{"resource":"lock:tenant","actorDid":"did:web:acme.example:agent:tenant"}`
			for end := time.Now().Add(dur); time.Now().Before(end); {
				t0 := time.Now()
				tc.post("/api/v1/acp/coordination/lease", body, 200)
				lat = append(lat, time.Since(t0))
				tc.post("/api/v1/acp/coordination/release", body, 200)
			}
			slices.Sort(lat)
			p := func(q float64) time.Duration { return lat[int(q*float64(len(lat)-1))].Round(10 * time.Microsecond) }
			conn := "kept-alive connection"
			if !keep {
				conn = "fresh connection each"
			}
			fmt.Printf("%s: tenant acquire (%s): n %d, p50 %v, p99 %v\n", what, conn, len(lat), p(0.5), p(0.99))
		}
	}
	tenant("idle")
	defer tenant("idle again, after")

	// The plane's own count of connections without a key, sampled.
	var most, evicted, refusedConns atomic.Int64
	sampling := make(chan struct{})
	go func() {
		for {
			select {
			case <-sampling:
				return
			case <-time.After(200 * time.Millisecond):
			}
			resp, err := http.Get(c.base + "/metrics")
			if err != nil {
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, l := range strings.Split(string(b), "\n") {
				name, v, _ := strings.Cut(l, " ")
				var f float64
				fmt.Sscan(v, &f)
				switch name {
				case "leaseplane_connections_unauthenticated":
					if int64(f) > most.Load() {
						most.Store(int64(f))
					}
				case "leaseplane_connections_evicted_total":
					evicted.Store(int64(f))
				case "leaseplane_connections_refused_total":
					refusedConns.Store(int64(f))
				}
			}
		}
	}()
	a := startSockets(c.base, sockets, addrs, pace)
	for a.opened.Load() < int64(sockets) {
		time.Sleep(100 * time.Millisecond)
	}
	start := a.opened.Load()
	cpu0 := processCPU(pid)
	tenant("under attack")
	cpu := processCPU(pid) - cpu0
	opened := a.opened.Load() - start
	a.stop()
	if pid != 0 && opened > 0 {
		fmt.Printf("the server's CPU time under attack: %v, %v per connection accepted (the tenant's requests included)\n",
			cpu.Round(10*time.Millisecond), (cpu / time.Duration(opened)).Round(100*time.Nanosecond))
	}
	fmt.Printf("attacker (a process of its own): %d sockets kept trying at once from %d addresses, each reopened %v after the server closed it; %d connections accepted by the OS during the measurement, %d before; at most %d open at once as the attacker saw them\n",
		sockets, addrs, pace, opened, start, a.maxOpen.Load())
	close(sampling)
	fmt.Printf("the plane: at most %d connections without a key open at once (sampled every 200 ms); %d closed at once, %d evicted for a newcomer\n",
		most.Load(), refusedConns.Load(), evicted.Load())

	if heldKey == "" {
		return
	}
	// Another agent of the flood's workspace holds the resource the flood
	// asks for (holderKey, a workspace key there; the tenant's own key
	// when the flood is in the tenant's workspace).
	holder := c
	if holderKey != "" {
		holder = &client{base: c.base, key: holderKey, hc: c.hc}
	}
	holder.post("/api/v1/acp/coordination/lease", `{"resource":"lock:flooded","actorDid":"did:web:acme.example:agent:holder"}`, 200)
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	hc := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{DialContext: d.DialContext, MaxConnsPerHost: 48, MaxIdleConnsPerHost: 48}}
	var refused, other atomic.Int64
	var wg sync.WaitGroup
	done := make(chan struct{})
	for range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", c.base+"/api/v1/acp/coordination/lease?waitUpToMs=30000",
				strings.NewReader(`{"resource":"lock:flooded","actorDid":"`+heldAgent+`"}`))
			req.Header.Set("Authorization", "Bearer "+heldKey)
			resp, err := hc.Do(req)
			if err != nil {
				other.Add(1)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 429 && strings.Contains(string(b), `"heldRequests"`) {
				refused.Add(1)
			} else {
				other.Add(1)
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	for refused.Load()+other.Load() < int64(held)-64 {
		time.Sleep(100 * time.Millisecond)
	}
	tenant("during the held flood")
	fmt.Printf("held flood: %d held requests asked by one key, %d refused 429 heldRequests, %d otherwise answered or failed so far\n", held, refused.Load(), other.Load())
	holder.post("/api/v1/acp/coordination/release", `{"resource":"lock:flooded","actorDid":"did:web:acme.example:agent:holder"}`, 200)
	<-done
}

// agentOf is the agent an agent key names (GET /api/v1/whoami).
func agentOf(c *client, key string) string {
	k := &client{base: c.base, key: key, hc: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}
	b := k.get("/api/v1/whoami")
	_, rest, _ := strings.Cut(string(b), `"actorDid":"`)
	did, _, _ := strings.Cut(rest, `"`)
	return did
}

// sockets_ is the hidden mode in which this command is the attacker's
// process: the sockets run in a process of their own, so that the
// tenant's latency is the plane's, not that of a Go runtime also busy
// with thousands of attacker goroutines (measured: it doubled the p99).
const sockets_ = "keyless-sockets"

// keylessSockets runs the sockets (keyless.Attacker) until stdin closes,
// printing "opened N max M" every 100 ms and once more at the end.
func keylessSockets(url string, sockets, addrs int, pace time.Duration) {
	a := &keyless.Attacker{URL: url, Addrs: addrs, Pace: pace}
	a.Start(sockets)
	eof := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(eof) }()
	for {
		select {
		case <-eof:
			a.Stop()
			fmt.Printf("opened %d max %d\n", a.Opened.Load(), a.MaxOpen.Load())
			return
		case <-time.After(100 * time.Millisecond):
			fmt.Printf("opened %d max %d\n", a.Opened.Load(), a.MaxOpen.Load())
		}
	}
}

// attackerProc is the attacker's process as the measuring one sees it.
type attackerProc struct {
	cmd             *exec.Cmd
	stdin           io.Closer
	opened, maxOpen atomic.Int64
	done            chan struct{}
}

// startSockets starts this command again as the attacker's process.
func startSockets(url string, n, addrs int, pace time.Duration) *attackerProc {
	self, err := os.Executable()
	if err != nil {
		panic(err)
	}
	cmd := exec.Command(self, sockets_, "-url", url, "-sockets", strconv.Itoa(n), "-addrs", strconv.Itoa(addrs), "-pace", pace.String())
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		panic(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		panic(err)
	}
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	s := &attackerProc{cmd: cmd, stdin: in, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var o, m int64
			if _, err := fmt.Sscanf(sc.Text(), "opened %d max %d", &o, &m); err == nil {
				s.opened.Store(o)
				s.maxOpen.Store(m)
			}
		}
	}()
	return s
}

// stop ends the attacker's process, once its last counts are read.
func (s *attackerProc) stop() {
	s.stdin.Close()
	<-s.done
	s.cmd.Wait()
}

// processCPU is the user and system CPU time of process pid so far, from
// /proc/PID/stat (in clock ticks of 10 ms); 0 without a pid.
func processCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 0
	}
	// The fields after the command's name, which is in parentheses:
	// utime and stime are the 12th and 13th.
	_, rest, _ := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}
