// Command flusher runs the sluice flusher service alone: config -> wire -> run.
package main

import (
	"os"

	"github.com/sluice-cdc/sluice/services/flusher"
	"github.com/sluice-cdc/sluice/shared/stack"
)

func main() { os.Exit(stack.Main(flusher.Spec)) }
