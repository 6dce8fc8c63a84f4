package catalog

import (
	"context"

	"github.com/sluice-cdc/sluice/shared/packstore"
)

// BuildCompacted exposes buildCompacted to the compaction tests.
func BuildCompacted(ctx context.Context, store packstore.Store, table, fp, packID string, ins []CompactInput) (CompactedSegment, error) {
	return buildCompacted(ctx, store, table, fp, packID, ins)
}

// SetCompactWinnersOnly sets the compactWinnersOnly knob; the returned
// function restores it.
func SetCompactWinnersOnly(on bool) func() {
	old := compactWinnersOnly
	compactWinnersOnly = on
	return func() { compactWinnersOnly = old }
}

// SetGCIgnoresRetention sets the gcIgnoresRetention knob; the returned
// function restores it.
func SetGCIgnoresRetention(on bool) func() {
	old := gcIgnoresRetention
	gcIgnoresRetention = on
	return func() { gcIgnoresRetention = old }
}

// SetGCLightweight makes GC delete rows with lightweight DELETE FROM.
func SetGCLightweight(on bool) func() {
	old := gcLightweight
	gcLightweight = on
	return func() { gcLightweight = old }
}

// SetLifecycleHooks sets the crash tests' hooks: after a compacted segment
// is stored, after it is indexed, after GC deleted files, after GC deleted
// rows (nil: none).
func SetLifecycleHooks(beforeIndex, beforePublish, afterFiles, afterRows func()) {
	compactBeforeIndex, compactBeforePublish, gcAfterFiles, gcAfterRows = beforeIndex, beforePublish, afterFiles, afterRows
}

// SetMaxRemovalsPerPublish lowers maxRemovalsPerPublish; the returned
// function restores it.
func SetMaxRemovalsPerPublish(n int) func() {
	old := maxRemovalsPerPublish
	maxRemovalsPerPublish = n
	return func() { maxRemovalsPerPublish = old }
}

// SetPurgeNoRewrite sets the purgeNoRewrite knob; the returned function
// restores it.
func SetPurgeNoRewrite(on bool) func() {
	old := purgeNoRewrite
	purgeNoRewrite = on
	return func() { purgeNoRewrite = old }
}

// CompactCandidates is the (destination, table)s a trigger of p chose at
// the latest snapshot, as "table/destination", in the order Compact takes
// them.
func (c *Catalog) CompactCandidates(ctx context.Context, storeID string, p CompactPolicy) ([]string, error) {
	latest, err := c.Latest(ctx)
	if err != nil {
		return nil, err
	}
	cands, err := c.compactCandidates(ctx, latest.Version, storeID, p, "")
	if err != nil {
		return nil, err
	}
	out := []string{}
	for _, cd := range cands {
		out = append(out, cd.table+"/"+cd.destination)
	}
	return out, nil
}
