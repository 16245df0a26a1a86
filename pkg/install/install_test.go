package install

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fixture makes a conf dir with one file and a fake podwire binary.
func fixture(t *testing.T, name, content string) (confPath, binDir, binary string) {
	t.Helper()
	dir := t.TempDir()
	confPath = filepath.Join(dir, "net.d", name)
	binDir = filepath.Join(dir, "bin")
	binary = filepath.Join(dir, "podwire-build")
	if err := os.MkdirAll(filepath.Dir(confPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(confPath, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(binary, []byte("#!/bin/sh\necho podwire\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return confPath, binDir, binary
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestInstallUninstall(t *testing.T) {
	conf, binDir, binary := fixture(t, "10-ptp.conflist", ptpList)
	o := Options{BinDir: binDir, Binary: binary, Conflist: conf}

	res, err := Install(o)
	if err != nil {
		t.Fatal(err)
	}
	if !res.BinaryChanged || !res.ConflistChanged || res.Backup != conf+BackupSuffix {
		t.Fatalf("first install: %+v", res)
	}
	if b, _ := os.ReadFile(res.Backup); string(b) != ptpList {
		t.Errorf("backup does not hold the previous content:\n%s", b)
	}
	fi, err := os.Stat(conf)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("conflist mode not kept: %v %v", fi.Mode(), err)
	}
	if fi, err := os.Stat(res.Backup); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("backup of a 0600 conflist: %v %v, want the original's 0600", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(binDir, PluginType)); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("binary not installed executable: %v", err)
	}
	installed, _ := os.ReadFile(conf)
	if p := plugins(t, installed); len(p) != 3 || p[2]["type"] != PluginType {
		t.Fatalf("conflist after install: %s", installed)
	}

	// A second run changes nothing, not even the files' times.
	before, _ := os.Stat(conf)
	res, err = Install(o)
	if err != nil || res.BinaryChanged || res.ConflistChanged {
		t.Fatalf("second install: %+v err=%v", res, err)
	}
	if after, _ := os.Stat(conf); !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("second install rewrote the conflist")
	}
	// No temporary files left behind.
	for _, n := range append(dirNames(t, filepath.Dir(conf)), dirNames(t, binDir)...) {
		if strings.HasSuffix(n, ".tmp") {
			t.Errorf("temporary file %q left behind", n)
		}
	}

	// A new binary is picked up.
	if err := os.WriteFile(binary, []byte("#!/bin/sh\necho podwire v2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if res, err = Install(o); err != nil || !res.BinaryChanged || res.ConflistChanged {
		t.Fatalf("install of a new binary: %+v err=%v", res, err)
	}

	res, err = Uninstall(o)
	if err != nil || !res.BinaryChanged || !res.ConflistChanged {
		t.Fatalf("uninstall: %+v err=%v", res, err)
	}
	after, _ := os.ReadFile(conf)
	if !jsonEqual(after, []byte(ptpList)) {
		t.Errorf("uninstall did not restore the conflist:\n%s", after)
	}
	if _, err := os.Stat(filepath.Join(binDir, PluginType)); !os.IsNotExist(err) {
		t.Errorf("binary still there after uninstall: %v", err)
	}
	if res, err = Uninstall(o); err != nil || res.BinaryChanged || res.ConflistChanged {
		t.Fatalf("second uninstall: %+v err=%v", res, err)
	}
}

func TestInstallRefusesWithoutChanges(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		content string
		config  string
		wantErr string
	}{
		{name: "single conf", file: "10-bridge.conf", content: `{"cniVersion":"1.0.0","name":"n","type":"bridge"}`, wantErr: "--convert"},
		{name: "old version", file: "10-flannel.conflist", content: strings.Replace(flannel031, "0.3.1", "0.2.0", 1), wantErr: "0.2.0"},
		{name: "bad config", file: "10-ptp.conflist", content: ptpList, config: `{"type":"ptp"}`, wantErr: `"type" is "ptp"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conf, binDir, binary := fixture(t, tc.file, tc.content)
			var cfg []byte
			if tc.config != "" {
				cfg = []byte(tc.config)
			}
			_, err := Install(Options{BinDir: binDir, Binary: binary, Conflist: conf, Config: cfg})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), conf) {
				t.Fatalf("%s: want error naming %q and containing %q, got %v", tc.name, conf, tc.wantErr, err)
			}
			if got, _ := os.ReadFile(conf); string(got) != tc.content {
				t.Errorf("%s: refused install changed the file", tc.name)
			}
			if _, err := os.Stat(binDir); !os.IsNotExist(err) {
				t.Errorf("%s: refused install touched the bin dir", tc.name)
			}
		})
	}
}

func TestInstallConvert(t *testing.T) {
	const single = `{"cniVersion":"1.0.0","name":"mynet","type":"bridge","bridge":"cni0"}`
	conf, binDir, binary := fixture(t, "10-bridge.conf", single)
	res, err := Install(Options{BinDir: binDir, Binary: binary, Conflist: conf, Convert: true})
	if err != nil {
		t.Fatal(err)
	}
	wantList := strings.TrimSuffix(conf, ".conf") + ".conflist"
	if res.Conflist != wantList || res.Backup != conf+BackupSuffix || !res.ConflistChanged {
		t.Fatalf("convert: %+v", res)
	}
	names := dirNames(t, filepath.Dir(conf))
	if strings.Join(names, " ") != "10-bridge.conf.bak 10-bridge.conflist" {
		t.Errorf("conf dir after convert: %v", names)
	}
	data, _ := os.ReadFile(wantList)
	p := plugins(t, data)
	if len(p) != 2 || p[0]["type"] != "bridge" || p[0]["bridge"] != "cni0" || p[1]["type"] != PluginType {
		t.Errorf("converted conflist: %s", data)
	}
	// Running again on the new conflist is a no-op.
	res, err = Install(Options{BinDir: binDir, Binary: binary, Conflist: wantList})
	if err != nil || res.ConflistChanged || res.BinaryChanged {
		t.Errorf("install after convert: %+v err=%v", res, err)
	}
}

func TestInstallMissingConflist(t *testing.T) {
	_, err := Install(Options{Conflist: filepath.Join(t.TempDir(), "nope.conflist")})
	if err == nil || !strings.Contains(err.Error(), "nope.conflist") {
		t.Fatalf("want error naming the missing conflist, got %v", err)
	}
}
