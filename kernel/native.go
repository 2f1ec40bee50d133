package kernel

// Native is the Factory of in-process engines: the Machine itself.
var Native Factory = nativeFactory{}

type nativeFactory struct{}

func (nativeFactory) Name() string { return "native" }

func (nativeFactory) New(rules []byte) (Engine, error) {
	r, err := ParseRules(rules)
	if err != nil {
		return nil, err
	}
	return nativeEngine{New(r)}, nil
}

func (nativeFactory) Restore(snapshot []byte) (Engine, error) {
	m, err := Restore(snapshot)
	if err != nil {
		return nil, err
	}
	return nativeEngine{m}, nil
}

// nativeEngine adapts a Machine to Engine.
type nativeEngine struct{ m *Machine }

func (e nativeEngine) Apply(op Op, nowMs int64, body []byte) (Result, error) {
	return e.m.ApplyJSON(op, nowMs, body), nil
}

func (e nativeEngine) StepJSON(step []byte) (Result, error) { return e.m.StepJSON(step), nil }

func (e nativeEngine) Step(c Command) (Ready, error) { return e.m.Step(c), nil }

func (e nativeEngine) NextAlarm() (int64, bool, error) {
	at, ok := e.m.NextAlarm()
	return at, ok, nil
}

func (e nativeEngine) Snapshot() ([]byte, error) { return e.m.Snapshot(), nil }
func (e nativeEngine) Trust() ([]byte, error)    { return e.m.TrustJSON(), nil }
func (e nativeEngine) Stats() (Stats, error)     { return e.m.Stats(), nil }
func (e nativeEngine) SetSemantics(v int) error  { return e.m.SetSemantics(v) }
func (e nativeEngine) Close() error              { return nil }
