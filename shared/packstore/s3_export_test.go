package packstore

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
