package server

import (
	"context"
	"crypto/subtle"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/api"
	"github.com/leaseplane/leaseplane/server/ledger"
)

// metrics are the server's Prometheus series, in a registry of its own so
// that several servers can live in one process (tests).
type metrics struct {
	reg *prometheus.Registry
	// perWorkspace holds the series labelled with workspace names, served
	// only to a scrape allowed to see them (Config.MetricsWorkspaces,
	// Config.MetricsToken).
	perWorkspace *prometheus.Registry

	requests       *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	commitSeconds  prometheus.Histogram
	commitBatch    prometheus.Histogram
	commitFailures prometheus.Counter
	commitDropped  prometheus.Counter
	eventsWritten  prometheus.Counter
	eventsDropped  prometheus.Counter
	alarms         prometheus.Counter
	reloads        prometheus.Counter
	workspaces     prometheus.Gauge

	// Counted on the command path (atomics: no label look-up there).
	steps        atomic.Int64 // commands the kernel stepped, replays excluded
	logged       atomic.Int64 // of them, logged
	asksAnswered atomic.Int64 // held asks answered to a parked request
	undelivered  atomic.Int64 // held grants released, not delivered

	// resolved label sets, so the hot path does no label hashing
	mu       sync.RWMutex
	counters map[opStatus]prometheus.Counter
	histos   map[kernel.Op]prometheus.Observer
}

type opStatus struct {
	op     kernel.Op
	status int
}

// secondBuckets are the buckets of the latency histograms, 100 µs to 1 s.
var secondBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		reg:          prometheus.NewRegistry(),
		perWorkspace: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leaseplane_requests_total",
			Help: "Lease commands answered, by operation and HTTP status.",
		}, []string{"op", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "leaseplane_request_duration_seconds",
			Help:    "Time from a command's arrival (after HTTP parsing) to its durable answer.",
			Buckets: secondBuckets,
		}, []string{"op"}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "leaseplane_commit_duration_seconds",
			Help:    "Time of one group commit to SQLite, fsync included.",
			Buckets: secondBuckets,
		}),
		commitBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "leaseplane_commit_batch_commands",
			Help:    "Commands that shared one commit.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024},
		}),
		commitFailures: counter("leaseplane_commit_failures_total", "Commits that failed (their commands were answered 503)."),
		commitDropped:  counter("leaseplane_commit_stale_total", "Commands not committed because an earlier command of their workspace failed to commit."),
		eventsWritten:  counter("leaseplane_events_written_total", "Kernel events written to the events table (replays included; duplicates are ignored by the table)."),
		eventsDropped:  counter("leaseplane_events_dropped_total", "Kernel events the best-effort sink dropped (queue full or write failed)."),
		alarms:         counter("leaseplane_alarm_ticks_total", "Ticks sent by workspace alarms."),
		reloads:        counter("leaseplane_workspace_reloads_total", "Workspaces rebuilt from disk after a failure."),
		workspaces:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "leaseplane_workspaces", Help: "Workspaces loaded."}),
		counters:       map[opStatus]prometheus.Counter{},
		histos:         map[kernel.Op]prometheus.Observer{},
	}
	m.reg.MustRegister(m.requests, m.duration, m.commitSeconds, m.commitBatch, m.commitFailures,
		m.commitDropped, m.eventsWritten, m.eventsDropped, m.alarms, m.reloads, m.workspaces,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "leaseplane_info",
			Help:        "The engine and kernel version this server runs.",
			ConstLabels: prometheus.Labels{"engine": s.engine.Name(), "kernel": kernel.Version},
		}, func() float64 { return 1 }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leaseplane_drill_last_passed",
			Help: "Whether the last finished drill run passed: 1 passed, 0 failed, -1 no run finished since the server started.",
		}, func() float64 {
			if s.drills == nil {
				return -1
			}
			return s.drills.lastVerdict()
		}),
		ledgerCounter(s, "leaseplane_ledger_entries_appended_total", "Entries the signed ledger appended.",
			func(st ledger.Stats) int64 { return st.Appended }),
		ledgerCounter(s, "leaseplane_ledger_write_failures_total", "Ledger writes that failed (their events are caught up from the command log).",
			func(st ledger.Stats) int64 { return st.Failures }),
		ledgerCounter(s, "leaseplane_ledger_caught_up_commands_total", "Logged commands the ledger read back from the command log to catch up.",
			func(st ledger.Stats) int64 { return st.CaughtUp }),
		ledgerCounter(s, "leaseplane_ledger_checkpoints_signed_total", "Ledger checkpoints signed.",
			func(st ledger.Stats) int64 { return st.Signed }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leaseplane_detection_open_cases",
			Help: "Cases detectors have filed that are open, in every workspace.",
		}, func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			n, err := s.store.OpenCases(ctx)
			if err != nil {
				return -1
			}
			return float64(n)
		}))
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leaseplane_connections_unauthenticated", Help: "Connections open now that have not presented a valid key.",
		}, func() float64 { return float64(s.conns.unauthenticated()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leaseplane_connections_authenticated", Help: "Connections open now on which a request presented a valid key.",
		}, func() float64 { return float64(s.conns.authed.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "leaseplane_connections_refused_total", Help: "Connections without a key closed at once: their address held its share (per address), or the budget was full and their address held its fair share of it.",
		}, func() float64 { return float64(s.conns.refusedAddr.Load() + s.conns.refusedFull.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "leaseplane_connections_evicted_total", Help: "Connections without a key closed to make room for a newcomer from an address holding fewer.",
		}, func() float64 { return float64(s.conns.evicted.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leaseplane_held_requests", Help: "Held lease requests open now.",
		}, func() float64 { return float64(s.held.heldOpen()) }),
		atomicCounter("leaseplane_steps_total", "Commands the kernels stepped: requests, alarm ticks, and the cancels and releases the server sends (replays at load excluded). No held ask is decided without one.", &m.steps),
		atomicCounter("leaseplane_commands_logged_total", "Commands that changed durable state and were logged.", &m.logged),
		atomicCounter("leaseplane_held_asks_answered_total", "Held asks the kernel answered to the request parked on them.", &m.asksAnswered),
		atomicCounter("leaseplane_held_grants_released_total", "Grants to held requests that could not be delivered (the client went away or its key was revoked), released.", &m.undelivered),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "leaseplane_held_requests_refused_total", Help: "Held lease requests refused 429 heldRequests (a cap was reached).",
		}, func() float64 { return float64(s.held.refusedCount()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leaseplane_drill_runs_queued", Help: "Drill runs waiting to start, every workspace's.",
		}, func() float64 { q, _ := s.drills.queueCounts(); return float64(q) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "leaseplane_drill_runs_refused_total", Help: "Drill runs refused 429 drillRuns (a bound of the queue was reached).",
		}, func() float64 { _, r := s.drills.queueCounts(); return float64(r) }),
	)
	m.perWorkspace.MustRegister(newWorkspaceGauges(s))
	return m
}

// metricsHandler answers /metrics: the plane-wide series to anyone (no key:
// a scraper has none), and the series labelled with workspace names only
// when Config.MetricsWorkspaces is set or the scrape sends
// Authorization: Bearer with Config.MetricsToken, so that nobody without
// a key learns which workspaces the plane holds.
func (s *Server) metricsHandler() http.Handler {
	public := promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})
	all := promhttp.HandlerFor(prometheus.Gatherers{s.metrics.reg, s.metrics.perWorkspace}, promhttp.HandlerOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.MetricsWorkspaces {
			all.ServeHTTP(w, r)
			return
		}
		if s.cfg.MetricsToken != "" {
			if tok, ok := api.BearerKey(r.Header.Get("Authorization")); ok &&
				subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.MetricsToken)) == 1 {
				all.ServeHTTP(w, r)
				return
			}
		}
		public.ServeHTTP(w, r)
	})
}

// counter is a plain counter of the server's.
func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

// atomicCounter exposes a counter the command path adds to.
func atomicCounter(name, help string, v *atomic.Int64) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v.Load()) })
}

// ledgerCounter exposes one of the ledger's counters (0 without a ledger).
func ledgerCounter(s *Server, name, help string, f func(ledger.Stats) int64) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 {
		if s.ledger == nil {
			return 0
		}
		return float64(f(s.ledger.Stats()))
	})
}

// observe counts one answered command.
func (m *metrics) observe(op kernel.Op, status int, d time.Duration) {
	k := opStatus{op, status}
	m.mu.RLock()
	c, ok1 := m.counters[k]
	h, ok2 := m.histos[op]
	m.mu.RUnlock()
	if !ok1 || !ok2 {
		if !validOp(op) {
			op = "other"
			k.op = op
		}
		m.mu.Lock()
		if c, ok1 = m.counters[k]; !ok1 {
			c = m.requests.WithLabelValues(string(op), strconv.Itoa(status))
			m.counters[k] = c
		}
		if h, ok2 = m.histos[op]; !ok2 {
			h = m.duration.WithLabelValues(string(op))
			m.histos[op] = h
		}
		m.mu.Unlock()
	}
	c.Inc()
	h.Observe(d.Seconds())
}

func validOp(op kernel.Op) bool {
	_, err := kernel.ParseOp(string(op))
	return err == nil
}
