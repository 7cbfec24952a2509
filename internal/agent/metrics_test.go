package agent

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/spool"
)

func TestSpoolMetrics(t *testing.T) {
	now := time.Date(2026, 11, 24, 21, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		stats spool.Stats
		want  map[string]string
	}{
		{"empty", spool.Stats{Sent: 12}, map[string]string{
			"flint_spool_windows": "0", "flint_spool_oldest_window_age_seconds": "0", "flint_windows_sent_total": "12",
		}},
		{"backlog", spool.Stats{
			Windows: 3, Bytes: 4096, Oldest: now.Add(-90 * time.Second), Sent: 7, SendFailures: 5,
			DroppedWindows: 2, DroppedBytes: 2048, Corrupt: 1,
		}, map[string]string{
			"flint_spool_windows": "3", "flint_spool_bytes": "4096", "flint_spool_oldest_window_age_seconds": "90",
			"flint_windows_sent_total": "7", "flint_spool_send_failures_total": "5",
			"flint_spool_dropped_windows_total": "2", "flint_spool_dropped_bytes_total": "2048",
			"flint_spool_corrupt_windows_total": "1",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			writeSpoolMetrics(&b, tc.stats, now)
			values := map[string]string{}
			for line := range strings.Lines(b.String()) {
				if name, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok && !strings.HasPrefix(line, "#") {
					values[name] = v
				}
			}
			for name, want := range tc.want {
				if values[name] != want {
					t.Errorf("%s = %q, want %s\n%s", name, values[name], want, b.String())
				}
			}
		})
	}
}
