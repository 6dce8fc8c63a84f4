package telemetry

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestMustRegisterSharesDuplicates: the second registration of the same
// metric returns the first collector, so samples through either reach the
// registry; a nil registry leaves the collector unregistered.
func TestMustRegisterSharesDuplicates(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "sluice_test_total", Help: "A test counter."}
	a := MustRegister(reg, prometheus.NewCounter(opts))
	b := MustRegister(reg, prometheus.NewCounter(opts))
	if a != b {
		t.Fatal("the duplicate registration returned its own, unregistered counter")
	}
	b.Inc()
	if n := testutil.ToFloat64(a); n != 1 {
		t.Fatalf("registered counter %v, want 1", n)
	}
	if got, err := testutil.GatherAndCount(reg, "sluice_test_total"); err != nil || got != 1 {
		t.Fatalf("gathered %d series (%v), want 1", got, err)
	}
	c := MustRegister(nil, prometheus.NewCounter(opts))
	c.Inc()
	if n := testutil.ToFloat64(a); n != 1 {
		t.Fatalf("a nil registry's counter reached the registry: %v", n)
	}
}

// TestMustRegisterPanicsOnClash: the same name with other labels is a
// programming error, refused at construction.
func TestMustRegisterPanicsOnClash(t *testing.T) {
	reg := prometheus.NewRegistry()
	MustRegister(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_clash_total", Help: "h"}, []string{"a"}))
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(r.(string), "registering metrics") {
			t.Fatalf("recovered %v, want a registration panic", r)
		}
	}()
	MustRegister(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_clash_total", Help: "h"}, []string{"b"}))
}
