package telemetry

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// MustRegister registers c on reg and returns the collector to use: c, or
// the collector already registered with the same descriptors (components
// of one process share a registry: `sluice dev`, several consume loops, a
// restarted component), so every sample lands on the registered one. A nil
// reg leaves c unregistered. Any other refusal — a name registered with
// other labels or help, or by a collector of another type — is a
// programming error found at construction, and panics like
// prometheus.MustRegister.
func MustRegister[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
		panic(fmt.Sprintf("registering metrics: %T already registered as %T", c, are.ExistingCollector))
	}
	panic(fmt.Sprintf("registering metrics: %v", err))
}
