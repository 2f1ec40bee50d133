package server

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leaseplane/leaseplane/server/store"
)

// workspaceGauges is a Prometheus collector of what each loaded
// workspace's machine holds: live leases, waiters, live resources and
// agents remembered, labelled by workspace. A scrape asks each machine for
// its counts (Engine.Stats, which costs nothing that grows with the
// workspace) under that workspace's lock, one workspace at a time. With a
// ledger, it also gives each workspace's ledger entries and the bytes they
// keep on disk (store.LedgerUsageOf: a read of each row's size, outside
// the workspace's lock).
type workspaceGauges struct {
	s                                  *Server
	leases, waiters, resources, agents *prometheus.Desc
	ledgerEntries, ledgerBytes         *prometheus.Desc
}

func newWorkspaceGauges(s *Server) *workspaceGauges {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"workspace"}, nil)
	}
	return &workspaceGauges{
		s:             s,
		leases:        d("leaseplane_workspace_leases", "Live leases of the workspace."),
		waiters:       d("leaseplane_workspace_waiters", "Waiters of the workspace."),
		resources:     d("leaseplane_workspace_resources", "Resources of the workspace with a lease or a waiter."),
		agents:        d("leaseplane_workspace_agents", "Agents the workspace remembers (trust not 0, holding, waiting or suspended)."),
		ledgerEntries: d("leaseplane_ledger_entries", "Entries of the workspace's signed ledger (its tree size)."),
		ledgerBytes: d("leaseplane_ledger_bytes",
			"Bytes the workspace's ledger keeps in ledger.db: packed entry bodies, tree hashes and grant look-ups (without SQLite's page overhead)."),
	}
}

func (g *workspaceGauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.leases
	ch <- g.waiters
	ch <- g.resources
	ch <- g.agents
	ch <- g.ledgerEntries
	ch <- g.ledgerBytes
}

func (g *workspaceGauges) Collect(ch chan<- prometheus.Metric) {
	g.s.wsMu.RLock()
	wss := make([]*workspace, 0, len(g.s.workspaces))
	for _, ws := range g.s.workspaces {
		if !store.IsDrillWorkspace(ws.name) { // a drill's lives for one drill
			wss = append(wss, ws)
		}
	}
	g.s.wsMu.RUnlock()
	for _, ws := range wss {
		ws.mu.Lock()
		if ws.eng == nil || ws.needsReload() {
			ws.mu.Unlock()
			continue
		}
		st, err := ws.eng.Stats()
		ws.mu.Unlock()
		if err != nil {
			continue
		}
		for _, m := range [...]struct {
			d *prometheus.Desc
			n int
		}{{g.leases, st.Leases}, {g.waiters, st.Waiters}, {g.resources, st.Resources}, {g.agents, st.Agents}} {
			ch <- prometheus.MustNewConstMetric(m.d, prometheus.GaugeValue, float64(m.n), ws.name)
		}
		if g.s.ledger == nil {
			continue
		}
		if u, err := g.s.store.LedgerUsageOf(context.Background(), ws.id); err == nil {
			ch <- prometheus.MustNewConstMetric(g.ledgerEntries, prometheus.GaugeValue, float64(u.Entries), ws.name)
			ch <- prometheus.MustNewConstMetric(g.ledgerBytes, prometheus.GaugeValue, float64(u.Bytes), ws.name)
		}
	}
}
