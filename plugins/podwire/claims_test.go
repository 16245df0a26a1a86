package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/podwire/podwire/pkg/agentapi"
)

// fakeAgent answers the plugin on stateDir's agent socket with answer and
// records what it was asked.
type fakeAgent struct {
	mu     sync.Mutex
	reqs   []agentapi.Request
	answer func(agentapi.Request) *agentapi.Response
}

func (f *fakeAgent) asked(op string) []agentapi.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []agentapi.Request
	for _, r := range f.reqs {
		if r.Op == op {
			out = append(out, r)
		}
	}
	return out
}

// serveAgent runs f on n's agent socket until the test ends.
func (n *testNode) serveAgent(f *fakeAgent) {
	n.t.Helper()
	if err := os.MkdirAll(n.dir, 0o700); err != nil {
		n.t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(n.dir, "agent.sock"))
	if err != nil {
		n.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.t.Cleanup(cancel)
	go func() {
		_ = agentapi.Serve(ctx, ln, 5*time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)),
			func(_ context.Context, req agentapi.Request) *agentapi.Response {
				f.mu.Lock()
				f.reqs = append(f.reqs, req)
				f.mu.Unlock()
				if req.Op != agentapi.OpClaim {
					return &agentapi.Response{}
				}
				return f.answer(req)
			})
	}()
}

// addCluster is add with claimScope "cluster".
func (n *testNode) addCluster(p testPod) error {
	args := n.args(p, true, n.conf("1.0.0", p, true, map[string]any{"claimScope": "cluster"}))
	_, _, err := testutils.CmdAddWithArgs(args, func() error { return n.p.cmdAdd(args) })
	return err
}

func (n *testNode) delCluster(p testPod) error {
	args := n.args(p, false, n.conf("1.0.0", p, false, map[string]any{"claimScope": "cluster"}))
	return testutils.CmdDelWithArgs(args, func() error { return n.p.cmdDel(args) })
}

// TestClusterClaims: with claimScope "cluster", a forwarding pod's ADD asks
// the agent to hold its route after the node's own check, and its DEL
// gives it back; an ordinary pod asks nothing. A refusal is CNI error 7
// with the agent's message (the holder named), reported as a refusal of
// its gate; an agent that cannot tell (the API unreachable) is error 11.
// Neither leaves anything behind.
func TestClusterClaims(t *testing.T) {
	held := "annotation podwire.io/routes \"198.51.100.0/25\" refused by no overlapping routes: pod nf-a/router (node n2)'s route 198.51.100.0/25 overlaps route 198.51.100.0/24 of pod nf-b/r0 (node n1)"
	for _, tc := range []struct {
		name   string
		answer *agentapi.Response
		code   uint
	}{
		{"held", &agentapi.Response{}, 0},
		{"refused", &agentapi.Response{Code: 7, Reason: agentapi.RefusalRouteOverlap, Error: held}, 7},
		{"API unreachable", &agentapi.Response{Code: 11, Error: "ClaimPool routes: the server is currently unable to handle the request"}, 11},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNode(t)
			n.wire(ordinary)
			n.wire(router)
			f := &fakeAgent{answer: func(agentapi.Request) *agentapi.Response { return tc.answer }}
			n.serveAgent(f)

			if err := n.addCluster(ordinary); err != nil {
				t.Fatalf("ADD of an ordinary pod: %v", err)
			}
			if got := f.asked(agentapi.OpClaim); len(got) != 0 {
				t.Fatalf("an ordinary pod asked the agent: %+v", got)
			}

			err := n.addCluster(router)
			claims := f.asked(agentapi.OpClaim)
			if len(claims) != 1 {
				t.Fatalf("claims asked: %+v", claims)
			}
			c := claims[0]
			if c.Attachment != router.id+"/eth0" || c.Namespace != "nf-a" || c.Name != "router" || len(c.Claims) != 1 ||
				c.Claims[0] != (agentapi.Claim{Kind: agentapi.ClaimRoute, Value: "198.51.100.0/25"}) {
				t.Errorf("claim asked: %+v", c)
			}
			if tc.code == 0 {
				if err != nil {
					t.Fatalf("ADD: %v", err)
				}
				rec := n.record(router)
				elems := n.podElements(rec)
				if err := n.delCluster(router); err != nil {
					t.Fatalf("DEL: %v", err)
				}
				if rel := f.asked(agentapi.OpRelease); len(rel) != 1 || rel[0].Attachment != router.id+"/eth0" {
					t.Errorf("releases after DEL: %+v", rel)
				}
				n.assertGone("DEL", router, elems)
				return
			}
			var cerr *types.Error
			if !errors.As(err, &cerr) || cerr.Code != tc.code {
				t.Fatalf("ADD: %v, want CNI error %d", err, tc.code)
			}
			if !strings.Contains(err.Error(), tc.answer.Error) {
				t.Errorf("ADD error %q does not carry the agent's %q", err, tc.answer.Error)
			}
			n.assertGone("refused ADD", router, nil)
			refusals := f.asked(agentapi.OpRefusal)
			if tc.code == 7 && (len(refusals) != 1 || refusals[0].Reason != agentapi.RefusalRouteOverlap) {
				t.Errorf("refusals reported: %+v", refusals)
			}
		})
	}
}

// TestClusterClaimsDelWithoutAgent: DEL of a pod whose claims are held
// works with the agent gone (the release is best effort).
func TestClusterClaimsDelWithoutAgent(t *testing.T) {
	n := newTestNode(t)
	n.wire(router)
	f := &fakeAgent{answer: func(agentapi.Request) *agentapi.Response { return &agentapi.Response{} }}
	n.serveAgent(f)
	if err := n.addCluster(router); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	elems := n.podElements(n.record(router))
	if err := os.Remove(filepath.Join(n.dir, "agent.sock")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := n.delCluster(router); err != nil {
		t.Fatalf("DEL without the agent: %v", err)
	}
	if d := time.Since(start); d > releaseTimeout {
		t.Errorf("DEL without the agent took %v", d)
	}
	n.assertGone("DEL", router, elems)
}
