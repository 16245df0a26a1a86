// Package alerts tests what the chart's monitoring objects query against
// what the node agent serves: every query of the Grafana dashboard
// (deploy/helm/podwire/dashboards/podwire.json) parses as PromQL and names
// only metrics of the agent's registry (agent.MetricNames). The alerts
// themselves are checked and evaluated by promtool (scripts/check-alerts.sh,
// on testdata/rules_test.yaml).
//
// Its own Go module, so that Prometheus' PromQL parser and its dependencies
// stay out of the product's go.mod.
package alerts
