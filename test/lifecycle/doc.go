// Package lifecycle drives `sluice destinations pause|resume|drain|retire`
// end to end: a real Postgres source with two tenants, `sluice dev`, and
// only the user contract (the CLI and `sluice read`/`sluice wait`). A
// paused tenant's rows are held while the other tenant's flow; resumed,
// they appear; drained, its buffer is flushed and later rows are held;
// retired, its later rows never appear while its earlier ones stay
// readable. The test skips with -short.
package lifecycle
