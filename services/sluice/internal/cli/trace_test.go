package cli

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// sluice trace needs a destination or a trace id, and a Jaeger to ask; it
// says which is missing and exits 2.
func TestTraceNeedsItsArguments(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none.yaml")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"trace"}, "give --destination D or --trace ID"},
		{[]string{"trace", "--destination", "a", "--trace", "b"}, "give --destination D or --trace ID"},
		{[]string{"trace", "--destination", "a", "--config", missing}, "set telemetry.jaeger_query or telemetry.jaeger_ui"},
		{[]string{"trace", "--trace", "not-hex", "--jaeger", "http://127.0.0.1:1"}, "up to 32 hex digits"},
		{[]string{"trace", "--destination", "~c4n65", "--jaeger", "http://127.0.0.1:1"}, "canonical"},
	} {
		root := newRoot()
		root.SetArgs(tc.args)
		err := root.Execute()
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("sluice %s: %v; want exit 2 saying %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}
