package publisher

import (
	"context"
	"time"
)

// SetExpireEvery changes how often p advances the snapshot expiry horizon.
func SetExpireEvery(p *Publisher, d time.Duration) { p.expireEvery = d }

// CollectClaims runs one claim collection pass of p at now.
func CollectClaims(ctx context.Context, p *Publisher, now time.Time) (ClaimStats, error) {
	return p.collectClaims(ctx, now)
}

// Claim rules TestClaimGC switches off (SetClaimRuleOff) for its negative
// controls.
const (
	ClaimRuleFrontier   = claimRuleFrontier
	ClaimRuleReferenced = claimRuleReferenced
	ClaimRuleGrace      = claimRuleGrace
)

// SetClaimRuleOff switches the rules in mask off; it returns a restore func.
func SetClaimRuleOff(mask int) func() {
	old := claimRuleOff
	claimRuleOff = mask
	return func() { claimRuleOff = old }
}

// SetCompactionHook makes f run at the start of each of p's compaction
// passes (nil: none).
func SetCompactionHook(p *Publisher, f func()) { p.lc.passHook = f }
