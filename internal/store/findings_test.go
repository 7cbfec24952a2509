package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

func finding(start time.Time, detector, comm string) Finding {
	return Finding{
		Start: start, Duration: 10 * time.Second, Detector: detector, Severity: "warning",
		Labels: map[string]string{"comm": comm, "pid": "42", "node": "n1"},
		Body:   []byte(`{"id":"` + detector + `","comm":"` + comm + `"}`),
	}
}

func TestFindings(t *testing.T) {
	o := testOptions()
	o.MaxFindings = 3
	forEachBackend(t, o, func(t *testing.T, s Store) {
		ctx := context.Background()
		err := s.WriteFindings(ctx, []Finding{
			finding(t0, "busy-poll", "api"),
			finding(t0, "hot-debug-output", "web"),
			finding(t0.Add(time.Minute), "busy-poll", "api"),
		})
		if err != nil {
			t.Fatal(err)
		}
		all := Query{From: t0, To: t0.Add(time.Hour)}
		got, err := s.Findings(ctx, all)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 || got[2].Start.UnixNano() != t0.Add(time.Minute).UnixNano() || got[0].Duration != 10*time.Second {
			t.Fatalf("findings %+v", got)
		}
		if f := got[1]; f.Detector != "hot-debug-output" || f.Severity != "warning" || f.Labels["comm"] != "web" || !strings.Contains(string(f.Body), `"web"`) {
			t.Errorf("finding read back as %+v", f)
		}

		q := all
		q.Selector = mustParse(t, `{comm="api"}`)
		if got, err := s.Findings(ctx, q); err != nil || len(got) != 2 {
			t.Errorf("{comm=\"api\"}: %d findings, %v; want 2", len(got), err)
		}
		q = Query{From: t0.Add(time.Second), To: t0.Add(time.Hour)}
		if got, err := s.Findings(ctx, q); err != nil || len(got) != 1 {
			t.Errorf("from t0+1s: %d findings, %v; want 1", len(got), err)
		}
		if _, err := s.Findings(ctx, Query{From: t0, To: t0}); !errors.Is(err, ErrBadQuery) {
			t.Errorf("empty range: %v, want ErrBadQuery", err)
		}
		if err := s.WriteFindings(ctx, []Finding{finding(t0.Add(2*time.Minute), "busy-poll", "api")}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Findings(ctx, all); !errors.Is(err, ErrTooLarge) {
			t.Errorf("4 findings with MaxFindings 3: %v, want ErrTooLarge", err)
		}
	})
}

// TestFindingsRetention checks that findings leave with their windows.
func TestFindingsRetention(t *testing.T) {
	o := testOptions()
	o.Retention = time.Hour
	s := openTest(t, t.TempDir(), o)
	ctx := context.Background()
	wl := newWorkload(t0)
	write(t, s, wl.window(0), wl.window(2*360))
	old, recent := wl.window(0).Start, wl.window(2*360).Start
	if err := s.WriteFindings(ctx, []Finding{finding(old, "busy-poll", "api"), finding(recent, "busy-poll", "api")}); err != nil {
		t.Fatal(err)
	}
	now := recent.Add(time.Minute)
	s.now = func() time.Time { return now }
	if err := s.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := s.Findings(ctx, Query{From: old, To: now})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !got[0].Start.Equal(recent) {
		t.Errorf("after retention: %+v, want the recent finding only", got)
	}
}

// TestMigrateFromOlderVersions opens stores written by earlier flints:
// version 1 (before findings), 2 (before functions' start lines) and 3
// (before profile types). Their windows stay and read as CPU, findings can
// be written, and start lines are kept.
func TestMigrateFromOlderVersions(t *testing.T) {
	dropStartLine := `ALTER TABLE functions DROP COLUMN start_line`
	dropType := `ALTER TABLE windows DROP COLUMN type`
	for _, tt := range []struct {
		version string
		edits   []string
	}{
		{"1", []string{`DROP TABLE findings`, dropStartLine, dropType, `UPDATE meta SET value = '1' WHERE key = 'schema_version'`}},
		{"2", []string{dropStartLine, dropType, `UPDATE meta SET value = '2' WHERE key = 'schema_version'`}},
		{"3", []string{dropType, `UPDATE meta SET value = '3' WHERE key = 'schema_version'`}},
	} {
		t.Run("version "+tt.version, func(t *testing.T) {
			s := openTest(t, storeEditedBy(t, tt.edits...), testOptions())
			if n := count(t, s, "windows"); n != 1 {
				t.Errorf("%d windows after migration, want 1", n)
			}
			checkReadsAsCPU(t, s, newWorkload(t0).window(0))
			var v string
			s.rdb.QueryRow(`SELECT value FROM meta WHERE key = 'schema_version'`).Scan(&v)
			if v != strconv.Itoa(schemaVersion) {
				t.Errorf("schema version %q after migration, want %d", v, schemaVersion)
			}
			if err := s.WriteFindings(context.Background(), []Finding{finding(t0, "busy-poll", "api")}); err != nil {
				t.Fatal(err)
			}
			checkStartLines(t, s)
		})
	}
}

// checkStartLines writes the handmade window and reads back the start line
// of main.main.
func checkStartLines(t *testing.T, s *SQLite) {
	t.Helper()
	at := t0.Add(time.Hour)
	write(t, s, handmade(at))
	p := query(t, s, Query{From: at, To: at.Add(time.Minute)})
	for _, smp := range p.Samples {
		for _, l := range smp.Stack {
			for _, f := range l.Frames {
				if f.Function == "main.main" && f.StartLine != 10 {
					t.Fatalf("main.main read back with start line %d, want 10", f.StartLine)
				} else if f.Function == "main.main" {
					return
				}
			}
		}
	}
	t.Fatal("main.main not read back")
}
