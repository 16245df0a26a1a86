package vm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/podwire/podwire/integration/packets"
)

// capturePackets opens a capture (packets.Capture) on ifName in netns
// ("" for every interface, also those made later), closed when t ends.
func capturePackets(t *testing.T, netns ns.NetNS, ifName string) *packets.Capture {
	t.Helper()
	c, err := packets.OpenCapture(netns.Path(), ifName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// isGratuitousARP matches an ARP request for ip from ip (RFC 5227, 3).
func isGratuitousARP(ip net.IP) func([]byte) bool {
	ip4 := ip.To4()
	return func(f []byte) bool {
		return len(f) >= 42 && binary.BigEndian.Uint16(f[12:]) == unix.ETH_P_ARP &&
			binary.BigEndian.Uint16(f[20:]) == 1 && bytes.Equal(f[28:32], ip4) && bytes.Equal(f[38:42], ip4)
	}
}

// isNeighborAdvert matches an ICMPv6 neighbour advertisement of target.
func isNeighborAdvert(target net.IP) func([]byte) bool {
	return func(f []byte) bool {
		return len(f) >= 78 && binary.BigEndian.Uint16(f[12:]) == unix.ETH_P_IPV6 &&
			f[20] == unix.IPPROTO_ICMPV6 && f[54] == 136 && bytes.Equal(f[62:78], target.To16())
	}
}

// mustSee fails t unless the capture sees a matching frame within 5 s.
func mustSee(t *testing.T, c *packets.Capture, what string, match func([]byte) bool) {
	t.Helper()
	if !c.WaitFor(5*time.Second, match) {
		t.Fatal(fmt.Sprintf("did not see %s", what))
	}
}
