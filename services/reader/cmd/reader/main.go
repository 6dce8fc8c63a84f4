// Command reader runs the sluice reader service alone: config -> wire -> run.
package main

import (
	"os"

	"github.com/sluice-cdc/sluice/services/reader"
	"github.com/sluice-cdc/sluice/shared/stack"
)

func main() { os.Exit(stack.Main(reader.Spec)) }
