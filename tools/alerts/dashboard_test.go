package alerts

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/podwire/podwire/pkg/agent"
)

// dashboardFile is the chart's dashboard, from this module's directory.
const dashboardFile = "../../deploy/helm/podwire/dashboards/podwire.json"

// grafanaVars are the interval variables Grafana replaces in a query
// before Prometheus sees it; the others ($instance) stand inside label
// matchers' strings, where PromQL takes them as they are.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// panel is what the test reads of a Grafana panel (rows nest panels).
type panel struct {
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
}

// TestDashboardQueries: the dashboard's JSON parses; every panel has a
// query, every query parses as PromQL, and each metric it names is one the
// agent's registry serves.
func TestDashboardQueries(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string  `json:"title"`
		UID    string  `json:"uid"`
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatalf("%s: uid %q, %d panels: want a uid and panels", dashboardFile, dash.UID, len(dash.Panels))
	}
	served, err := agent.MetricNames()
	if err != nil {
		t.Fatal(err)
	}
	queries := 0
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if len(p.Panels) > 0 {
				continue // a row
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, q := range p.Targets {
				queries++
				names, err := metricNames(grafanaVars.Replace(q.Expr))
				if err != nil {
					t.Errorf("panel %q, query %s %q: %v", p.Title, q.RefID, q.Expr, err)
					continue
				}
				if len(names) == 0 {
					t.Errorf("panel %q, query %s %q names no metric", p.Title, q.RefID, q.Expr)
				}
				for _, n := range names {
					if !slices.Contains(served, n) {
						t.Errorf("panel %q, query %s: metric %s is not served by the agent", p.Title, q.RefID, n)
					}
				}
			}
		}
	}
	walk(dash.Panels)
	t.Logf("%d panels, %d queries, against %d metric names of the agent", len(dash.Panels), queries, len(served))
}

// metricNames parses expr and returns the metric names its selectors
// match by name (__name__="...", or the name before the braces); a selector
// with no fixed name is an error.
func metricNames(expr string) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	var bad error
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				names = append(names, m.Value)
				return nil
			}
		}
		bad = fmt.Errorf("selector %s names no metric", vs)
		return nil
	})
	if bad != nil {
		return nil, bad
	}
	return names, nil
}

// TestMetricNamesOfQueries: the extraction finds every selector's name,
// inside functions, aggregations and binary operators, and refuses a
// selector without one (the control for the test above).
func TestMetricNamesOfQueries(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
		err  bool
	}{
		{expr: `topk(10, sum by (pod) (rate(podwire_pod_dropped_packets_total{instance=~"$instance"}[5m])))`, want: []string{"podwire_pod_dropped_packets_total"}},
		{expr: `process_resident_memory_bytes and on (instance) podwire_agent_build_info`, want: []string{"process_resident_memory_bytes", "podwire_agent_build_info"}},
		{expr: `count(podwire_chain_in_use == 0) or vector(0)`, want: []string{"podwire_chain_in_use"}},
		{expr: `{__name__=~"podwire_.*"}`, err: true},
		{expr: `rate(podwire_table_repairs_total[5m]`, err: true},
	} {
		got, err := metricNames(tc.expr)
		if (err != nil) != tc.err || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, %v; want %q, error %v", tc.expr, got, err, tc.want, tc.err)
		}
	}
}
