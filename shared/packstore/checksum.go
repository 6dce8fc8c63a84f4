package packstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/zeebo/xxh3"

	"github.com/sluice-cdc/sluice/proto"
)

// A file's checksum (proto.MetaPackChecksum) covers every byte of it: the
// record batches (their flatbuffer headers and bodies, compressed or not),
// the leading schema message and the footer. It lives in the schema
// metadata, which arrow-go writes twice (the schema message before the
// batches, the footer after them) from one schema fixed before the first
// batch, so the writer puts a random placeholder of the value's length
// there, and sealChecksum, once the file is complete, finds it in both
// places, hashes the file with its digits read as "0" and writes the sum
// over them. A same-length string leaves every flatbuffer offset as it
// was. The sum depends only on the file's content, so encoding the same
// rows twice still gives the same bytes (a Put of a retried flush stays
// an idempotent no-op).

const (
	checksumPrefix = "xxh3:"
	checksumDigits = 16
)

var checksumZeros = bytes.Repeat([]byte{'0'}, checksumDigits)

// checksumOn is false only in the benchmark's comparison (SetChecksum).
var checksumOn = true

// checksumPlaceholder is a value of the checksum's form that occurs
// nowhere else in a file's schema message or footer (64 random bits).
func checksumPlaceholder() string {
	return checksumPrefix + fmt.Sprintf("%016x", rand.Uint64())
}

// withChecksum appends the checksum key with a fresh placeholder to a
// file's metadata, returning the placeholder ("" when checksums are off).
func withChecksum(keys, vals []string) ([]string, []string, string) {
	if !checksumOn {
		return keys, vals, ""
	}
	ph := checksumPlaceholder()
	return append(keys, proto.MetaPackChecksum), append(vals, ph), ph
}

// checksumRegions returns the byte ranges of data's leading schema message
// and of its footer, where the schema metadata is.
func checksumRegions(data []byte) (head, footer [2]int, err error) {
	if len(data) < 8+8+10 {
		return head, footer, fmt.Errorf("%d bytes: too short for an Arrow IPC file", len(data))
	}
	prefix := 4
	if binary.LittleEndian.Uint32(data[8:]) == 0xFFFFFFFF {
		prefix = 8
	}
	n := int64(int32(binary.LittleEndian.Uint32(data[8+prefix-4:])))
	size := int64(int32(binary.LittleEndian.Uint32(data[len(data)-10:])))
	fstart := int64(len(data)) - 10 - size
	hend := 8 + int64(prefix) + n
	if n <= 0 || size <= 0 || fstart < 8 || hend > fstart {
		return head, footer, fmt.Errorf("schema message (%d bytes) or footer (%d bytes) outside the file's %d", n, size, len(data))
	}
	return [2]int{8, int(hend)}, [2]int{int(fstart), len(data) - 10}, nil
}

// checksumDigitsAt returns where value's hex digits are in data's schema
// message and in its footer: value must occur exactly once in each.
func checksumDigitsAt(data []byte, value string) ([2]int, error) {
	head, footer, err := checksumRegions(data)
	if err != nil {
		return [2]int{}, err
	}
	var at [2]int
	for i, r := range [][2]int{head, footer} {
		region := data[r[0]:r[1]]
		if c := bytes.Count(region, []byte(value)); c != 1 {
			return at, fmt.Errorf("checksum %s occurs %d times in the file's %s, want once", value, c, [...]string{"schema message", "footer"}[i])
		}
		at[i] = r[0] + bytes.Index(region, []byte(value)) + len(checksumPrefix)
	}
	return at, nil
}

// fileSum is the XXH3-64 of data with the checksum digits at both
// positions read as "0" (data is not changed).
func fileSum(data []byte, at [2]int) uint64 {
	h := xxh3.New()
	prev := 0
	for _, p := range at {
		_, _ = h.Write(data[prev:p])
		_, _ = h.Write(checksumZeros)
		prev = p + checksumDigits
	}
	_, _ = h.Write(data[prev:])
	return h.Sum64()
}

// sealChecksum writes data's checksum over placeholder (see the top of
// this file); a "" placeholder (checksums off) leaves data as it is.
func sealChecksum(data []byte, placeholder string) error {
	if placeholder == "" {
		return nil
	}
	at, err := checksumDigitsAt(data, placeholder)
	if err != nil {
		return fmt.Errorf("sealing the checksum: %w", err)
	}
	sum := fmt.Sprintf("%016x", fileSum(data, at))
	for _, p := range at {
		copy(data[p:], sum)
	}
	return nil
}

// verifyChecksum checks data against the checksum its footer schema
// carries, if any (a file written before checksums has none). A key one or
// two bytes away from proto.MetaPackChecksum is a damaged one, not an old
// file. Errors are the reason only; the caller wraps ErrCorruptPack.
func verifyChecksum(data []byte, schema *arrow.Schema) error {
	if !checksumOn {
		return nil
	}
	md := schema.Metadata()
	for _, k := range md.Keys() {
		if k != proto.MetaPackChecksum && nearly(k, proto.MetaPackChecksum) {
			return fmt.Errorf("footer key %q is a damaged %s", k, proto.MetaPackChecksum)
		}
	}
	value, ok := md.GetValue(proto.MetaPackChecksum)
	if !ok {
		return nil
	}
	if len(value) != len(checksumPrefix)+checksumDigits || value[:len(checksumPrefix)] != checksumPrefix {
		return fmt.Errorf("checksum %q is not %s and %d hex digits", value, checksumPrefix, checksumDigits)
	}
	want, err := strconv.ParseUint(value[len(checksumPrefix):], 16, 64)
	if err != nil {
		return fmt.Errorf("checksum %q is not %s and %d hex digits", value, checksumPrefix, checksumDigits)
	}
	at, err := checksumDigitsAt(data, value)
	if err != nil {
		return err
	}
	if got := fileSum(data, at); got != want {
		return fmt.Errorf("checksum mismatch: footer says %s%016x, the file hashes to %s%016x", checksumPrefix, want, checksumPrefix, got)
	}
	return nil
}

// nearly reports whether a and b have one length and differ in one or two
// bytes.
func nearly(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	d := 0
	for i := range len(a) {
		if a[i] != b[i] {
			d++
		}
	}
	return d > 0 && d <= 2
}

// fileName names a file by its footer's keys before they are checked:
// its store path when they make one, else its pack id.
func fileName(md arrow.Metadata) string {
	id, _ := md.GetValue(proto.MetaPackID)
	table, _ := md.GetValue(proto.MetaPackTable)
	if f, _ := md.GetValue(proto.MetaPackFormat); f == proto.SegmentFormatVersion {
		if p, err := proto.SegmentPath(id, table); err == nil {
			return p
		}
		return "segment " + strconv.Quote(id)
	}
	dest, _ := md.GetValue(proto.MetaPackDestination)
	if proto.ValidateDestination(dest) == nil && proto.ValidateTable(table) == nil && id != "" {
		return proto.PackPath(dest, table, id)
	}
	return "pack " + strconv.Quote(id)
}
