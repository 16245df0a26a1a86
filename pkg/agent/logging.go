package agent

import (
	"fmt"
	"io"
	"log/slog"
)

// Log formats and levels of the agent's --log-format and --log-level.
const (
	LogText = "text"
	LogJSON = "json"
)

// NewLogger is the agent's logger on w: format LogText (slog's key=value
// lines) or LogJSON (one JSON object a line, keys time, level, msg and the
// attributes), at level debug, info, warn or error (records below it are
// dropped). An unknown format or level is an error naming it.
func NewLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("bad log level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case LogText:
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case LogJSON:
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("bad log format %q: want %s or %s", format, LogText, LogJSON)
}
