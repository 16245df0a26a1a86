package agentapi

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"

	"golang.org/x/net/netutil"
	"golang.org/x/sys/unix"
)

// MaxConns is the number of connections the agent serves at once; more
// wait in the socket's backlog (each is bounded by Serve's timeout). The
// kubelet runs a node's CNI ADDs in parallel, one plugin process each.
const MaxConns = 64

// Listen opens the agent's socket at path for Serve:
//
//   - a socket left at path (a predecessor's, live or not) is removed
//     before the bind, and only then: anything else there is an error;
//   - the listener does not unlink path when closed, so an agent that
//     stops after its successor bound the same path (a surge rollout)
//     leaves the successor's socket in place;
//   - the socket is 0600, and a peer whose SO_PEERCRED uid is not 0 is
//     closed unanswered, logged;
//   - at most maxConns connections are served at once
//     (netutil.LimitListener).
func Listen(path string, maxConns int, log *slog.Logger) (net.Listener, error) {
	return listen(path, maxConns, 0, log)
}

// listen is Listen admitting peers of uid.
func listen(path string, maxConns int, uid uint32, log *slog.Logger) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("%s is a %s, not a socket: refusing to remove it", path, fi.Mode().Type())
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("failed to remove stale socket %q: %w", path, err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("failed to listen on %q: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("failed to restrict %q: %w", path, err)
	}
	return netutil.LimitListener(&peerListener{UnixListener: ln, uid: uid, log: log}, maxConns), nil
}

// peerListener accepts only peers whose SO_PEERCRED uid is uid.
type peerListener struct {
	*net.UnixListener
	uid uint32
	log *slog.Logger
}

func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			return nil, err
		}
		cred, err := peerCred(c)
		if err == nil && cred.Uid == l.uid {
			return c, nil
		}
		if err != nil {
			l.log.Warn("connection refused: no peer credentials", "error", err)
		} else {
			l.log.Warn("connection refused: peer is not root", "uid", cred.Uid, "pid", cred.Pid)
		}
		c.Close()
	}
}

// peerCred is the credentials of c's peer at connect time (unix(7),
// SO_PEERCRED).
func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, serr
}
