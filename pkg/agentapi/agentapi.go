// Package agentapi is the protocol between the podwire plugin and the node
// agent (cmd/podwire-agent) over a unix socket in stateDir: one JSON request
// and one JSON response per connection. It links no Kubernetes module, since
// the plugin imports it.
//
// Limits: the socket is protected by its file mode (0600, root) and by the
// host path it lives in; there is no authentication beyond that.
package agentapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Ops of a Request.
const (
	// OpPod asks for a pod's annotations (Namespace, Name, UID).
	OpPod = "pod"
	// OpStatus asks for the agent's state (Response.Status).
	OpStatus = "status"
)

// maxMessage bounds a request or response, in bytes.
const maxMessage = 1 << 20

// Request is what the plugin sends.
type Request struct {
	Op        string `json:"op"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	// UID is K8S_POD_UID: the agent refuses a pod whose UID differs.
	UID string `json:"uid,omitempty"`
}

// Response is what the agent answers. Code is 0 on success, else a CNI
// error code: 11 (try again later) when the agent cannot answer yet, 999
// when the API answered no (not found, UID mismatch).
type Response struct {
	Annotations map[string]string `json:"annotations,omitempty"`
	// Source is "informer" or "get" (for logs and tests).
	Source string  `json:"source,omitempty"`
	Code   uint    `json:"code,omitempty"`
	Error  string  `json:"error,omitempty"`
	Status *Status `json:"status,omitempty"`
}

// Status is the agent's state, shown by `podwire status`.
type Status struct {
	Node    string    `json:"node"`
	Version string    `json:"version,omitempty"`
	Started time.Time `json:"started"`
	Ready   bool      `json:"ready"`
	// Conflist is the file holding podwire's entry, and Mode how the agent
	// keeps it there ("edit" the primary's conflist or "derive" its own).
	Conflist string `json:"conflist,omitempty"`
	Mode     string `json:"mode,omitempty"`
	// Restores counts the times the entry was put back after a rewrite.
	Restores int `json:"restores"`
	// Repairs counts the repairs of podwire's tables; LastRepair is the last.
	Repairs    int       `json:"repairs"`
	LastRepair time.Time `json:"lastRepair,omitzero"`
	// PodsCached is the size of the informer's cache of the node's pods.
	PodsCached int      `json:"podsCached"`
	EgressIPs  string   `json:"egressIPs,omitempty"`
	Errors     []string `json:"errors,omitempty"`
}

// Call sends req to the agent at socket and returns its response. It
// retries the connection until ctx ends (the agent may be restarting), so
// the caller bounds the wait with ctx's deadline.
func Call(ctx context.Context, socket string, req Request) (*Response, error) {
	var d net.Dialer
	var conn net.Conn
	var err error
	for {
		conn, err = d.DialContext(ctx, "unix", socket)
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no podwire agent on %s: %w", socket, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return nil, fmt.Errorf("failed to send to the podwire agent on %s: %w", socket, err)
	}
	resp := &Response{}
	if err := json.NewDecoder(io.LimitReader(conn, maxMessage)).Decode(resp); err != nil {
		return nil, fmt.Errorf("no answer from the podwire agent on %s: %w", socket, err)
	}
	return resp, nil
}

// Handler answers one request.
type Handler func(ctx context.Context, req Request) *Response

// Serve answers requests on ln until ctx ends, each connection on its own
// goroutine, each bounded by timeout.
func Serve(ctx context.Context, ln net.Listener, timeout time.Duration, h Handler) error {
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			continue
		}
		go func() {
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(timeout))
			var req Request
			if err := json.NewDecoder(io.LimitReader(conn, maxMessage)).Decode(&req); err != nil {
				return
			}
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			_ = json.NewEncoder(conn).Encode(h(cctx, req))
		}()
	}
}
