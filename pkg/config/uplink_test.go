package config

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// TestParseUplinks: the uplink key is an ordered candidate list; one name
// is a list of one; each candidate is an interface name, named once, and
// not the bridge. Errors are CNI error 7 naming the key and the whole value.
func TestParseUplinks(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		want        []string
		wantErr     []string // substrings of the error; nil for success
	}{
		{"none", ``, nil, nil},
		{"one name", `eth1`, []string{"eth1"}, nil},
		{"two in order", `eth1,ens5`, []string{"eth1", "ens5"}, nil},
		{"order kept", `ens5,eth1`, []string{"ens5", "eth1"}, nil},
		{"white space around names", ` eth1 , ens5 `, []string{"eth1", "ens5"}, nil},
		{"empty candidate", `eth1,,ens5`, nil, []string{`invalid uplink "eth1,,ens5"`, "candidate 2", "empty"}},
		{"trailing comma", `eth1,`, nil, []string{`invalid uplink "eth1,"`, "candidate 2"}},
		{"repeated", `eth1,ens5,eth1`, nil, []string{`invalid uplink "eth1,ens5,eth1"`, `"eth1" is named twice`}},
		{"space inside a name", `eth1,ens 5`, nil, []string{`invalid uplink "eth1,ens 5"`, "candidate 2"}},
		{"too long", `eth1,enp0s31f6abcdefg`, nil, []string{"candidate 2", "longer than 15"}},
		{"the bridge", `eth1,podwire0`, nil, []string{`invalid uplink "eth1,podwire0"`, `"podwire0" is the bridge itself`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse(conf(`"uplink":"` + tc.value + `"`))
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if got := c.Uplinks(); !slices.Equal(got, tc.want) {
					t.Errorf("Uplinks() = %q, want %q", got, tc.want)
				}
				return
			}
			var e *types.Error
			if !errors.As(err, &e) || e.Code != types.ErrInvalidNetworkConfig {
				t.Fatalf("Parse: %v, want CNI error 7", err)
			}
			for _, s := range tc.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %q", err, s)
				}
			}
		})
	}
}
