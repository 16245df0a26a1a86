package agent

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestChainInUse: podwire counts as in the chain only when the file the
// runtime reads (the first in libcni's order) holds it, directly or as
// Multus's delegate; Multus's own configuration is never the file podwire
// edits.
func TestChainInUse(t *testing.T) {
	// The shapes Multus writes (its generated 00-multus.conf): the thin
	// plugin embeds the primary's conflist, the thick plugin's shim names
	// its path on the node.
	multusThin := func(delegate string) string {
		return `{"cniVersion":"0.3.1","name":"multus-cni-network","type":"multus","capabilities":{"portMappings":true},` +
			`"kubeconfig":"/etc/cni/net.d/multus.d/multus.kubeconfig","delegates":[` + delegate + `]}`
	}
	multusClusterNetwork := func(cn string) string {
		return `{"cniVersion":"0.3.1","name":"multus-cni-network","type":"multus-shim","logLevel":"verbose","logToStderr":true,` +
			`"clusterNetwork":"` + cn + `"}`
	}
	multusThick := multusClusterNetwork("/host/etc/cni/net.d/10-flannel.conflist")
	for _, tc := range []struct {
		name  string
		files map[string]string
		mode  string
		// regenerate is Multus's rewrite of its configuration after the
		// primary's file changed (nil: none).
		regenerate func(primary string) (string, string)
		// nads are the NetworkAttachmentDefinitions the API holds, by
		// namespace/name, their spec.config (nil: the agent reads none).
		nads map[string]string
		want string // substring of InUse's error before regenerate ("" = nil)
	}{
		{name: "flannel alone", files: map[string]string{"10-flannel.conflist": flannel}, mode: ModeAuto},
		{name: "derived conflist shadowed by a file sorting first", mode: ModeDerive,
			files: map[string]string{"00-a.conflist": cilium, "05-cilium.conflist": cilium},
			want:  "the runtime reads"},
		{name: "Multus thin, before and after it follows the primary", mode: ModeAuto,
			files: map[string]string{"00-multus.conf": multusThin(flannel), "10-flannel.conflist": flannel},
			regenerate: func(primary string) (string, string) {
				return "00-multus.conf", multusThin(primary)
			},
			want: "(Multus), whose delegate does not chain podwire yet"},
		{name: "Multus thick shim", mode: ModeAuto,
			files: map[string]string{"00-multus.conf": multusThick, "10-flannel.conflist": flannel}},
		// The other forms of clusterNetwork (multus-cni's getNetDelegate).
		{name: "Multus clusterNetwork by the conflist's name", mode: ModeAuto,
			files: map[string]string{"00-multus.conf": multusClusterNetwork("cbr0"), "10-flannel.conflist": flannel}},
		{name: "Multus clusterNetwork by the node's path", mode: ModeAuto,
			files: map[string]string{"00-multus.conf": multusClusterNetwork("/etc/cni/net.d/10-flannel.conflist"), "10-flannel.conflist": flannel}},
		{name: "Multus clusterNetwork a directory of another chain", mode: ModeAuto,
			files: map[string]string{
				"00-multus.conf": multusClusterNetwork("/host/etc/cni/net.d/cluster"), "10-flannel.conflist": flannel,
				"cluster/10-cluster.conflist": strings.Replace(flannel, "cbr0", "cluster", 1),
			},
			want: `whose clusterNetwork "/host/etc/cni/net.d/cluster" is `},
		{name: "Multus clusterNetwork a directory of podwire's chain", mode: ModeAuto,
			files: map[string]string{"00-multus.conf": multusClusterNetwork("/etc/cni/net.d"), "10-flannel.conflist": flannel},
			// Multus reads its own file first there: a loop, no chain of podwire.
			want: "does not chain podwire"},
		{name: "Multus clusterNetwork of no configuration's name", mode: ModeAuto,
			files: map[string]string{"00-multus.conf": multusClusterNetwork("kube-system-net"), "10-flannel.conflist": flannel},
			want:  `clusterNetwork "kube-system-net" is the name of no configuration`},
		// A name is first a NetworkAttachmentDefinition in Multus's
		// namespace, then a configuration's name.
		{name: "Multus clusterNetwork a NetworkAttachmentDefinition of podwire's chain", mode: ModeAuto,
			files: map[string]string{"00-multus.conf": multusClusterNetwork("cluster"), "10-flannel.conflist": flannel},
			nads:  map[string]string{"kube-system/cluster": nadChain(true)}},
		{name: "Multus clusterNetwork a NetworkAttachmentDefinition without podwire", mode: ModeAuto,
			files: map[string]string{"00-multus.conf": multusClusterNetwork("cluster"), "10-flannel.conflist": flannel},
			nads:  map[string]string{"kube-system/cluster": nadChain(false)},
			want:  `whose clusterNetwork "cluster" is NetworkAttachmentDefinition kube-system/cluster, which does not chain podwire`},
		{name: "Multus clusterNetwork a NetworkAttachmentDefinition of Multus's namespace", mode: ModeAuto,
			files: map[string]string{"00-multus.conf": strings.Replace(multusClusterNetwork("cluster"), `"type"`, `"multusNamespace":"multus","type"`, 1),
				"10-flannel.conflist": flannel},
			nads: map[string]string{"kube-system/cluster": nadChain(false), "multus/cluster": nadChain(true)}},
		{name: "Multus clusterNetwork a NetworkAttachmentDefinition without config", mode: ModeAuto,
			files: map[string]string{"00-multus.conf": multusClusterNetwork("cbr0"), "10-flannel.conflist": flannel},
			nads:  map[string]string{"kube-system/cbr0": ""}},
		{name: "Multus clusterNetwork a NetworkAttachmentDefinition before a configuration", mode: ModeAuto,
			files: map[string]string{"00-multus.conf": multusClusterNetwork("cbr0"), "10-flannel.conflist": flannel},
			nads:  map[string]string{"kube-system/cbr0": nadChain(false)},
			want:  "is NetworkAttachmentDefinition kube-system/cbr0, which does not chain podwire"},
		{name: "Multus clusterNetwork of no name the API or the conf dir knows", mode: ModeAuto,
			files: map[string]string{"00-multus.conf": multusClusterNetwork("nowhere"), "10-flannel.conflist": flannel},
			nads:  map[string]string{},
			want:  `clusterNetwork "nowhere" is the name of no NetworkAttachmentDefinition in kube-system and of no configuration`},
		{name: "Multus clusterNetwork outside the conf dir", mode: ModeAuto,
			files: map[string]string{"00-multus.conf": multusClusterNetwork("/opt/cni/conf/10-flannel.conflist"), "10-flannel.conflist": flannel},
			want:  "lies outside the conf dir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, data := range tc.files {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			c := &Chain{ConfDir: dir, Mode: tc.mode, HostConfDir: "/host/etc/cni/net.d"}
			if tc.nads != nil {
				c.NetworkAttachment = func(_ context.Context, namespace, name string) (string, bool, error) {
					config, ok := tc.nads[namespace+"/"+name]
					return config, ok, nil
				}
			}
			res, err := c.Sync()
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(res.Primary, "multus") {
				t.Fatalf("Sync took Multus's %s for the primary", res.Primary)
			}
			err = c.InUse(res.Conflist)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("InUse(%s): %v", res.Conflist, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("InUse(%s) = %v, want an error with %q", res.Conflist, err, tc.want)
			}
			if tc.regenerate == nil {
				return
			}
			primary, _ := os.ReadFile(res.Conflist)
			name, data := tc.regenerate(string(primary))
			if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := c.InUse(res.Conflist); err != nil {
				t.Fatalf("after Multus followed the primary: %v", err)
			}
		})
	}
}

// nadChain is a NetworkAttachmentDefinition's config: flannel's chain,
// with podwire or without.
func nadChain(podwire bool) string {
	plugins := `{"type":"flannel","delegate":{"hairpinMode":true}},{"type":"portmap","capabilities":{"portMappings":true}}`
	if podwire {
		plugins += `,{"type":"podwire"}`
	}
	return `{"cniVersion":"0.3.1","name":"cluster","plugins":[` + plugins + `]}`
}

// TestNetworkAttachments: the agent's read of a NetworkAttachmentDefinition
// answers its spec.config; no such object is found false; when the API
// does not answer, the last answer stands, and without one the error is
// returned; a definite refusal (forbidden) is returned too.
func TestNetworkAttachments(t *testing.T) {
	scheme := kruntime.NewScheme()
	nad := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
		"metadata": map[string]any{"namespace": "kube-system", "name": "cluster"},
		"spec":     map[string]any{"config": nadChain(true)},
	}}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme,
		map[schema.GroupVersionResource]string{nadResource: "NetworkAttachmentDefinitionList"})
	// By its resource: the fake's guess from the kind drops the hyphens.
	if err := client.Tracker().Create(nadResource, nad, "kube-system"); err != nil {
		t.Fatal(err)
	}
	get := NetworkAttachments(client)
	ctx := context.Background()
	if config, found, err := get(ctx, "kube-system", "cluster"); err != nil || !found || config != nadChain(true) {
		t.Fatalf("the object: %q, %v, %v", config, found, err)
	}
	if _, found, err := get(ctx, "kube-system", "other"); err != nil || found {
		t.Fatalf("no such object: found %v, %v", found, err)
	}
	var fail error
	client.PrependReactor("get", "network-attachment-definitions", func(k8stesting.Action) (bool, kruntime.Object, error) {
		return fail != nil, nil, fail
	})
	fail = &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	if config, found, err := get(ctx, "kube-system", "cluster"); err != nil || !found || config != nadChain(true) {
		t.Errorf("the API not answering: %q, %v, %v; want the last answer", config, found, err)
	}
	if _, _, err := get(ctx, "kube-system", "unseen"); err == nil {
		t.Error("the API not answering for an object never read: no error")
	}
	fail = apierrors.NewForbidden(nadResource.GroupResource(), "cluster", errors.New("RBAC"))
	if _, _, err := get(ctx, "kube-system", "cluster"); !apierrors.IsForbidden(err) {
		t.Errorf("forbidden: %v, want the refusal", err)
	}
}
