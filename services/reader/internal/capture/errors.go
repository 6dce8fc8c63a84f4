package capture

import "errors"

var (
	// ErrPublish ends a session: a publish failed or was not acked in time.
	ErrPublish = errors.New("publishing to JetStream")
	// ErrTooLarge marks a single row whose batch exceeds nats.max_payload.
	ErrTooLarge = errors.New("batch larger than nats.max_payload")
	// ErrIdentityChanged is why a table halts when its replica identity no
	// longer carries the routing column (ALTER TABLE ... REPLICA IDENTITY
	// while sluice runs): its deletes would have no tenant.
	ErrIdentityChanged = errors.New("replica identity no longer carries the routing column: the table is halted until an operator acts")
	// ErrTableReplaced is why a table halts when it is renamed, or dropped
	// and created again, while sluice runs.
	ErrTableReplaced = errors.New("captured table replaced: the table is halted until an operator acts")
	// ErrTypeChanged is why a table halts when a column's type changes.
	ErrTypeChanged = errors.New("column type changed: the table is halted until an operator acts")
	// ErrSpill wraps failures of a streamed transaction's spill file on
	// local disk (spill.go): the session ends and the stream resends it.
	ErrSpill = errors.New("spilling a streamed transaction")
	// ErrReplication wraps failures of the replication connection.
	ErrReplication = errors.New("replication stream")
)
