package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
)

// invocation is one direct run of a plugin binary, as a runtime runs it:
// CNI_* environment and the config (with prevResult) on stdin.
type invocation struct {
	dur    time.Duration
	cpu    time.Duration // user + system time of the plugin process
	faults int64         // minor page faults of the plugin process (wait4's ru_minflt)
	out    []byte
}

// execPlugin runs bin with verb for pod p in the node netns (the calling
// thread's netns is inherited by the child). wrap, when set, is a command
// line the plugin runs under (strace).
func (n *node) execPlugin(bin, verb string, p *pod, entry map[string]any, cniPath string, wrap []string) (*invocation, error) {
	conf := map[string]any{}
	for k, v := range entry {
		conf[k] = v
	}
	delete(conf, "capabilities")
	conf["cniVersion"] = "1.1.0"
	conf["name"] = p.list.Name
	if verb == "ADD" && p.result != nil {
		conf["prevResult"] = p.result
	}
	conf["runtimeConfig"] = map[string]any{"io.kubernetes.cri.pod-annotations": p.rt.CapabilityArgs["io.kubernetes.cri.pod-annotations"]}
	stdin, err := json.Marshal(conf)
	if err != nil {
		return nil, err
	}
	var args []string
	for _, kv := range p.rt.Args {
		args = append(args, kv[0]+"="+kv[1])
	}
	argv := append(append([]string{}, wrap...), bin)
	inv := &invocation{}
	err = n.ns.Do(func(ns.NetNS) error {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = []string{
			"CNI_COMMAND=" + verb,
			"CNI_CONTAINERID=" + p.rt.ContainerID,
			"CNI_NETNS=" + p.rt.NetNS,
			"CNI_IFNAME=" + p.rt.IfName,
			"CNI_ARGS=" + strings.Join(args, ";"),
			"CNI_PATH=" + cniPath,
			"PATH=/usr/sbin:/usr/bin:/sbin:/bin",
		}
		cmd.Stdin = bytes.NewReader(stdin)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		t0 := time.Now()
		err := cmd.Run()
		inv.dur = time.Since(t0)
		if err != nil {
			return fmt.Errorf("%s %s: %v: %s%s", bin, verb, err, stdout.Bytes(), stderr.Bytes())
		}
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			inv.faults = ru.Minflt
			inv.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
		inv.out = stdout.Bytes()
		return nil
	})
	return inv, err
}
