package servertest

import (
	"context"
	"sync"
	"time"
)

// RunClients starts n load clients, counted in wg, until stop closes:
// client i calls step(i, k) for k = 0, 1, ... until it returns false (the
// server is gone).
func RunClients(wg *sync.WaitGroup, n int, stop <-chan struct{}, step func(i, k int) bool) {
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				if !step(i, k) {
					return
				}
			}
		}()
	}
}

// Gate lets a test run each sleep of the code under test: Sleep announces
// its duration on Asked and returns once the test sends on Wake, or with
// ctx's error when ctx ends first.
type Gate struct {
	Asked chan time.Duration
	Wake  chan struct{}
}

// NewGate is a Gate with unbuffered channels: Sleep waits for the test.
func NewGate() *Gate { return &Gate{Asked: make(chan time.Duration), Wake: make(chan struct{})} }

// Sleep waits for the test as the Gate says.
func (g *Gate) Sleep(ctx context.Context, d time.Duration) error {
	select {
	case g.Asked <- d:
		select {
		case <-g.Wake:
			return nil
		case <-ctx.Done():
		}
	case <-ctx.Done():
	}
	return ctx.Err()
}
