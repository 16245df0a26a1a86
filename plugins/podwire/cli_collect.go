package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/podwire/podwire/pkg/cliapi"
	"github.com/podwire/podwire/pkg/state"
)

// cliCollect implements
//
//	podwire collect [--conflist FILE | --conf-dir DIR] [--config JSON|@FILE]
//	                --key CONTAINERID/IFNAME --uid POD_UID
//
// It removes a stale attachment, one whose pod is gone while the runtime
// never ran its DEL (containerd does not call CNI GC), by running DEL
// itself (cmdDel, with the runtime's CNI_ARGS rebuilt from the record and
// without a netns, as a runtime's second DEL): the elements, forwarding
// routes and sysctls, the VLAN port and the record go, under the node lock,
// and whatever else DEL releases. The node agent runs it once it has
// established that the pod is gone (pkg/agent, collect.go). It refuses
// (exit 1) when the record belongs to a pod of another UID than --uid; a
// record that is gone already is nothing to do (exit 0, collected false).
// It prints cliapi.CollectResult as JSON.
func cliCollect(args []string, stdout, stderr io.Writer) int {
	fs := cliFlags("podwire collect [--conflist FILE | --conf-dir DIR] [--config JSON|@FILE] --key CONTAINERID/IFNAME --uid POD_UID", stderr)
	src := entryFlags(fs)
	key := fs.String("key", "", "the attachment: containerID/ifname (the record's key)")
	uid := fs.String("uid", "", "the UID of the pod the record must belong to")
	if !parseFlags(fs, args) {
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "podwire collect: %v\n", err)
		return 1
	}
	cid, ifName, ok := strings.Cut(*key, "/")
	if !ok || cid == "" || ifName == "" || *uid == "" {
		fmt.Fprintf(stderr, "podwire collect: --key CONTAINERID/IFNAME and --uid are required (got --key %q --uid %q)\n", *key, *uid)
		fs.Usage()
		return 2
	}
	entry, from, warn, err := findEntry(src.confDir, src.conflist, src.config)
	if err == nil && warn != "" {
		err = fmt.Errorf("%s", warn)
	}
	if err != nil {
		return fail(err)
	}
	if _, err := parseEntry(entry); err != nil {
		return fail(fmt.Errorf("%s: %w", from, err))
	}
	res, err := linuxPlugin().collect(entry, cid, ifName, *uid)
	if err != nil {
		return fail(err)
	}
	return printJSON(stdout, stderr, res)
}

// collect runs DEL for the attachment cid/ifName of podwire's entry when
// its record belongs to the pod of UID uid.
func (p *plugin) collect(entry []byte, cid, ifName, uid string) (cliapi.CollectResult, error) {
	res := cliapi.CollectResult{Key: cid + "/" + ifName, UID: uid}
	conf, err := parseEntry(entry)
	if err != nil {
		return res, err
	}
	rec, err := state.New(conf.StateDir).Get(cid, ifName)
	if err != nil || rec == nil {
		return res, err
	}
	res.Pod = rec.PodRef()
	// A container ID names one sandbox, so the record's pod cannot change
	// between this read and DEL's: checked here, without the node lock
	// that DEL takes.
	if rec.PodUID != uid {
		return res, fmt.Errorf("record %s belongs to pod %s of UID %q, not %q: refusing to collect it", res.Key, res.Pod, rec.PodUID, uid)
	}
	stdin, err := delStdin(entry, rec)
	if err != nil {
		return res, err
	}
	del := &skel.CmdArgs{ContainerID: cid, IfName: ifName, StdinData: stdin,
		Args: fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_UID=%s", rec.PodNamespace, rec.PodName, rec.PodUID)}
	if err := p.cmdDel(del); err != nil {
		return res, fmt.Errorf("DEL of %s (pod %s): %w", res.Key, res.Pod, err)
	}
	res.Collected = true
	return res, nil
}

// delStdin is the network config of a DEL of rec as a runtime sends it for
// podwire's entry: the entry with the network's name (the record's) and a
// cniVersion, no prevResult.
func delStdin(entry []byte, rec *state.Record) ([]byte, error) {
	m := map[string]any{}
	if err := json.Unmarshal(entry, &m); err != nil {
		return nil, fmt.Errorf("invalid podwire entry: %w", err)
	}
	m["cniVersion"] = "1.0.0"
	m["name"] = rec.Network
	if rec.Network == "" {
		m["name"] = "podwire"
	}
	return json.Marshal(m)
}
