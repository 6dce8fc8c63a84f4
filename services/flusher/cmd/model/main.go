// Command model runs the flusher protocol's model checker (make model):
// the small configuration and every mutant, or with SLUICE_MODEL=large the
// large one. -trace prints each mutant's counterexample; -conform FILE...
// replays flusher core logs (SLUICE_FLUSHER_CORE_TRACE) against the
// protocol.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/sluice-cdc/sluice/services/flusher/internal/model"
)

func main() {
	traces := flag.Bool("trace", false, "print every mutant's shortest counterexample")
	conform := flag.Bool("conform", false, "replay the core logs named as arguments (SLUICE_FLUSHER_CORE_TRACE) against the protocol")
	only := flag.Bool("protocol", false, "explore the protocol only (no mutants)")
	crashes := flag.Int("crashes", -1, "override the crash budget")
	expiries := flag.Int("expiries", -1, "override the lease-expiry budget")
	failures := flag.Int("failures", -1, "override the failed-flush budget")
	maxStates := flag.Int("max", 0, "stop after this many distinct states")
	changes := flag.String("changes", "", "override the messages: pos:dest[+dest...],... (e.g. 1:0+1,2:1,3:0)")
	inOrder := flag.Bool("inorder", false, "routers publish in position order")
	flag.Parse()
	if *conform {
		os.Exit(conformLogs(flag.Args()))
	}
	cs := []model.Config{model.Small(), model.Slices()}
	if os.Getenv("SLUICE_MODEL") == "large" {
		cs = []model.Config{model.Large()}
	}
	if *changes != "" || *only {
		cs = cs[:1] // one configuration: the first, overridden
	}
	c := &cs[0]
	if *changes != "" {
		c.Changes = nil
		for _, f := range strings.Split(*changes, ",") {
			var ch model.Change
			p, ds, _ := strings.Cut(f, ":")
			var err error
			if ch.Pos, err = strconv.Atoi(p); err == nil {
				for _, d := range strings.Split(ds, "+") {
					var n int
					if n, err = strconv.Atoi(d); err != nil {
						break
					}
					ch.Dests = append(ch.Dests, n)
					c.Dests = max(c.Dests, n+1)
				}
			}
			if err != nil || len(ch.Dests) == 0 {
				fmt.Fprintln(os.Stderr, "bad -changes:", f)
				os.Exit(2)
			}
			c.Changes = append(c.Changes, ch)
		}
	}
	if os.Getenv("SLUICE_MODEL_PROGRESS") != "" {
		c.Progress = func(d, n, f int) { fmt.Fprintf(os.Stderr, "depth %d: %d states, frontier %d\n", d, n, f) }
	}
	for i := range cs { // the budgets apply to every configuration
		for _, o := range []struct {
			v   int
			dst *int
		}{{*crashes, &cs[i].Crashes}, {*expiries, &cs[i].LeaseExpiries}, {*failures, &cs[i].FlushFailures}} {
			if o.v >= 0 {
				*o.dst = o.v
			}
		}
		cs[i].InOrder = cs[i].InOrder || *inOrder
		cs[i].Progress = c.Progress
		if *maxStates > 0 {
			cs[i].MaxStates = *maxStates
		}
	}
	if *only {
		r := model.Check(*c)
		fmt.Printf("%d states depth %d %s truncated %v violation %q\n", r.States, r.Depth, r.Elapsed, r.Truncated, r.Violation)
		for _, l := range r.Trace {
			fmt.Println(l)
		}
		return
	}
	if !model.Run(os.Stdout, cs, *traces) {
		os.Exit(1)
	}
}

// conformLogs replays every log named and reports each; it returns the
// exit code.
func conformLogs(paths []string) int {
	code := 0
	total := 0
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
			continue
		}
		n, err := model.Conform(f)
		f.Close()
		total += n
		if err != nil {
			fmt.Printf("%s: REFUSED after %d records: %v\n", path, n, err)
			code = 1
			continue
		}
		fmt.Printf("%s: %d records conform\n", path, n)
	}
	fmt.Printf("conform: %d logs, %d records\n", len(paths), total)
	return code
}
