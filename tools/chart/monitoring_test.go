package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// monitoringTemplates are the chart's monitoring objects, each off by
// default.
var monitoringTemplates = []string{"30-metrics-service.yaml", "31-servicemonitor.yaml", ruleTemplate, "33-dashboard.yaml"}

// object parses the one object a template rendered into a generic map.
func object(t *testing.T, rendered map[string]string, name string) map[string]any {
	t.Helper()
	var o map[string]any
	if err := yaml.Unmarshal([]byte(rendered[name]), &o); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if o == nil {
		t.Fatalf("%s rendered nothing", name)
	}
	return o
}

// field is the value at path in o (nil when absent).
func field(o any, path ...string) any {
	for _, p := range path {
		m, ok := o.(map[string]any)
		if !ok {
			return nil
		}
		o = m[p]
	}
	return o
}

// TestMonitoringObjects: the Service, ServiceMonitor, PrometheusRule and
// dashboard ConfigMap render only when asked, each refused without
// metrics.enabled (nothing would serve what they read). Rendered: a
// headless Service on the metrics port, a ServiceMonitor of it with the
// operator's labels, the rules with the `for`, severity and thresholds of
// the values, and the dashboard with the sidecar's label (configurable),
// its JSON the chart's file. The metrics port is declared as a
// containerPort only where no surge replaces the agents.
func TestMonitoringObjects(t *testing.T) {
	_, rendered, err := render(chartPath, nil, []string{"metrics.enabled=true"})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range monitoringTemplates {
		if strings.TrimSpace(rendered[name]) != "" {
			t.Errorf("metrics.enabled alone renders %s:\n%s", name, rendered[name])
		}
	}
	for _, v := range []string{"metrics.service.enabled", "metrics.serviceMonitor.enabled", "metrics.prometheusRule.enabled", "metrics.dashboard.enabled"} {
		if _, _, err := render(chartPath, nil, []string{v + "=true"}); err == nil || !strings.Contains(err.Error(), "metrics.enabled") {
			t.Errorf("%s without metrics.enabled: render error %v, want one naming metrics.enabled", v, err)
		}
	}

	_, rendered, err = render(chartPath, nil, []string{"metrics.enabled=true", "metrics.port=9300",
		"metrics.serviceMonitor.enabled=true", `metrics.serviceMonitor.labels={"release":"kps"}`,
		"metrics.prometheusRule.enabled=true", `metrics.prometheusRule.alerts.agentNotReady.for="10m"`,
		`metrics.prometheusRule.alerts.tableRepairs.perMinute=4`, `metrics.prometheusRule.alerts.sourceCheckDrops.severity="critical"`,
		"metrics.dashboard.enabled=true", `metrics.dashboard.label="grafana_dashboards"`, `metrics.dashboard.namespace="monitoring"`})
	if err != nil {
		t.Fatal(err)
	}
	svc := object(t, rendered, "30-metrics-service.yaml")
	if field(svc, "spec", "clusterIP") != "None" || !strings.Contains(rendered["30-metrics-service.yaml"], "port: 9300") ||
		field(svc, "spec", "selector", "app.kubernetes.io/name") != "podwire-agent" {
		t.Errorf("metrics Service: %v, want headless on 9300 selecting the agents", svc)
	}
	sm := object(t, rendered, "31-servicemonitor.yaml")
	eps, _ := field(sm, "spec", "endpoints").([]any)
	if field(sm, "apiVersion") != "monitoring.coreos.com/v1" || field(sm, "metadata", "labels", "release") != "kps" ||
		len(eps) != 1 || field(eps[0], "port") != "metrics" {
		t.Errorf("ServiceMonitor: %v, want monitoring.coreos.com/v1 with release=kps, one endpoint on port metrics", sm)
	}
	pr := object(t, rendered, ruleTemplate)
	groups, _ := field(pr, "spec", "groups").([]any)
	if field(pr, "apiVersion") != "monitoring.coreos.com/v1" || len(groups) != 1 {
		t.Fatalf("PrometheusRule: %v, want monitoring.coreos.com/v1 with one group", pr)
	}
	alerts := map[string]map[string]any{}
	for _, r := range field(groups[0], "rules").([]any) {
		alerts[field(r, "alert").(string)] = r.(map[string]any)
	}
	want := []string{"PodwireAgentNotReady", "PodwireOutOfChain", "PodwireReconcilerFailing", "PodwireTableRepairsHigh",
		"PodwireUncheckedPods", "PodwireUnknownInterfaces", "PodwirePodsRefused", "PodwireEgressErrors", "PodwireSourceCheckDrops"}
	for _, a := range want {
		if alerts[a] == nil {
			t.Errorf("PrometheusRule has no alert %s", a)
		}
	}
	if len(alerts) != len(want) {
		t.Errorf("PrometheusRule's alerts %v, want %v", len(alerts), want)
	}
	if f := field(alerts["PodwireAgentNotReady"], "for"); f != "10m" {
		t.Errorf("PodwireAgentNotReady for %v, want the value's 10m", f)
	}
	if e, _ := field(alerts["PodwireTableRepairsHigh"], "expr").(string); !strings.HasSuffix(e, "* 60 > 4") {
		t.Errorf("PodwireTableRepairsHigh expr %q, want the value's threshold 4 a minute", e)
	}
	if s := field(alerts["PodwireSourceCheckDrops"], "labels", "severity"); s != "critical" {
		t.Errorf("PodwireSourceCheckDrops severity %v, want the value's critical", s)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict([]byte(rendered["33-dashboard.yaml"]), &cm); err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(filepath.Join(chartPath, "dashboards", "podwire.json"))
	if err != nil {
		t.Fatal(err)
	}
	if cm.Namespace != "monitoring" || cm.Labels["grafana_dashboards"] != "1" || !json.Valid([]byte(cm.Data["podwire.json"])) ||
		strings.TrimSpace(cm.Data["podwire.json"]) != strings.TrimSpace(string(file)) {
		t.Errorf("dashboard ConfigMap in %q labelled %v: want namespace monitoring, grafana_dashboards=1, the chart's dashboard as data", cm.Namespace, cm.Labels)
	}
	if c := parse(t, rendered).container(t); len(c.Ports) != 0 {
		t.Errorf("ports %v declared under the default surge, want none", c.Ports)
	}

	_, rendered, err = render(chartPath, nil, []string{"metrics.enabled=true", "metrics.dashboard.enabled=true",
		"updateStrategy.rollingUpdate.maxSurge=0", "updateStrategy.rollingUpdate.maxUnavailable=1"})
	if err != nil {
		t.Fatal(err)
	}
	if cm := object(t, rendered, "33-dashboard.yaml"); field(cm, "metadata", "labels", "grafana_dashboard") != "1" {
		t.Errorf("dashboard labels %v, want the sidecar's default grafana_dashboard: \"1\"", field(cm, "metadata", "labels"))
	}
	ports := parse(t, rendered).container(t).Ports
	if len(ports) != 1 || ports[0].Name != "metrics" || ports[0].ContainerPort != 9178 {
		t.Errorf("ports %+v without a surge, want the metrics containerPort 9178", ports)
	}
}

// TestRuleFile: the rule file `make lint` gives promtool is the
// PrometheusRule's groups, with the annotations, or without them (-bare).
func TestRuleFile(t *testing.T) {
	for _, bare := range []bool{false, true} {
		b, err := ruleFile(root, bare)
		if err != nil {
			t.Fatal(err)
		}
		var f struct {
			Groups []struct {
				Name  string           `json:"name"`
				Rules []map[string]any `json:"rules"`
			} `json:"groups"`
		}
		if err := yaml.UnmarshalStrict(b, &f); err != nil {
			t.Fatalf("bare %v: %v", bare, err)
		}
		if len(f.Groups) != 1 || len(f.Groups[0].Rules) == 0 {
			t.Fatalf("bare %v: %d groups, want podwire's one with rules", bare, len(f.Groups))
		}
		annotated := slices.ContainsFunc(f.Groups[0].Rules, func(r map[string]any) bool { return r["annotations"] != nil })
		if annotated == bare {
			t.Errorf("bare %v: annotations present %v", bare, annotated)
		}
	}
}
