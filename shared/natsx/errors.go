package natsx

import (
	"errors"

	"github.com/sluice-cdc/sluice/proto"
	"github.com/sluice-cdc/sluice/shared/arrowcodec"
)

// ErrManualAck is returned (wrapped) by a Handler that will ack, nak or term
// the message itself later. Consume then leaves the message alone.
var ErrManualAck = errors.New("message acked by handler")

// ErrEmbeddedNotReady is returned when the embedded server does not become
// ready for connections in time.
var ErrEmbeddedNotReady = errors.New("embedded NATS server not ready")

// ErrPublishTimeout resolves a Publisher future whose PubAck did not arrive
// within the Publisher's AckTimeout. The publish may or may not be stored:
// republish with the same Nats-Msg-Id.
var ErrPublishTimeout = errors.New("timed out waiting for publish ack")

// ErrPanic marks a handler panic; it is permanent.
var ErrPanic = errors.New("handler panicked")

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as permanent: retrying the message cannot succeed, so
// Consume dead-letters and terminates it. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	var p *permanentError
	if errors.As(err, &p) {
		return err
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err is permanent: marked with Permanent, or
// wrapping arrowcodec.ErrDecode, proto.ErrWireVersion or ErrPanic.
func IsPermanent(err error) bool {
	if err == nil {
		return false
	}
	var p *permanentError
	return errors.As(err, &p) ||
		errors.Is(err, arrowcodec.ErrDecode) ||
		errors.Is(err, proto.ErrWireVersion) ||
		errors.Is(err, ErrPanic)
}
