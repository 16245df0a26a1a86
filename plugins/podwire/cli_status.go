package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"

	"github.com/podwire/podwire/pkg/agentapi"
	"github.com/podwire/podwire/pkg/cliapi"
	"github.com/podwire/podwire/pkg/config"
	"github.com/podwire/podwire/pkg/install"
	"github.com/podwire/podwire/pkg/nft"
	"github.com/podwire/podwire/pkg/nodetables"
	"github.com/podwire/podwire/pkg/ruleset"
	"github.com/podwire/podwire/pkg/sourcecheck"
	"github.com/podwire/podwire/pkg/state"
	"github.com/podwire/podwire/pkg/vlanbridge"
)

// nodeStatus is cliapi.NodeStatus with the methods that read and print it.
type nodeStatus struct{ cliapi.NodeStatus }

// cliStatus implements
//
//	podwire status [--conflist FILE | --conf-dir DIR] [--config JSON|@FILE] [--json]
//
// It exits 0 when it could read the node, warnings or not, 1 otherwise.
func cliStatus(args []string, stdout, stderr io.Writer) int {
	fs := cliFlags("podwire status [--conflist FILE | --conf-dir DIR] [--config JSON|@FILE] [--json]", stderr)
	src := entryFlags(fs)
	asJSON := fs.Bool("json", false, "print the status as JSON")
	if !parseFlags(fs, args) {
		return 2
	}
	st, err := readStatus(src.confDir, src.conflist, src.config)
	if err != nil {
		fmt.Fprintf(stderr, "podwire status: %v\n", err)
		return 1
	}
	if *asJSON {
		return printJSON(stdout, stderr, st)
	}
	st.print(stdout)
	return 0
}

// entrySource is where a CLI command finds podwire's config: the flags
// --conf-dir, --conflist and --config that status and repair share.
type entrySource struct{ confDir, conflist, config string }

// entryFlags declares those flags on fs; their values are set by fs.Parse.
func entryFlags(fs *flag.FlagSet) *entrySource {
	s := &entrySource{}
	fs.StringVar(&s.confDir, "conf-dir", "/etc/cni/net.d", "CNI conf dir searched (in the runtime's order) for the conflist holding podwire")
	fs.StringVar(&s.conflist, "conflist", "", "conflist holding the podwire entry (default: the first in --conf-dir)")
	fs.StringVar(&s.config, "config", "", "podwire config as JSON or @FILE instead of a conflist's entry")
	return s
}

// findEntry returns the podwire entry and the file it came from: --config,
// else --conflist, else the first file of confDir (libcni's order, the one
// a runtime uses) that chains podwire.
func findEntry(confDir, conflist, cfg string) (entry []byte, from string, warn string, err error) {
	if cfg != "" {
		entry, err = readEntry(cfg)
		return entry, "", "", err
	}
	files := []string{conflist}
	if conflist == "" {
		if files, err = install.ConfFiles(confDir); err != nil {
			return nil, "", "", fmt.Errorf("failed to list CNI conf dir %q: %w", confDir, err)
		}
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			if conflist != "" {
				return nil, "", "", fmt.Errorf("failed to read conflist %q: %w", f, err)
			}
			continue
		}
		e, ok, err := install.Entry(data)
		if err != nil && conflist != "" {
			return nil, "", "", fmt.Errorf("conflist %q: %w", f, err)
		}
		if ok {
			return e, f, "", nil
		}
	}
	where := conflist
	if where == "" {
		where = confDir
	}
	return nil, "", fmt.Sprintf("no podwire entry in %s: showing the defaults (run podwire install)", where), nil
}

func readStatus(confDir, conflist, cfg string) (*nodeStatus, error) {
	entry, from, warn, err := findEntry(confDir, conflist, cfg)
	if err != nil {
		return nil, err
	}
	conf, err := parseEntry(entry)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", from, err)
	}
	st := &nodeStatus{cliapi.NodeStatus{Conflist: from, StateDir: conf.StateDir, Attachments: []cliapi.Attachment{}, Warnings: []string{}}}
	if warn != "" {
		st.Warnings = append(st.Warnings, warn)
	}

	p := linuxPlugin()
	env := p.node.tablesEnv(conf)
	if err := st.readTables(p, conf, env); err != nil {
		st.Warnings = append(st.Warnings, err.Error())
	}
	st.readLinks(conf)
	recs, err := state.New(conf.StateDir).List()
	if err != nil {
		st.Warnings = append(st.Warnings, fmt.Sprintf("state dir %s: %v", conf.StateDir, err))
	}
	drops, err := readDrops(p)
	if err != nil {
		st.Warnings = append(st.Warnings, err.Error())
	}
	for _, r := range recs {
		a := attachmentFromRecord(r)
		a.Drops = cliapi.AttachmentDrops(r, drops)
		st.Attachments = append(st.Attachments, a)
	}
	// The same health STATUS answers from (health.go); the tables' own
	// state is read above.
	h := p.readHealth(conf, env, nil)
	for _, u := range h.Unavailable {
		st.Warnings = append(st.Warnings, "STATUS fails (error 50), no pod can be added: "+u)
	}
	st.Warnings = append(st.Warnings, h.Warnings...)
	if w := ciliumWarning(from); w != "" && !slices.Contains(h.Warnings, w) {
		st.Warnings = append(st.Warnings, w)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if resp, err := agentapi.Call(ctx, conf.AgentSocket, agentapi.Request{Op: agentapi.OpStatus}); err == nil {
		st.Agent = resp.Status
	}
	return st, nil
}

// readTables verifies the tables the config wants on a node described by
// env by content and finds podwire's obsolete tables (nft.Inspect, the reads
// of every ADD).
// readDrops reads the source check's per-interface drop counters, the
// ones the node agent exports as podwire_pod_dropped_packets_total.
func readDrops(p *plugin) (map[string]sourcecheck.Drops, error) {
	c, err := p.dialNFT()
	if err != nil {
		return nil, fmt.Errorf("nftables unusable: %w", err)
	}
	return sourcecheck.ReadDrops(c)
}

func (st *nodeStatus) readTables(p *plugin, conf *config.NetConf, env nodetables.Env) error {
	c, err := p.dialNFT()
	if err != nil {
		return fmt.Errorf("nftables unusable: %w", err)
	}
	states, err := nft.Inspect(c, ruleset.Tables(conf, env), ruleset.Known())
	if err != nil {
		return fmt.Errorf("nftables unusable: %w", err)
	}
	for _, s := range states {
		ts := cliapi.Table{Name: s.ID.String(), Hash: s.Hash, Wanted: s.Wanted, Present: s.Present, Current: s.Current()}
		st.Tables = append(st.Tables, ts)
		switch {
		case !s.Wanted:
			st.Warnings = append(st.Warnings, fmt.Sprintf("nftables table %s is obsolete: the next ADD removes it", s.ID))
		case !s.Present:
			st.Warnings = append(st.Warnings, fmt.Sprintf("nftables table %s is missing: the next ADD rebuilds it", s.ID))
		case !ts.Current:
			st.Warnings = append(st.Warnings, fmt.Sprintf("nftables table %s is stale (%s): the next ADD rebuilds it", s.ID, strings.Join(s.Drift, "; ")))
		}
	}
	slices.SortFunc(st.Tables, func(a, b cliapi.Table) int { return strings.Compare(a.Name, b.Name) })
	return nil
}

// readLinks reads the node bridge and the uplink this node uses (the first
// candidate that is a link; the config's value when none is).
func (st *nodeStatus) readLinks(conf *config.NetConf) {
	uplink, _ := vlanbridge.FindUplink(conf.Uplinks())
	st.Bridge = cliapi.Link{Name: conf.Bridge}
	links, _ := netlinksafe.LinkList()
	if br, err := netlinksafe.LinkByName(conf.Bridge); err == nil {
		st.Bridge.Present = true
		st.Bridge.Up = br.Attrs().Flags&net.FlagUp != 0
		st.Bridge.Ours = br.Attrs().Alias == vlanbridge.Alias
		if b, ok := br.(*netlink.Bridge); ok && b.VlanFiltering != nil {
			st.Bridge.VLANFiltering = *b.VlanFiltering
		}
		for _, l := range links {
			if l.Attrs().MasterIndex == br.Attrs().Index && l.Attrs().Name != uplink {
				st.Bridge.Ports++
			}
		}
	}
	if conf.Uplink == "" {
		return
	}
	st.Uplink = &cliapi.Link{Name: conf.Uplink}
	if uplink == "" {
		return // a warning of readHealth
	}
	st.Uplink.Name = uplink
	up, err := netlinksafe.LinkByName(uplink)
	if err != nil {
		return // a warning of readHealth
	}
	st.Uplink.Present = true
	st.Uplink.Up = up.Attrs().Flags&net.FlagUp != 0
	if m := up.Attrs().MasterIndex; m > 0 {
		if ml, err := netlink.LinkByIndex(m); err == nil {
			st.Uplink.Master = ml.Attrs().Name
		}
	}
}

func attachmentFromRecord(r *state.Record) cliapi.Attachment {
	a := cliapi.Attachment{
		Pod: r.PodRef(), ContainerID: r.ContainerID, IfName: r.IfName,
		HostIfName: r.HostIfName, HostBridge: r.HostBridge, Unchecked: r.Unchecked, Addresses: r.Addresses, Complete: r.Complete,
		AnnotationSource: r.AnnotationSource, SourceCheck: r.SourceCheck, Forwarding: r.Forwarding,
		AllowedSourcePrefixes: r.AllowedSourcePrefixes, Egress: r.Egress,
	}
	if r.PodName == "" {
		a.Pod = "?"
	}
	for _, rt := range r.Routes {
		a.Routes = append(a.Routes, rt.Dst)
	}
	if v := r.VLAN; v != nil {
		var parts []string
		if v.PVID != 0 {
			parts = append(parts, "pvid "+strconv.Itoa(int(v.PVID)))
		}
		if len(v.Tagged) > 0 {
			var tags []string
			for _, t := range v.Tagged {
				tags = append(tags, strconv.Itoa(int(t)))
			}
			parts = append(parts, "tagged "+strings.Join(tags, ","))
		}
		a.VLAN = fmt.Sprintf("%s on %s via %s (%s)", v.PodIfName, v.Bridge, v.HostVeth, strings.Join(parts, "; "))
	}
	return a
}

func (st *nodeStatus) print(w io.Writer) {
	if st.Conflist != "" {
		fmt.Fprintf(w, "conflist:  %s\n", st.Conflist)
	}
	fmt.Fprintf(w, "state dir: %s\n", st.StateDir)
	if a := st.Agent; a != nil {
		fmt.Fprintf(w, "agent:     node %s, ready %v, chain %s (%s), %d restores, %d table repairs, %d pods cached, egress-ip %q\n",
			a.Node, a.Ready, a.Conflist, a.Mode, a.Restores, a.Repairs, a.PodsCached, a.EgressIPs)
		for _, e := range a.Errors {
			fmt.Fprintf(w, "  agent error: %s\n", e)
		}
		for _, u := range a.Unknown {
			fmt.Fprintf(w, "  UNKNOWN interface without a podwire record: %s\n", u)
		}
		for _, r := range a.Revoked {
			fmt.Fprintf(w, "  REVOKED gate, still wired: %s\n", r)
		}
		printReconcilers(w, a.Reconcilers, time.Now())
	} else {
		fmt.Fprintln(w, "agent:     none answering (no DaemonSet on this node)")
	}
	fmt.Fprintf(w, "\ntables:\n")
	if len(st.Tables) == 0 {
		fmt.Fprintln(w, "  (none wanted by the config)")
	}
	for _, t := range st.Tables {
		state := "current"
		switch {
		case !t.Wanted:
			state = "obsolete"
		case !t.Present:
			state = "missing"
		case !t.Current:
			state = "stale"
		}
		fmt.Fprintf(w, "  %-28s %-8s %s\n", t.Name, state, t.Hash)
	}
	fmt.Fprintf(w, "\nbridge %s: %s\n", st.Bridge.Name, describeLink(st.Bridge))
	if st.Uplink != nil {
		fmt.Fprintf(w, "uplink %s: %s\n", st.Uplink.Name, describeLink(*st.Uplink))
	}
	fmt.Fprintf(w, "\nattachments: %d\n", len(st.Attachments))
	for _, a := range st.Attachments {
		var flags []string
		if !a.Complete {
			flags = append(flags, "INCOMPLETE")
		}
		if a.Forwarding {
			flags = append(flags, "forwarding")
		}
		switch {
		case a.SourceCheck && a.HostBridge != "":
			flags = append(flags, "source-check at bridge "+a.HostBridge)
		case a.SourceCheck:
			flags = append(flags, "source-check")
		case a.Unchecked != "":
			flags = append(flags, "UNCHECKED")
		}
		for _, p := range a.AllowedSourcePrefixes {
			flags = append(flags, "allow "+p.String())
		}
		for _, p := range a.Routes {
			flags = append(flags, "route "+p.String())
		}
		if a.Egress {
			flags = append(flags, "egress-snat")
		}
		if d := a.Drops; d != nil {
			flags = append(flags, fmt.Sprintf("dropped %d packets (%d bytes)", d.Packets, d.Bytes))
		}
		var addrs []string
		for _, ad := range a.Addresses {
			addrs = append(addrs, ad.String())
		}
		cid := a.ContainerID
		if len(cid) > 12 {
			cid = cid[:12]
		}
		fmt.Fprintf(w, "  %s  %s %s host=%s %s [%s]\n", a.Pod, cid, a.IfName, a.HostIfName, strings.Join(addrs, ","), strings.Join(flags, " "))
		if a.VLAN != "" {
			fmt.Fprintf(w, "      vlan: %s\n", a.VLAN)
		}
	}
	fmt.Fprintf(w, "\nwarnings: %d\n", len(st.Warnings))
	for _, wr := range st.Warnings {
		fmt.Fprintf(w, "  ! %s\n", wr)
	}
}

func describeLink(l cliapi.Link) string {
	if !l.Present {
		return "absent"
	}
	var parts []string
	if l.Up {
		parts = append(parts, "up")
	} else {
		parts = append(parts, "down")
	}
	if l.Ours {
		parts = append(parts, "podwire's")
	}
	if l.VLANFiltering {
		parts = append(parts, "vlan_filtering")
	}
	if l.Ports > 0 {
		parts = append(parts, fmt.Sprintf("%d pod ports", l.Ports))
	}
	if l.Master != "" {
		parts = append(parts, "enslaved to "+l.Master)
	}
	return strings.Join(parts, ", ")
}

// ciliumWarning is primaryWarning for the chain in conflist, for `podwire
// status` on a node without the agent (with it, readHealth reads the
// primary's type the agent wrote into stateDir).
func ciliumWarning(conflist string) string {
	if conflist == "" {
		return ""
	}
	data, err := os.ReadFile(conflist)
	if err != nil {
		return ""
	}
	var l struct {
		Plugins []struct {
			Type string `json:"type"`
		} `json:"plugins"`
	}
	if json.Unmarshal(data, &l) != nil || len(l.Plugins) == 0 {
		return ""
	}
	return primaryWarning(l.Plugins[0].Type)
}

// primaryWarning warns when the primary plugin is Cilium: with BPF host
// routing (Cilium's default where the kernel allows it) its tc programs
// redirect pod traffic past netfilter, so podwire's check never sees it and
// Cilium's own source-IP verification is what applies. podwire cannot tell
// the routing mode from the node.
func primaryWarning(typ string) string {
	if typ != "cilium-cni" {
		return ""
	}
	return "primary is Cilium: with BPF host routing its programs send pod traffic past netfilter, where podwire's source check never sees it; Cilium's own source-IP verification (enable-source-ip-verification, on by default) checks those pods"
}

// printReconcilers prints one line per agent reconciler: its passes, how
// long ago the last ended and succeeded, and its error.
func printReconcilers(w io.Writer, rs []agentapi.ReconcilerStatus, now time.Time) {
	if len(rs) == 0 {
		return
	}
	ago := func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return now.Sub(t).Round(time.Second).String() + " ago"
	}
	fmt.Fprintln(w, "  reconcilers:")
	for _, r := range rs {
		line := fmt.Sprintf("    %-18s %d passes, %d failed; last %s (took %s), last success %s",
			r.Name, r.Runs, r.Failures, ago(r.LastRun), r.Took.Round(time.Microsecond), ago(r.LastSuccess))
		if r.LastError != "" {
			line += fmt.Sprintf("; FAILING since %s: %s", ago(r.ErrorSince), r.LastError)
		}
		fmt.Fprintln(w, line)
	}
}
