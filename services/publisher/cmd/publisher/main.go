// Command publisher runs the sluice publisher service alone: config -> wire -> run.
package main

import (
	"os"

	"github.com/sluice-cdc/sluice/services/publisher"
	"github.com/sluice-cdc/sluice/shared/stack"
)

func main() { os.Exit(stack.Main(publisher.Spec)) }
