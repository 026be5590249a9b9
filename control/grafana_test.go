package control

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/control/controltest"
	"github.com/sluicegw/sluice/gateway"
	"github.com/sluicegw/sluice/ike"
)

// dashboardPath is the example Grafana dashboard shipped with sluice.
const dashboardPath = "../packaging/grafana/sluice-dashboard.json"

var (
	metricName = regexp.MustCompile(`\b(?:sluice|go|process)_[a-z0-9_]+\b`)
	byClause   = regexp.MustCompile(`\bby \(([^)]*)\)`)
)

// TestGrafanaDashboard: every metric the example dashboard queries is one
// the exporter serves, and every label it groups by is one of that
// metric's, so that the dashboard cannot rot as the metrics change. The
// panels have unique ids and titles and use the dashboard's data source.
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			ID         int    `json:"id"`
			Type       string `json:"type"`
			Title      string `json:"title"`
			Datasource *struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	if dash.Title == "" || dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatalf("%s: no title, uid or panels", dashboardPath)
	}

	// The families and their labels, from a gateway with every part.
	b := controltest.New()
	b.SetIKE(&gateway.IKEInfo{Stats: gateway.IKEStatsMap(ike.Stats{}),
		Connections: []gateway.IKEConnInfo{{Name: "c", Children: []gateway.IKEChildInfo{{Name: "ch"}}}}})
	mfs, err := NewRegistry(b.Stats).Gather()
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]map[string]bool{} // family -> its labels
	for _, mf := range mfs {
		ls := map[string]bool{"instance": true, "job": true} // added by the scrape
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				ls[l.GetName()] = true
			}
		}
		labels[mf.GetName()] = ls
	}

	var exprs []string
	ids, titles := map[int]bool{}, map[string]bool{}
	for _, p := range dash.Panels {
		if ids[p.ID] || titles[p.Title] || p.Title == "" {
			t.Errorf("panel %d %q: id or title empty or used twice", p.ID, p.Title)
		}
		ids[p.ID], titles[p.Title] = true, true
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: no query, or not on the dashboard's data source", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if v.Definition != "" {
			exprs = append(exprs, v.Definition)
		}
	}
	used := 0
	for _, e := range exprs {
		names := metricName.FindAllString(e, -1)
		if len(names) == 0 {
			t.Errorf("query %q names no metric", e)
		}
		for _, n := range names {
			used++
			if labels[n] == nil {
				t.Errorf("query %q: the exporter has no %s", e, n)
			}
		}
		for _, m := range byClause.FindAllStringSubmatch(e, -1) {
			for _, l := range strings.Split(m[1], ",") {
				l = strings.TrimSpace(l)
				found := false
				for _, n := range names {
					found = found || labels[n][l]
				}
				if !found {
					t.Errorf("query %q groups by %q, which none of its metrics has", e, l)
				}
			}
		}
	}
	// The panels the issue asks for: throughput per tunnel, drops by
	// reason, IKE SAs and children, exchanges, TLS handshakes and failures.
	for _, want := range []string{"sluice_tunnel_bytes_total", "sluice_tunnel_drops_total", "sluice_ike_connection_up",
		"sluice_ike_child_installed", "sluice_ike_sa_up", "sluice_ike_sa_events_total", "sluice_ike_exchanges_total",
		"sluice_tls_handshakes_total", "sluice_tls_handshake_failures_total"} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("the dashboard has no panel on %s", want)
		}
	}
	t.Logf("%d panels, %d queries, %d metric references", len(dash.Panels), len(exprs), used)
}
