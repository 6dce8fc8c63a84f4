// Package chtest is the test kit for the ClickHouse catalog: a real chDB
// engine per test binary, a fresh database per test, and the list of
// backends (chDB in-process, clickhouse-go over the chdbhttp shim, and a real
// server when SLUICE_TEST_CLICKHOUSE_URL is set) that a contract suite runs
// against.
//
// libchdb runs one engine per process, so every test of a binary shares it;
// isolation is by database: Conn(t) and Backends(t) return connections whose
// unqualified table names resolve in a database created for the test and
// dropped at its cleanup. Tests may run in parallel.
//
// It must never be imported by non-test code, never mock the engine, and
// never skip silently: a missing libchdb fails the test with the fix.
package chtest
