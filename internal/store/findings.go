package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// WriteFindings stores the findings of one examination in one transaction.
func (s *SQLite) WriteFindings(ctx context.Context, fs []Finding) error {
	if len(fs) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("write findings: %w", errClosed)
	}
	err := s.w.tx(ctx, func() error {
		for _, f := range fs {
			labels, _ := appendLabels(nil, f.Labels, nil)
			_, err := s.w.conn.ExecContext(ctx,
				`INSERT INTO findings (start, duration, detector, severity, labels, body) VALUES (?, ?, ?, ?, ?, ?)`,
				f.Start.UnixNano(), int64(f.Duration), f.Detector, f.Severity, labels, string(f.Body))
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("write findings: %w", err)
	}
	return nil
}

// Findings returns the findings of examinations starting in [q.From, q.To)
// whose labels match q.Selector, oldest first.
func (s *SQLite) Findings(ctx context.Context, q Query) ([]Finding, error) {
	if err := s.checkRange("findings", q.From, q.To); err != nil {
		return nil, err
	}
	var out []Finding
	err := s.inSnapshot(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx,
			`SELECT start, duration, detector, severity, labels, body FROM findings WHERE start >= ? AND start < ? ORDER BY start, id`,
			q.From.UnixNano(), q.To.UnixNano())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var start, duration int64
			var f Finding
			var labels []byte
			var body string
			if err := rows.Scan(&start, &duration, &f.Detector, &f.Severity, &labels, &body); err != nil {
				return err
			}
			if f.Labels, err = decodeLabels(labels); err != nil {
				return fmt.Errorf("finding at %d: %w", start, err)
			}
			if !q.Selector.Matches(f.Labels) {
				continue
			}
			if max := s.opts.MaxFindings; max > 0 && len(out) == max {
				return errTooManyFindings(max)
			}
			f.Start, f.Duration, f.Body = time.Unix(0, start), time.Duration(duration), []byte(body)
			out = append(out, f)
		}
		return rows.Err()
	})
	if err != nil {
		if errors.Is(err, ErrTooLarge) {
			return nil, err
		}
		return nil, fmt.Errorf("read findings: %w", err)
	}
	return out, nil
}
