package cli

import (
	"io"
	"log/slog"
)

// Logger is a command's log as text on w: Info and above, Debug too when
// debug is set (the commands' --debug or --verbose flag).
func Logger(w io.Writer, debug bool) *slog.Logger {
	level := slog.LevelInfo
	if debug {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}
