// Command chart renders podwire's Helm chart (deploy/helm/podwire) with the
// Helm SDK, as `helm template` does, and writes the plain manifests of
// deploy/ from it: one file per template (templates/20-daemonset.yaml ->
// deploy/20-daemonset.yaml), a template that renders nothing gives no file.
// The values are the chart's defaults and deploy/helm/manifests-values.yaml
// (the plain manifests ship no ConfigMap), merged as `helm -f` merges them.
//
// Its own Go module, so that the main module does not pull Helm's
// dependency tree; `make manifests` runs it, and its test (run by `make
// lint`) lints the chart and fails when deploy/ differs from the render.
//
// Usage: chart -root DIR (the repository's top directory)
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/cli/values"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/getter"
	"sigs.k8s.io/yaml"
)

// releaseName is the release the plain manifests are rendered as. The chart
// names its objects without it (one podwire per cluster).
const releaseName = "podwire"

// Where the chart and the plain manifests are, from the repository's top.
const (
	chartDir       = "deploy/helm/podwire"
	manifestValues = "deploy/helm/manifests-values.yaml"
	manifestDir    = "deploy"
)

func main() {
	root := flag.String("root", "", "the repository's top directory")
	rules := flag.String("prometheus-rules", "", "write the PrometheusRule's rule file here instead of the manifests")
	bare := flag.Bool("bare", false, "with -prometheus-rules: leave the alerts' annotations out")
	flag.Parse()
	if *root == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	write := func() error { return writeManifests(*root) }
	if *rules != "" {
		write = func() error { return writeRules(*root, *rules, *bare) }
	}
	if err := write(); err != nil {
		fmt.Fprintln(os.Stderr, "chart:", err)
		os.Exit(1)
	}
}

// render loads the chart in dir and renders it with its values, files on
// top (as -f), and set on top of those (as --set-json key=JSON).
// The values are checked against values.schema.json. It returns the rendered
// text of every template file by its base name (NOTES.txt included), and
// fails on a reference to a value the values do not hold.
func render(dir string, files []string, set []string) (*chart.Chart, map[string]string, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to load the chart %q: %w", dir, err)
	}
	opts := values.Options{ValueFiles: files, JSONValues: set}
	vals, err := opts.MergeValues(getter.Providers{})
	if err != nil {
		return nil, nil, fmt.Errorf("failed to read the values: %w", err)
	}
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{
		Name: releaseName, Namespace: "default", Revision: 1, IsInstall: true,
	}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, nil, err
	}
	out, err := engine.Engine{Strict: true}.Render(ch, rv)
	if err != nil {
		return nil, nil, err
	}
	byName := map[string]string{}
	for name, text := range out {
		base := path.Base(name)
		if strings.HasPrefix(base, "_") || strings.Contains(name, "/templates/tests/") {
			// tests/ are `helm test`'s hooks, which run on that
			// command only: the plain manifests have no such step.
			continue
		}
		byName[base] = text
	}
	return ch, byName, nil
}

// plainManifests renders the chart under root as the plain manifests of
// deploy/: each YAML template's text that holds more than blank lines, by
// file name, with a header naming where it comes from.
func plainManifests(root string) (map[string][]byte, error) {
	ch, rendered, err := render(filepath.Join(root, chartDir), []string{filepath.Join(root, manifestValues)}, nil)
	if err != nil {
		return nil, err
	}
	m := map[string][]byte{}
	for name, text := range rendered {
		if path.Ext(name) != ".yaml" || strings.TrimSpace(text) == "" {
			continue
		}
		var b bytes.Buffer
		fmt.Fprintf(&b, "# Rendered by `make manifests` from the chart %s %s\n", chartDir, ch.Metadata.Version)
		fmt.Fprintf(&b, "# with its default values and %s.\n", manifestValues)
		b.WriteString("# Edit the chart, not this file.\n")
		b.WriteString(strings.TrimLeft(text, "\n"))
		if !bytes.HasSuffix(b.Bytes(), []byte("\n")) {
			b.WriteByte('\n')
		}
		m[name] = b.Bytes()
	}
	return m, nil
}

// writeManifests writes the plain manifests into root's deploy/, removing
// the *.yaml files there that the render no longer produces.
func writeManifests(root string) error {
	want, err := plainManifests(root)
	if err != nil {
		return err
	}
	out := filepath.Join(root, manifestDir)
	old, err := filepath.Glob(filepath.Join(out, "*.yaml"))
	if err != nil {
		return err
	}
	for _, f := range old {
		if _, ok := want[filepath.Base(f)]; !ok {
			if err := os.Remove(f); err != nil {
				return err
			}
			fmt.Println("removed", filepath.Join(manifestDir, filepath.Base(f)))
		}
	}
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := os.WriteFile(filepath.Join(out, name), want[name], 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", filepath.Join(manifestDir, name))
	}
	return nil
}

// ruleValues turn on the chart's PrometheusRule (and the metrics it needs).
var ruleValues = []string{"metrics.enabled=true", "metrics.prometheusRule.enabled=true"}

// ruleFile renders the chart under root with its defaults and ruleValues,
// and returns the rule file of its PrometheusRule: the object's spec, in
// the format of Prometheus' rule_files; bare, without the annotations.
func ruleFile(root string, bare bool) ([]byte, error) {
	_, rendered, err := render(filepath.Join(root, chartDir), nil, ruleValues)
	if err != nil {
		return nil, err
	}
	var obj struct {
		Kind string `json:"kind"`
		Spec struct {
			Groups []struct {
				Name  string           `json:"name"`
				Rules []map[string]any `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal([]byte(rendered[ruleTemplate]), &obj); err != nil {
		return nil, fmt.Errorf("failed to parse %s: %w", ruleTemplate, err)
	}
	if obj.Kind != "PrometheusRule" {
		return nil, fmt.Errorf("%s renders kind %q, want PrometheusRule", ruleTemplate, obj.Kind)
	}
	for _, g := range obj.Spec.Groups {
		for _, r := range g.Rules {
			if bare {
				delete(r, "annotations")
			}
		}
	}
	return yaml.Marshal(obj.Spec)
}

// ruleTemplate is the chart's template of the PrometheusRule.
const ruleTemplate = "32-prometheusrule.yaml"

// writeRules writes ruleFile's rule file to out.
func writeRules(root, out string, bare bool) error {
	b, err := ruleFile(root, bare)
	if err != nil {
		return err
	}
	return os.WriteFile(out, b, 0o644)
}
