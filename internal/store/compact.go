package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"
)

const (
	// deleteChunk is how many windows one transaction deletes (an hour of
	// 10 s windows), so that dropping a week never holds the write lock
	// for long or grows the WAL by the whole week.
	deleteChunk = 360
	// gcEvery is how often unreferenced stacks, locations, functions,
	// mappings and label sets are collected once windows were dropped. They
	// are few next to the samples, so collecting rarely costs little space.
	gcEvery = time.Hour
	// vacuumChunk is how many free pages (of 4 KiB) one incremental vacuum
	// transaction returns to the file system.
	vacuumChunk = 4096
)

// Compact drops windows older than Options.Retention, then the oldest
// windows while the files are larger than Options.MaxSize (down to 90% of
// it), collects rows no window refers to any more (at most once per hour,
// or at once when the size limit was hit), and shrinks the files when much
// of them is free. The background goroutine Open starts calls it every
// Options.CompactInterval; it is safe to call at any time.
func (s *SQLite) Compact(ctx context.Context) error {
	if err := s.compact(ctx); err != nil {
		return fmt.Errorf("compact store: %w", err)
	}
	return nil
}

func (s *SQLite) compact(ctx context.Context) error {
	dropped := false
	if s.opts.Retention > 0 {
		cutoff := s.now().Add(-s.opts.Retention).UnixNano()
		n, err := s.dropBefore(ctx, cutoff)
		if err != nil {
			return fmt.Errorf("drop expired windows: %w", err)
		}
		dropped = n > 0
	}
	over, trimmed, err := s.trim(ctx)
	if err != nil {
		return fmt.Errorf("enforce size limit: %w", err)
	}
	s.mu.Lock()
	if dropped {
		s.gcPending = true
	}
	due := s.gcPending && (trimmed || s.now().Sub(s.lastGC) >= gcEvery)
	s.mu.Unlock()
	if due {
		if err := s.gc(ctx); err != nil {
			return fmt.Errorf("collect unreferenced rows: %w", err)
		}
	}
	if err := s.vacuum(ctx, over); err != nil {
		return err
	}
	// A checkpoint syncs the WAL first, so it bounds what a power loss can
	// take (synchronous=NORMAL syncs nothing at commit) to the windows
	// since the last compaction; SQLite's own come only at
	// autoCheckpointPages. PASSIVE: it waits for no reader.
	return s.locked(func() error {
		var busy, logPages, done int
		if err := s.w.conn.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &logPages, &done); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		return nil
	})
}

// locked runs f with the write lock held, unless the store is closed.
func (s *SQLite) locked(f func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	return f()
}

// dropBefore deletes the windows starting before cutoff, oldest first, a
// chunk per transaction; it returns how many it deleted.
func (s *SQLite) dropBefore(ctx context.Context, cutoff int64) (int, error) {
	total := 0
	for {
		var n int
		err := s.locked(func() error {
			var err error
			n, err = s.dropOldest(ctx, deleteChunk, cutoff)
			return err
		})
		total += n
		if err != nil || n < deleteChunk {
			return total, err
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}

// dropOldest deletes the oldest windows, at most max of them, all starting
// before cutoff; it returns how many it deleted. Called with s.mu held.
func (s *SQLite) dropOldest(ctx context.Context, max int, cutoff int64) (int, error) {
	n := 0
	err := s.w.tx(ctx, func() error {
		// Windows sharing a start time go together, so a chunk may exceed
		// max a little.
		var limit int64
		err := s.w.conn.QueryRowContext(ctx, `SELECT start FROM windows WHERE start < ? ORDER BY start LIMIT 1 OFFSET ?`,
			cutoff, max-1).Scan(&limit)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			limit = cutoff
		case err != nil:
			return err
		default:
			limit++ // delete through the max-th window's start
		}
		for _, q := range []string{`DELETE FROM samples WHERE start < ?`, `DELETE FROM findings WHERE start < ?`} {
			if _, err := s.w.conn.ExecContext(ctx, q, limit); err != nil {
				return err
			}
		}
		res, err := s.w.conn.ExecContext(ctx, `DELETE FROM windows WHERE start < ?`, limit)
		if err != nil {
			return err
		}
		d, err := res.RowsAffected()
		n = int(d)
		return err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// diskSize is the size in bytes of the database and its WAL and shared
// memory files.
func (s *SQLite) diskSize() (int64, error) {
	var total int64
	for _, suffix := range []string{"", "-wal", "-shm"} {
		fi, err := os.Stat(s.path + suffix)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		total += fi.Size()
	}
	return total, nil
}

// pages returns the database's page size, page count and free page count,
// as of the latest commit (WAL included).
func (s *SQLite) pages(ctx context.Context) (size, count, free int64, err error) {
	for _, p := range []struct {
		pragma string
		v      *int64
	}{{"page_size", &size}, {"page_count", &count}, {"freelist_count", &free}} {
		if err := s.w.conn.QueryRowContext(ctx, "PRAGMA "+p.pragma).Scan(p.v); err != nil {
			return 0, 0, 0, fmt.Errorf("read %s: %w", p.pragma, err)
		}
	}
	return size, count, free, nil
}

// trim drops the oldest windows while the files exceed MaxSize, until the
// pages in use fit in 90% of it. It reports whether the files were over
// the limit (the caller then shrinks them: a WAL not yet checkpointed can
// be the excess) and whether it dropped windows.
func (s *SQLite) trim(ctx context.Context) (over, dropped bool, err error) {
	if s.opts.MaxSize <= 0 {
		return false, false, nil
	}
	size, err := s.diskSize()
	if err != nil || size <= s.opts.MaxSize {
		return false, false, err
	}
	target := s.opts.MaxSize / 10 * 9
	for {
		var done bool
		err := s.locked(func() error {
			pageSize, count, free, err := s.pages(ctx)
			if err != nil {
				return err
			}
			used := (count - free) * pageSize
			var windows int64
			if err := s.w.conn.QueryRowContext(ctx, `SELECT count(*) FROM windows`).Scan(&windows); err != nil {
				return err
			}
			if used <= target || windows == 0 {
				done = true
				return nil
			}
			// Samples are most of the file and about the same per window:
			// drop the share of windows that should free the excess. The
			// rows only they used go in the collection below, so this
			// may take a few rounds.
			k := int((windows*(used-target) + used - 1) / used)
			k = min(max(k, 1), deleteChunk*10)
			n, err := s.dropOldest(ctx, k, 1<<63-1)
			if n > 0 {
				dropped = true
				s.gcPending = true
			}
			return err
		})
		if err != nil || done {
			return true, dropped, err
		}
		if err := s.gc(ctx); err != nil {
			return true, dropped, err
		}
		if err := ctx.Err(); err != nil {
			return true, dropped, err
		}
	}
}

// gc deletes the stacks and label sets no remaining window can refer to,
// then the locations, functions and mappings no remaining stack refers to.
// A stack's last column may be up to lastSlack older than the last window
// using it, so anything used within lastSlack of the oldest window stays.
func (s *SQLite) gc(ctx context.Context) error {
	return s.locked(func() error {
		err := s.w.tx(ctx, func() error {
			c := s.w.conn
			var oldest sql.NullInt64
			if err := c.QueryRowContext(ctx, `SELECT min(start) FROM windows`).Scan(&oldest); err != nil {
				return err
			}
			cutoff := int64(1<<63 - 1)
			if oldest.Valid {
				cutoff = oldest.Int64 - lastSlack
			}
			if _, err := c.ExecContext(ctx, `DELETE FROM stacks WHERE last < ?`, cutoff); err != nil {
				return err
			}
			if _, err := c.ExecContext(ctx, `DELETE FROM labelsets WHERE last < ?`, cutoff); err != nil {
				return err
			}
			if err := sweep(ctx, c, "SELECT locations FROM stacks", decodeStack, "locations"); err != nil {
				return err
			}
			frames := func(b []byte, ids []int64) ([]int64, error) {
				fs, err := decodeFrames(b, nil)
				for _, f := range fs {
					ids = append(ids, f.function)
				}
				return ids, err
			}
			if err := sweep(ctx, c, "SELECT frames FROM locations", frames, "functions"); err != nil {
				return err
			}
			_, err := c.ExecContext(ctx, `DELETE FROM mappings WHERE id NOT IN (SELECT mapping FROM locations)`)
			return err
		})
		if err != nil {
			return err
		}
		s.w.resetCaches()
		s.gcPending = false
		s.lastGC = s.now()
		return nil
	})
}

// sweep deletes the rows of table whose ids no blob of refs (decoded by
// decode) mentions.
func sweep(ctx context.Context, c *sql.Conn, refs string, decode func([]byte, []int64) ([]int64, error), table string) error {
	live := map[int64]bool{}
	rows, err := c.QueryContext(ctx, refs)
	if err != nil {
		return err
	}
	var ids []int64
	for rows.Next() {
		var b sql.RawBytes
		if err := rows.Scan(&b); err != nil {
			rows.Close()
			return err
		}
		if ids, err = decode(b, ids[:0]); err != nil {
			// Deleting on a misread blob could drop live rows; stop.
			rows.Close()
			return fmt.Errorf("%s: %w", refs, err)
		}
		for _, id := range ids {
			live[id] = true
		}
	}
	if err := rows.Close(); err != nil {
		return err
	}
	rows, err = c.QueryContext(ctx, "SELECT id FROM "+table)
	if err != nil {
		return err
	}
	var dead []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		if !live[id] {
			dead = append(dead, id)
		}
	}
	if err := rows.Close(); err != nil {
		return err
	}
	for len(dead) > 0 {
		n := min(len(dead), maxInList)
		if _, err := c.ExecContext(ctx, "DELETE FROM "+table+" WHERE id IN ("+idList(dead[:n])+")"); err != nil {
			return err
		}
		dead = dead[n:]
	}
	return nil
}

// vacuum returns free pages to the file system when the size limit was hit
// or a quarter of the file is free; otherwise free pages are left for new
// windows to reuse, which is cheaper than shrinking and growing the file.
func (s *SQLite) vacuum(ctx context.Context, force bool) error {
	shrunk := false
	for {
		var more bool
		err := s.locked(func() error {
			_, count, free, err := s.pages(ctx)
			if err != nil {
				return err
			}
			if free == 0 || (!force && free*4 < count) {
				return nil
			}
			// The pragma frees one page per step: read it to the end.
			rows, err := s.w.conn.QueryContext(ctx, fmt.Sprintf("PRAGMA incremental_vacuum(%d)", vacuumChunk))
			if err != nil {
				return err
			}
			for rows.Next() {
			}
			if err := rows.Close(); err != nil {
				return err
			}
			shrunk = true
			more = free > vacuumChunk
			return nil
		})
		if err != nil {
			return fmt.Errorf("vacuum: %w", err)
		}
		if !more {
			break
		}
		force = true // finish what was started
	}
	if !shrunk {
		return nil
	}
	// The database file shrinks when the WAL is checkpointed; TRUNCATE
	// also empties the WAL. Readers in progress can make it partial; the
	// next automatic checkpoint finishes the job.
	return s.locked(func() error {
		var busy, logPages, done int
		err := s.w.conn.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &logPages, &done)
		if err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		return nil
	})
}
