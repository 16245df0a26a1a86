package ruleset

import (
	"testing"

	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/nodetables"
	"github.com/podwire/podwire/pkg/vlanbridge"
)

// TestTablesPortCheck: the bridge port check is laid down when VLANs are
// allowed by allowedVLANs or granted by vlanGrants, and not otherwise.
func TestTablesPortCheck(t *testing.T) {
	for _, tc := range []struct {
		name, keys string
		want       bool
	}{
		{"no VLANs", ``, false},
		{"allowedVLANs", `,"allowedVLANs":"100"`, true},
		{"vlanGrants only", `,"vlanGrants":[{"vlans":"100","namespaces":["team-a"]}]`, true},
	} {
		conf, err := config.Parse([]byte(`{"cniVersion":"1.0.0","name":"n","type":"podwire"` + tc.keys + `}`))
		if err != nil {
			t.Fatal(err)
		}
		got := false
		for _, tb := range Tables(conf, nodetables.Env{}) {
			if tb.ID() == vlanbridge.PortCheckID {
				got = true
			}
		}
		if got != tc.want {
			t.Errorf("%s: port check table laid down %v, want %v", tc.name, got, tc.want)
		}
	}
}
