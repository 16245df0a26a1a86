package k8s

import (
	"testing"

	"github.com/podwire/podwire/integration/packets"
)

// newUDPSink listens on port in the namespace at nsPath until the test ends.
func newUDPSink(t *testing.T, nsPath string, port int) *packets.Sink {
	t.Helper()
	s, err := packets.NewSink(nsPath, port)
	if err != nil {
		t.Fatalf("failed to listen on UDP %d: %v", port, err)
	}
	t.Cleanup(s.Close)
	return s
}
