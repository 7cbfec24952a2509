package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/flint-dev/flint/internal/store/chtest"
)

// The tests that take a Store run against every backend: the same
// windows, the same queries, the same answers.

// clickhouseServer is one ClickHouse server for the whole test binary,
// started on first use (~3 s) and stopped by TestMain; every test gets a
// database of its own on it.
var clickhouseServer struct {
	once sync.Once
	srv  *chtest.Server
	dir  string
	err  error
	dbs  atomic.Int64
}

// sharedClickHouse returns the shared server, skipping t when
// clickhouse-server is not installed (failing it under CI=true).
func sharedClickHouse(t testing.TB) *chtest.Server {
	t.Helper()
	cs := &clickhouseServer
	cs.once.Do(func() {
		if cs.dir, cs.err = os.MkdirTemp("", "flint-clickhouse-"); cs.err == nil {
			cs.srv, cs.err = chtest.New(cs.dir)
		}
	})
	if errors.Is(cs.err, chtest.ErrNotInstalled) && os.Getenv("CI") != "true" {
		t.Skip(cs.err)
	}
	if cs.err != nil {
		t.Fatal(cs.err)
	}
	return cs.srv
}

// stopSharedClickHouse is for TestMain.
func stopSharedClickHouse() {
	if s := clickhouseServer.srv; s != nil {
		s.Stop()
	}
	if d := clickhouseServer.dir; d != "" {
		os.RemoveAll(d)
	}
}

// newDatabase returns the DSN of a database no other test uses.
func newDatabase(t testing.TB, params ...string) string {
	srv := sharedClickHouse(t)
	return srv.DSN(fmt.Sprintf("t%d", clickhouseServer.dbs.Add(1)), params...)
}

func openClickHouse(t testing.TB, dsn string, o Options) *ClickHouse {
	t.Helper()
	s, err := OpenClickHouse(context.Background(), dsn, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// forEachBackend runs f as a subtest per backend, each with a new, empty
// store opened with o.
func forEachBackend(t *testing.T, o Options, f func(t *testing.T, s Store)) {
	t.Run("sqlite", func(t *testing.T) { f(t, openTest(t, t.TempDir(), o)) })
	t.Run("clickhouse", func(t *testing.T) { f(t, openClickHouse(t, newDatabase(t), o)) })
}
