package proto

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Message headers. nats.Header keys are case-sensitive: always use these.
const (
	HeaderWire    = "Sluice-Wire"    // wire version, "major.minor"
	HeaderTable   = "Sluice-Table"   // source table, schema.table
	HeaderSchema  = "Sluice-Schema"  // Arrow schema fingerprint of the body
	HeaderFirst   = "Sluice-First"   // first position in the batch (Position.String)
	HeaderLast    = "Sluice-Last"    // last position in the batch
	HeaderThrough = "Sluice-Through" // LSN the source is complete through once this message and all before it are stored
	HeaderRows    = "Sluice-Rows"    // rows in the body
	// HeaderClaimBytes is, on a CHANGES batch that carries values by
	// reference (ColClaims), the sum of their sizes in bytes; the router
	// copies it to its outputs, and the flusher counts it in its memory
	// budget from the moment it receives the batch (the values themselves
	// are read only at the flush).
	HeaderClaimBytes  = "Sluice-Claim-Bytes"
	HeaderDestination = "Sluice-Destination" // destination (PACKS; ROUTED per-destination messages of before segments)
	// HeaderDestinations is the number of destination runs in a ROUTED
	// partition message (proto.DestinationRuns).
	HeaderDestinations = "Sluice-Destinations"
	HeaderStage        = "Sluice-Stage"  // DLQ: the stage that dead-lettered
	HeaderReason       = "Sluice-Reason" // DLQ: why
	HeaderOrigSubject  = "Sluice-Orig-Subject"
	HeaderOrigStream   = "Sluice-Orig-Stream"
	HeaderOrigSeq      = "Sluice-Orig-Seq"
	// HeaderPackPath names the pack or segment an indexer dead letter is
	// about (docs/adr/0034-corrupt-pack-halts.md).
	HeaderPackPath = "Sluice-Pack-Path"
	// HeaderHaltDestinations is, on an indexer dead letter, how many
	// destinations the pack event names (0: unknown, a segment the
	// reconciler found); HeaderHaltDestinationsHash is the SHA-256 (first 16
	// bytes, hex) of their names joined by newlines, in the event's order:
	// the names themselves are in the dead letter's body (the event), so the
	// headers stay a few dozen bytes for a 4,096-destination segment.
	HeaderHaltDestinations     = "Sluice-Halt-Destinations"
	HeaderHaltDestinationsHash = "Sluice-Halt-Destinations-Hash"

	HeaderMsgID       = "Nats-Msg-Id"
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// DestinationsHash is the value of HeaderHaltDestinationsHash for names.
func DestinationsHash(names []string) string {
	h := sha256.New()
	for i, n := range names {
		if i > 0 {
			h.Write([]byte{'\n'})
		}
		h.Write([]byte(n))
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// The wire version this build writes. A reader accepts any minor version of
// its own major and refuses every other major.
const (
	WireMajor   = 1
	WireMinor   = 0
	WireVersion = "1.0"
)

// ErrWireVersion is returned for a message whose wire major version this
// build does not read. It is permanent: the message is dead-lettered.
var ErrWireVersion = errors.New("unsupported wire version")

// CheckWire validates the Sluice-Wire header value.
func CheckWire(v string) error {
	major, _, ok := strings.Cut(v, ".")
	if !ok {
		return fmt.Errorf("%w: header %s=%q is not major.minor", ErrWireVersion, HeaderWire, v)
	}
	m, err := strconv.Atoi(major)
	if err != nil || m != WireMajor {
		return fmt.Errorf("%w: got %q, this build reads major %d", ErrWireVersion, v, WireMajor)
	}
	return nil
}
