package nft

import (
	"errors"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

// Dial opens podwire's nftables connection, in the calling thread's netns
// unless opts name another (nftables.WithNetNSFd): one NETLINK_NETFILTER
// socket for every request and batch of an invocation, with the send buffer
// of BatchBuffer.
//
// Without it google/nftables opens a socket per request (socket, bind,
// getsockname, setsockopt, close, and a 5 KiB math/rand source seeded in
// mdlayher/netlink's NewConn): about 25 per ADD.
//
// A failed request or batch may leave replies unread on the socket
// (google/nftables' Flush returns at the first EPERM or ENOBUFS without
// reading the other acks), and the next request would read them as its
// own. So after any error other than ENOENT (a complete NLMSG_ERROR reply:
// the table or chain does not exist) the connection closes its socket and
// falls back to google/nftables' socket per request.
func Dial(opts ...nftables.ConnOption) (Conn, error) {
	c, err := nftables.New(append(opts, BatchBuffer(), nftables.AsLasting())...)
	if err != nil {
		return nil, err
	}
	return &persistentConn{c}, nil
}

// persistentConn is a *nftables.Conn over one socket until its first error.
type persistentConn struct{ *nftables.Conn }

// check drops the socket after err, unless err is ENOENT or nil.
func (c *persistentConn) check(err error) error {
	if err != nil && !errors.Is(err, unix.ENOENT) {
		_ = c.CloseLasting()
	}
	return err
}

func (c *persistentConn) Flush() error { return c.check(c.Conn.Flush()) }

func (c *persistentConn) ListTableOfFamily(name string, family nftables.TableFamily) (*nftables.Table, error) {
	t, err := c.Conn.ListTableOfFamily(name, family)
	return t, c.check(err)
}

func (c *persistentConn) ListChain(t *nftables.Table, name string) (*nftables.Chain, error) {
	ch, err := c.Conn.ListChain(t, name)
	return ch, c.check(err)
}

func (c *persistentConn) GetRules(t *nftables.Table, ch *nftables.Chain) ([]*nftables.Rule, error) {
	r, err := c.Conn.GetRules(t, ch)
	return r, c.check(err)
}

func (c *persistentConn) GetSets(t *nftables.Table) ([]*nftables.Set, error) {
	s, err := c.Conn.GetSets(t)
	return s, c.check(err)
}

func (c *persistentConn) GetSetElements(s *nftables.Set) ([]nftables.SetElement, error) {
	e, err := c.Conn.GetSetElements(s)
	return e, c.check(err)
}

func (c *persistentConn) ListTables() ([]*nftables.Table, error) {
	t, err := c.Conn.ListTables()
	return t, c.check(err)
}

// AddSet and the element calls only queue messages (their errors are
// serialisation errors, before any I/O): the embedded methods serve.
