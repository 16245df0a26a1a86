package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite testdata/*.entry.json from the render")

const (
	root      = "../.."
	allValues = "testdata/all-values.yaml"
	// The entries the default values and all-values.yaml render;
	// pkg/install's test installs them and parses them as the plugin would.
	defaultEntry = "testdata/default.entry.json"
	allEntry     = "testdata/all-values.entry.json"
)

// checkGolden compares a rendered entry, indented, with the file golden.
func checkGolden(t *testing.T, entry, golden string) {
	t.Helper()
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, []byte(entry), "", "  "); err != nil {
		t.Fatalf("entry is not JSON: %v\n%s", err, entry)
	}
	pretty.WriteByte('\n')
	if *update {
		if err := os.WriteFile(golden, pretty.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want, pretty.Bytes()) {
		t.Errorf("entry differs from %s (go test -update rewrites it):\n%s", golden, pretty.Bytes())
	}
}

var chartPath = filepath.Join(root, chartDir)

// TestLint runs `helm lint` (the SDK's lint.All: Chart.yaml, values against
// values.schema.json, every template rendered and parsed as Kubernetes
// objects) with the default values, the plain manifests' and all-values.yaml.
// A warning fails as an error does.
func TestLint(t *testing.T) {
	for _, files := range [][]string{nil, {filepath.Join(root, manifestValues)}, {allValues}} {
		t.Run(strings.Join(append([]string{"defaults"}, files...), "+"), func(t *testing.T) {
			vals := map[string]any{}
			for _, f := range files {
				v, err := chartutil.ReadValuesFile(f)
				if err != nil {
					t.Fatal(err)
				}
				vals = chartutil.CoalesceTables(v.AsMap(), vals)
			}
			res := lint.All(chartPath, vals, "default", false)
			for _, m := range res.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("helm lint: %v", m)
				} else {
					t.Logf("helm lint: %v", m)
				}
			}
		})
	}
}

// TestManifestsUpToDate fails when deploy/*.yaml are not what `make
// manifests` renders from the chart.
func TestManifestsUpToDate(t *testing.T) {
	want, err := plainManifests(root)
	if err != nil {
		t.Fatal(err)
	}
	have, err := filepath.Glob(filepath.Join(root, manifestDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range have {
		if _, ok := want[filepath.Base(f)]; !ok {
			t.Errorf("%s/%s: the chart renders no such file; run make manifests", manifestDir, filepath.Base(f))
		}
	}
	for name, w := range want {
		got, err := os.ReadFile(filepath.Join(root, manifestDir, name))
		if err != nil {
			t.Errorf("%v; run make manifests", err)
			continue
		}
		if !bytes.Equal(got, w) {
			t.Errorf("%s/%s differs from the chart's render (%s); run make manifests", manifestDir, name, firstDiff(got, w))
		}
	}
}

// firstDiff names the first line where a (the file) and b (the render)
// differ.
func firstDiff(a, b []byte) string {
	al, bl := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return fmt.Sprintf("line %d: file %q, render %q", i+1, x, y)
		}
	}
	return "same lines"
}

// TestChartVersion: the chart's version and appVersion are the project's
// version, the base of scripts/version.sh.
func TestChartVersion(t *testing.T) {
	script, err := os.ReadFile(filepath.Join(root, "scripts/version.sh"))
	if os.IsNotExist(err) {
		t.Skip("scripts/version.sh not in this tree")
	}
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^BASE=(v\S+)$`).FindSubmatch(script)
	if m == nil {
		t.Fatal("scripts/version.sh sets no BASE=v...")
	}
	base := string(m[1])
	ch, _, err := render(chartPath, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.Version != strings.TrimPrefix(base, "v") || ch.Metadata.AppVersion != base {
		t.Errorf("Chart.yaml has version %q and appVersion %q; scripts/version.sh's base %s wants %q and %q",
			ch.Metadata.Version, ch.Metadata.AppVersion, base, strings.TrimPrefix(base, "v"), base)
	}
}

// pinnedImage is the form of the release's image in the chart's defaults
// and deploy/: the project's repository and the image index's digest.
var pinnedImage = regexp.MustCompile(`^ghcr\.io/podwire/podwire-agent@sha256:[0-9a-f]{64}$`)

// TestImagePinned: the chart's default image and the one deploy/ names are
// the release's, pinned by digest (`make push` or `make pin` writes it,
// docs/releasing.md), and values.yaml names the release's tag, a version
// without a git describe suffix: a pin of a development build fails.
func TestImagePinned(t *testing.T) {
	_, rendered, err := render(chartPath, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c := parse(t, rendered).container(t); !pinnedImage.MatchString(c.Image) {
		t.Errorf("the chart's default image is %q, want %s", c.Image, pinnedImage)
	}
	files, err := filepath.Glob(filepath.Join(root, manifestDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	named := 0
	lineRE := regexp.MustCompile(`(?m)^\s+image:\s*(\S+/podwire-agent\S*)$`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range lineRE.FindAllSubmatch(b, -1) {
			named++
			if !pinnedImage.Match(m[1]) {
				t.Errorf("%s names the image %s, want it pinned by digest: make pin", filepath.Base(f), m[1])
			}
		}
	}
	if named == 0 {
		t.Errorf("deploy/*.yaml name no podwire-agent image")
	}
	b, err := os.ReadFile(filepath.Join(chartPath, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ Image struct{ Tag string } }
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(v.Image.Tag) {
		t.Errorf("values.yaml pins the tag %q, want a release's vX.Y.Z", v.Image.Tag)
	}
}

// objects is a render parsed into the objects the tests look at.
type objects struct {
	namespaces []corev1.Namespace
	configMaps map[string]corev1.ConfigMap
	ds         appsv1.DaemonSet
	policies   map[string]admissionv1.ValidatingAdmissionPolicy
	bindings   map[string]admissionv1.ValidatingAdmissionPolicyBinding
	other      []string // kinds of the rest
	namespaced []string // "Kind/name namespace" of every namespaced object
	rendered   map[string]string
}

func parse(t *testing.T, rendered map[string]string) *objects {
	t.Helper()
	o := &objects{configMaps: map[string]corev1.ConfigMap{}, rendered: rendered,
		policies: map[string]admissionv1.ValidatingAdmissionPolicy{}, bindings: map[string]admissionv1.ValidatingAdmissionPolicyBinding{}}
	// In file-name order, as helm and deploy/ apply them: o.other's
	// order is part of what the tests check.
	for _, name := range slices.Sorted(maps.Keys(rendered)) {
		text := rendered[name]
		if filepath.Ext(name) != ".yaml" {
			continue
		}
		for _, doc := range strings.Split(text, "\n---\n") {
			var meta struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name      string `json:"name"`
					Namespace string `json:"namespace"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if meta.Metadata.Namespace != "" {
				o.namespaced = append(o.namespaced, meta.Kind+"/"+meta.Metadata.Name+" "+meta.Metadata.Namespace)
			}
			var err error
			switch meta.Kind {
			case "":
				continue
			case "Namespace":
				var ns corev1.Namespace
				err = yaml.UnmarshalStrict([]byte(doc), &ns)
				o.namespaces = append(o.namespaces, ns)
			case "ConfigMap":
				var cm corev1.ConfigMap
				err = yaml.UnmarshalStrict([]byte(doc), &cm)
				o.configMaps[cm.Name] = cm
			case "DaemonSet":
				err = yaml.UnmarshalStrict([]byte(doc), &o.ds)
			case "ValidatingAdmissionPolicy":
				var p admissionv1.ValidatingAdmissionPolicy
				err = yaml.UnmarshalStrict([]byte(doc), &p)
				o.policies[p.Name] = p
			case "ValidatingAdmissionPolicyBinding":
				var b admissionv1.ValidatingAdmissionPolicyBinding
				err = yaml.UnmarshalStrict([]byte(doc), &b)
				o.bindings[b.Name] = b
			default:
				o.other = append(o.other, meta.Kind)
			}
			if err != nil {
				t.Fatalf("%s: %s: %v", name, meta.Kind, err)
			}
		}
	}
	return o
}

func (o *objects) container(t *testing.T) corev1.Container {
	t.Helper()
	if c := o.ds.Spec.Template.Spec.Containers; len(c) == 1 {
		return c[0]
	}
	t.Fatalf("DaemonSet has %d containers, want 1", len(o.ds.Spec.Template.Spec.Containers))
	return corev1.Container{}
}

func (o *objects) env(t *testing.T, name string) corev1.EnvVar {
	t.Helper()
	for _, e := range o.container(t).Env {
		if e.Name == name {
			return e
		}
	}
	t.Fatalf("no env %s", name)
	return corev1.EnvVar{}
}

func (o *objects) checksum() string {
	return o.ds.Spec.Template.Annotations["checksum/config"]
}

func sha(s string) string { return fmt.Sprintf("%x", sha256.Sum256([]byte(s))) }

// policy returns the ValidatingAdmissionPolicy name, checking that its
// binding denies what it refuses.
func (o *objects) policy(t *testing.T, name string) admissionv1.ValidatingAdmissionPolicy {
	t.Helper()
	p, ok := o.policies[name]
	if !ok {
		t.Fatalf("no ValidatingAdmissionPolicy %s (have %v)", name, slices.Sorted(maps.Keys(o.policies)))
	}
	b, ok := o.bindings[name]
	if !ok || b.Spec.PolicyName != name || !slices.Equal(b.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) {
		t.Errorf("binding %s: %+v, want one of policy %s with [Deny]", name, b.Spec, name)
	}
	if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionv1.Fail {
		t.Errorf("policy %s: failurePolicy %v, want Fail", name, p.Spec.FailurePolicy)
	}
	return p
}

// expression is the CEL expression of p's variable or match condition
// name ("" when none).
func expression(p admissionv1.ValidatingAdmissionPolicy, name string) string {
	for _, v := range p.Spec.Variables {
		if v.Name == name {
			return v.Expression
		}
	}
	for _, m := range p.Spec.MatchConditions {
		if m.Name == name {
			return m.Expression
		}
	}
	return ""
}

// checkPolicies checks the policies of an install in namespace ns,
// whose startup taint is taint, whose namespace label admins are admins
// (a CEL list) and whose guarded label keys are keys (a CEL list).
func checkPolicies(t *testing.T, o *objects, ns, taint, admins, keys string) {
	t.Helper()
	node := o.policy(t, "podwire-agent-node")
	if got, want := expression(node, "podwire-agent"), "request.userInfo.username == 'system:serviceaccount:"+ns+":podwire-agent'"; got != want {
		t.Errorf("podwire-agent-node matches %q, want %q", got, want)
	}
	if got := expression(node, "taints"); !strings.Contains(got, "t.key != '"+taint+"'") {
		t.Errorf("podwire-agent-node's taints %q: want every taint but %s compared", got, taint)
	}
	if got := expression(node, "boundNode"); !strings.Contains(got, "request.userInfo.extra['authentication.kubernetes.io/node-name']") {
		t.Errorf("podwire-agent-node's boundNode %q: want the token's node-name extra", got)
	}
	mirror := o.policy(t, "podwire-agent-podwirenode")
	if got, want := expression(mirror, "podwire-agent"), "request.userInfo.username == 'system:serviceaccount:"+ns+":podwire-agent'"; got != want {
		t.Errorf("podwire-agent-podwirenode matches %q, want %q", got, want)
	}
	if _, ok := o.bindings["podwire-agent-podwirenode"]; !ok {
		t.Error("no binding of podwire-agent-podwirenode")
	}
	labels := o.policy(t, "podwire-namespace-labels")
	if got, want := expression(labels, "not-a-namespace-label-admin"), "!request.userInfo.groups.exists(g, g in "+admins+")"; got != want {
		t.Errorf("podwire-namespace-labels matches %q, want %q", got, want)
	}
	if got := expression(labels, "keys"); got != keys {
		t.Errorf("podwire-namespace-labels guards %s, want %s", got, keys)
	}
}

const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// TestRender renders the chart with values as an operator sets them and
// checks the objects.
func TestRender(t *testing.T) {
	manifests := filepath.Join(root, manifestValues)
	for _, tc := range []struct {
		name  string
		files []string
		set   []string // --set-json key=JSON
		check func(t *testing.T, o *objects)
	}{{
		name: "defaults",
		check: func(t *testing.T, o *objects) {
			if len(o.namespaces) != 1 || o.namespaces[0].Name != "podwire-system" ||
				o.namespaces[0].Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
				t.Errorf("want Namespace podwire-system labelled for PodSecurity privileged, got %+v", o.namespaces)
			}
			for _, n := range o.namespaced {
				if !strings.HasSuffix(n, " podwire-system") && !multusGrant(n, "kube-system") {
					t.Errorf("%s: not in podwire-system", n)
				}
			}
			if !slices.ContainsFunc(o.namespaced, func(n string) bool { return multusGrant(n, "kube-system") }) {
				t.Errorf("no Role of multus.namespace in kube-system: %v", o.namespaced)
			}
			spec := o.ds.Spec.Template.Spec
			if spec.PriorityClassName != "system-node-critical" {
				t.Errorf("priorityClassName %q", spec.PriorityClassName)
			}
			if len(spec.NodeSelector) != 1 || spec.NodeSelector["kubernetes.io/os"] != "linux" {
				t.Errorf("nodeSelector %v, want kubernetes.io/os: linux", spec.NodeSelector)
			}
			if len(spec.Tolerations) != 1 || spec.Tolerations[0] != (corev1.Toleration{Operator: corev1.TolerationOpExists}) {
				t.Errorf("tolerations %+v, want every taint", spec.Tolerations)
			}
			c := o.container(t)
			if !strings.HasPrefix(c.Image, "ghcr.io/podwire/podwire-agent@") {
				t.Errorf("image %q, want the project's, pinned by digest (TestImagePinned)", c.Image)
			}
			sc := c.SecurityContext
			if sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("container securityContext %+v: want seccompProfile RuntimeDefault", sc)
			}
			if sc == nil || sc.Privileged == nil || *sc.Privileged || len(sc.Capabilities.Add) != 1 || sc.Capabilities.Add[0] != "NET_ADMIN" {
				t.Errorf("container securityContext %+v: want unprivileged with NET_ADMIN only", sc)
			}
			cm, ok := o.configMaps["podwire-config"]
			if !ok {
				t.Fatal("no ConfigMap podwire-config")
			}
			const want = `{"capabilities":{"io.kubernetes.cri.pod-annotations":true},"sourceCheck":true,"type":"podwire"}`
			if cm.Data["entry"] != want {
				t.Errorf("entry %s, want %s", cm.Data["entry"], want)
			}
			checkGolden(t, cm.Data["entry"], defaultEntry)
			if _, ok := o.configMaps["kubernetes-services-endpoint"]; ok {
				t.Error("kubernetes-services-endpoint rendered without a host")
			}
			if got, want := o.checksum(), sha(o.rendered["15-config.yaml"]); got != want {
				t.Errorf("checksum/config %q, want %q (the rendered ConfigMaps)", got, want)
			}
			if ref := o.env(t, "PODWIRE_CONFIG").ValueFrom.ConfigMapKeyRef; ref.Name != "podwire-config" || ref.Key != "entry" || ref.Optional != nil {
				t.Errorf("PODWIRE_CONFIG from %+v, want the chart's ConfigMap, required", ref)
			}
			// Closed by default: unknown interfaces dropped, the taint put
			// back NoSchedule, both admission policies on.
			for _, a := range []string{"--unknown-interfaces=drop", "--startup-taint=podwire.io/agent-not-ready", "--startup-taint-effect=NoSchedule"} {
				if !slices.Contains(c.Args, a) {
					t.Errorf("args %v lack %s", c.Args, a)
				}
			}
			checkPolicies(t, o, "podwire-system", "podwire.io/agent-not-ready", `["system:masters"]`, `[]`)
		},
	}, {
		name: "admission policies off",
		set:  []string{`admissionPolicies={"agentNode":false,"namespaceLabels":false,"namespaceLabelAdmins":["system:masters"],"namespaceLabelKeys":[]}`},
		check: func(t *testing.T, o *objects) {
			if len(o.policies) != 0 || len(o.bindings) != 0 {
				t.Errorf("policies %v and bindings %v rendered with both off", slices.Sorted(maps.Keys(o.policies)), slices.Sorted(maps.Keys(o.bindings)))
			}
		},
	}, {
		name: "guarded label keys from every selector",
		set: []string{
			`config.forwarding.namespaceSelector={"matchLabels":{"nf":"true","kubernetes.io/metadata.name":"edge"}}`,
			`config.vlanGrants=[{"vlans":"100","namespaceSelector":{"matchExpressions":[{"key":"team","operator":"In","values":["a"]}]}},{"vlans":"101","namespaces":["b"]},{"vlans":"102","namespaceSelector":{"matchLabels":{"nf":"true"}}}]`,
			`admissionPolicies.namespaceLabelKeys=["example.com/zone"]`,
			`admissionPolicies.namespaceLabelAdmins=["system:masters","platform"]`,
		},
		check: func(t *testing.T, o *objects) {
			checkPolicies(t, o, "podwire-system", "podwire.io/agent-not-ready", `["system:masters","platform"]`, `["example.com/zone","nf","team"]`)
		},
	}, {
		name:  "plain manifests",
		files: []string{manifests},
		check: func(t *testing.T, o *objects) {
			if len(o.configMaps) != 0 {
				t.Errorf("ConfigMaps rendered: %v", o.configMaps)
			}
			if sum, ok := o.ds.Spec.Template.Annotations["checksum/config"]; ok {
				t.Errorf("checksum/config %q without a ConfigMap", sum)
			}
			if ref := o.env(t, "PODWIRE_CONFIG").ValueFrom.ConfigMapKeyRef; ref.Name != "podwire-config" || ref.Key != "entry" || ref.Optional == nil || !*ref.Optional {
				t.Errorf("PODWIRE_CONFIG from %+v, want the operator's ConfigMap, optional", ref)
			}
			ef := o.container(t).EnvFrom
			if len(ef) != 1 || ef[0].ConfigMapRef == nil || ef[0].ConfigMapRef.Name != "kubernetes-services-endpoint" || !*ef[0].ConfigMapRef.Optional {
				t.Errorf("envFrom %+v, want the optional ConfigMap kubernetes-services-endpoint", ef)
			}
			if len(o.namespaces) != 1 || !slices.Equal(o.other, []string{"CustomResourceDefinition", "CustomResourceDefinition", "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Role", "RoleBinding", "ClusterRole", "Role"}) {
				t.Errorf("want the Namespace, the ClaimPool, PodwireNode and PodwireNodeStatus CRDs, the ServiceAccount, the ClusterRole and its binding, the Roles of cni.uninstall and multus.namespace and their bindings, the status reader's ClusterRole and Role (no helm test hook); got %d Namespaces and %v", len(o.namespaces), o.other)
			}
			if args := o.container(t).Args; !slices.Contains(args, "--cni-uninstall") || !slices.Contains(args, "--daemonset=podwire-system/podwire-agent") ||
				!slices.Contains(args, "--host-cni-conf-dir=/etc/cni/net.d") {
				t.Errorf("args %v: want --cni-uninstall --daemonset=podwire-system/podwire-agent --host-cni-conf-dir=/etc/cni/net.d (cni.uninstall defaults to true)", args)
			}
		},
	}, {
		name: "cni.uninstall false",
		set:  []string{`cni.uninstall=false`},
		check: func(t *testing.T, o *objects) {
			for _, a := range o.container(t).Args {
				if strings.HasPrefix(a, "--cni-uninstall") || strings.HasPrefix(a, "--daemonset") || strings.HasPrefix(a, "--host-cni-conf-dir") {
					t.Errorf("arg %q with cni.uninstall false", a)
				}
			}
			if slices.ContainsFunc(o.namespaced, func(n string) bool {
				return strings.HasPrefix(n, "Role/podwire-agent ") || strings.HasPrefix(n, "RoleBinding/podwire-agent ")
			}) {
				t.Errorf("the Role of cni.uninstall rendered with it false: %v", o.namespaced)
			}
		},
	}, {
		name: "multus.namespace",
		set:  []string{`multus.namespace="multus"`},
		check: func(t *testing.T, o *objects) {
			if !slices.ContainsFunc(o.namespaced, func(n string) bool { return multusGrant(n, "multus") }) {
				t.Errorf("no Role of multus.namespace in multus: %v", o.namespaced)
			}
		},
	}, {
		name: "multus.namespace empty",
		set:  []string{`multus.namespace=""`},
		check: func(t *testing.T, o *objects) {
			if slices.ContainsFunc(o.namespaced, func(n string) bool { return strings.Contains(n, "podwire-agent-multus") }) {
				t.Errorf("the Role of multus.namespace rendered with it empty: %v", o.namespaced)
			}
		},
	}, {
		name: "a VLAN grant with VRRP",
		set:  []string{`config.vlanGrants=[{"vlans":"100","namespaces":["nf-a"],"subnets":["192.0.2.0/24"],"vrrp":"7-9"}]`},
		check: func(t *testing.T, o *objects) {
			entry := o.configMaps["podwire-config"].Data["entry"]
			if !strings.Contains(entry, `"vlanGrants":[{"namespaces":["nf-a"],"subnets":["192.0.2.0/24"],"vlans":"100","vrrp":"7-9"}]`) {
				t.Errorf("entry %s: want the grant with its vrrp key", entry)
			}
		},
	}, {
		name: "digest wins over tag",
		set:  []string{`image={"repository":"registry.example/podwire-agent","tag":"v1.2.3","digest":"` + digest + `"}`},
		check: func(t *testing.T, o *objects) {
			if c := o.container(t); c.Image != "registry.example/podwire-agent@"+digest {
				t.Errorf("image %q", c.Image)
			}
		},
	}, {
		name: "tag",
		set:  []string{`image.tag="v0.1.0-12-g15c26ea"`, `image.digest=""`},
		check: func(t *testing.T, o *objects) {
			if c := o.container(t); c.Image != "ghcr.io/podwire/podwire-agent:v0.1.0-12-g15c26ea" {
				t.Errorf("image %q", c.Image)
			}
		},
	}, {
		name: "apiserver endpoint",
		set:  []string{`kubernetesServicesEndpoint={"host":"192.0.2.10","port":6443}`},
		check: func(t *testing.T, o *objects) {
			cm := o.configMaps["kubernetes-services-endpoint"]
			if cm.Namespace != "podwire-system" || cm.Data["KUBERNETES_SERVICE_HOST"] != "192.0.2.10" || cm.Data["KUBERNETES_SERVICE_PORT"] != "6443" || len(cm.Data) != 2 {
				t.Errorf("kubernetes-services-endpoint %+v", cm)
			}
			if got, want := o.checksum(), sha(o.rendered["15-config.yaml"]); got != want {
				t.Errorf("checksum/config %q, want %q", got, want)
			}
		},
	}, {
		name:  "endpoint alone with the plain manifests",
		files: []string{manifests},
		set:   []string{`kubernetesServicesEndpoint.host="192.0.2.10"`},
		check: func(t *testing.T, o *objects) {
			if _, ok := o.configMaps["podwire-config"]; ok || len(o.configMaps) != 1 {
				t.Errorf("ConfigMaps %v, want kubernetes-services-endpoint alone", o.configMaps)
			}
			if o.checksum() == "" {
				t.Error("no checksum/config")
			}
		},
	}, {
		name: "own namespace",
		set:  []string{`namespace={"name":"net-system","create":false}`},
		check: func(t *testing.T, o *objects) {
			if len(o.namespaces) != 0 {
				t.Errorf("Namespace rendered with namespace.create false: %+v", o.namespaces)
			}
			for _, n := range o.namespaced {
				if !strings.HasSuffix(n, " net-system") && !multusGrant(n, "kube-system") {
					t.Errorf("%s: not in net-system", n)
				}
			}
		},
	}, {
		name: "empty probeSNAT, egress and forwarding are left out",
		set:  []string{`config.probeSNAT={"preset":"","rules":[],"interfaces":[]}`, `config.egress.exceptCIDRs=["10.96.0.0/12"]`, `config.sourceCheck=false`},
		check: func(t *testing.T, o *objects) {
			const want = `{"capabilities":{"io.kubernetes.cri.pod-annotations":true},"egress":{"exceptCIDRs":["10.96.0.0/12"]},"sourceCheck":false,"type":"podwire"}`
			if got := o.configMaps["podwire-config"].Data["entry"]; got != want {
				t.Errorf("entry %s, want %s", got, want)
			}
		},
	}, {
		name: "extra keys",
		set:  []string{`config.extra={"futureKey":{"a":1}}`},
		check: func(t *testing.T, o *objects) {
			const want = `{"capabilities":{"io.kubernetes.cri.pod-annotations":true},"futureKey":{"a":1},"sourceCheck":true,"type":"podwire"}`
			if got := o.configMaps["podwire-config"].Data["entry"]; got != want {
				t.Errorf("entry %s, want %s", got, want)
			}
		},
	}, {
		name:  "every value",
		files: []string{allValues},
		check: func(t *testing.T, o *objects) {
			checkGolden(t, o.configMaps["podwire-config"].Data["entry"], allEntry)
			spec := o.ds.Spec.Template.Spec
			c := o.container(t)
			if c.Image != "registry.example/podwire/podwire-agent@"+digest || c.ImagePullPolicy != corev1.PullAlways {
				t.Errorf("image %q %s", c.Image, c.ImagePullPolicy)
			}
			if len(spec.ImagePullSecrets) != 1 || spec.ImagePullSecrets[0].Name != "regcred" {
				t.Errorf("imagePullSecrets %v", spec.ImagePullSecrets)
			}
			if spec.PriorityClassName != "" || len(spec.Tolerations) != 1 || spec.NodeSelector["podwire.io/enabled"] != "true" {
				t.Errorf("priorityClassName %q, tolerations %v, nodeSelector %v", spec.PriorityClassName, spec.Tolerations, spec.NodeSelector)
			}
			if got := c.Resources.Limits.Memory().String(); got != "100Mi" {
				t.Errorf("memory limit %s", got)
			}
			args := strings.Join(c.Args, " ")
			for _, a := range []string{"--mode=derive", "--health-addr=127.0.0.1:19765"} {
				if !strings.Contains(args, a) {
					t.Errorf("args %q lack %s", args, a)
				}
			}
			if p := c.LivenessProbe.HTTPGet.Port.IntValue(); p != 19765 {
				t.Errorf("liveness probe port %d", p)
			}
			for _, a := range []string{"--unknown-interfaces=report", "--startup-taint=example.com/not-ready", "--startup-taint-effect=NoExecute"} {
				if !slices.Contains(c.Args, a) {
					t.Errorf("args %v lack %s", c.Args, a)
				}
			}
			checkPolicies(t, o, "podwire-test", "example.com/not-ready", `["system:masters","platform-admins"]`, `["podwire.io/forwarding","team","tier"]`)
			paths := map[string]string{}
			for _, v := range spec.Volumes {
				paths[v.Name] = v.HostPath.Path
			}
			if paths["cni-bin"] != "/usr/libexec/cni" || paths["cni-conf"] != "/etc/kubernetes/cni/net.d" {
				t.Errorf("host paths %v", paths)
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			_, rendered, err := render(chartPath, tc.files, tc.set)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, parse(t, rendered))
		})
	}
}

// TestConfigChangeRollsDaemonSet: any change of the entry or the endpoint
// changes the pod template's checksum.
func TestConfigChangeRollsDaemonSet(t *testing.T) {
	seen := map[string]string{}
	for _, set := range []string{
		`config.sourceCheck=true`,
		`config.forwarding.namespaces=["nf-*"]`,
		`config.forwarding.namespaces=["nf-*","router"]`,
		`config.allowedVLANs="100"`,
		`kubernetesServicesEndpoint.host="192.0.2.10"`,
	} {
		_, rendered, err := render(chartPath, nil, []string{set})
		if err != nil {
			t.Fatal(err)
		}
		sum := parse(t, rendered).checksum()
		if sum == "" {
			t.Fatalf("%s: no checksum/config", set)
		}
		if other, ok := seen[sum]; ok {
			t.Errorf("%s and %s render the same checksum", other, set)
		}
		seen[sum] = set
	}
}

// TestRefused: values that cannot work fail the render, naming the value.
func TestRefused(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{`log.format="xml"`, "/log/format"},
		{`log.level="verbose"`, "/log/level"},
		{`metrics.port=0`, "/metrics/port"},
		{`config.forwarding.namespaces="nf-*"`, "forwarding/namespaces"},
		{`config.forwading={"namespaces":["nf-*"]}`, "forwading"},
		{`config.allowedVLANs=100`, "allowedVLANs"},
		{`config.vlanGrants=[{"vlans":"100","subnets":["192.0.2.0/24"],"vrrp":7}]`, "vrrp"},
		{`config.probeSNAT.interfaces=["eth0"]`, "config.probeSNAT.interfaces"},
		{`config.probeSNAT.preset="aws"`, "preset"},
		{`config.extra={"stateDir":"/var/run/x"}`, "config.extra.stateDir"},
		{`config.extra={"uplink":"eth1"}`, "config.uplink"},
		{`image.digest="0123"`, "digest"},
		{`cni.chainMode="append"`, "chainMode"},
		{`startupTaintEffect="PreferNoSchedule"`, "startupTaintEffect"},
		{`startupTaint="not a key"`, "startupTaint"},
		{`unknownInterfaces="ignore"`, "unknownInterfaces"},
		{`admissionPolicies.namespaceLabelAdmins=[]`, "namespaceLabelAdmins"},
		{`admissionPolicies.namespaceLabelAdmins=["o'brien"]`, "namespaceLabelAdmins"},
		{`admissionPolicies.namespaceLabelKeys=["a b"]`, "namespaceLabelKeys"},
		{`admissionPolicies.nodes=true`, "nodes"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			_, _, err := render(chartPath, nil, []string{tc.set})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("render error %v, want one naming %q", err, tc.want)
			}
			t.Log(err)
		})
	}
}

// TestMetricsValues: metrics off renders no /metrics flag or scrape
// annotation; on, the agent binds the port on every node address (or the
// chosen one) and carries Prometheus' scrape annotations unless told not
// to. No port is declared either way. The log values become the agent's
// flags.
func TestMetricsValues(t *testing.T) {
	flagged := func(c corev1.Container, prefix string) []string {
		var out []string
		for _, a := range c.Args {
			if strings.HasPrefix(a, prefix) {
				out = append(out, a)
			}
		}
		return out
	}
	for _, tc := range []struct {
		set      []string
		flag     string // want --metrics-bind-address=flag, "" none
		annotate bool
	}{
		{set: nil},
		{set: []string{`metrics.enabled=true`}, flag: ":9178", annotate: true},
		{set: []string{`metrics.enabled=true`, `metrics.port=9300`, `metrics.bindAddress="127.0.0.1"`, `metrics.scrapeAnnotations=false`}, flag: "127.0.0.1:9300"},
	} {
		_, rendered, err := render(chartPath, nil, tc.set)
		if err != nil {
			t.Fatalf("%v: %v", tc.set, err)
		}
		o := parse(t, rendered)
		c := o.container(t)
		got := flagged(c, "--metrics-bind-address=")
		ann := o.ds.Spec.Template.Annotations
		switch {
		case tc.flag == "" && (len(got) > 0 || len(c.Ports) > 0 || ann["prometheus.io/scrape"] != ""):
			t.Errorf("%v: metrics off, but flag %v, ports %v, annotations %v", tc.set, got, c.Ports, ann)
		case tc.flag != "" && (len(got) != 1 || got[0] != "--metrics-bind-address="+tc.flag):
			t.Errorf("%v: flags %v, want --metrics-bind-address=%s", tc.set, got, tc.flag)
		case len(c.Ports) > 0:
			// With the host network a declared port is a host port: the
			// scheduler would keep a surge's second agent off the node.
			t.Errorf("%v: ports %+v declared, want none (the default update is a surge)", tc.set, c.Ports)
		}
		if tc.flag != "" {
			port := tc.flag[strings.LastIndex(tc.flag, ":")+1:]
			scraped := ann["prometheus.io/scrape"] == "true" && ann["prometheus.io/port"] == port && ann["prometheus.io/path"] == "/metrics"
			if scraped != tc.annotate {
				t.Errorf("%v: scrape annotations %v, want them %v", tc.set, ann, tc.annotate)
			}
		}
		if l := flagged(c, "--log-"); strings.Join(l, " ") != "--log-format=text --log-level=info" {
			t.Errorf("%v: log flags %v", tc.set, l)
		}
	}
	_, rendered, err := render(chartPath, nil, []string{`log.format="json"`, `log.level="warn"`})
	if err != nil {
		t.Fatal(err)
	}
	if l := flagged(parse(t, rendered).container(t), "--log-"); strings.Join(l, " ") != "--log-format=json --log-level=warn" {
		t.Errorf("log.format=json log.level=warn: flags %v", l)
	}
}

// TestSurgeUpdate: by default a new release replaces each node's agent by
// a surge (maxSurge 1, maxUnavailable 0): the new agent starts beside the
// old one and takes the node over, named by its pod UID (POD_UID). The
// strategy is a value; a type the DaemonSet does not know is refused.
func TestSurgeUpdate(t *testing.T) {
	_, rendered, err := render(chartPath, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := parse(t, rendered)
	ru := o.ds.Spec.UpdateStrategy.RollingUpdate
	if o.ds.Spec.UpdateStrategy.Type != "RollingUpdate" || ru == nil || ru.MaxSurge == nil || ru.MaxSurge.String() != "1" ||
		ru.MaxUnavailable == nil || ru.MaxUnavailable.String() != "0" {
		t.Errorf("default updateStrategy %+v, want RollingUpdate with maxSurge 1, maxUnavailable 0", o.ds.Spec.UpdateStrategy)
	}
	uid := false
	for _, e := range o.container(t).Env {
		uid = uid || (e.Name == "POD_UID" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.uid")
	}
	if !uid {
		t.Errorf("no POD_UID from metadata.uid in %+v", o.container(t).Env)
	}
	_, rendered, err = render(chartPath, nil, []string{"updateStrategy.rollingUpdate.maxSurge=0", "updateStrategy.rollingUpdate.maxUnavailable=1"})
	if err != nil {
		t.Fatal(err)
	}
	if ru := parse(t, rendered).ds.Spec.UpdateStrategy.RollingUpdate; ru.MaxSurge.String() != "0" || ru.MaxUnavailable.String() != "1" {
		t.Errorf("updateStrategy from values: %+v, want maxSurge 0, maxUnavailable 1", ru)
	}
	if _, _, err := render(chartPath, nil, []string{"updateStrategy.type=Recreate"}); err == nil || !strings.Contains(err.Error(), "updateStrategy") {
		t.Errorf("updateStrategy.type=Recreate: render error %v, want one naming updateStrategy", err)
	}
}

// multusGrant reports whether n, an object of objects.namespaced, is the
// Role of multus.namespace or its binding, in namespace.
func multusGrant(n, namespace string) bool {
	return n == "Role/podwire-agent-multus "+namespace || n == "RoleBinding/podwire-agent-multus "+namespace
}
