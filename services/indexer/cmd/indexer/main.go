// Command indexer runs the sluice indexer service alone: config -> wire -> run.
package main

import (
	"os"

	"github.com/sluice-cdc/sluice/services/indexer"
	"github.com/sluice-cdc/sluice/shared/stack"
)

func main() { os.Exit(stack.Main(indexer.Spec)) }
