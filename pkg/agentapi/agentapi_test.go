package agentapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podwire/podwire/pkg/buildinfo"
)

// serve runs Serve with h on a socket in a temp dir and returns its path.
func serve(t *testing.T, h Handler) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = Serve(ctx, ln, 5*time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)), h)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return sock
}

// fakeAgent answers every connection with the raw JSON line answer, as an
// agent of another build would, and sends what it read on got.
func fakeAgent(t *testing.T, answer string) (sock string, got <-chan string) {
	t.Helper()
	sock = filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan string, 1)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(conn).ReadString('\n')
			ch <- line
			_, _ = io.WriteString(conn, answer+"\n")
			conn.Close()
		}
	}()
	return sock, ch
}

// rawCall sends the raw JSON line req, as a plugin of another build would,
// and decodes the answer.
func rawCall(t *testing.T, sock, req string) map[string]any {
	t.Helper()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, req+"\n"); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.NewDecoder(conn).Decode(&m); err != nil {
		t.Fatalf("answer to %s: %v", req, err)
	}
	return m
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return c
}

// annotations is a handler answering every pod with one annotation and
// recording the requests it saw.
func annotations(seen *[]Request) Handler {
	return func(_ context.Context, req Request) *Response {
		*seen = append(*seen, req)
		return &Response{Annotations: map[string]string{"podwire.io/forwarding": "true"}, Source: "informer"}
	}
}

// TestSameBuild: Call and Serve of one build, both headers stamped.
func TestSameBuild(t *testing.T) {
	var seen []Request
	sock := serve(t, annotations(&seen))
	resp, err := Call(ctx(t), sock, Request{Op: OpPod, Namespace: "nf", Name: "a", UID: "u"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Annotations["podwire.io/forwarding"] != "true" || resp.Proto != Proto || resp.Build != buildinfo.Version {
		t.Errorf("response %+v", resp)
	}
	if len(seen) != 1 || seen[0].Proto != Proto || seen[0].Build != buildinfo.Version || seen[0].Name != "a" {
		t.Errorf("the agent saw %+v", seen)
	}
}

// TestMixedBuilds: what each side does with a peer of another protocol
// version, the peer played with raw JSON.
func TestMixedBuilds(t *testing.T) {
	t.Run("plugin without a version, agent of this build: answered in version 1", func(t *testing.T) {
		var seen []Request
		sock := serve(t, annotations(&seen))
		m := rawCall(t, sock, `{"op":"pod","namespace":"nf","name":"a","uid":"u"}`)
		if m["proto"] != float64(1) || m["annotations"] == nil || m["code"] != nil {
			t.Errorf("answer %v", m)
		}
		if len(seen) != 1 {
			t.Errorf("the handler saw %d requests, want 1", len(seen))
		}
	})
	t.Run("plugin newer than the agent reads: refused, handler not called", func(t *testing.T) {
		var seen []Request
		sock := serve(t, annotations(&seen))
		m := rawCall(t, sock, `{"proto":2,"minProto":2,"build":"v0.9.0","op":"pod","namespace":"nf","name":"a"}`)
		msg, _ := m["error"].(string)
		if m["code"] != float64(11) || !strings.Contains(msg, "podwire agent "+buildinfo.Version+" speaks agent protocol 1") ||
			!strings.Contains(msg, "podwire plugin v0.9.0 speaks 2") || m["annotations"] != nil {
			t.Errorf("answer %v", m)
		}
		if len(seen) != 0 {
			t.Errorf("the handler saw %+v", seen)
		}
	})
	t.Run("agent without a version, plugin of this build: works", func(t *testing.T) {
		sock, got := fakeAgent(t, `{"annotations":{"k":"v"},"source":"get"}`)
		resp, err := Call(ctx(t), sock, Request{Op: OpPod, Namespace: "nf", Name: "a"})
		if err != nil || resp.Annotations["k"] != "v" {
			t.Fatalf("resp %+v, err %v", resp, err)
		}
		if req := <-got; !strings.Contains(req, `"proto":1`) || !strings.Contains(req, `"build":"`+buildinfo.Version+`"`) {
			t.Errorf("the agent read %s", req)
		}
	})
	t.Run("newer agent that still reads version 1: works", func(t *testing.T) {
		sock, _ := fakeAgent(t, `{"proto":1,"minProto":1,"build":"v0.9.0","annotations":{"k":"v"}}`)
		resp, err := Call(ctx(t), sock, Request{Op: OpPod, Namespace: "nf", Name: "a"})
		if err != nil || resp.Annotations["k"] != "v" {
			t.Fatalf("resp %+v, err %v", resp, err)
		}
	})
	t.Run("agent that no longer reads version 1: IncompatibleError naming both builds", func(t *testing.T) {
		sock, _ := fakeAgent(t, `{"proto":3,"minProto":2,"build":"v0.9.0","code":11,"error":"refused"}`)
		_, err := Call(ctx(t), sock, Request{Op: OpPod, Namespace: "nf", Name: "a"})
		var ie *IncompatibleError
		if !errors.As(err, &ie) {
			t.Fatalf("err %v, want an IncompatibleError", err)
		}
		for _, want := range []string{"podwire plugin " + buildinfo.Version + " speaks agent protocol 1",
			"podwire agent v0.9.0 speaks 2-3"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
	})
	t.Run("agent answering in a version this build cannot read: IncompatibleError", func(t *testing.T) {
		sock, _ := fakeAgent(t, `{"proto":2,"minProto":1,"build":"v0.9.0","annotations":{"k":"v"}}`)
		_, err := Call(ctx(t), sock, Request{Op: OpPod, Namespace: "nf", Name: "a"})
		var ie *IncompatibleError
		if !errors.As(err, &ie) || ie.Peer.Build != "v0.9.0" {
			t.Fatalf("err %v, want an IncompatibleError from v0.9.0", err)
		}
	})
}

// failingListener fails every Accept, counting them.
type failingListener struct {
	net.Listener
	accepts atomic.Int64
}

func (l *failingListener) Accept() (net.Conn, error) {
	l.accepts.Add(1)
	return nil, errors.New("accept4: too many open files")
}

func (l *failingListener) Close() error { return nil }

// TestServeBacksOffOnAcceptErrors: an Accept that keeps failing (EMFILE)
// is retried with a growing pause and logged, not spun on: in 300 ms at
// most a handful of tries (5, 10, 20, 40, 80, 160 ms pauses).
func TestServeBacksOffOnAcceptErrors(t *testing.T) {
	ln := &failingListener{}
	var logBuf strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logBuf}, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := Serve(ctx, ln, time.Second, log, func(context.Context, Request) *Response { return nil }); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if n := ln.accepts.Load(); n > 10 {
		t.Errorf("%d accepts in 300 ms: Serve spins on a failing Accept", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logBuf.String(), "too many open files") {
		t.Errorf("the accept error was not logged:\n%s", logBuf.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// TestNotify: a report reaches an agent with its reason; with no agent, or
// an agent too old for the op, or one that never answers, Notify fails
// within its context's timeout instead of waiting as Call does.
func TestNotify(t *testing.T) {
	var seen []Request
	var mu sync.Mutex
	sock := serve(t, func(_ context.Context, req Request) *Response {
		mu.Lock()
		seen = append(seen, req)
		mu.Unlock()
		if req.Op != OpRefusal {
			return &Response{Code: 11, Error: "unknown op"}
		}
		return &Response{}
	})
	short := func() context.Context {
		c, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		t.Cleanup(cancel)
		return c
	}
	if err := Notify(short(), sock, Request{Op: OpRefusal, Reason: RefusalAllowedVLANs, Namespace: "ns", Name: "p"}); err != nil {
		t.Fatalf("Notify: %v", err)
	}
	mu.Lock()
	if len(seen) != 1 || seen[0].Reason != RefusalAllowedVLANs || seen[0].Name != "p" {
		t.Errorf("the agent saw %+v", seen)
	}
	mu.Unlock()
	if err := Notify(short(), sock, Request{Op: "newer"}); err == nil || !strings.Contains(err.Error(), "unknown op") {
		t.Errorf("an op the agent does not know: %v", err)
	}

	start := time.Now()
	if err := Notify(short(), filepath.Join(t.TempDir(), "none.sock"), Request{Op: OpRefusal}); err == nil {
		t.Error("no agent: no error")
	}
	// A listener that never accepts: the connection is queued, the answer
	// never comes.
	mute := filepath.Join(t.TempDir(), "mute.sock")
	ln, err := net.Listen("unix", mute)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := Notify(short(), mute, Request{Op: OpRefusal}); err == nil {
		t.Error("a mute agent: no error")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Notify without an agent took %v, want about its 300 ms timeout", took)
	}
}

// TestCallRetriesABrokenExchange: an agent that accepts the connection and
// goes without answering (the old agent of a DaemonSet rollout, killed in
// the middle) is asked again until one answers; a mute agent is not asked
// past the caller's deadline.
func TestCallRetriesABrokenExchange(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var accepted atomic.Int32
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			n := accepted.Add(1)
			if n == 1 {
				// Gone with the request unread: the kernel resets the
				// connection (ECONNRESET on the reader), as helper runs saw.
				time.Sleep(50 * time.Millisecond)
				conn.Close()
				continue
			}
			if _, err := bufio.NewReader(conn).ReadString('\n'); err != nil {
				conn.Close()
				continue
			}
			if n == 2 { // gone mid-answer: the reader sees an unexpected EOF
				_, _ = io.WriteString(conn, `{"annotations":`)
			} else {
				_ = json.NewEncoder(conn).Encode(&Response{Header: header(Proto), Annotations: map[string]string{"a": "b"}})
			}
			conn.Close()
		}
	}()
	resp, err := Call(ctx(t), sock, Request{Op: OpPod, Namespace: "ns", Name: "p"})
	if err != nil {
		t.Fatalf("Call after two broken exchanges: %v", err)
	}
	if resp.Annotations["a"] != "b" || accepted.Load() != 3 {
		t.Errorf("answer %+v after %d connections, want the third's", resp, accepted.Load())
	}

	// A mute agent (accepts, never answers): the deadline ends it.
	mute := filepath.Join(t.TempDir(), "mute.sock")
	ml, err := net.Listen("unix", mute)
	if err != nil {
		t.Fatal(err)
	}
	defer ml.Close()
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := Call(short, mute, Request{Op: OpPod}); err == nil {
		t.Error("a mute agent: no error")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Call to a mute agent took %v, want about its 300 ms deadline", took)
	}
}
