package chdbhttp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/sluice-cdc/sluice/shared/httpx"
)

// Serve answers the HTTP interface on ln until ctx is cancelled, then shuts
// down gracefully (in-flight queries get up to 10 s), with
// httpx.CatalogTimeouts. It returns nil on a clean shutdown. `sluice
// catalog serve` runs it over the embedded engine.
func Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	return ServeTimeouts(ctx, ln, h, httpx.CatalogTimeouts)
}

// ServeTimeouts is Serve with other timeouts (tests use short ones).
func ServeTimeouts(ctx context.Context, ln net.Listener, h http.Handler, t httpx.Timeouts) error {
	srv := httpx.NewHTTPServer(h, t, nil)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serving catalog http on %s: %w", ln.Addr(), err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	})
	return g.Wait()
}
