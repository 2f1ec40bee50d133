package web

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/scenario"
)

// Check is a claim the docs' prose makes about a step's answer: the value
// at Path (dotted, with array indexes, e.g. "stampede.admitted.0") is Want
// (as JSON). Tests run every check against the kernel, so prose that
// drifts from the kernel fails `make test`.
type Check struct {
	Step int
	Path string
	Want string
}

// LiveExample is a scenario in the docs with a Run button: the page shows
// the answers of the Show steps as the kernel gives them, and Run replays
// the scenario in the browser and compares.
type LiveExample struct {
	ID       string
	Title    string
	Lead     string // prose; its claims are in Checks
	Scenario string // JSON
	Show     []int
	Checks   []Check

	Shown []ShownStep // filled by the kernel
}

// ShownStep is one step's request and the kernel's answer, as the docs
// print it.
type ShownStep struct {
	Index      int
	AtMs       int64
	Op         string
	Request    string // pretty JSON of the command's own fields ("" for none)
	Status     int
	StatusText string
	RetryAfter int
	Answer     string // pretty JSON
}

// Exchange is one request and response in the REST reference: the setup
// steps run first, then Step is the request shown.
type Exchange struct {
	Route  string // POST /api/v1/acp/coordination/lease
	Title  string
	Rules  string
	Setup  []string
	Step   string
	Checks []Check // Step index 0 is the shown request

	Shown ShownStep
}

// Recipe is a task done against the REST API: plain HTTP in three
// languages (curl, fetch, requests), the same task on the Python and the
// TypeScript client libraries, and a runnable scenario of the exchange.
type Recipe struct {
	ID       string
	Title    string
	Lead     string
	Curl     string
	JS       string
	Py       string
	PyClient string // on server/client/python
	TSClient string // on server/client/js
	Live     LiveExample
}

// Docs is everything the docs page shows that the kernel computes.
type Docs struct {
	Examples  []LiveExample
	Recipes   []Recipe
	Exchanges []Exchange
}

var (
	docsOnce sync.Once
	docsData *Docs
	docsErr  error
)

// DocsData replays every example of the docs through the native kernel.
func DocsData() (*Docs, error) {
	docsOnce.Do(func() { docsData, docsErr = buildDocs() })
	return docsData, docsErr
}

const (
	didRelease = "did:web:acme.example:agent:release"
	didCost    = "did:web:acme.example:agent:cost"
	slot       = "lock:deploy/production"
)

func referenceLive() []LiveExample {
	return []LiveExample{
		{ID: "two-release-agents", Show: []int{1, 5}, Lead: "Two release agents ask for " + slot +
			". The first gets the lease. The second is refused lease_held: the answer names the holder, admits the asker as the first waiter and tells it to back off 50 ms. After the holder releases, the second asks again and gets the lease with fence 2.",
			Checks: []Check{{1, "reason", `"lease_held"`}, {1, "holder", `"` + didRelease + `"`}, {1, "stampede.waitMs", "50"},
				{1, "stampede.admitted.0", `"` + didCost + `"`}, {5, "ok", "true"}, {5, "lease.fence", "2"}}},
		{ID: "crashed-holder", Show: []int{3, 4}, Lead: "The backup agent takes the lease and never comes back. At 31000 ms, the lease's expiresAtMs, the host's alarm sends a tick: the lease is taken back with a coordination.expire event that costs the holder 5 trust points, and the waiting agent's next request gets the lease with fence 2.",
			Checks: []Check{{3, "nowMs", "31000"}, {4, "ok", "true"}, {4, "lease.fence", "2"}, {4, "lease.holder", `"did:web:acme.example:agent:migrate"`}}},
		{ID: "breaking-a-deadlock", Show: []int{3}, Lead: "Billing holds the invoices and waits for the customers table, which reporting holds. When reporting asks for the invoices, granting it would close a wait cycle, so it is refused deadlock: holder is billing, waitingOn is db:billing/customers, and cycle lists the loop. Reporting is not queued; it releases what it holds and billing goes on.",
			Checks: []Check{{3, "reason", `"deadlock"`}, {3, "holder", `"did:web:acme.example:agent:billing"`}, {3, "waitingOn", `"db:billing/customers"`}}},
		{ID: "thundering-herd", Show: []int{1, 5, 50}, Lead: "Fifty workers ask to write a file the exporter is writing. The back-off doubles with the queue, 50, 100, 200, 400 and then 800 ms for everyone after, and only the first 8 waiters are admitted. Admitted waiters that keep to their back-off have a claim on the file: when the exporter lets go, it goes to the first of those 8 to ask again (worker-01 here), not to whoever happens to ask; a worker past the eighth, or one that stopped asking, yields to them.",
			Checks: []Check{{1, "stampede.waitMs", "50"}, {2, "stampede.waitMs", "100"}, {3, "stampede.waitMs", "200"}, {4, "stampede.waitMs", "400"},
				{5, "stampede.waitMs", "800"}, {50, "stampede.waitMs", "800"}, {50, "stampede.admitted.7", `"did:web:acme.example:agent:worker-08"`}}},
		{ID: "herd-of-fifty-held", Show: []int{51, 52}, Lead: "The same herd, waiting without polling: each of the fifty workers asks once with waitUpToMs, and the kernel holds its ask instead of answering lease_held. No one asks again, so nothing is logged while they wait. When the holder releases, the release's own step answers the first held ask, worker-01's, with the lease at fence 2; the other forty-nine stay held, in queue order, and each release after that grants the next.",
			Checks: []Check{{51, "nowMs", "1600"}, {52, "released", "true"}}},
	}
}

// recipeFS holds the recipes' code as files, so the browser tests can run
// them against a real server exactly as the docs print them.
//
//go:embed recipes
var recipeFS embed.FS

func recipeCode(name string) string {
	b, err := recipeFS.ReadFile("recipes/" + name)
	if err != nil {
		panic("web: missing recipe file " + name) // embedded: a build mistake
	}
	return strings.TrimRight(string(b), "\n")
}

// newRecipe is the recipe id: its code from recipes/id.{sh,mjs,py} and
// recipes/id.client.{py,mjs}, and live,
// which runs it in the kernel, named recipe-id and titled as the recipe.
func newRecipe(id, title, lead string, live LiveExample) Recipe {
	live.ID, live.Title = "recipe-"+id, title
	return Recipe{ID: id, Title: title, Lead: lead, Live: live,
		Curl: recipeCode(id + ".sh"), JS: recipeCode(id + ".mjs"), Py: recipeCode(id + ".py"),
		PyClient: recipeCode(id + ".client.py"), TSClient: recipeCode(id + ".client.mjs")}
}

func recipes() []Recipe {
	return []Recipe{
		newRecipe("take-and-release", "Take a lease and release it",
			"Ask for the slot as the agent that wants it; a free resource answers with a lease. Do the work, then release it with the lease id, which raises the agent's trust score by 0.5. The code reads the plane's address from LEASEPLANE_URL and a key from LEASEPLANE_KEY, which leaseplane serve prints on its first start.",
			LiveExample{Scenario: `{"rules": {"readShared": []},
 "steps": [
  {"atMs": 1000, "op": "acquire", "resource": "` + slot + `", "actorDid": "` + didRelease + `"},
  {"atMs": 5000, "op": "release", "resource": "` + slot + `", "actorDid": "` + didRelease + `", "leaseId": "` + leaseIDOfFirstGrant + `"}]}`,
				Show:   []int{0, 1},
				Checks: []Check{{0, "ok", "true"}, {0, "lease.expiresAtMs", "31000"}, {1, "released", "true"}, {1, "releasedIds.0", leaseIDOfFirstGrant}}}),
		newRecipe("queue-for-the-slot", "Queue for the production deploy slot",
			"When another agent holds the slot, the refusal names it and says in stampede.waitMs how long to back off. Sleep that long and ask again; stop on deadlock, which means you hold something the holder waits for: release it first. Once deployed, release the slot by the lease's id, so the next agent in the queue gets it.",
			LiveExample{Scenario: `{"rules": {"readShared": []},
 "steps": [
  {"atMs": 1000, "op": "acquire", "resource": "` + slot + `", "actorDid": "` + didRelease + `"},
  {"atMs": 1200, "op": "acquire", "resource": "` + slot + `", "actorDid": "` + didCost + `"},
  {"atMs": 1250, "op": "acquire", "resource": "` + slot + `", "actorDid": "` + didCost + `"},
  {"atMs": 1260, "op": "release", "resource": "` + slot + `", "actorDid": "` + didRelease + `"},
  {"atMs": 1310, "op": "acquire", "resource": "` + slot + `", "actorDid": "` + didCost + `"},
  {"atMs": 2000, "op": "release", "resource": "` + slot + `", "actorDid": "` + didCost + `"}]}`,
				Show: []int{1, 4, 5},
				Checks: []Check{{1, "reason", `"lease_held"`}, {1, "stampede.waitMs", "50"}, {2, "stampede.waitMs", "50"},
					{4, "ok", "true"}, {4, "lease.holder", `"` + didCost + `"`}, {4, "lease.fence", "2"}, {5, "released", "true"}}}),
	}
}

func exchanges() []Exchange {
	acq := func(res, did string) string {
		return `{"atMs": 2000, "op": "acquire", "resource": "` + res + `", "actorDid": "` + did + `"}`
	}
	hold := `{"atMs": 1000, "op": "acquire", "resource": "` + slot + `", "actorDid": "` + didRelease + `"}`
	a, b := "did:web:acme.example:agent:a", "did:web:acme.example:agent:b"
	return []Exchange{
		{Route: "POST /api/v1/acp/coordination/lease", Title: "Granted", Step: acq(slot, didRelease),
			Checks: []Check{{0, "ok", "true"}, {0, "lease.fence", "1"}}},
		{Route: "POST /api/v1/acp/coordination/lease", Title: "Held by another agent", Setup: []string{hold}, Step: acq(slot, didCost),
			Checks: []Check{{0, "reason", `"lease_held"`}}},
		{Route: "POST /api/v1/acp/coordination/lease", Title: "Would close a wait cycle",
			Setup: []string{
				`{"atMs": 1000, "op": "acquire", "resource": "res:x", "actorDid": "` + a + `"}`,
				`{"atMs": 1000, "op": "acquire", "resource": "res:y", "actorDid": "` + b + `"}`,
				`{"atMs": 1500, "op": "acquire", "resource": "res:y", "actorDid": "` + a + `"}`},
			Step:   acq("res:x", b),
			Checks: []Check{{0, "reason", `"deadlock"`}, {0, "waitingOn", `"res:y"`}}},
		{Route: "POST /api/v1/acp/coordination/lease", Title: "Suspended agent",
			Setup:  []string{`{"atMs": 1000, "op": "suspend", "actorDid": "` + didCost + `"}`},
			Step:   acq(slot, didCost),
			Checks: []Check{{0, "reason", `"suspended"`}}},
		{Route: "POST /api/v1/acp/coordination/lease", Title: "Invalid request", Step: acq(slot, "agent-7"),
			Checks: []Check{{0, "reason", `"invalid_request"`}}},
		{Route: "POST /api/v1/acp/coordination/release", Title: "Released", Setup: []string{hold},
			Step:   `{"atMs": 2000, "op": "release", "resource": "` + slot + `", "actorDid": "` + didRelease + `"}`,
			Checks: []Check{{0, "released", "true"}}},
		{Route: "POST /api/v1/acp/coordination/release", Title: "Stale lease id", Setup: []string{hold},
			Step:   `{"atMs": 2000, "op": "release", "resource": "` + slot + `", "actorDid": "` + didRelease + `", "leaseId": "lease_0000000000000000"}`,
			Checks: []Check{{0, "reason", `"stale_lease"`}}},
		{Route: "GET /api/v1/acp/coordination/wait", Title: "Holders, waiters and deadlock pairs", Setup: []string{hold, acq(slot, didCost)},
			Step:   `{"atMs": 2500, "op": "wait"}`,
			Checks: []Check{{0, "queues.0.waiters.0.actorDid", `"` + didCost + `"`}}},
	}
}

func buildDocs() (*Docs, error) {
	d := &Docs{Exchanges: exchanges(), Recipes: recipes()}
	for _, l := range referenceLive() {
		ex, ok := ExampleByName(l.ID)
		if !ok {
			return nil, fmt.Errorf("web: docs example %s is not in the corpus (run make generate)", l.ID)
		}
		l.Title, l.Scenario = ex.Title, ex.JSON
		d.Examples = append(d.Examples, l)
	}
	for i := range d.Examples {
		if err := d.Examples[i].fill(); err != nil {
			return nil, err
		}
	}
	for i := range d.Recipes {
		if err := d.Recipes[i].Live.fill(); err != nil {
			return nil, err
		}
	}
	for i := range d.Exchanges {
		if err := d.Exchanges[i].fill(); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// results replays steps (raw JSON) on a fresh native machine.
func results(rules string, steps []json.RawMessage) ([]kernel.Result, error) {
	e, err := kernel.Native.New([]byte(rules))
	if err != nil {
		return nil, err
	}
	defer e.Close()
	out := make([]kernel.Result, len(steps))
	for i, s := range steps {
		if out[i], err = e.StepJSON(s); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// leaseIDOfFirstGrant in a docs scenario (or a check's Want, quoted) is
// replaced by the id of the scenario's first grant, so a recipe can
// release by id without the docs spelling out an id the kernel derives.
const leaseIDOfFirstGrant = "LEASE_ID_OF_FIRST_GRANT"

func (l *LiveExample) fill() error {
	if strings.Contains(l.Scenario, leaseIDOfFirstGrant) {
		id, err := firstGrantID(l.Scenario)
		if err != nil {
			return fmt.Errorf("web: docs example %s: %w", l.ID, err)
		}
		l.Scenario = strings.ReplaceAll(l.Scenario, leaseIDOfFirstGrant, id)
		for i := range l.Checks {
			if l.Checks[i].Want == leaseIDOfFirstGrant {
				l.Checks[i].Want = strconv.Quote(id)
			}
		}
	}
	s, err := scenario.Parse([]byte(l.Scenario))
	if err != nil {
		return fmt.Errorf("web: docs example %s: %w", l.ID, err)
	}
	steps := make([]json.RawMessage, len(s.Steps))
	for i, st := range s.Steps {
		steps[i] = json.RawMessage(st)
	}
	res, err := results(string(s.Rules), steps)
	if err != nil {
		return fmt.Errorf("web: docs example %s: %w", l.ID, err)
	}
	l.Shown = l.Shown[:0]
	for _, i := range l.Show {
		if i >= len(res) {
			return fmt.Errorf("web: docs example %s shows step %d of %d", l.ID, i, len(res))
		}
		l.Shown = append(l.Shown, shown(i, s.Steps[i], res[i]))
	}
	return nil
}

// firstGrantID replays a scenario and returns the first granted lease id.
func firstGrantID(scn string) (string, error) {
	var s struct {
		Rules json.RawMessage   `json:"rules"`
		Steps []json.RawMessage `json:"steps"`
	}
	if err := json.Unmarshal([]byte(scn), &s); err != nil {
		return "", err
	}
	for n := 1; n <= len(s.Steps); n++ {
		res, err := results(string(s.Rules), s.Steps[:n])
		if err != nil {
			return "", err
		}
		if id, err := Lookup(res[n-1].Answer, "lease.id"); err == nil {
			var out string
			return out, json.Unmarshal(id, &out)
		}
	}
	return "", errors.New("no step is granted a lease")
}

func (x *Exchange) fill() error {
	rules := x.Rules
	var steps []json.RawMessage
	for _, s := range append(append([]string{}, x.Setup...), x.Step) {
		steps = append(steps, json.RawMessage(s))
	}
	res, err := results(rules, steps)
	if err != nil {
		return fmt.Errorf("web: REST example %s: %w", x.Title, err)
	}
	last := len(steps) - 1
	x.Shown = shown(0, steps[last], res[last])
	return nil
}

func shown(i int, step json.RawMessage, r kernel.Result) ShownStep {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(step, &m)
	var at int64
	_ = json.Unmarshal(m["atMs"], &at)
	var op string
	_ = json.Unmarshal(m["op"], &op)
	req := ""
	if body := requestBody(step); body != "{}" {
		req = body
	}
	return ShownStep{Index: i, AtMs: at, Op: op, Request: req, Status: r.Status, StatusText: http.StatusText(r.Status),
		RetryAfter: r.RetryAfterSec, Answer: Pretty(r.Answer)}
}

// requestBody is a step's command fields (all but atMs and op) as the
// REST body, pretty printed in the step's key order.
func requestBody(step json.RawMessage) string {
	dec := json.NewDecoder(bytes.NewReader(step))
	var b strings.Builder
	b.WriteString("{")
	n := 0
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "{}"
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return "{}"
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return "{}"
		}
		if k == "atMs" || k == "op" {
			continue
		}
		if n > 0 {
			b.WriteString(",")
		}
		n++
		b.WriteString("\n  " + strconv.Quote(k.(string)) + ": " + string(v))
	}
	if n == 0 {
		return "{}"
	}
	b.WriteString("\n}")
	return b.String()
}

// Pretty indents JSON by two spaces, as JSON.stringify(v, null, 2) does.
func Pretty(b []byte) string {
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		return string(b)
	}
	return buf.String()
}

// Lookup finds the value at a dotted path in a JSON document.
func Lookup(doc []byte, path string) (json.RawMessage, error) {
	cur := json.RawMessage(doc)
	for _, part := range strings.Split(path, ".") {
		if i, err := strconv.Atoi(part); err == nil {
			var arr []json.RawMessage
			if err := json.Unmarshal(cur, &arr); err != nil || i < 0 || i >= len(arr) {
				return nil, fmt.Errorf("no element %d at %q", i, path)
			}
			cur = arr[i]
			continue
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(cur, &obj); err != nil {
			return nil, fmt.Errorf("not an object before %q in %q", part, path)
		}
		v, ok := obj[part]
		if !ok {
			return nil, fmt.Errorf("no field %q in %q", part, path)
		}
		cur = v
	}
	return cur, nil
}
