package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/podwire/podwire/pkg/state"
)

// TestRevokedReported: a running pod admitted by the gates is reported,
// in the agent's status and as an Event on the pod, once its namespace is
// relabelled out of forwarding.namespaceSelector, and once the config no
// longer bounds its routes; the pods the gates still admit are not (the
// control: the same check with the grants in place names no one).
func TestRevokedReported(t *testing.T) {
	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	conflist := filepath.Join(dir, "10-test.conflist")
	writeConf := func(routable string) {
		t.Helper()
		c := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"k8s","plugins":[{"type":"ptp"},{"type":"podwire","stateDir":%q,
			"forwarding":{"namespaces":["edge"],"namespaceSelector":{"matchLabels":{"tier":"nf"}},"routablePrefixes":[%q]}}]}`, stateDir, routable)
		if err := os.WriteFile(conflist, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeConf("198.51.100.0/24")
	store := state.New(stateDir)
	for i, r := range []struct {
		ns, name string
		fwd      bool
		route    string
	}{
		{"nf-a", "router", true, "198.51.100.0/25"},
		{"edge", "gw", true, "198.51.100.128/25"},
		{"plain", "web", false, ""},
	} {
		rec := &state.Record{Version: state.RecordVersion, ContainerID: fmt.Sprintf("c%d", i), IfName: "eth0", Complete: true,
			PodNamespace: r.ns, PodName: r.name, PodUID: "uid-" + r.name, Forwarding: r.fwd}
		if r.route != "" {
			rec.Routes = []state.Route{{Dst: netip.MustParsePrefix(r.route), Via: netip.MustParseAddr("10.244.0.5"), Dev: "veth0"}}
		}
		if err := store.Put(rec); err != nil {
			t.Fatal(err)
		}
	}
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	ns := func(name string, labels map[string]string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, ResourceVersion: "1"}}
	}
	md := metadatafake.NewSimpleMetadataClient(scheme, ns("nf-a", map[string]string{"tier": "nf"}), ns("edge", nil), ns("plain", nil))
	a := New(Config{Node: "n1", StateDir: stateDir}, md, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	rec := record.NewFakeRecorder(10)
	a.ev = &events{recorder: rec}
	a.st.status.Conflist = conflist
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.api.ns.Run(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), a.api.ns.Synced) {
		t.Fatal("namespaces not synced")
	}
	events := func() []string {
		var out []string
		for {
			select {
			case e := <-rec.Events:
				out = append(out, e)
			default:
				return out
			}
		}
	}

	mustPass(t, a.reconcileGates(ctx))
	if got := a.Status().Revoked; len(got) != 0 {
		t.Fatalf("with every grant in place: revoked %q, want none", got)
	}
	if e := events(); len(e) != 0 {
		t.Fatalf("with every grant in place: Events %q", e)
	}

	// nf-a relabelled out of the selector.
	relabelled := ns("nf-a", map[string]string{"tier": "web"})
	relabelled.ResourceVersion = "2"
	if err := md.Tracker().Update(namespacesResource, relabelled, ""); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if l, _ := a.api.ns.cachedLabels("nf-a"); l["tier"] == "web" {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the relabel never reached the cache")
		}
	}
	mustPass(t, a.reconcileGates(ctx))
	got := a.Status().Revoked
	if len(got) != 1 || !strings.Contains(got[0], "nf-a/router") || !strings.Contains(got[0], "forwarding.namespaceSelector") {
		t.Errorf("after the relabel: revoked %q, want nf-a/router by forwarding.namespaceSelector", got)
	}
	e := events()
	if len(e) != 1 || !strings.Contains(e[0], ReasonRevoked) || !strings.Contains(e[0], "nf-a/router") {
		t.Errorf("after the relabel: Events %q, want one %s naming nf-a/router", e, ReasonRevoked)
	}
	// Nothing changed: nothing reported again.
	mustPass(t, a.reconcileGates(ctx))
	if e := events(); len(e) != 0 {
		t.Errorf("a second check with nothing changed recorded %q", e)
	}

	// The grant of edge's routes leaves the config.
	time.Sleep(20 * time.Millisecond) // a new mtime
	writeConf("203.0.113.0/24")
	mustPass(t, a.reconcileGates(ctx))
	got = a.Status().Revoked
	if len(got) != 2 || !strings.Contains(strings.Join(got, "\n"), "edge/gw") || !strings.Contains(strings.Join(got, "\n"), "forwarding.routablePrefixes") {
		t.Errorf("after the config change: revoked %q, want nf-a/router and edge/gw (forwarding.routablePrefixes)", got)
	}
	if strings.Contains(strings.Join(got, "\n"), "plain/web") {
		t.Errorf("an ordinary pod reported: %q", got)
	}
}
