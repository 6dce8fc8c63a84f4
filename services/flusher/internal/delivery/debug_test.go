package delivery

import (
	"log/slog"
	"os"
)

func init() {
	if os.Getenv("FLUSHER_DEBUG") != "" {
		slog.SetLogLoggerLevel(slog.LevelDebug)
	}
}
