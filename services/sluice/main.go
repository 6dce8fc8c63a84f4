// Command sluice runs the whole pipeline in one process (sluice dev), one
// service (sluice run <service>), and carries the operator CLI.
package main

import (
	"os"

	"github.com/sluice-cdc/sluice/services/sluice/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
