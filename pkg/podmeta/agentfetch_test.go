package podmeta

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

// TestAgentFetcherIncompatibleAgent: an agent of another release that no
// longer reads this plugin's protocol version fails the ADD with CNI
// error 11 and a message naming both builds (the upgrade case of
// pkg/agentapi, as the runtime sees it).
func TestAgentFetcherIncompatibleAgent(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = bufio.NewReader(conn).ReadString('\n')
		_, _ = io.WriteString(conn, `{"proto":3,"minProto":2,"build":"v0.9.0","code":11,"error":"refused"}`+"\n")
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = AgentFetcher{Socket: sock}.PodAnnotations(ctx, Identity{Namespace: "nf-a", Name: "r1", UID: "u1"})
	var cniErr *types.Error
	if !errors.As(err, &cniErr) || cniErr.Code != types.ErrTryAgainLater {
		t.Fatalf("err %v, want CNI error 11", err)
	}
	for _, want := range []string{"nf-a/r1", "podwire agent v0.9.0 speaks 2-3", "speaks agent protocol 1"} {
		if !strings.Contains(cniErr.Msg+" "+cniErr.Details, want) {
			t.Errorf("error %q / %q does not say %q", cniErr.Msg, cniErr.Details, want)
		}
	}
}
