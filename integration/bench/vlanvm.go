package main

import (
	"fmt"
	"os"
	"strings"
)

// vlanVM is row G measured in the VM: the p50s (ms, under QEMU TCG) of
// BenchmarkVLANAttachment (integration/vm) for an ordinary podwire pod and
// a VLAN attachment, interleaved in one VM run.
type vlanVM struct {
	rounds                           int
	ordAdd, vlanAdd, ordDel, vlanDel float64
	err                              string // why there is no figure
}

// readVLANVM reads the last PODWIRE-VLAN-BENCH line of the VM's console
// output in path (key=value fields).
func readVLANVM(path string) *vlanVM {
	b, err := os.ReadFile(path)
	if err != nil {
		return &vlanVM{err: err.Error()}
	}
	// The last line: Go runs a benchmark with b.N = 1 first, then with the
	// -test.benchtime count.
	lines := strings.Split(string(b), "\n")
	for j := len(lines) - 1; j >= 0; j-- {
		line := lines[j]
		i := strings.Index(line, "PODWIRE-VLAN-BENCH ")
		if i < 0 {
			continue
		}
		v := &vlanVM{}
		kv := map[string]string{}
		for _, f := range strings.Fields(line[i:])[1:] {
			k, val, _ := strings.Cut(f, "=")
			kv[k] = val
		}
		var errs []string
		for _, f := range []struct {
			key string
			dst any
		}{
			{"rounds", &v.rounds}, {"ordinary_add_p50_ms", &v.ordAdd}, {"vlan_add_p50_ms", &v.vlanAdd},
			{"ordinary_del_p50_ms", &v.ordDel}, {"vlan_del_p50_ms", &v.vlanDel},
		} {
			if _, err := fmt.Sscan(kv[f.key], f.dst); err != nil {
				errs = append(errs, f.key)
			}
		}
		if len(errs) > 0 || v.ordAdd == 0 || v.ordDel == 0 {
			return &vlanVM{err: fmt.Sprintf("unreadable fields %v in %q", errs, strings.TrimSpace(line[i:]))}
		}
		return v
	}
	return &vlanVM{err: "no PODWIRE-VLAN-BENCH line in " + path}
}
