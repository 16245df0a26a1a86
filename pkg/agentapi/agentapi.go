// Package agentapi is the protocol between the podwire plugin and the node
// agent (cmd/podwire-agent) over a unix socket in stateDir: one JSON request
// and one JSON response per connection. It links no Kubernetes module, since
// the plugin imports it.
//
// Every request and response carries a Header with the protocol version of
// its format, checked on read (see Proto), so a plugin and an agent of
// different builds (during a rollout, or a rollback) either work together or
// fail with an error naming both builds.
//
// Limits: the socket (Listen) is protected by its file mode (0600), the
// host path it lives in (stateDir, 0700) and its peers' SO_PEERCRED uid
// (0); there is no authentication beyond that, so any root process of the
// node may ask what the plugin may ask.
package agentapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"syscall"
	"time"

	"github.com/podwire/podwire/pkg/buildinfo"
)

// Protocol versions. Proto is the version this build writes and MinProto
// the oldest it still reads; a reader accepts a message whose version lies
// in MinProto..Proto and refuses any other with an *IncompatibleError. A
// message without a version comes from a build made before the protocol was
// versioned, whose format is version 1.
//
// A change a reader of the previous version would misread (a field whose
// meaning changes, a required new field) raises Proto; a new optional field
// that older readers may ignore does not (encoding/json skips unknown
// fields). Raise MinProto only when no supported release speaks the old
// version any more: the agent answers every request in the request's
// version, so while MinProto stays, an older plugin keeps working with a
// newer agent.
const (
	Proto    = 1
	MinProto = 1
)

// Header opens every request and response.
type Header struct {
	// Proto is the version of the message's format; 0 (absent) means 1.
	Proto int `json:"proto,omitempty"`
	// MinProto is the oldest version the sender reads; 0 means Proto.
	MinProto int `json:"minProto,omitempty"`
	// Build is the sender's version (pkg/buildinfo), for messages and logs.
	Build string `json:"build,omitempty"`
}

// header is this build's Header, writing version proto.
func header(proto int) Header {
	return Header{Proto: proto, MinProto: MinProto, Build: buildinfo.Version}
}

// version is h.Proto with the absent value read as 1.
func (h Header) version() int {
	if h.Proto == 0 {
		return 1
	}
	return h.Proto
}

// reads is the range of versions the sender of h reads.
func (h Header) reads() (lo, hi int) {
	hi = h.version()
	if lo = h.MinProto; lo == 0 || lo > hi {
		lo = hi
	}
	return lo, hi
}

// readable reports whether this build reads a message of h's version.
func readable(h Header) bool {
	v := h.version()
	return MinProto <= v && v <= Proto
}

// IncompatibleError is a plugin and an agent whose protocol versions do not
// overlap. Its message names both builds and their versions.
type IncompatibleError struct {
	// Side is "plugin" or "agent": this build's role.
	Side string
	// Peer is the other side's header (its Build may be empty: an old peer).
	Peer Header
}

func (e *IncompatibleError) Error() string {
	other := "agent"
	if e.Side == "agent" {
		other = "plugin"
	}
	build := e.Peer.Build
	if build == "" {
		build = "(a build without a version)"
	}
	lo, hi := e.Peer.reads()
	return fmt.Sprintf("podwire %s %s speaks agent protocol %s and podwire %s %s speaks %s: "+
		"they cannot talk; run the plugin and the agent of one release (the agent installs its own plugin, "+
		"so this lasts only until the DaemonSet's rollout reaches this node)",
		e.Side, buildinfo.Version, span(MinProto, Proto), other, build, span(lo, hi))
}

func span(lo, hi int) string {
	if lo == hi {
		return fmt.Sprint(hi)
	}
	return fmt.Sprintf("%d-%d", lo, hi)
}

// Ops of a Request.
const (
	// OpPod asks for a pod's annotations (Namespace, Name, UID).
	OpPod = "pod"
	// OpStatus asks for the agent's state (Response.Status).
	OpStatus = "status"
	// OpRefusal tells the agent that the plugin refused a pod's ADD
	// (Reason, Namespace, Name, UID), for its podwire_refusals_total. The
	// plugin sends it with Notify: the refusal itself is the ADD's CNI
	// error and the plugin's log, whether or not an agent hears of it.
	OpRefusal = "refusal"
	// OpNamespace asks for a namespace's labels (Namespace), for the gates
	// that select namespaces by label (Response.Labels).
	OpNamespace = "namespace"
)

// Refusal reasons of an OpRefusal: the gate of the plugin that refused
// the ADD. The agent counts any other value as RefusalOther, so that a
// plugin of another release cannot grow the metric's label values.
const (
	// RefusalForwardingNamespace: a forwarding annotation in a namespace
	// that forwarding.namespaces does not match.
	RefusalForwardingNamespace = "forwarding-namespace"
	// RefusalRoutablePrefixes: a route outside forwarding.routablePrefixes.
	RefusalRoutablePrefixes = "routable-prefixes"
	// RefusalAllowedVLANs: a VLAN outside allowedVLANs.
	RefusalAllowedVLANs = "allowed-vlans"
	// RefusalBadAnnotation: a podwire.io/* annotation that does not parse.
	RefusalBadAnnotation = "bad-annotation"
	// RefusalOther: a reason this build does not know.
	RefusalOther = "other"
)

// MaxRefusalMessage bounds an OpRefusal's Message, in bytes.
const MaxRefusalMessage = 1024

// RefusalReasons are the reasons this build reports (the tenancy gates'
// of refusal_tenancy.go included), RefusalOther last.
var RefusalReasons = []string{RefusalForwardingNamespace, RefusalRoutablePrefixes,
	RefusalAllowedVLANs, RefusalBadAnnotation, RefusalSourcePrefixes, RefusalVLANSubnets,
	RefusalAddressHeld, RefusalRouteOverlap, RefusalVRRPGroup, RefusalOther}

// codeTryAgainLater is CNI error 11 (types.ErrTryAgainLater), without
// importing the CNI library into the agent's protocol.
const codeTryAgainLater = 11

// maxMessage bounds a request or response, in bytes.
const maxMessage = 1 << 20

// Request is what the plugin sends.
type Request struct {
	Header
	Op        string `json:"op"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	// UID is K8S_POD_UID: the agent refuses a pod whose UID differs.
	UID string `json:"uid,omitempty"`
	// Reason is an OpRefusal's gate (Refusal*), and Message the refusal's
	// CNI error message (at most MaxRefusalMessage bytes), for the Event
	// the agent records on the pod.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Attachment ("containerID/ifname") and Claims are an OpClaim's (an
	// OpRelease's: Attachment only), claims.go.
	Attachment string  `json:"attachment,omitempty"`
	Claims     []Claim `json:"claims,omitempty"`
}

// Response is what the agent answers. Code is 0 on success, else a CNI
// error code: 11 (try again later) when the agent cannot answer yet, 999
// when the API answered no (not found, UID mismatch).
type Response struct {
	Header
	Annotations map[string]string `json:"annotations,omitempty"`
	// Labels are an OpNamespace's answer: the namespace's labels.
	Labels map[string]string `json:"labels,omitempty"`
	// Source is "informer" or "get" (for logs and tests).
	Source string `json:"source,omitempty"`
	// Reason is the gate (a Refusal* value) of an OpClaim refused with
	// code 7.
	Reason string  `json:"reason,omitempty"`
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
	// Unknown are the node's pod interfaces without a podwire record, one
	// line each ("veth1234 (routed 10.244.0.7) checked").
	Unknown []string `json:"unknown,omitempty"`
	// Revoked are the node's attachments whose gates the current config
	// and namespace labels no longer admit, one line each naming the pod,
	// the record and the gate; they keep running as wired.
	Revoked []string `json:"revoked,omitempty"`
	// Reconcilers is each of the agent's reconcilers' state, in the order
	// the agent runs them at its start.
	Reconcilers []ReconcilerStatus `json:"reconcilers,omitempty"`
}

// ReconcilerStatus is one reconciler's state: its passes, the last one's
// outcome and when it is due next.
type ReconcilerStatus struct {
	Name string `json:"name"`
	// Runs counts its passes, Failures those that failed.
	Runs     int `json:"runs"`
	Failures int `json:"failures"`
	// LastRun is the end of its last pass, LastSuccess of its last good
	// one; Took is the last pass's duration (nanoseconds in JSON).
	LastRun     time.Time     `json:"lastRun,omitzero"`
	LastSuccess time.Time     `json:"lastSuccess,omitzero"`
	Took        time.Duration `json:"took"`
	// LastError is the last pass's error ("" when it succeeded), failing
	// since ErrorSince.
	LastError  string    `json:"lastError,omitempty"`
	ErrorSince time.Time `json:"errorSince,omitzero"`
	// Due is when its next pass is due (zero: when triggered).
	Due time.Time `json:"due,omitzero"`
}

// Call sends req to the agent at socket, with this build's Header, and
// returns its response. It retries until ctx ends (the agent may be
// restarting, so the caller bounds the wait with ctx's deadline): the
// connection, and the whole exchange when the connection broke before a
// whole answer came (an agent ending in a DaemonSet rollout accepted it and
// went; every request is a read or, OpClaim, idempotent for its
// attachment, so asking again is safe). An agent whose
// protocol versions do not overlap this build's is an *IncompatibleError.
func Call(ctx context.Context, socket string, req Request) (*Response, error) {
	req.Header = header(Proto)
	for {
		resp, err := exchange(ctx, socket, req)
		var broken *brokenError
		if !errors.As(err, &broken) {
			return resp, err
		}
		select {
		case <-ctx.Done():
			return nil, broken.err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// brokenError is a failed exchange worth another try: no agent listening
// yet, or a connection that broke before the answer.
type brokenError struct{ err error }

func (e *brokenError) Error() string { return e.err.Error() }
func (e *brokenError) Unwrap() error { return e.err }

// exchange is one connection of Call.
func exchange(ctx context.Context, socket string, req Request) (*Response, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, &brokenError{fmt.Errorf("no podwire agent on %s: %w", socket, err)}
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return nil, brokenIf(fmt.Errorf("failed to send to the podwire agent on %s: %w", socket, err))
	}
	resp := &Response{}
	if err := json.NewDecoder(io.LimitReader(conn, maxMessage)).Decode(resp); err != nil {
		return nil, brokenIf(fmt.Errorf("no answer from the podwire agent on %s: %w", socket, err))
	}
	// The agent refused our version (its answer says what it reads), or
	// answered in one we cannot read.
	if lo, hi := resp.reads(); Proto < lo || Proto > hi || !readable(resp.Header) {
		return nil, &IncompatibleError{Side: "plugin", Peer: resp.Header}
	}
	return resp, nil
}

// brokenIf marks err as worth another try when the connection ended before
// a whole message (the peer closed or reset it); a timeout or a malformed
// answer is final.
func brokenIf(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return &brokenError{err}
	}
	return err
}

// Notify sends req to the agent at socket once, without Call's retries,
// and waits for its answer until ctx's deadline: for a report whose loss
// does not matter (OpRefusal), so an absent agent (no socket, nobody
// listening) costs one failed dial and a slow one at most ctx's timeout.
// An agent too old to know req.Op answers with an error, returned as one.
func Notify(ctx context.Context, socket string, req Request) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return fmt.Errorf("no podwire agent on %s: %w", socket, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	req.Header = header(Proto)
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return fmt.Errorf("failed to send to the podwire agent on %s: %w", socket, err)
	}
	var resp Response
	if err := json.NewDecoder(io.LimitReader(conn, maxMessage)).Decode(&resp); err != nil {
		return fmt.Errorf("no answer from the podwire agent on %s: %w", socket, err)
	}
	if resp.Code != 0 {
		return fmt.Errorf("the podwire agent on %s answered %d: %s", socket, resp.Code, resp.Error)
	}
	return nil
}

// Handler answers one request.
type Handler func(ctx context.Context, req Request) *Response

// Serve answers requests on ln until ctx ends, each connection on its own
// goroutine, each bounded by timeout. h sees only requests of a version this
// build reads, and its response goes out in the request's version with this
// build's Header. Any other request is answered with CNI error 11 (try again
// later: a plugin and an agent of different releases meet only during a
// rollout) and this build's Header, without calling h, and logged.
func Serve(ctx context.Context, ln net.Listener, timeout time.Duration, log *slog.Logger, h Handler) error {
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	var backoff time.Duration
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of file descriptors, say: back off as net/http's
			// Server.Serve does (5 ms doubling to 1 s), logged, instead of
			// spinning on the error.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			log.Error("accept failed; retrying", "error", err, "in", backoff)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		go func() {
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(timeout))
			var req Request
			if err := json.NewDecoder(io.LimitReader(conn, maxMessage)).Decode(&req); err != nil {
				return
			}
			if !readable(req.Header) {
				err := &IncompatibleError{Side: "agent", Peer: req.Header}
				log.Warn("request refused", "op", req.Op, "error", err)
				_ = json.NewEncoder(conn).Encode(&Response{Header: header(Proto), Code: codeTryAgainLater, Error: err.Error()})
				return
			}
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			resp := h(cctx, req)
			if resp == nil {
				resp = &Response{Code: codeTryAgainLater, Error: "the agent gave no answer"}
			}
			resp.Header = header(req.version())
			_ = json.NewEncoder(conn).Encode(resp)
		}()
	}
}
