// Package test holds sluice's end-to-end and crash tests.
package test
