package forwarding

import (
	"fmt"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
)

// eachPodSysctl calls f, inside the pod netns at netnsPath, with each
// sysctl of a forwarding pod and its value: forwarding on for both
// families, rp_filter off for all, default and each interface (the kernel
// applies max(all, iface), and default covers interfaces added later).
func eachPodSysctl(netnsPath string, f func(key, want string) error) error {
	return ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		want := map[string]string{
			KeyIPv4Forward:         "1",
			KeyIPv6Forward:         "1",
			RPFilterKey("all"):     "0",
			RPFilterKey("default"): "0",
		}
		links, err := netlinksafe.LinkList()
		if err != nil {
			return fmt.Errorf("failed to list pod interfaces: %w", err)
		}
		for _, l := range links {
			want[RPFilterKey(l.Attrs().Name)] = "0"
		}
		for k, v := range want {
			if err := f(k, v); err != nil {
				return err
			}
		}
		return nil
	})
}

// EnablePod turns forwarding on inside the pod netns at netnsPath. The netns
// is the pod's: nothing needs undoing on DEL, it goes with the pod.
func EnablePod(netnsPath string) error {
	return eachPodSysctl(netnsPath, func(k, v string) error {
		if err := SetSysctl(k, v); err != nil {
			return fmt.Errorf("pod netns: %w", err)
		}
		return nil
	})
}

// CheckPod verifies the sysctls EnablePod set, naming the first wrong one.
func CheckPod(netnsPath string) error {
	return eachPodSysctl(netnsPath, func(k, v string) error {
		got, err := GetSysctl(k)
		if err != nil {
			return fmt.Errorf("pod netns: %w", err)
		}
		if got != v {
			return fmt.Errorf("pod netns sysctl %s is %s, want %s", k, got, v)
		}
		return nil
	})
}

// RPFilterWarning returns a warning when net.ipv4.conf.all.rp_filter of the
// calling thread's netns (the node) is above 0: the kernel then applies
// max(all, iface), so a forwarding pod's host-side rp_filter=0 is
// ineffective and IPv4 it forwards from other sources is dropped by the node.
// It returns "" when all is 0 or cannot be read.
func RPFilterWarning() string {
	v, err := GetSysctl(KeyAllRPFilter)
	if err != nil || v == "0" {
		return ""
	}
	return fmt.Sprintf("net.ipv4.conf.all.rp_filter is %s on this node: the kernel applies max(all, interface), "+
		"so forwarding pods' rp_filter=0 has no effect and IPv4 they forward from other sources is dropped; "+
		"set net.ipv4.conf.all.rp_filter=0 (podwire's nftables source check keeps ordinary pods strictly verified)", v)
}
