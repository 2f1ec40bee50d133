package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/leaseplane/leaseplane/server/client"
)

// A prototype of a batch route (--batch B, spread only): each bench
// client is an orchestrator acting for B agents, and sends their B
// acquires in one request and their B releases in another. The product has
// no such route: it needs a server built with the prototype's
// POST /api/v1/acp/coordination/batch, whose body is
// [{"op":"acquire"|"release","body":{...}}, ...] and whose answer is
// [{"status":N,"answer":{...}}, ...] (docs/BENCHMARKS.md, "The transport").

// pathBatch is the prototype's route.
const pathBatch = "/api/v1/acp/coordination/batch"

// batchWorker is an orchestrator for len(dids) agents, each on a resource
// of its own under the one measure gives it.
type batchWorker struct {
	c    *client.Client
	dids []string
	acq  []byte // reused request bodies
}

// pairsPer is how many pairs one acquire+release of this worker makes.
func (w *batchWorker) pairsPer() int { return len(w.dids) }

type batchCommand struct {
	Op   string                `json:"op"`
	Body client.AcquireRequest `json:"body"`
}

type batchAnswer struct {
	Status int           `json:"status"`
	Answer client.Answer `json:"answer"`
}

func (w *batchWorker) send(ctx context.Context, op, res string) error {
	cmds := make([]batchCommand, len(w.dids))
	for j, did := range w.dids {
		cmds[j] = batchCommand{Op: op, Body: client.AcquireRequest{Resource: res + "/" + strconv.Itoa(j), ActorDid: did}}
	}
	body, err := json.Marshal(cmds)
	if err != nil {
		return err
	}
	status, ans, err := w.c.Request(ctx, "POST", pathBatch, body)
	if err != nil {
		return err
	}
	if status != 200 {
		return fmt.Errorf("batch %s: HTTP %d %s", op, status, ans)
	}
	var as []batchAnswer
	if err := json.Unmarshal(ans, &as); err != nil || len(as) != len(w.dids) {
		return fmt.Errorf("batch %s: answer %.200s (%v)", op, ans, err)
	}
	for _, a := range as {
		if a.Status != 200 || !a.Answer.OK {
			return fmt.Errorf("batch %s: a command answered %d", op, a.Status)
		}
	}
	return nil
}

func (w *batchWorker) acquire(ctx context.Context, res string) error {
	return w.send(ctx, "acquire", res)
}
func (w *batchWorker) release(ctx context.Context, res string) error {
	return w.send(ctx, "release", res)
}
func (w *batchWorker) close() {}
