package agent

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestNewLogger(t *testing.T) {
	for _, tc := range []struct {
		format, level string
		wantLines     int // of the four records logged below
		json, bad     bool
	}{
		{format: "json", level: "info", wantLines: 3, json: true},
		{format: "json", level: "warn", wantLines: 2, json: true},
		{format: "text", level: "debug", wantLines: 4},
		{format: "text", level: "ERROR", wantLines: 1},
		{format: "yaml", level: "info", bad: true},
		{format: "json", level: "loud", bad: true},
	} {
		var b bytes.Buffer
		log, err := NewLogger(&b, tc.format, tc.level)
		if tc.bad {
			if err == nil {
				t.Errorf("%s/%s: no error", tc.format, tc.level)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s/%s: %v", tc.format, tc.level, err)
		}
		log.Debug("d")
		log.Info("i", "pod", "ns/a")
		log.Warn("w")
		log.Error("e", "error", "boom")
		lines := strings.Split(strings.TrimSpace(b.String()), "\n")
		if len(lines) != tc.wantLines {
			t.Errorf("%s/%s: %d lines, want %d:\n%s", tc.format, tc.level, len(lines), tc.wantLines, b.String())
		}
		for _, l := range lines {
			var m map[string]any
			err := json.Unmarshal([]byte(l), &m)
			if tc.json && (err != nil || m["level"] == nil || m["msg"] == nil) {
				t.Errorf("%s/%s: not a JSON record: %q (%v)", tc.format, tc.level, l, err)
			}
			if !tc.json && (err == nil || !strings.Contains(l, "level=")) {
				t.Errorf("%s/%s: not a text record: %q", tc.format, tc.level, l)
			}
		}
	}
}
