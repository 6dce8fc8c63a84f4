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
//     base32hex (RFC 4648) form of its UTF-8 bytes ("a.b" -> "~c4n64"). The
//     encoding is reversible (DecodeDestination) and cannot collide with a
//     plain name, which never contains "~";
//   - only the canonical name of a value is a name: decoding is a bijection
//     (DestinationName(DecodeDestination(n)) == n for every accepted n).
//     Base32 leaves unused low bits in its last character, so "~c4n65" also
//     decodes to "a.b", and "~c5h66p35" decodes to the plain "abcde"; such
//     aliases are refused with the canonical name in the error, so one
//     destination never answers to two names (ValidateDestination);
//   - a value whose name would exceed MaxDestinationLen, and NULL, are
//     unroutable: they go to the dead-letter stream.
const MaxDestinationLen = 200

var (
	// ErrUnroutable marks a routing value that makes no valid destination.
	ErrUnroutable = errors.New("unroutable value")
	// ErrBadDestination marks a string that is not a valid destination name.
	ErrBadDestination = errors.New("invalid destination name")
	// ErrNotCanonical marks a well-formed encoded name that is not the
	// canonical name of the value it decodes to (an alias); it comes
	// wrapped with ErrBadDestination.
	ErrNotCanonical = errors.New("not canonical")
)

// b32 is base32hex (RFC 4648) in lowercase, unpadded.
const b32Alphabet = "0123456789abcdefghijklmnopqrstuv"

var b32 = base32.NewEncoding(b32Alphabet).WithPadding(base32.NoPadding)

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
	name := "~" + b32.EncodeToString([]byte(value))
	if len(name) > MaxDestinationLen {
		return "", fmt.Errorf("%w: value of %d bytes encodes to a name over %d characters", ErrUnroutable, len(value), MaxDestinationLen)
	}
	return name, nil
}

// DecodeDestination returns the routing value a destination name stands for.
// It accepts canonical names only (ValidateDestination).
func DecodeDestination(name string) (string, error) {
	if plain(name) {
		return name, nil
	}
	return decodeEncoded(name)
}

// ValidateDestination checks that name is a plain name or the canonical
// encoded name of a value. Every name that arrives from outside (a subject,
// a path, an HTTP request, the configuration) passes through here before it
// is used. An alias (a non-canonical encoding) is refused with an error
// that names the canonical form.
func ValidateDestination(name string) error {
	if plain(name) {
		return nil
	}
	_, err := decodeEncoded(name)
	return err
}

// decodeEncoded decodes a "~" name and checks that it is the canonical
// encoding of what it decodes to: the length the value encodes to, zero
// in the bits of the last character that carry none of the value, and a
// value that is not a plain name (which is its own name).
func decodeEncoded(name string) (string, error) {
	enc, ok := strings.CutPrefix(name, "~")
	if !ok || len(name) > MaxDestinationLen {
		return "", fmt.Errorf("%w: %q", ErrBadDestination, name)
	}
	for i := 0; i < len(enc); i++ {
		c := enc[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'v') {
			return "", fmt.Errorf("%w: %q", ErrBadDestination, name)
		}
	}
	b, err := b32.DecodeString(enc)
	if err != nil {
		return "", fmt.Errorf("%w: %q: %v", ErrBadDestination, name, err)
	}
	value := string(b)
	// Canonical means encoding the value gives this very name back; that
	// covers a wrong length, stray bits in the last character and the
	// encoding of a plain name. The canonical name is never longer than an
	// alias, so it is always a name.
	if canon, _ := DestinationName(value); canon != name {
		return "", fmt.Errorf("%w: %q is %w; the canonical name of that value is %s", ErrBadDestination, name, ErrNotCanonical, canon)
	}
	return value, nil
}

// Partition is the stable partition of a destination: FNV-1a 64 of its name,
// finalized with the murmur3 fmix64 mixer (FNV's low bits alone spread short
// similar names badly), modulo the partition count. Changing
// delivery.partitions re-maps destinations; do it only with the pipeline
// drained.
func Partition(destination string, partitions int) int {
	return int(Hash64(destination) % uint64(partitions))
}

// Hash64 is the hash Partition reduces: FNV-1a 64 finalized with murmur3's
// fmix64. Deterministic across processes and builds.
func Hash64(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}
