// Package cli is the sluice command line: the commands of the user contract
// (dev, run, status, snapshots, wait, read) and the operator commands. The
// commands that need the running pipeline talk to its HTTP API; none of them
// opens the embedded catalog itself, because it belongs to one process.
package cli
