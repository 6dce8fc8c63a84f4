package publisher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
	"github.com/sluice-cdc/sluice/shared/catalog"
	"github.com/sluice-cdc/sluice/shared/natsx"
	"github.com/sluice-cdc/sluice/shared/packstore"
	"github.com/sluice-cdc/sluice/shared/telemetry"
)

// Claim garbage collection (docs/adr/0033-claim-gc.md). A claim-check
// object (.claims/<table>/<lsn>-<seq>/<column>, proto.ClaimPath) is needed
// while a message that names it can still be delivered: pending on
// CHANGES, ROUTED or REPLAY, or sitting in the DLQ, from where `sluice dlq
// replay` sends it again. A claim at position P written at time W may be
// deleted (claimCollectable) only when all three hold:
//
//  1. P.LSN <= the through_lsn of the newest published snapshot: every
//     change of the stream at or below it is in an indexed pack, with its
//     values inlined there;
//  2. P < the referenced floor: the lowest position of a row that carries
//     claims in any message in DLQ or REPLAY (a body the publisher cannot
//     decode holds every claim), the lowest floor seen over the last
//     claims_grace, so that a replay in flight (republished, its dead
//     letter deleted, not yet flushed) keeps its claims;
//  3. now - W >= catalog.claims_grace: backfill and resync rows carry
//     positions older than the stream's (a backfill's snapshot LSN, a resync
//     chunk's high watermark - 1), so rule 1 can hold for them before their
//     message is routed; the data streams drop messages older than
//     nats.max_age (24h, claims_grace's default), so a claim older than
//     that names no message still pending there.
//
// A pass lists the claims (one listing of .claims/ per catalog.gc_interval)
// and deletes each collectable one; deleting is idempotent, so a pass
// killed midway is finished by the next. It runs in the active publisher,
// beside the pack GC (lifecycle.go).

// claimGC is the claim collection's state: the referenced floors seen and
// what it decoded of each dead letter (an immutable message, read once).
type claimGC struct {
	store packstore.ClaimCollector
	js    jetstream.JetStream
	log   *slog.Logger

	seen  []floorSeen                          // oldest first, within claims_grace
	refs  map[string]map[uint64]proto.Position // stream -> sequence -> lowest claim row
	start time.Time

	deleted prometheus.Counter
	kept    *prometheus.GaugeVec
}

type floorSeen struct {
	floor proto.Position
	at    time.Time
}

// noClaims is the floor of a message (or of the streams) that refers to no
// claim: above every position.
var noClaims = proto.Position{LSN: proto.LSN(math.MaxUint64), Seq: math.MaxUint64}

// ClaimStats counts one pass.
type ClaimStats struct {
	Deleted       int // claims deleted
	AboveFrontier int // kept: above the newest snapshot's through_lsn
	Referenced    int // kept: at or above the DLQ/REPLAY floor
	Young         int // kept: written within claims_grace
	Foreign       int // objects under .claims/ that name no claim (never deleted)
	Floor         proto.Position
	Through       proto.LSN
}

// claimRuleOff switches rules of claimCollectable off: a test knob (the
// negative controls of TestClaimGC).
var claimRuleOff int

const (
	claimRuleFrontier = 1 << iota
	claimRuleReferenced
	claimRuleGrace
)

// claimCollectable is the rule (see the top of this file): whether the
// claim at pos, last written at modified, may be deleted now, and if not,
// why.
func claimCollectable(pos proto.Position, modified, now time.Time, through proto.LSN, floor proto.Position, grace time.Duration) (bool, string) {
	switch {
	case claimRuleOff&claimRuleFrontier == 0 && pos.LSN > through:
		return false, "above_frontier"
	case claimRuleOff&claimRuleReferenced == 0 && !pos.Less(floor):
		return false, "referenced"
	case claimRuleOff&claimRuleGrace == 0 && now.Sub(modified) < grace:
		return false, "grace"
	}
	return true, ""
}

func newClaimGC(reg prometheus.Registerer, store packstore.ClaimCollector, js jetstream.JetStream, log *slog.Logger) *claimGC {
	return &claimGC{
		store: store, js: js, log: log, refs: map[string]map[uint64]proto.Position{},
		deleted: telemetry.MustRegister(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_catalog_gc_claims_total",
			Help: "Claim-check objects (.claims/, values carried by reference) garbage collection deleted."})),
		kept: telemetry.MustRegister(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_catalog_gc_claims_kept",
			Help: "Claim-check objects the last claim collection kept, by the rule that kept them (above_frontier, referenced, grace)."}, []string{"reason"})),
	}
}

// collect runs one pass at now: through is the newest snapshot's
// through_lsn (0: nothing published, nothing deleted).
func (g *claimGC) collect(ctx context.Context, now time.Time, through proto.LSN, grace time.Duration) (ClaimStats, error) {
	st := ClaimStats{Through: through}
	cur, err := g.referencedFloor(ctx)
	if err != nil {
		return st, fmt.Errorf("collecting claims: %w", err)
	}
	g.seen = append(g.seen, floorSeen{cur, now})
	floor := noClaims
	keep := g.seen[:0]
	for _, s := range g.seen {
		if now.Sub(s.at) <= grace || s.at.Equal(now) {
			keep = append(keep, s)
			if s.floor.Less(floor) {
				floor = s.floor
			}
		}
	}
	g.seen = keep
	st.Floor = floor
	err = g.store.ListClaims(ctx, func(ci packstore.ClaimInfo) error {
		_, pos, _, err := proto.ParseClaimPath(ci.Path)
		if err != nil {
			st.Foreign++
			return nil
		}
		ok, why := claimCollectable(pos, ci.Modified, now, through, floor, grace)
		switch why {
		case "above_frontier":
			st.AboveFrontier++
		case "referenced":
			st.Referenced++
		case "grace":
			st.Young++
		}
		if !ok {
			return nil
		}
		if err := g.store.DeleteClaim(ctx, ci.Path); err != nil {
			return err
		}
		st.Deleted++
		g.deleted.Inc()
		return nil
	})
	g.kept.WithLabelValues("above_frontier").Set(float64(st.AboveFrontier))
	g.kept.WithLabelValues("referenced").Set(float64(st.Referenced))
	g.kept.WithLabelValues("grace").Set(float64(st.Young))
	if err != nil {
		return st, fmt.Errorf("collecting claims: %w", err)
	}
	if st.Deleted > 0 {
		g.log.Info("claims collected", "deleted", st.Deleted, "kept_above_frontier", st.AboveFrontier,
			"kept_referenced", st.Referenced, "kept_grace", st.Young, "through_lsn", through.String(), "referenced_floor", floorString(floor))
	}
	return st, nil
}

func floorString(p proto.Position) string {
	if p == noClaims {
		return "none"
	}
	return p.String()
}

// referencedFloor is the lowest position of a row carrying claims in any
// message of DLQ and REPLAY now (noClaims: none). Each message is decoded
// once; a stream that does not exist refers to nothing.
func (g *claimGC) referencedFloor(ctx context.Context) (proto.Position, error) {
	floor := noClaims
	for _, name := range []string{proto.StreamDLQ, proto.StreamReplay} {
		s, err := g.js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			delete(g.refs, name)
			continue
		} else if err != nil {
			return floor, fmt.Errorf("opening stream %s: %w", name, err)
		}
		info, err := s.Info(ctx, jetstream.WithDeletedDetails(true))
		if err != nil {
			return floor, fmt.Errorf("reading stream %s: %w", name, err)
		}
		deleted := make(map[uint64]bool, len(info.State.Deleted))
		for _, q := range info.State.Deleted {
			deleted[q] = true
		}
		old, now := g.refs[name], map[uint64]proto.Position{}
		for q := info.State.FirstSeq; info.State.Msgs > 0 && q <= info.State.LastSeq; q++ {
			if deleted[q] {
				continue
			}
			p, ok := old[q]
			if !ok {
				m, err := s.GetMsg(ctx, q)
				if errors.Is(err, jetstream.ErrMsgNotFound) {
					continue
				} else if err != nil {
					return floor, fmt.Errorf("reading %s/%d: %w", name, q, err)
				}
				if p, err = g.lowestClaim(ctx, name, m); err != nil {
					// Nothing of this pass is kept: the next reads it again.
					return floor, err
				}
			}
			now[q] = p
			if p.Less(floor) {
				floor = p
			}
		}
		g.refs[name] = now
	}
	return floor, nil
}

// lowestClaim is the lowest position of a row of m's body that carries
// claims: noClaims when it carries none, the zero position (holding every
// claim) when its body cannot be decoded, so a message that might be
// replayed never loses a claim to a decoding gap here. A dead letter whose
// body was omitted is read through its original; only an original that is
// gone (its stream or message not found) refers to nothing. Any other
// failure to read it is an error, never "no claims": the result is kept
// for the message's life (refs), and a transient error taken for "none"
// would let every claim it holds be deleted.
func (g *claimGC) lowestClaim(ctx context.Context, stream string, m *jetstream.RawStreamMsg) (proto.Position, error) {
	body := m.Data
	if m.Header.Get(natsx.HeaderBodyOmitted) != "" {
		// The dead letter names its original instead; once that is gone a
		// replay fails ("the body … is gone"): it can read no claim.
		origStream, origSeq := m.Header.Get(proto.HeaderOrigStream), m.Header.Get(proto.HeaderOrigSeq)
		seq, _ := strconv.ParseUint(origSeq, 10, 64)
		if origStream == "" || seq == 0 {
			return noClaims, nil
		}
		orig, err := g.js.Stream(ctx, origStream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return noClaims, nil
		} else if err != nil {
			return proto.Position{}, fmt.Errorf("reading the original of %s/%d (%s/%d): %w", stream, m.Sequence, origStream, seq, err)
		}
		om, err := orig.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return noClaims, nil
		} else if err != nil {
			return proto.Position{}, fmt.Errorf("reading the original of %s/%d (%s/%d): %w", stream, m.Sequence, origStream, seq, err)
		}
		body = om.Data
	}
	if len(body) == 0 {
		return noClaims, nil
	}
	rec, err := arrowcodec.Decode(body, nil)
	if err != nil {
		g.log.Warn("claim collection: a message it cannot decode holds every claim until it is replayed or purged",
			"stream", stream, "seq", m.Sequence, "err", err)
		return proto.Position{}, nil
	}
	defer rec.Release()
	sc := rec.Schema()
	ci, li, si := sc.FieldIndices(proto.ColClaims), sc.FieldIndices(proto.ColLSN), sc.FieldIndices(proto.ColSeq)
	if len(ci) == 0 {
		return noClaims, nil
	}
	claims, ok1 := rec.Column(ci[0]).(*array.List)
	if len(li) == 0 || len(si) == 0 || !ok1 {
		return proto.Position{}, nil
	}
	lsn, ok2 := rec.Column(li[0]).(*array.Uint64)
	seq, ok3 := rec.Column(si[0]).(*array.Uint64)
	if !ok2 || !ok3 {
		return proto.Position{}, nil
	}
	low := noClaims
	for i := 0; i < int(rec.NumRows()); i++ {
		if claims.IsNull(i) {
			continue
		}
		if lo, hi := claims.ValueOffsets(i); hi == lo {
			continue
		}
		if p := (proto.Position{LSN: proto.LSN(lsn.Value(i)), Seq: seq.Value(i)}); p.Less(low) {
			low = p
		}
	}
	return low, nil
}

// collectClaims runs a claim pass of p's lifecycle at now, against the
// newest published snapshot.
func (p *Publisher) collectClaims(ctx context.Context, now time.Time) (ClaimStats, error) {
	g := p.lc.claims
	if g == nil {
		return ClaimStats{}, nil
	}
	var through proto.LSN
	s, err := p.cat.Latest(ctx)
	switch {
	case errors.Is(err, catalog.ErrNoSnapshot):
	case err != nil:
		return ClaimStats{}, fmt.Errorf("collecting claims: %w", err)
	default:
		through = s.ThroughLSN
	}
	return g.collect(ctx, now, through, p.cfg.Catalog.EffectiveClaimsGrace(p.cfg.NATS))
}
