package nft

import (
	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// batchBufferBytes is the send buffer of podwire's nftables socket.
// google/nftables sends a whole batch with one sendmsg(2), and a rebuild
// re-adds every pod's elements in one atomic batch: about 200 bytes per pod
// (3 elements with comments), so the default net.core.wmem_default
// (208 KiB) fails near 1000 pods.
const batchBufferBytes = 16 << 20

// BatchBuffer is a connection option that raises the socket's send buffer
// with SO_SNDBUFFORCE (CAP_NET_ADMIN, which a CNI plugin has), past
// net.core.wmem_max, falling back to SO_SNDBUF. Failure is not an error: the
// default buffer still serves small batches.
func BatchBuffer() nftables.ConnOption {
	return nftables.WithSockOptions(func(c *netlink.Conn) error {
		raw, err := c.SyscallConn()
		if err != nil {
			return nil
		}
		_ = raw.Control(func(fd uintptr) {
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, batchBufferBytes) != nil {
				_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, batchBufferBytes)
			}
		})
		return nil
	})
}
