package scenario

import (
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/leaseplane/leaseplane/kernel"
)

// Random returns a random scenario (as JSON) drawn from seed: a small cast
// of agents and resources, a mix of every operation, times that mostly move
// forward in small and 30-second-scale steps (and sometimes jump back or
// land exactly on an expiry), and some invalid steps. The same seed gives
// the same bytes. Acquires are held (waitUpToMs) or polled, and some
// steps cancel held asks.
func Random(seed int64) []byte { return random(seed, true) }

// RandomPolled is Random without held asks: no waitUpToMs and no cancel,
// the same scenarios as before semantics 3 (for models that know only
// polling).
func RandomPolled(seed int64) []byte { return random(seed, false) }

func random(seed int64, held bool) []byte {
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(seed)>>32^0x9e3779b97f4a7c15))
	nAgents := 2 + rng.IntN(5)
	nRes := 1 + rng.IntN(4)
	agents := make([]string, nAgents)
	for i := range agents {
		agents[i] = "did:web:acme.example:agent:a" + strconv.Itoa(i)
	}
	resources := make([]string, nRes)
	for i := range resources {
		if rng.IntN(3) == 0 {
			resources[i] = "file:r" + strconv.Itoa(i)
		} else {
			resources[i] = "lock:r" + strconv.Itoa(i)
		}
	}
	rules := `{"readShared":["file:"]}`
	switch rng.IntN(8) {
	case 0, 1:
		rules = `{"readShared":[]}`
	case 2:
		rules = `{"readShared":["file:"],"limits":{"leases":2,"waiters":2,"agents":3}}`
		if held {
			rules = `{"readShared":["file:"],"limits":{"leases":2,"waiters":2,"agents":3,"asks":2,"asksPerAgent":1}}`
		}
	}
	modes := []string{"", "read", "write", "delete", "read", "read"}
	nSteps := 1 + rng.IntN(40)
	steps := make([]step, 0, nSteps)
	now := int64(1000 + rng.IntN(5000))
	var times []int64
	for range nSteps {
		switch p := rng.IntN(100); {
		case p < 30:
			now += int64(rng.IntN(3000))
		case p < 55:
			now += int64(rng.IntN(1300)) // within back-off and claim windows
		case p < 70:
			now += int64(25000 + rng.IntN(10000))
		case p < 80 && len(times) > 0:
			now = times[rng.IntN(len(times))] + kernel.LeaseTTLMs // exactly on an expiry
		case p < 85:
			now -= int64(rng.IntN(5000)) // the host's clock jumps back
			if now < 0 {
				now = 0
			}
		}
		times = append(times, now)
		a := agents[rng.IntN(nAgents)]
		r := resources[rng.IntN(nRes)]
		s := step{"atMs": now}
		switch p := rng.IntN(100); {
		case p < 55:
			s["op"] = "acquire"
			s["resource"], s["actorDid"] = r, a
			if m := modes[rng.IntN(len(modes))]; m != "" {
				s["mode"] = m
			}
			if rng.IntN(10) == 0 {
				s["ttlMs"] = rng.IntN(100000)
			}
			if held && rng.IntN(3) == 0 {
				s["waitUpToMs"] = []int{0, 1, 50, 1000, 5000, 30000}[rng.IntN(6)] + rng.IntN(100)%30
			}
		case p < 75:
			s["op"] = "release"
			s["resource"], s["actorDid"] = r, a
			if rng.IntN(3) == 0 {
				s["leaseId"] = kernel.LeaseID(r, int64(1+rng.IntN(4)))
			}
		case p < 79:
			s["op"] = "wait"
		case p < 82:
			s["op"] = "wait"
			switch rng.IntN(3) {
			case 0:
				s["prefix"] = "file:"
			case 1:
				s["after"] = resources[rng.IntN(nRes)]
			}
			s["limit"] = 1 + rng.IntN(2)
		case p < 90:
			s["op"] = "tick"
		case p < 93:
			s["op"] = "suspend"
			s["actorDid"] = a
		case p < 95:
			s["op"] = "resume"
			s["actorDid"] = a
		case p < 97:
			s["op"] = "forget"
			s["actorDid"] = a
			if held && rng.IntN(2) == 0 {
				s = step{"atMs": now, "op": "cancel"}
				if rng.IntN(2) == 0 {
					s["askId"] = "ask_" + strconv.Itoa(1+rng.IntN(4))
				}
			}
		default:
			s = invalidStep(rng, now, r, a)
		}
		steps = append(steps, s)
	}
	b := append([]byte(`{"rules":`), rules...)
	b = append(b, `,"steps":[`...)
	for i, st := range steps {
		if i > 0 {
			b = append(b, ',')
		}
		b = st.appendJSON(b)
	}
	return append(b, "]}"...)
}

// step is a scenario step under construction: fields with raw JSON values,
// written with the names in sorted order.
type step map[string]any

func (s step) appendJSON(b []byte) []byte {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = kernel.AppendQuote(b, k)
		b = append(b, ':')
		switch v := s[k].(type) {
		case string:
			b = kernel.AppendQuote(b, v)
		case int:
			b = strconv.AppendInt(b, int64(v), 10)
		case int64:
			b = strconv.AppendInt(b, v, 10)
		}
	}
	return append(b, '}')
}

func invalidStep(rng *rand.Rand, now int64, r, a string) step {
	s := step{"atMs": now, "op": "acquire", "resource": r, "actorDid": a}
	switch rng.IntN(8) {
	case 0:
		delete(s, "resource")
	case 1:
		s["actorDid"] = "agent-without-did"
	case 2:
		s["mode"] = "exclusive"
	case 3:
		s["resource"] = 42
	case 4:
		s["op"] = "grab"
	case 5:
		s["atMs"] = -1
	case 6:
		s["leaseId"] = "lease_x" // acquire does not take leaseId
	case 7:
		s["resource"] = "bad\nname"
	}
	return s
}

// Shrink returns a smaller scenario for which fails still holds: it drops
// runs of steps (halving the run length down to single steps) while the
// failure persists. fails must be deterministic. A scenario that does not
// parse is returned unchanged.
func Shrink(scenario []byte, fails func([]byte) bool) []byte {
	s, err := Parse(scenario)
	if err != nil {
		return scenario
	}
	encode := func(steps [][]byte) []byte {
		b := []byte{'{'}
		if s.Rules != nil {
			b = append(b, `"rules":`...)
			b = kernel.AppendCompact(b, s.Rules)
			b = append(b, ',')
		}
		b = append(b, `"steps":[`...)
		for i, st := range steps {
			if i > 0 {
				b = append(b, ',')
			}
			b = kernel.AppendCompact(b, st)
		}
		return append(b, "]}"...)
	}
	best := scenario
	steps := s.Steps
	for chunk := len(steps) / 2; chunk >= 1; chunk /= 2 {
		for i := 0; i+chunk <= len(steps); {
			try := append(append([][]byte(nil), steps[:i]...), steps[i+chunk:]...)
			if b := encode(try); fails(b) {
				steps, best = try, b
				continue
			}
			i += chunk
		}
	}
	return best
}
