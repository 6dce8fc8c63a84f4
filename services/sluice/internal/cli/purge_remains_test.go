package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/services/sluice/internal/api"
)

// sluice destinations purge says what the purge left and when each goes.
func TestPrintRemains(t *testing.T) {
	until := time.Date(2026, 12, 14, 10, 0, 0, 0, time.UTC)
	var out bytes.Buffer
	printRemains(&out, []api.Remaining{
		{What: "dead letters (they hold its rows)", Count: 2, Until: &until, How: "sluice dlq purge removes them now"},
		{What: "its name in the state database", How: "kept: the retired state drops its rows"},
	})
	for _, want := range []string{
		"still: 2 dead letters (they hold its rows) (gone by 2026-12-14T10:00:00Z): sluice dlq purge removes them now",
		"still: its name in the state database (stays): kept",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
