package ociimage

import (
	"context"
	"fmt"
	"net"
	"net/http"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Pushable is what Push sends: a v1.Image or a v1.ImageIndex.
type Pushable interface {
	remote.Taggable
	Digest() (v1.Hash, error)
}

// PushOptions say how Push reaches the registry. The zero value pushes
// anonymously, over HTTPS except to a registry on loopback, localhost or
// a private (RFC 1918) address, which go-containerregistry reaches over
// plain HTTP when it does not answer HTTPS.
type PushOptions struct {
	// Insecure allows plain HTTP to any registry.
	Insecure bool
	// DialContext, when set, opens the connections to the registry, for
	// example inside a network namespace.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// Keychain resolves credentials (authn.DefaultKeychain reads the
	// Docker config, as `docker login` writes it); nil is anonymous.
	Keychain authn.Keychain
}

// Push uploads t (its blobs, then its manifest; an index's images too) to
// the registry as ref ("host[:port]/repository:tag") and returns t's
// digest, with which "repository@digest" names exactly what was pushed.
// Errors name the reference: a malformed one, an unreachable registry, or
// the registry's refusal.
func Push(ctx context.Context, ref string, t Pushable, o PushOptions) (v1.Hash, error) {
	var nopts []name.Option
	if o.Insecure {
		nopts = append(nopts, name.Insecure)
	}
	tag, err := name.NewTag(ref, nopts...)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("bad image reference %q (want registry/repository:tag): %w", ref, err)
	}
	ropts := []remote.Option{remote.WithContext(ctx)}
	if o.Keychain != nil {
		ropts = append(ropts, remote.WithAuthFromKeychain(o.Keychain))
	}
	if o.DialContext != nil {
		tr := remote.DefaultTransport.(*http.Transport).Clone()
		tr.DialContext = o.DialContext
		// Connections dialled in a namespace must not outlive the push.
		defer tr.CloseIdleConnections()
		ropts = append(ropts, remote.WithTransport(tr))
	}
	if err := remote.Push(tag, t, ropts...); err != nil {
		return v1.Hash{}, fmt.Errorf("failed to push %s: %w", tag, err)
	}
	return t.Digest()
}
