package vlan

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// printCPU prints the CPU time every process of the VM has used so far,
// summed by command name, the largest first: where the run's time goes
// under TCG (the control plane, the kubelets, the runtimes, the agents).
func printCPU() {
	byComm := map[string]float64{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime(14) stime(15): comm may hold
		// spaces and parentheses, so split after its last ')'.
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		byComm[s[open+1:end]] += (ut + st) / 100 // USER_HZ
	}
	type row struct {
		comm string
		sec  float64
	}
	var rows []row
	var total float64
	for k, v := range byComm {
		rows = append(rows, row{k, v})
		total += v
	}
	slices.SortFunc(rows, func(a, b row) int { return cmp.Compare(b.sec, a.sec) })
	var parts []string
	for _, r := range rows[:min(len(rows), 12)] {
		parts = append(parts, fmt.Sprintf("%s %.0f", r.comm, r.sec))
	}
	fmt.Printf("vm-k8s: CPU seconds of the live processes, %.0f in all: %s\n", total, strings.Join(parts, ", "))
}
