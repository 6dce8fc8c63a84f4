package publisher

import "time"

// SetExpireEvery changes how often p advances the snapshot expiry horizon.
func SetExpireEvery(p *Publisher, d time.Duration) { p.expireEvery = d }
