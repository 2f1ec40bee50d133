// Command leaseplane-measure drives a running leaseplane server for the
// memory and wait-latency figures of docs/BENCHMARKS.md. It is a
// measuring tool, not part of the product: standard library only.
//
//	leaseplane-measure pairs  -url URL -key KEY [-n 200000] [-clients 16]
//	leaseplane-measure hold   -url URL -key KEY [-n 60000] [-clients 16]
//	leaseplane-measure poll   -url URL -key KEY [-pollers 4] [-limit 1000] [-paged] [-duration 10s]
//	leaseplane-measure attack -url URL -key KEY [-sockets 2560] [-addrs 10] [-pace 1s] [-duration 10s] [-held-key AGENTKEY -held-holder-key KEY -held 1300] [-pid PID]
//
// attack measures a tenant's acquire latency (from 127.0.0.1, on a kept-
// alive connection and on a fresh connection each time) idle, then while
// an attacker without a key holds sockets from -addrs addresses
// 127.0.0.2 and on (idle, silent, stalled bodies, idle after /healthz,
// each reopened when the server closes it; the sockets run in a process
// of their own, this command started again), then, with -held-key (an
// agent key, of another workspace with -held-holder-key a workspace key
// there), while that key floods -held held requests from 127.0.0.2 over
// 48 connections (a resource another agent holds); it prints the
// percentiles and what the attacker held and was refused; with -pid, the
// server's CPU time while the sockets ran, and that over the connections
// the operating system accepted meanwhile.
//
// pairs acquires and releases n distinct resources (lock:pair/I), hold
// acquires n distinct resources and keeps them, poll has pollers clients
// reading wait in a loop (every page, following next, when -paged) while
// one other agent acquires and releases its own lock, and prints that
// agent's latency percentiles. With -pid, pairs prints the server's RSS
// before, after, and after 10 s of quiet.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: leaseplane-measure pairs|hold|poll -url URL -key KEY ...")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	base := fs.String("url", "http://127.0.0.1:18093", "server URL")
	key := fs.String("key", os.Getenv("LEASEPLANE_KEY"), "workspace key")
	n := fs.Int("n", 200000, "resources (pairs, hold)")
	clients := fs.Int("clients", 16, "concurrent clients (pairs, hold)")
	pid := fs.Int("pid", 0, "server process id, to read its RSS (pairs) or its CPU time (attack)")
	pollers := fs.Int("pollers", 4, "clients polling wait (poll)")
	limit := fs.Int("limit", 1000, "wait page size (poll -paged)")
	paged := fs.Bool("paged", false, "poll wait page by page with ?limit= and ?after= (poll)")
	dur := fs.Duration("duration", 10*time.Second, "how long to poll (poll), or to measure each phase (attack)")
	sockets := fs.Int("sockets", 2560, "attacker sockets held at once (attack)")
	addrs := fs.Int("addrs", 10, "attacker source addresses, 127.0.0.2 and on (attack)")
	heldKey := fs.String("held-key", "", "an agent key that floods held requests (attack)")
	held := fs.Int("held", 1300, "held requests of the flood (attack)")
	holderKey := fs.String("held-holder-key", "", "a workspace key of -held-key's workspace, whose agent holds the resource the flood asks (attack; default -key)")
	pace := fs.Duration("pace", time.Second, "how long an attacker socket waits, once the server closed it, before it opens another (attack)")
	fs.Parse(os.Args[2:])
	c := &client{base: strings.TrimSuffix(*base, "/"), key: *key, hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	switch os.Args[1] {
	case "pairs":
		rss("start", *pid)
		start := time.Now()
		c.spread(*n, *clients, func(i int) {
			body := fmt.Sprintf(`{"resource":"lock:pair/%d","actorDid":"did:web:acme.example:agent:w%d"}`, i, i%16)
			c.post("/api/v1/acp/coordination/lease", body, 200)
			c.post("/api/v1/acp/coordination/release", body, 200)
		})
		fmt.Printf("%d pairs in %v\n", *n, time.Since(start).Round(time.Millisecond))
		rss("after the pairs", *pid)
		time.Sleep(10 * time.Second)
		rss("10 s later", *pid)
	case "hold":
		start := time.Now()
		c.spread(*n, *clients, func(i int) {
			c.post("/api/v1/acp/coordination/lease", fmt.Sprintf(`{"resource":"lock:hold/%06d","actorDid":"did:web:acme.example:agent:h%d"}`, i, i%64), 200)
		})
		fmt.Printf("%d leases held in %v\n", *n, time.Since(start).Round(time.Millisecond))
	case "poll":
		var stop atomic.Bool
		var pages atomic.Int64
		var wg sync.WaitGroup
		for range *pollers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					if !*paged {
						c.get("/api/v1/acp/coordination/wait")
						pages.Add(1)
						continue
					}
					after := ""
					for !stop.Load() {
						q := url.Values{"limit": {strconv.Itoa(*limit)}}
						if after != "" {
							q.Set("after", after)
						}
						var page struct{ Next string }
						json.Unmarshal(c.get("/api/v1/acp/coordination/wait?"+q.Encode()), &page)
						pages.Add(1)
						if after = page.Next; after == "" {
							break
						}
					}
				}
			}()
		}
		var lat []time.Duration
		body := `{"resource":"lock:other","actorDid":"did:web:acme.example:agent:other"}`
		for end := time.Now().Add(*dur); time.Now().Before(end); {
			t0 := time.Now()
			c.post("/api/v1/acp/coordination/lease", body, 200)
			lat = append(lat, time.Since(t0))
			c.post("/api/v1/acp/coordination/release", body, 200)
		}
		stop.Store(true)
		wg.Wait()
		slices.Sort(lat)
		p := func(q float64) time.Duration { return lat[int(q*float64(len(lat)-1))].Round(10 * time.Microsecond) }
		fmt.Printf("other agent's acquire: n %d, p50 %v, p90 %v, p99 %v; %d wait pages read\n", len(lat), p(0.5), p(0.9), p(0.99), pages.Load())
	case "attack":
		attack(c, *sockets, *addrs, *dur, *pace, *heldKey, *holderKey, *held, *pid)
	case sockets_:
		keylessSockets(c.base, *sockets, *addrs, *pace)
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", os.Args[1])
		os.Exit(2)
	}
}

type client struct {
	base, key string
	hc        *http.Client
}

func (c *client) do(req *http.Request, want int) []byte {
	req.Header.Set("Authorization", "Bearer "+c.key)
	resp, err := c.hc.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		fmt.Fprintf(os.Stderr, "%s %s: %d %s\n", req.Method, req.URL, resp.StatusCode, b)
		os.Exit(1)
	}
	return b
}

func (c *client) post(path, body string, want int) []byte {
	req, _ := http.NewRequest("POST", c.base+path, bytes.NewReader([]byte(body)))
	req.Header.Set("Content-Type", "application/json")
	return c.do(req, want)
}

func (c *client) get(path string) []byte {
	req, _ := http.NewRequest("GET", c.base+path, nil)
	return c.do(req, 200)
}

// spread runs f(0..n-1) on clients goroutines.
func (c *client) spread(n, clients int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		}()
	}
	wg.Wait()
}

func rss(when string, pid int) {
	if pid == 0 {
		return
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			fmt.Printf("server RSS %s: %s\n", when, strings.TrimSpace(strings.TrimPrefix(line, "VmRSS:")))
		}
	}
}
