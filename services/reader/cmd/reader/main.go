// Command reader runs the sluice reader service alone.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/services/reader"
	"github.com/sluice-cdc/sluice/shared/config"
	"github.com/sluice-cdc/sluice/shared/natsx"
	"github.com/sluice-cdc/sluice/shared/telemetry"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "reader:", err)
		os.Exit(1)
	}
}

func run() error {
	path := flag.String("config", "sluice.yaml", "config file")
	flag.Parse()
	cfg, err := config.Load(*path, false)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := telemetry.NewLogger(cfg.Telemetry, "reader")
	shutdown, err := telemetry.Setup(ctx, "reader", cfg.Telemetry)
	if err != nil {
		return err
	}
	defer func() { _ = shutdown(context.Background()) }()
	nc, js, err := natsx.Connect(ctx, cfg.NATS, "", "sluice-reader")
	if err != nil {
		return err
	}
	defer nc.Close()
	r, err := reader.New(cfg, reader.Deps{JS: js, NC: nc, Log: log, Metrics: prometheus.NewRegistry()})
	if err != nil {
		return err
	}
	return r.Run(ctx)
}
