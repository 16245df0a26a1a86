package agent

import (
	"context"
	"io"
	"net/http"
	"time"

	"k8s.io/client-go/rest"
)

// RequestTimeout bounds every request of cfg's clients by d, on the
// client's side, except watches. rest.Config.Timeout would bound the
// informers' watches too: client-go sets it as the http.Client's timeout
// and as the apiserver's timeout parameter of every request, so each watch
// ends after d and is made again, every informer of every agent at that
// rate, and the apiserver serves that many watches per second more as the
// nodes grow. A watch ends when the apiserver's timeoutSeconds (which the
// reflector sets, 5 to 10 minutes) says so; a GET, LIST or PATCH that
// hangs fails after d, its body read included. cfg.Timeout is cleared.
func RequestTimeout(cfg *rest.Config, d time.Duration) {
	cfg.Timeout = 0
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &timeoutTripper{next: rt, d: d} })
}

type timeoutTripper struct {
	next http.RoundTripper
	d    time.Duration
}

func (t *timeoutTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Query().Get("watch") == "true" {
		return t.next.RoundTrip(req)
	}
	ctx, cancel := context.WithTimeout(req.Context(), t.d)
	resp, err := t.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelOnClose releases the request's timer when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
