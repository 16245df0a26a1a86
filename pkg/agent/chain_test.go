package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	metadatafake "k8s.io/client-go/metadata/fake"
)

const (
	flannel = `{"cniVersion":"0.3.1","name":"cbr0","plugins":[{"type":"flannel","delegate":{"isDefaultGateway":true}},{"type":"portmap","capabilities":{"portMappings":true}}]}`
	cilium  = `{"cniVersion":"0.3.1","name":"cilium","plugins":[{"type":"cilium-cni","enable-debug":false}]}`
)

// TestChainModes: per primary, flannel's conflist is edited in place and
// Cilium's is left alone behind a derived 00-podwire.conflist; a rewrite of
// the primary is undone by the next Sync, and a Sync with nothing to do
// writes nothing.
func TestChainModes(t *testing.T) {
	for _, tc := range []struct {
		name, primary, file, mode string
	}{
		{"flannel", flannel, "10-flannel.conflist", ModeEdit},
		{"cilium", cilium, "05-cilium.conflist", ModeDerive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			primary := filepath.Join(dir, "net.d", tc.file)
			_ = os.MkdirAll(filepath.Dir(primary), 0o755)
			if err := os.WriteFile(primary, []byte(tc.primary), 0o644); err != nil {
				t.Fatal(err)
			}
			plugin := filepath.Join(dir, "podwire-src")
			_ = os.WriteFile(plugin, []byte("#!/bin/true\n"), 0o755)
			c := &Chain{ConfDir: filepath.Dir(primary), BinDir: filepath.Join(dir, "bin"), Plugin: plugin, Mode: ModeAuto}
			for round := range 3 {
				res, err := c.Sync()
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				if res.Mode != tc.mode {
					t.Fatalf("mode %s, want %s", res.Mode, tc.mode)
				}
				if wantChange := round != 1; res.ConflistChanged != wantChange {
					t.Errorf("round %d: conflist changed %v, want %v", round, res.ConflistChanged, wantChange)
				}
				got, _ := os.ReadFile(res.Conflist)
				if !strings.Contains(string(got), `"type": "podwire"`) || !strings.Contains(string(got), tc.name) {
					t.Fatalf("round %d: %s holds no podwire after the primary:\n%s", round, res.Conflist, got)
				}
				if round == 2 && !strings.Contains(string(got), "rewritten") {
					t.Fatalf("%s does not follow the primary's rewrite:\n%s", res.Conflist, got)
				}
				if p, _ := os.ReadFile(primary); tc.mode == ModeDerive && string(p) != tc.primary {
					t.Fatalf("derive mode touched the primary's file:\n%s", p)
				}
				if round == 1 {
					// The primary's installer rewrites its file (a new
					// version of it, without podwire).
					tc.primary = strings.Replace(tc.primary, `"name":`, `"rewritten":true,"name":`, 1)
					if err := os.WriteFile(primary, []byte(tc.primary), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			if _, err := os.Stat(filepath.Join(c.BinDir, "podwire")); err != nil {
				t.Errorf("binary not installed: %v", err)
			}
		})
	}
}

// TestPodsGetOnMissAndUID: a pod the informer has not listed is read with
// one GET; a UID that differs is refused with code 999 naming the UID; a pod
// the API does not have is refused as well.
func TestPodsGetOnMissAndUID(t *testing.T) {
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	pod := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "nf", Name: "r", UID: "u1", Annotations: map[string]string{"podwire.io/forwarding": "true"}}}
	p := NewPods(metadatafake.NewSimpleMetadataClient(scheme, []runtime.Object{pod}...), "worker-1", 0) // not running: every answer is a GET
	ctx := context.Background()
	if r := p.Annotations(ctx, "nf", "r", "u1"); r.Code != 0 || r.Source != "get" || r.Annotations["podwire.io/forwarding"] != "true" {
		t.Errorf("miss: %+v, want the annotations from a GET", r)
	}
	if r := p.Annotations(ctx, "nf", "r", "u2"); r.Code != 999 || !strings.Contains(r.Error, "UID") {
		t.Errorf("UID mismatch: %+v, want code 999 naming the UID", r)
	}
	if r := p.Annotations(ctx, "nf", "gone", "u3"); r.Code != 999 {
		t.Errorf("pod not in the API: %+v, want code 999", r)
	}
}

// TestChainBinaryRestored: the installed binary, once found equal to the
// agent's, is not read again while neither file changes; overwritten in
// place with other bytes of the same size, it is put back by the next Sync.
func TestChainBinaryRestored(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "net.d", "10-flannel.conflist")
	_ = os.MkdirAll(filepath.Dir(conf), 0o755)
	if err := os.WriteFile(conf, []byte(flannel), 0o644); err != nil {
		t.Fatal(err)
	}
	plugin := filepath.Join(dir, "podwire-src")
	_ = os.WriteFile(plugin, []byte("#!/bin/true\n"), 0o755)
	c := &Chain{ConfDir: filepath.Dir(conf), BinDir: filepath.Join(dir, "bin"), Plugin: plugin, Mode: ModeAuto}
	installed := filepath.Join(c.BinDir, "podwire")
	for i, tc := range []struct {
		name    string
		tamper  func() error
		changed bool
	}{
		{"first", func() error { return nil }, true},
		{"unchanged", func() error { return nil }, false},
		{"overwritten in place", func() error {
			f, err := os.OpenFile(installed, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteString("#!/bin/nop\n\n")
			return err
		}, true},
		{"after the restore", func() error { return nil }, false},
	} {
		if err := tc.tamper(); err != nil {
			t.Fatal(err)
		}
		res, err := c.Sync()
		if err != nil {
			t.Fatalf("%d %s: %v", i, tc.name, err)
		}
		if res.BinaryChanged != tc.changed {
			t.Errorf("%d %s: binary changed %v, want %v", i, tc.name, res.BinaryChanged, tc.changed)
		}
		if got, _ := os.ReadFile(installed); string(got) != "#!/bin/true\n" {
			t.Errorf("%d %s: installed binary %q", i, tc.name, got)
		}
	}
}
