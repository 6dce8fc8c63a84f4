package capture

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestNewMetricsTwiceShares: two readers' metrics on one registry (a
// restarted component, or two in one process) share the registered
// collectors instead of panicking on the duplicate.
func TestNewMetricsTwiceShares(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := NewMetrics(reg)
	b := NewMetrics(reg)
	b.Restarts.Inc()
	if n := testutil.ToFloat64(a.Restarts); n != 1 {
		t.Fatalf("first handle's restarts %v, want 1 (the second handle's increment)", n)
	}
}
