// Command router runs the sluice router service alone: config -> wire -> run.
package main

import (
	"os"

	"github.com/sluice-cdc/sluice/services/router"
	"github.com/sluice-cdc/sluice/shared/stack"
)

func main() { os.Exit(stack.Main(router.Spec)) }
