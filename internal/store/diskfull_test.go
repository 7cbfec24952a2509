package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/flint-dev/flint/internal/profile"
)

// TestDiskFull fills a small tmpfs: Write must fail with SQLITE_FULL and
// store nothing of the window, the store must stay usable for queries,
// and writes must succeed again once space returns, with every committed
// window intact (also after reopening).
func TestDiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a size-limited tmpfs")
	}
	mnt := t.TempDir()
	if err := unix.Mount("flint-test", mnt, "tmpfs", 0, "size=6m"); err != nil {
		t.Skipf("cannot mount a tmpfs (no CAP_SYS_ADMIN in this container?): %v", err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	// A filler to delete later, so space comes back.
	filler := filepath.Join(mnt, "filler")
	if err := os.WriteFile(filler, make([]byte, 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(mnt, "data")
	s := openTest(t, dir, testOptions())
	wl := newWorkload(t0)
	ctx := context.Background()

	var committed []*profile.Profile
	var full error
	for i := 0; i < 100_000 && full == nil; i++ {
		p := wl.window(i)
		if err := s.Write(ctx, p); err != nil {
			full = err
			break
		}
		committed = append(committed, p)
	}
	if full == nil {
		t.Fatal("a 6 MB file system never filled up")
	}
	var se *sqlite.Error
	if !errors.As(full, &se) || se.Code()&0xff != sqlite3.SQLITE_FULL {
		t.Fatalf("write on a full disk: %v, want SQLITE_FULL", full)
	}
	if !strings.HasPrefix(full.Error(), "write window at ") {
		t.Errorf("error %q does not say what failed", full)
	}
	t.Logf("disk full after %d windows: %v", len(committed), full)

	// Still full: writes keep failing cleanly, queries keep working.
	for i := range 3 {
		if err := s.Write(ctx, wl.window(len(committed)+i)); err == nil {
			t.Fatal("write succeeded on a full disk")
		}
	}
	// check compares the last window alone and all of them merged: a
	// missing or partial window changes the merged counts.
	check := func(s *SQLite, ps []*profile.Profile) {
		t.Helper()
		last := ps[len(ps)-1]
		got := query(t, s, Query{From: last.Start, To: last.Start.Add(wlWindow)})
		if diff := compare(canonical(got.Samples), canonical(last.Samples)); diff != "" {
			t.Fatalf("last window: %s", diff)
		}
		var want []*profile.Sample
		for _, p := range ps {
			want = append(want, p.Samples...)
		}
		got = query(t, s, Query{From: ps[0].Start, To: last.Start.Add(wlWindow)})
		if diff := compare(canonical(got.Samples), canonical(want)); diff != "" {
			t.Fatalf("all windows: %s", diff)
		}
	}
	check(s, committed)
	// The failed windows left nothing behind.
	p := wl.window(len(committed))
	if got := query(t, s, Query{From: p.Start, To: p.Start.Add(3 * wlWindow)}); len(got.Samples) != 0 {
		t.Fatalf("failed writes stored %d samples", len(got.Samples))
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		p := wl.window(len(committed) + 3 + i)
		if err := s.Write(ctx, p); err != nil {
			t.Fatalf("write %d after space returned: %v", i, err)
		}
		committed = append(committed, p)
	}
	check(s, committed)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir, testOptions())
	check(s, committed)
}
