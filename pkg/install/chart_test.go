package install

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/podwire/podwire/pkg/config"
)

// TestHelmChartEntries: the entries the Helm chart (deploy/helm/podwire)
// renders into the ConfigMap podwire-config, with its default values and
// with every value set (tools/chart/testdata/*.entry.json, which the chart's
// own test keeps equal to the render), are what the agent installs as they
// are and what the plugin accepts: AddEntry chains each into a primary's
// conflist without changing it, libcni loads the result, and config.Parse
// takes podwire's plugin config as a runtime sends it (the list's name and
// cniVersion added).
func TestHelmChartEntries(t *testing.T) {
	files, err := filepath.Glob("../../tools/chart/testdata/*.entry.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 {
		t.Fatalf("want the chart's default and all-values entries, found %v", files)
	}
	primary, err := os.ReadFile("../../cni-conf/20-ptp.conflist")
	if err != nil {
		t.Fatal(err)
	}
	primary, _, err = RemoveEntry(primary)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			entry, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			data, changed, err := AddEntry(primary, entry)
			if err != nil || !changed {
				t.Fatalf("AddEntry: changed=%v err=%v", changed, err)
			}
			list, err := libcni.ConfListFromBytes(data)
			if err != nil {
				t.Fatalf("libcni cannot load the conflist: %v", err)
			}
			last := list.Plugins[len(list.Plugins)-1]
			if !jsonEqual(last.Bytes, entry) {
				t.Errorf("installed entry %s, want the chart's %s", last.Bytes, entry)
			}
			var conf map[string]any
			if err := json.Unmarshal(last.Bytes, &conf); err != nil {
				t.Fatal(err)
			}
			conf["name"], conf["cniVersion"] = list.Name, list.CNIVersion
			stdin, err := json.Marshal(conf)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := config.Parse(stdin); err != nil {
				t.Errorf("the plugin refuses the chart's entry: %v", err)
			}
		})
	}
}
