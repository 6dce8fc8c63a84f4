// Package publisher is the publisher service: it holds the catalog's
// publisher lease and publishes fenced snapshots (one watermark row each,
// whose high-water and removals give the snapshot's members, see
// shared/catalog) whenever new packs are
// indexed or the frontier moves, each claiming the through_lsn the
// frontier state machine has proven (docs/adr/0020). Any number of replicas may run; one holds the lease.
//
// The publisher must never publish without a live lease (the catalog checks
// it inside each statement), never claim a through_lsn the frontier has not
// proven, and never let through_lsn go backwards.
//
// NOTES
//   - Frontier (ARCHITECTURE.md "Frontiers"): sample the router's ack floor
//     on CHANGES, read the message there and take its Sluice-Through as L,
//     with ROUTED's last sequence S1; wait until every flusher-p<N> consumer
//     (N < delivery.partitions; a missing one has not passed) has an ack
//     floor >= S1 or nothing pending; sample PACKS' last sequence S2; wait
//     until the indexer's ack floor >= S2 or nothing pending; then L is
//     proven. If CHANGES is empty (or the router has acked nothing), L = 0.
//   - The proof covers what the publish admits: the indexer acks a pack
//     event only after its inventory row is committed, and catalog.Publish
//     admits every inventory row its statement sees (by block number, not
//     by clock), so a snapshot claiming L holds every pack with a change at
//     or below L (shared/catalog TestStalledIndexerPackIsPublished).
//   - Claim collection (claims.go, docs/adr/0033-claim-gc.md) deletes a
//     .claims/ object only below the newest snapshot's through_lsn, below
//     the lowest claim-carrying row of the DLQ and REPLAY messages seen over
//     catalog.claims_grace, and older than catalog.claims_grace.
//   - The lease is renewed before every publish (by catalog.Publish) and on
//     the first idle tick a third of lease_ttl after the last renewal;
//     lease_ttl > 2 * interval is enforced by config.
package publisher
