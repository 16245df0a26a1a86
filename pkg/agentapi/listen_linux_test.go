package agentapi

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// serveOn runs Serve on ln with a handler answering with source name, and
// returns its stop (which waits for Serve to return).
func serveOn(t *testing.T, ln net.Listener, name string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = Serve(ctx, ln, 5*time.Second, discard, func(context.Context, Request) *Response {
			return &Response{Source: name}
		})
	}()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

// callWithin is Call bounded by d.
func callWithin(sock string, d time.Duration) (*Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return Call(ctx, sock, Request{Op: OpStatus})
}

// TestListenHandover is a surge rollout on one node: agent A serves,
// agent B starts on the same path (removing A's socket before its bind)
// and serves, A stops: the plugin still reaches B, since A's listener does
// not unlink the path it no longer owns.
func TestListenHandover(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	lnA, err := Listen(sock, MaxConns, discard)
	if err != nil {
		t.Fatal(err)
	}
	stopA := serveOn(t, lnA, "A")
	if r, err := callWithin(sock, time.Second); err != nil || r.Source != "A" {
		t.Fatalf("before B: %+v %v, want A", r, err)
	}
	lnB, err := Listen(sock, MaxConns, discard)
	if err != nil {
		t.Fatalf("B's Listen beside a live A: %v", err)
	}
	serveOn(t, lnB, "B")
	if r, err := callWithin(sock, time.Second); err != nil || r.Source != "B" {
		t.Fatalf("with A and B: %+v %v, want B", r, err)
	}
	stopA()
	if r, err := callWithin(sock, time.Second); err != nil || r.Source != "B" {
		t.Fatalf("after A stopped: %+v %v, want B (A unlinked B's socket?)", r, err)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket: %v %v, want mode 0600", fi.Mode(), err)
	}
}

// TestListenPeerCred: a peer whose uid is not the one admitted is closed
// unanswered; the admitted uid is answered. (The test admits its own uid
// and another one, so it runs as any user.)
func TestListenPeerCred(t *testing.T) {
	me := uint32(os.Geteuid())
	for _, tc := range []struct {
		name   string
		admit  uint32
		answer bool
	}{{"own uid", me, true}, {"another uid", me + 1, false}} {
		sock := filepath.Join(t.TempDir(), "agent.sock")
		ln, err := listen(sock, MaxConns, tc.admit, discard)
		if err != nil {
			t.Fatal(err)
		}
		serveOn(t, ln, "agent")
		r, err := callWithin(sock, 500*time.Millisecond)
		if tc.answer && (err != nil || r.Source != "agent") {
			t.Errorf("%s: %+v %v, want an answer", tc.name, r, err)
		}
		if !tc.answer && err == nil {
			t.Errorf("%s: answered %+v", tc.name, r)
		}
	}
}

// TestListenCapsConnections: with maxConns connections held open, another
// is not served until one of them goes.
func TestListenCapsConnections(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := Listen(sock, 2, discard)
	if err != nil {
		t.Fatal(err)
	}
	serveOn(t, ln, "agent")
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	if r, err := callWithin(sock, 300*time.Millisecond); err == nil {
		t.Fatalf("a third connection was served beside 2 held ones (cap 2): %+v", r)
	}
	held[0].Close()
	if r, err := callWithin(sock, 2*time.Second); err != nil || r.Source != "agent" {
		t.Fatalf("after one held connection went: %+v %v", r, err)
	}
}

// TestListenRefusesNonSocket: a file that is not a socket at the path is
// left alone.
func TestListenRefusesNonSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.sock")
	if err := os.WriteFile(path, []byte("records"), 0o600); err != nil {
		t.Fatal(err)
	}
	if ln, err := Listen(path, MaxConns, discard); err == nil || !strings.Contains(err.Error(), "not a socket") {
		if ln != nil {
			ln.Close()
		}
		t.Fatalf("Listen over a regular file: %v", err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "records" {
		t.Errorf("the file was touched: %q %v", b, err)
	}
}
