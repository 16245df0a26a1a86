package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const cliConflist = `{"cniVersion":"1.0.0","name":"cbr0","plugins":[{"type":"flannel","delegate":{"hairpinMode":true}},{"type":"portmap","capabilities":{"portMappings":true}}]}`

func runCLIArgs(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = runCLI(args, &o, &e)
	return code, o.String(), e.String()
}

func TestCLIInstallUninstall(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "10-flannel.conflist")
	binDir := filepath.Join(dir, "bin")
	entryFile := filepath.Join(dir, "entry.json")
	if err := os.WriteFile(conf, []byte(cliConflist), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(entryFile, []byte(`{"stateDir":"`+filepath.Join(dir, "state")+`","bridge":"pwclitest0","forwarding":{"namespaces":["nf-*"]}}`), 0o644); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
		wantErr  string
	}{
		{name: "usage", args: []string{"install"}, wantCode: 2, wantErr: "usage: podwire install"},
		{name: "stray argument named", args: []string{"uninstall", "--conflist", conf, "extra"}, wantCode: 2, wantErr: `unexpected argument "extra"`},
		{name: "stray argument of repair", args: []string{"repair", "now"}, wantCode: 2, wantErr: "usage: podwire repair"},
		{name: "bad config refused", args: []string{"install", "--bin-dir", binDir, "--conflist", conf, "--config", `{"mtu":-5}`}, wantCode: 1, wantErr: "mtu"},
		{name: "wrong type refused", args: []string{"install", "--conflist", conf, "--config", `{"type":"bridge"}`}, wantCode: 1, wantErr: `"type" is bridge`},
		{name: "missing config file", args: []string{"install", "--conflist", conf, "--config", "@" + dir + "/nope.json"}, wantCode: 1, wantErr: "nope.json"},
		{name: "install", args: []string{"install", "--bin-dir", binDir, "--conflist", conf, "--config", "@" + entryFile}, wantOut: "podwire entry written"},
		{name: "second install is a no-op", args: []string{"install", "--bin-dir", binDir, "--conflist", conf, "--config", "@" + entryFile}, wantOut: "conflist " + conf + ": unchanged"},
		{name: "uninstall keeping the node", args: []string{"uninstall", "--bin-dir", binDir, "--conflist", conf, "--keep-node"}, wantOut: "binary " + filepath.Join(binDir, "podwire") + ": removed"},
		{name: "second uninstall is a no-op", args: []string{"uninstall", "--bin-dir", binDir, "--conflist", conf, "--keep-node"}, wantOut: "conflist " + conf + ": unchanged"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLIArgs(tc.args...)
			if code != tc.wantCode || !strings.Contains(out, tc.wantOut) || !strings.Contains(errOut, tc.wantErr) {
				t.Fatalf("%s: code %d, stdout %q, stderr %q; want code %d, stdout with %q, stderr with %q",
					tc.name, code, out, errOut, tc.wantCode, tc.wantOut, tc.wantErr)
			}
		})
	}
	got, _ := os.ReadFile(conf)
	var a, b any
	json.Unmarshal(got, &a)
	json.Unmarshal([]byte(cliConflist), &b)
	if ja, _ := json.Marshal(a); string(ja) != func() string { jb, _ := json.Marshal(b); return string(jb) }() {
		t.Errorf("conflist after install+uninstall differs from the original:\n%s", got)
	}
}

func TestCLIInstallJSON(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "net.conflist")
	if err := os.WriteFile(conf, []byte(cliConflist), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLIArgs("install", "--conflist", conf, "--json")
	if code != 0 {
		t.Fatalf("code %d: %s", code, errOut)
	}
	var res struct {
		Conflist        string `json:"conflist"`
		ConflistChanged bool   `json:"conflistChanged"`
		Backup          string `json:"backup"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || !res.ConflistChanged || res.Backup != conf+".bak" {
		t.Fatalf("json output %q: %+v %v", out, res, err)
	}
}
