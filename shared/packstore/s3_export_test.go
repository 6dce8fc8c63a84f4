package packstore

import "github.com/apache/arrow-go/v18/arrow"

// SetS3NoCondition flips the negative-control knob of an S3Store: Put
// becomes a plain PUT with no immutability check.
func SetS3NoCondition(s *S3Store, v bool) { s.noCondition = v }

// SetS3Conditional forces the immutability mode of an S3Store: true uses
// If-None-Match: *, false HEAD-and-compare.
func SetS3Conditional(s *S3Store, v bool) { s.conditional = v }

// SetSegmentBatchBytes lowers the batch size of segments; it returns a
// restore func.
func SetSegmentBatchBytes(n int) func() {
	old := segmentBatchBytes
	segmentBatchBytes = n
	return func() { segmentBatchBytes = old }
}

// SetChecksum turns sealing and checking proto.MetaPackChecksum on or off
// (for the benchmark's comparison); it returns a restore func.
func SetChecksum(on bool) func() {
	old := checksumOn
	checksumOn = on
	return func() { checksumOn = old }
}

// CheckChecksum is the checksum check alone (VerifyPack runs it first).
func CheckChecksum(data []byte, schema *arrow.Schema) error { return verifyChecksum(data, schema) }

// SealChecksum is the checksum's sealing alone: data must carry
// placeholder (the checksum a file carries can stand in for it).
func SealChecksum(data []byte, placeholder string) error { return sealChecksum(data, placeholder) }
