package proto

import (
	"encoding/base32"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
)

// A destination name is what a routing value becomes. It is used as a NATS
// subject token, a directory name in the pack store, and a string value in
// SQL, so it is drawn from a closed alphabet:
//
//   - a routing value made only of [A-Za-z0-9_-], 1 to 64 characters, is its
//     own name ("shop0", "42", a uuid);
//   - any other value is encoded as "~" followed by the unpadded, lowercase
//     base32hex (RFC 4648) form of its UTF-8 bytes ("a.b" -> "~c5n64"). The
//     encoding is reversible (DecodeDestination) and cannot collide with a
//     plain name, which never contains "~";
//   - a value whose name would exceed MaxDestinationLen, and NULL, are
//     unroutable: they go to the dead-letter stream.
const MaxDestinationLen = 200

var (
	// ErrUnroutable marks a routing value that makes no valid destination.
	ErrUnroutable = errors.New("unroutable value")
	// ErrBadDestination marks a string that is not a valid destination name.
	ErrBadDestination = errors.New("invalid destination name")
)

var b32 = base32.HexEncoding.WithPadding(base32.NoPadding)

func plain(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// DestinationName turns a routing value's text form into a destination name.
func DestinationName(value string) (string, error) {
	if plain(value) {
		return value, nil
	}
	name := "~" + strings.ToLower(b32.EncodeToString([]byte(value)))
	if len(name) > MaxDestinationLen {
		return "", fmt.Errorf("%w: value of %d bytes encodes to a name over %d characters", ErrUnroutable, len(value), MaxDestinationLen)
	}
	return name, nil
}

// DecodeDestination returns the routing value a destination name stands for.
func DecodeDestination(name string) (string, error) {
	if err := ValidateDestination(name); err != nil {
		return "", err
	}
	enc, ok := strings.CutPrefix(name, "~")
	if !ok {
		return name, nil
	}
	b, err := b32.DecodeString(strings.ToUpper(enc))
	if err != nil {
		return "", fmt.Errorf("%w: %q: %v", ErrBadDestination, name, err)
	}
	return string(b), nil
}

// ValidateDestination checks that name is a plain name or a well-formed
// encoded one. Every name that arrives from outside (a subject, a path, an
// HTTP request) passes through here before it is used.
func ValidateDestination(name string) error {
	if plain(name) {
		return nil
	}
	enc, ok := strings.CutPrefix(name, "~")
	if !ok || len(name) > MaxDestinationLen {
		return fmt.Errorf("%w: %q", ErrBadDestination, name)
	}
	for i := 0; i < len(enc); i++ {
		c := enc[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'v') {
			return fmt.Errorf("%w: %q", ErrBadDestination, name)
		}
	}
	if _, err := b32.DecodeString(strings.ToUpper(enc)); err != nil {
		return fmt.Errorf("%w: %q", ErrBadDestination, name)
	}
	return nil
}

// Partition is the stable partition of a destination: FNV-1a 64 of its name,
// finalized with the murmur3 fmix64 mixer (FNV's low bits alone spread short
// similar names badly), modulo the partition count. Changing
// delivery.partitions re-maps destinations; do it only with the pipeline
// drained.
func Partition(destination string, partitions int) int {
	h := fnv.New64a()
	h.Write([]byte(destination))
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return int(x % uint64(partitions))
}
