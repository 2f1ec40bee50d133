// Command ledgerload puts a lease load on a running plane (leaseplane serve)
// to measure what the ledger keeps on disk per event (docs/BENCHMARKS.md,
// "Ledger"). Two loads:
//
//   - spread: --clients clients, each taking and releasing a resource of
//     its own (bench/spread/CLIENT/N, eight in turn) as fast as it can, for
//     --duration;
//   - renew: --leases leases, each held by an agent of its own and renewed
//     every --every, the renewals spread evenly over the period, for
//     --duration (the first round grants them).
//
// It prints what it did; the size of ledger.db and the number of entries
// (the checkpoint's size) are read by the caller (see docs/BENCHMARKS.md).
//
//	ledgerload --url URL --load spread|renew [--clients 64] [--duration 10s]
//	           [--leases 1000] [--every 10s]      (key: LEASEPLANE_KEY)
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaseplane/leaseplane/server/client"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	fs := flag.NewFlagSet("ledgerload", flag.ContinueOnError)
	url := fs.String("url", os.Getenv("LEASEPLANE_URL"), "the plane's URL (env LEASEPLANE_URL)")
	load := fs.String("load", "spread", "spread or renew")
	clients := fs.Int("clients", 64, "spread: concurrent clients")
	dur := fs.Duration("duration", 10*time.Second, "how long the load runs")
	leases := fs.Int("leases", 1000, "renew: leases held and renewed")
	every := fs.Duration("every", 10*time.Second, "renew: how often each lease is renewed")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	key := os.Getenv("LEASEPLANE_KEY")
	if *url == "" || key == "" || fs.NArg() != 0 || *clients < 1 || *leases < 1 || *every <= 0 || *dur <= 0 {
		fmt.Fprintln(os.Stderr, "usage: ledgerload --url URL --load spread|renew [--clients 64] [--duration 10s] [--leases 1000] [--every 10s] (LEASEPLANE_KEY set)")
		return 2
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: time.Minute}
	c := client.New(*url, key, hc)
	ctx := context.Background()
	var ok, failed atomic.Int64
	call := func(do func() (*client.Answer, error)) {
		a, err := do()
		if err != nil || !a.OK {
			failed.Add(1)
			return
		}
		ok.Add(1)
	}
	start := time.Now()
	switch *load {
	case "spread":
		end := start.Add(*dur)
		var wg sync.WaitGroup
		for i := range *clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				did := "did:bench:client:" + strconv.Itoa(i)
				for n := 0; time.Now().Before(end); n++ {
					res := "bench/spread/" + strconv.Itoa(i) + "/" + strconv.Itoa(n%8)
					call(func() (*client.Answer, error) {
						return c.Acquire(ctx, client.AcquireRequest{Resource: res, ActorDid: did})
					})
					call(func() (*client.Answer, error) {
						return c.Release(ctx, client.ReleaseRequest{Resource: res, ActorDid: did})
					})
				}
			}()
		}
		wg.Wait()
	case "renew":
		work := make(chan int, *leases)
		var wg sync.WaitGroup
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range work {
					call(func() (*client.Answer, error) {
						return c.Acquire(ctx, client.AcquireRequest{Resource: "lock:jobs/worker-" + strconv.Itoa(i),
							ActorDid: "did:web:acme.example:agent:w" + strconv.Itoa(i)})
					})
				}
			}()
		}
		for k := 0; ; k++ {
			for i := range *leases {
				due := start.Add(time.Duration(k)**every + *every*time.Duration(i)/time.Duration(*leases))
				if !due.Before(start.Add(*dur)) {
					goto done
				}
				time.Sleep(time.Until(due))
				work <- i
			}
		}
	done:
		close(work)
		wg.Wait()
	default:
		fmt.Fprintf(os.Stderr, "ledgerload: --load %q: want spread or renew\n", *load)
		return 2
	}
	took := time.Since(start)
	fmt.Printf("ledgerload: %s: %d calls answered ok, %d not, in %.1f s (%.0f/s)\n", *load, ok.Load(), failed.Load(), took.Seconds(),
		float64(ok.Load())/took.Seconds())
	return 0
}
