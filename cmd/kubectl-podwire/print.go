package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/podwire/podwire/pkg/nodestatus"
)

// status prints every node's view; errUnhealthy when one is not healthy.
func (o *options) status(ctx context.Context) error {
	s, err := o.snapshot(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	views, err := s.views(now)
	if err != nil {
		return err
	}
	switch o.output {
	case "json", "yaml":
		err = o.structured(map[string]any{"nodes": views})
	default:
		err = printStatus(o.out, views, o.output == "wide", now)
	}
	if err != nil {
		return err
	}
	for _, v := range views {
		if !v.Healthy {
			return errUnhealthy
		}
	}
	return nil
}

// structured prints v as -o json or -o yaml.
func (o *options) structured(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if o.output == "yaml" {
		if b, err = yaml.JSONToYAML(b); err != nil {
			return err
		}
	} else {
		b = append(b, '\n')
	}
	_, err = o.out.Write(b)
	return err
}

func printStatus(w io.Writer, views []nodeView, wide bool, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "NODE\tHEALTHY\tAGENT\tREADY\tIN-CHAIN\tTABLES\tWIRED\tCHECKED\tUNCHECKED\tDROPS\tEGRESS\tROUTES"
	if wide {
		head += "\tCONFLIST\tREPAIRS\tLAST-REPAIR\tFAILING\tREPORTED"
	}
	fmt.Fprintln(tw, head)
	for _, v := range views {
		if !v.Selected && v.AgentPod == "" && v.Status == nil {
			fmt.Fprintf(tw, "%s\tyes\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-", v.Node)
			if wide {
				fmt.Fprint(tw, "\t-\t-\t-\t-\t-")
			}
			fmt.Fprintln(tw)
			continue
		}
		ready := "no"
		if v.AgentReady {
			ready = "yes"
		}
		if v.AgentPod == "" {
			ready = "no pod"
		}
		st := v.Status
		if st == nil {
			st = &nodestatus.Status{}
		}
		version := st.Agent.Version
		if version == "" {
			version = "-"
		}
		tables := "verified"
		if !st.Tables.Verified {
			tables = "unverified"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s", v.Node, yesNo(v.Healthy), version, ready,
			yesNo(st.Chain.InChain), tables, st.Counts.Wired, st.Counts.Checked, st.Counts.Unchecked, st.Counts.DroppedPackets,
			orDash(st.EgressIPs), orDash(strings.Join(st.Routes, ",")))
		if wide {
			var failing []string
			for _, r := range st.Failing {
				failing = append(failing, r.Name)
			}
			fmt.Fprintf(tw, "\t%s\t%d\t%s\t%s\t%s", orDash(st.Chain.Conflist), st.Tables.Repairs, age(st.Tables.LastRepair, now),
				orDash(strings.Join(failing, ",")), age(st.Updated, now))
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, v := range views {
		for _, p := range v.Problems {
			fmt.Fprintf(w, "%s: %s\n", v.Node, p)
		}
		if wide && v.Status != nil && !v.Status.Tables.LastRepair.IsZero() {
			fmt.Fprintf(w, "%s: last repair %s: %s\n", v.Node, v.Status.Tables.LastRepair.UTC().Format(time.RFC3339), v.Status.Tables.LastRepaired)
		}
	}
	return nil
}

// podRow is one wired attachment, with its node.
type podRow struct {
	Node string `json:"node"`
	nodestatus.Pod
}

// refusalRow is one refused ADD, with its node.
type refusalRow struct {
	Node string `json:"node"`
	nodestatus.Refusal
}

// pods prints the wired pods and the refused ones of every node (or
// o.node), of one namespace when -n is given.
func (o *options) pods(ctx context.Context) error {
	s, err := o.snapshot(ctx)
	if err != nil {
		return err
	}
	ns := ""
	if o.namespace {
		ns = o.overrides.Context.Namespace
	}
	var pods []podRow
	var refused []refusalRow
	var truncated []string
	for node, st := range s.statuses {
		if o.node != "" && node != o.node {
			continue
		}
		for _, p := range st.Pods {
			if ns == "" || p.Namespace == ns {
				pods = append(pods, podRow{Node: node, Pod: p})
			}
		}
		for _, r := range st.Refusals {
			if ns == "" || r.Namespace == ns {
				refused = append(refused, refusalRow{Node: node, Refusal: r})
			}
		}
		if st.PodsTruncated {
			truncated = append(truncated, node)
		}
	}
	slices.SortFunc(pods, func(a, b podRow) int {
		return cmpJoin(a.Namespace, b.Namespace, a.Name, b.Name, a.Interface, b.Interface, a.Node, b.Node)
	})
	slices.SortFunc(refused, func(a, b refusalRow) int { return a.At.Compare(b.At) })
	slices.Sort(truncated)
	if o.output == "json" || o.output == "yaml" {
		return o.structured(map[string]any{"pods": pods, "refused": refused, "truncatedNodes": truncated})
	}
	now := time.Now()
	tw := tabwriter.NewWriter(o.out, 0, 4, 2, ' ', 0)
	head := "NAMESPACE\tPOD\tNODE\tINTERFACE\tSOURCE-CHECK\tGATES\tDROPS"
	if o.output == "wide" {
		head += "\tADDRESSES"
	}
	fmt.Fprintln(tw, head)
	for _, p := range pods {
		check := yesNo(p.SourceCheck)
		if p.Unchecked != "" {
			check = "unchecked: " + p.Unchecked
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d", p.Namespace, p.Name, p.Node, p.Interface, check, orDash(gates(p.Pod)), p.DroppedPackets)
		if o.output == "wide" {
			fmt.Fprintf(tw, "\t%s", orDash(strings.Join(p.Addresses, ",")))
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(refused) > 0 {
		fmt.Fprintln(o.out)
		tw = tabwriter.NewWriter(o.out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "REFUSED\tPOD\tNODE\tGATE\tAGE\tMESSAGE")
		for _, r := range refused {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Namespace, r.Name, r.Node, r.Gate, age(r.At, now), r.Message)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, n := range truncated {
		fmt.Fprintf(o.out, "%s: more than %d attachments; the list is cut\n", n, nodestatus.MaxPods)
	}
	return nil
}

// gates names what podwire admitted a pod to, beyond its source check.
func gates(p nodestatus.Pod) string {
	var g []string
	if p.Forwarding {
		g = append(g, "forwarding")
	}
	if len(p.Routes) > 0 {
		g = append(g, "routes "+strings.Join(p.Routes, ","))
	}
	if p.VLAN != "" {
		g = append(g, "vlan "+p.VLAN)
	}
	if len(p.VRRP) > 0 {
		ids := make([]string, len(p.VRRP))
		for i, id := range p.VRRP {
			ids[i] = strconv.Itoa(id)
		}
		g = append(g, "vrrp "+strings.Join(ids, ","))
	}
	if p.Egress {
		g = append(g, "egress")
	}
	return strings.Join(g, "; ")
}

// cmpJoin compares pairs (a1, b1), (a2, b2), ... in order.
func cmpJoin(pairs ...string) int {
	for i := 0; i+1 < len(pairs); i += 2 {
		if c := strings.Compare(pairs[i], pairs[i+1]); c != 0 {
			return c
		}
	}
	return 0
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// age is how long ago t was, as kubectl prints ages ("-" for never).
func age(t time.Time, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t).Round(time.Second)
	switch {
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 2*time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
