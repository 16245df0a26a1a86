package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// startStats are the start-up figures of one command line.
type startStats struct {
	label      string
	wall, cpu  samples
	isPodwire  bool // podwire's CNI VERSION: the row the target judges
	isMinimal  bool // the minimal static Go plugin's CNI VERSION
	commandStr string
}

// startup times a plugin's start-up: the CNI VERSION verb (no config, no
// netns, no state: exec, package initialisation, one JSON line) of podwire
// against passthrough, the minimal static Go plugin (skel, types/100), and
// `podwire version` (the operator CLI), interleaved round-robin. Wall time
// around fork+exec+wait; CPU is wait4's user + system time of the process.
func (b *bench) startup() error {
	pass := filepath.Join(b.benchBin, "passthrough")
	cmds := []*startStats{
		{label: "podwire, CNI VERSION", isPodwire: true, commandStr: "CNI_COMMAND=VERSION podwire"},
		{label: "passthrough (minimal static Go plugin), CNI VERSION", isMinimal: true, commandStr: "CNI_COMMAND=VERSION passthrough"},
		{label: "podwire version (operator CLI)", commandStr: "podwire version"},
	}
	run := func(s *startStats) (cost, error) {
		var cmd *exec.Cmd
		switch {
		case s.isPodwire:
			cmd = exec.Command(b.podwireBin)
			cmd.Env = []string{"CNI_COMMAND=VERSION"}
		case s.isMinimal:
			cmd = exec.Command(pass)
			cmd.Env = []string{"CNI_COMMAND=VERSION"}
		default:
			cmd = exec.Command(b.podwireBin, "version")
		}
		cmd.Stdin = bytes.NewReader([]byte(`{"cniVersion":"1.1.0"}`))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		t0 := time.Now()
		err := cmd.Run()
		c := cost{wall: time.Since(t0)}
		if err != nil {
			return c, fmt.Errorf("%s: %v: %s", s.commandStr, err, out.Bytes())
		}
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			c.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
		return c, nil
	}
	rounds := 2 * b.opt.rounds // cheap: twice the rounds of the other phases
	for r := -b.opt.warmup; r < rounds; r++ {
		if err := checkInterrupted(); err != nil {
			return err
		}
		for _, s := range rotate(cmds, r) {
			c, err := run(s)
			if err != nil {
				return err
			}
			if r >= 0 {
				s.wall, s.cpu = append(s.wall, c.wall), append(s.cpu, c.cpu)
			}
		}
	}
	b.r.startup = cmds
	return nil
}
