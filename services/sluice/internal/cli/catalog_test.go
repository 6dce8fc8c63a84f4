package cli

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/httpx"
)

// TestCatalogServeRefusesOpenListen: `sluice catalog serve` without
// credentials does not start on an address other hosts can reach (checked
// before the engine is opened).
func TestCatalogServeRefusesOpenListen(t *testing.T) {
	cmd := &cobra.Command{}
	cmd.SetContext(context.Background())
	err := serveCatalog(cmd, config.Catalog{URL: "embedded"}, t.TempDir(), "0.0.0.0:0", false)
	var ee *exitError
	if !errors.As(err, &ee) || !errors.Is(ee.err, httpx.ErrNoAuth) || !strings.Contains(err.Error(), "--insecure-no-auth") {
		t.Fatalf("serveCatalog on 0.0.0.0 without credentials: %v", err)
	}
}
