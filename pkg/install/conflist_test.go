package install

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

const flannel031 = `{
  "name": "cbr0",
  "cniVersion": "0.3.1",
  "plugins": [{"type": "flannel", "delegate": {"hairpinMode": true, "isDefaultGateway": true}}]
}`

// ptpList has unusual key order, a big number and an unknown key: all must
// survive an edit untouched.
const ptpList = `{"cniVersion":"1.0.0","name":"net","zz-unknown":{"b":1,"a":2},
 "plugins":[{"type":"ptp","mtu":9000,"ipam":{"type":"host-local","subnet":"10.199.0.0/24","z":1e3}},
            {"type":"portmap","capabilities":{"portMappings":true}}]}`

func plugins(t *testing.T, data []byte) []map[string]any {
	t.Helper()
	var l struct {
		Plugins []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(data, &l); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, data)
	}
	return l.Plugins
}

func TestAddEntry(t *testing.T) {
	withPodwire, _, err := AddEntry([]byte(ptpList), []byte(`{"bridge":"br9","capabilities":{"portMappings":false}}`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		in          string
		entry       string
		wantChanged bool
		wantErr     string
		check       func(t *testing.T, out []byte)
	}{
		{
			name: "append default entry", in: ptpList, wantChanged: true,
			check: func(t *testing.T, out []byte) {
				p := plugins(t, out)
				if len(p) != 3 || p[2]["type"] != "podwire" {
					t.Fatalf("want podwire appended as third plugin, got %v", p)
				}
				caps := p[2]["capabilities"].(map[string]any)
				if caps[AnnotationsCapability] != true {
					t.Errorf("capability not declared: %v", caps)
				}
			},
		},
		{
			name: "append given entry keeps its keys and adds type and capability", in: ptpList,
			entry: `{"bridge":"br9","capabilities":{"portMappings":false}}`, wantChanged: true,
			check: func(t *testing.T, out []byte) {
				p := plugins(t, out)[2]
				if p["type"] != "podwire" || p["bridge"] != "br9" {
					t.Errorf("entry = %v", p)
				}
				caps := p["capabilities"].(map[string]any)
				if caps["portMappings"] != false || caps[AnnotationsCapability] != true {
					t.Errorf("capabilities = %v", caps)
				}
			},
		},
		{
			name: "an explicit false capability is kept", in: ptpList,
			entry: `{"capabilities":{"` + AnnotationsCapability + `":false}}`, wantChanged: true,
			check: func(t *testing.T, out []byte) {
				caps := plugins(t, out)[2]["capabilities"].(map[string]any)
				if caps[AnnotationsCapability] != false {
					t.Errorf("capabilities = %v, want the operator's false kept", caps)
				}
			},
		},
		{
			name: "second run with the same entry changes nothing", in: string(withPodwire),
			entry: `{"type":"podwire","bridge":"br9","capabilities":{"portMappings":false}}`,
		},
		{
			name: "second run without entry keeps the existing one", in: string(withPodwire),
		},
		{
			name: "update in place", in: string(withPodwire), entry: `{"bridge":"br10"}`, wantChanged: true,
			check: func(t *testing.T, out []byte) {
				p := plugins(t, out)
				if len(p) != 3 || p[2]["bridge"] != "br10" {
					t.Fatalf("want third plugin updated, got %v", p)
				}
				if _, ok := p[2]["capabilities"].(map[string]any)["portMappings"]; ok {
					t.Errorf("a given entry replaces the old one whole: %v", p[2])
				}
			},
		},
		{
			name: "existing entry without capability gets it", wantChanged: true,
			in: `{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"ptp"},{"type":"podwire","mtu":1400},{"type":"portmap"}]}`,
			check: func(t *testing.T, out []byte) {
				p := plugins(t, out)
				if p[1]["type"] != "podwire" || p[1]["mtu"] != 1400.0 || p[1]["capabilities"] == nil {
					t.Errorf("want entry updated where it stands, got %v", p)
				}
			},
		},
		{
			name: "cniVersions list is honoured", wantChanged: true,
			in: `{"cniVersions":["0.3.1","1.0.0"],"name":"n","plugins":[{"type":"ptp"}]}`,
		},
		{name: "single conf refused", in: `{"cniVersion":"1.0.0","name":"n","type":"bridge"}`, wantErr: "--convert"},
		{
			// The stock flannel list (kube-flannel.yml) is at 0.3.1: podwire
			// goes at its end and the list keeps its version.
			name: "stock flannel list at 0.3.1 accepted", in: flannel031, wantChanged: true,
			check: func(t *testing.T, out []byte) {
				p := plugins(t, out)
				if len(p) != 2 || p[1]["type"] != "podwire" {
					t.Fatalf("want podwire appended, got %v", p)
				}
				if !strings.Contains(string(out), `"cniVersion": "0.3.1"`) {
					t.Errorf("cniVersion changed: %s", out)
				}
			},
		},
		{name: "old cniVersion refused", in: `{"cniVersion":"0.2.0","name":"n","plugins":[{"type":"ptp"}]}`, wantErr: `raise "cniVersion"`},
		{name: "missing cniVersion refused", in: `{"name":"n","plugins":[{"type":"ptp"}]}`, wantErr: `no "cniVersion"`},
		{name: "two podwire entries refused", in: `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"podwire"},{"type":"podwire"}]}`, wantErr: "more than one"},
		{name: "plugin without type refused", in: `{"cniVersion":"1.0.0","name":"n","plugins":[{"mtu":1}]}`, wantErr: `plugin 0: entry has no "type"`},
		{name: "duplicate key refused", in: `{"cniVersion":"1.0.0","name":"n","name":"m","plugins":[]}`, wantErr: `duplicate key "name"`},
		{name: "not JSON", in: `{"cniVersion":`, wantErr: "invalid JSON"},
		{name: "non-boolean annotations capability refused", in: ptpList,
			entry: `{"capabilities":{"` + AnnotationsCapability + `":"yes"}}`, wantErr: `"` + AnnotationsCapability + `" is "yes", want true or false`},
		{name: "trailing data", in: `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"a"}]} {}`, wantErr: "trailing data"},
		{name: "wrong entry type", in: ptpList, entry: `{"type":"bridge"}`, wantErr: `"type" is "bridge"`},
		{name: "entry with conflist key", in: ptpList, entry: `{"name":"x"}`, wantErr: `key "name" belongs to the conflist`},
		{name: "entry not an object", in: ptpList, entry: `[1]`, wantErr: "podwire config: invalid JSON"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var entry []byte
			if tc.entry != "" {
				entry = []byte(tc.entry)
			}
			out, changed, err := AddEntry([]byte(tc.in), entry)
			if !errorAsWanted(t, err, tc.wantErr) {
				return
			}
			if changed != tc.wantChanged {
				t.Fatalf("%s: changed = %v, want %v", tc.name, changed, tc.wantChanged)
			}
			if !changed && string(out) != tc.in {
				t.Fatalf("%s: unchanged run must return the input as is", tc.name)
			}
			if tc.check != nil {
				tc.check(t, out)
			}
			// Idempotence: running again on the output changes nothing.
			if _, again, err := AddEntry(out, entry); err != nil || again {
				t.Errorf("%s: second run changed=%v err=%v", tc.name, again, err)
			}
		})
	}
}

// TestAddEntryKeepsOthers checks that every other plugin and key comes back
// as it was: same order, same number spelling, same unknown keys.
func TestAddEntryKeepsOthers(t *testing.T) {
	out, _, err := AddEntry([]byte(ptpList), nil)
	if err != nil {
		t.Fatal(err)
	}
	back, changed, err := RemoveEntry(out)
	if err != nil || !changed {
		t.Fatalf("remove: changed=%v err=%v", changed, err)
	}
	if !jsonEqual(back, []byte(ptpList)) {
		t.Errorf("round trip changed the conflist:\n%s", back)
	}
	s := string(out)
	for _, want := range []string{`"z": 1e3`, `"zz-unknown": {`, `"b": 1,`} {
		if !strings.Contains(s, want) {
			t.Errorf("output lost %q:\n%s", want, s)
		}
	}
	if strings.Index(s, `"cniVersion"`) > strings.Index(s, `"name"`) ||
		strings.Index(s, `"b"`) > strings.Index(s, `"a"`) ||
		strings.Index(s, `"ptp"`) > strings.Index(s, `"portmap"`) {
		t.Errorf("key or plugin order changed:\n%s", s)
	}
}

func TestRemoveEntry(t *testing.T) {
	tests := []struct {
		name        string
		in          string
		wantChanged bool
		wantTypes   []string
		wantErr     string
	}{
		{name: "removes entry", in: `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"ptp"},{"type":"podwire"},{"type":"portmap"}]}`,
			wantChanged: true, wantTypes: []string{"ptp", "portmap"}},
		{name: "no entry is a no-op", in: ptpList, wantTypes: []string{"ptp", "portmap"}},
		{name: "old cniVersion still removable", in: `{"cniVersion":"0.3.1","name":"n","plugins":[{"type":"ptp"},{"type":"podwire"}]}`,
			wantChanged: true, wantTypes: []string{"ptp"}},
		{name: "podwire alone refused", in: `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"podwire"}]}`, wantErr: "without plugins"},
		{name: "single conf refused", in: `{"cniVersion":"1.0.0","name":"n","type":"bridge"}`, wantErr: "single-plugin"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, changed, err := RemoveEntry([]byte(tc.in))
			if !errorAsWanted(t, err, tc.wantErr) {
				return
			}
			if changed != tc.wantChanged {
				t.Fatalf("%s: changed = %v, want %v", tc.name, changed, tc.wantChanged)
			}
			var types []string
			for _, p := range plugins(t, out) {
				types = append(types, p["type"].(string))
			}
			if strings.Join(types, ",") != strings.Join(tc.wantTypes, ",") {
				t.Errorf("%s: plugins = %v, want %v", tc.name, types, tc.wantTypes)
			}
		})
	}
}

func TestConvertConf(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    string
		wantErr string
	}{
		{name: "bridge conf", in: `{"cniVersion":"1.0.0","name":"mynet","type":"bridge","bridge":"cni0","ipam":{"type":"host-local","subnet":"10.199.0.0/24"}}`,
			want: `{"cniVersion":"1.0.0","name":"mynet","plugins":[{"type":"bridge","bridge":"cni0","ipam":{"type":"host-local","subnet":"10.199.0.0/24"}}]}`},
		{name: "already a list", in: ptpList, wantErr: "already a conflist"},
		{name: "no name", in: `{"cniVersion":"1.0.0","type":"bridge"}`, wantErr: `no "name"`},
		{name: "no type", in: `{"cniVersion":"1.0.0","name":"n"}`, wantErr: `no "type"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := ConvertConf([]byte(tc.in))
			if !errorAsWanted(t, err, tc.wantErr) {
				return
			}
			if !jsonEqual(out, []byte(tc.want)) {
				t.Errorf("%s: got\n%s\nwant\n%s", tc.name, out, tc.want)
			}
		})
	}
}

func TestSingleConfErrorType(t *testing.T) {
	_, _, err := AddEntry([]byte(`{"cniVersion":"1.0.0","name":"n","type":"macvlan"}`), nil)
	var sc *SingleConfError
	if !errors.As(err, &sc) || sc.Type != "macvlan" {
		t.Fatalf("want *SingleConfError for macvlan, got %v", err)
	}
}

// errorAsWanted fails t unless err contains want ("": no error wanted) and
// reports whether the case goes on (no error was wanted).
func errorAsWanted(t *testing.T, err error, want string) bool {
	t.Helper()
	if want == "" && err != nil {
		t.Fatal(err)
	}
	if want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
		t.Fatalf("want an error containing %q, got %v", want, err)
	}
	return want == ""
}
