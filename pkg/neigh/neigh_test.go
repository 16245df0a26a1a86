package neigh

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
)

func TestNABody(t *testing.T) {
	mac, _ := net.ParseMAC("02:00:00:00:00:01")
	got := naBody(netip.MustParseAddr("2001:db8::10"), mac)
	want := []byte{
		0x20, 0, 0, 0, // override
		0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
		2, 1, 0x02, 0, 0, 0, 0, 0x01,
	}
	if !bytes.Equal(got, want) {
		t.Errorf("naBody = % x, want % x", got, want)
	}
}
