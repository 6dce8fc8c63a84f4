package packstoretest

import (
	"bytes"
	"encoding/binary"

	"github.com/sluice-cdc/sluice/proto"
)

// DamageBody returns a copy of the pack (an Arrow IPC file) with n bytes
// in the middle of its record batches inverted, and its footer and schema
// message untouched: what a bad disk block, a partial overwrite or a stray
// write does to a file that still opens.
func DamageBody(pack []byte, n int) []byte {
	b := append([]byte(nil), pack...)
	// "ARROW1\0\0", then the schema message: 0xFFFFFFFF, its length, the
	// flatbuffer; the footer ends the file with its length and "ARROW1".
	bodyStart := 16 + int(binary.LittleEndian.Uint32(b[12:]))
	footerStart := len(b) - 10 - int(binary.LittleEndian.Uint32(b[len(b)-10:]))
	mid := bodyStart + (footerStart-bodyStart)/2
	for i := mid; i < min(mid+n, footerStart); i++ {
		b[i] ^= 0xFF
	}
	return b
}

// Unchecksummed returns a copy of a file with its proto.MetaPackChecksum
// key renamed in place (in the schema message and the footer) to one no
// reader knows: the file then reads as one written before checksums. For
// damage tests and fuzz seeds that must reach the structural checks a
// checksum would otherwise pre-empt.
func Unchecksummed(file []byte) []byte {
	return bytes.ReplaceAll(file, []byte(proto.MetaPackChecksum), []byte(uncheckedKey))
}

// uncheckedKey has MetaPackChecksum's length and differs from it in more
// than two bytes (a near miss is refused as a damaged key).
const uncheckedKey = "sluice.test.unsealed"
