package packstoretest

import "encoding/binary"

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
