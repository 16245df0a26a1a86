package agent

import (
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	metadatafake "k8s.io/client-go/metadata/fake"
)

// TestStatusErrorsInOrder: the agent's findings and its reconcilers'
// errors come out of Status sorted, the same on every call, so that
// `podwire status` and the agent's Ready message do not reorder from one
// read to the next.
func TestStatusErrorsInOrder(t *testing.T) {
	md := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	a := New(Config{Node: "n1", StateDir: t.TempDir()}, md, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, what := range []string{"node data", "egress", "owner file"} {
		a.setFinding(what, errors.New(what+" broke"))
	}
	for _, name := range []string{recTables, recChain} {
		r := a.run.byName[name]
		a.run.finish(r, time.Now(), errors.New(name+" broke"), false)
	}
	first := a.Status().Errors
	if len(first) != 5 || !slices.IsSorted(first) {
		t.Fatalf("errors %q: want all five, sorted", first)
	}
	for range 50 {
		if got := a.Status().Errors; !slices.Equal(got, first) {
			t.Fatalf("errors changed order between two reads: %q then %q", first, got)
		}
	}
}
