package agent

import (
	"encoding/binary"
	"testing"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// nftMsg is a notification of nf_tables: type typ, the nfgenmsg, then
// attrs.
func nftMsg(t *testing.T, typ uint16, attrs ...netlink.Attribute) netlink.Message {
	t.Helper()
	b, err := netlink.MarshalAttributes(attrs)
	if err != nil {
		t.Fatal(err)
	}
	return netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | typ)},
		Data:   append([]byte{unix.NFPROTO_INET, unix.NFNETLINK_V0, 0, 0}, b...),
	}
}

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

func genMsg(t *testing.T, gen uint32, comm string) netlink.Message {
	return nftMsg(t, unix.NFT_MSG_NEWGEN,
		netlink.Attribute{Type: unix.NFTA_GEN_ID, Data: be32(gen)},
		netlink.Attribute{Type: unix.NFTA_GEN_PROC_PID, Data: be32(4242)},
		netlink.Attribute{Type: unix.NFTA_GEN_PROC_NAME, Data: append([]byte(comm), 0)})
}

func tableMsg(t *testing.T, typ uint16, table string) netlink.Message {
	return nftMsg(t, typ, netlink.Attribute{Type: 1, Data: append([]byte(table), 0)})
}

// TestTableChanges feeds batches of notifications as the kernel sends
// them and checks which generations the agent repairs after.
func TestTableChanges(t *testing.T) {
	own := &ownGens{comm: "podwire-agent"}
	own.add(ownWindow{from: 9, to: 11})
	own.add(ownWindow{from: 0xfffffffe, to: 1}) // across the wrap
	cases := []struct {
		name    string
		batch   []netlink.Message
		changed bool // a podwire table was touched
		foreign bool
	}{
		{"kube-proxy's own table", []netlink.Message{
			tableMsg(t, unix.NFT_MSG_NEWRULE, "kube-proxy"),
			tableMsg(t, unix.NFT_MSG_NEWSETELEM, "kube-proxy"),
			genMsg(t, 20, "kube-proxy")}, false, false},
		{"nft flush ruleset", []netlink.Message{
			tableMsg(t, unix.NFT_MSG_DELRULE, "kube-proxy"),
			tableMsg(t, unix.NFT_MSG_DELTABLE, "kube-proxy"),
			tableMsg(t, unix.NFT_MSG_DELSET, "podwire"),
			tableMsg(t, unix.NFT_MSG_DELTABLE, "podwire"),
			genMsg(t, 21, "nft")}, true, true},
		{"an element deleted", []netlink.Message{
			tableMsg(t, unix.NFT_MSG_DELSETELEM, "podwire-egress"),
			genMsg(t, 22, "nft")}, true, true},
		{"the plugin's ADD", []netlink.Message{
			tableMsg(t, unix.NFT_MSG_NEWSETELEM, "podwire"),
			genMsg(t, 23, "podwire")}, true, false},
		{"the agent's repair", []netlink.Message{
			tableMsg(t, unix.NFT_MSG_NEWTABLE, "podwire"),
			genMsg(t, 10, "podwire-agent")}, true, false},
		{"the agent's repair across the wrap", []netlink.Message{
			tableMsg(t, unix.NFT_MSG_NEWTABLE, "podwire"),
			genMsg(t, 0, "podwire-agent")}, true, false},
		{"the agent's process outside a repair", []netlink.Message{
			tableMsg(t, unix.NFT_MSG_DELTABLE, "podwire"),
			genMsg(t, 12, "podwire-agent")}, true, true},
	}
	for _, tc := range cases {
		w := &tableWatch{ready: make(chan struct{}, 1)}
		// Two receives: a batch may span them.
		w.read(tc.batch[:1])
		w.read(tc.batch[1:])
		got, lost, _ := w.take()
		if lost || (len(got) == 1) != tc.changed || len(got) > 1 {
			t.Errorf("%s: changes %+v (lost %v), want a change: %v", tc.name, got, lost, tc.changed)
			continue
		}
		if tc.changed && own.foreign(got[0]) != tc.foreign {
			t.Errorf("%s: change %+v foreign = %v, want %v", tc.name, got[0], !tc.foreign, tc.foreign)
		}
	}
}
