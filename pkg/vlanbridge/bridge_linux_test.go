package vlanbridge

import (
	"testing"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// TestNestedAttrs reads IFLA_BR_NF_CALL_IPTABLES out of an RTM_NEWLINK
// payload as the kernel nests it (IFLA_LINKINFO > IFLA_INFO_DATA), and
// nothing where the path is absent: nfCall's parse, without the bridge
// that only the VM suite can make.
func TestNestedAttrs(t *testing.T) {
	info := nl.NewRtAttr(unix.IFLA_LINKINFO, nil)
	info.AddRtAttr(nl.IFLA_INFO_KIND, nl.NonZeroTerminated("bridge"))
	data := info.AddRtAttr(nl.IFLA_INFO_DATA, nil)
	data.AddRtAttr(nl.IFLA_BR_NF_CALL_IPTABLES, []byte{1})
	payload := append(nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated("br0")).Serialize(), info.Serialize()...)

	attrs, err := nestedAttrs(payload, unix.IFLA_LINKINFO, nl.IFLA_INFO_DATA)
	if err != nil || len(attrs) != 1 || attrs[0].Attr.Type != nl.IFLA_BR_NF_CALL_IPTABLES || attrs[0].Value[0] != 1 {
		t.Fatalf("IFLA_LINKINFO > IFLA_INFO_DATA: %v %v, want IFLA_BR_NF_CALL_IPTABLES = 1", attrs, err)
	}
	if attrs, err := nestedAttrs(payload, unix.IFLA_LINKINFO, nl.IFLA_INFO_SLAVE_DATA); err != nil || attrs != nil {
		t.Fatalf("absent IFLA_INFO_SLAVE_DATA: %v %v, want none", attrs, err)
	}
}
