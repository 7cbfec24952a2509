package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
)

// schemaVersion is the version of the on-disk format this code writes and
// reads; docs/STORE.md describes it. Bump it with every change to a table
// or a blob encoding, and teach migrate the way up from the one before.
const schemaVersion = 4

// schema creates the current version. Times are Unix nanoseconds, durations
// nanoseconds; addresses are uint64s stored as their int64 bit pattern.
// AUTOINCREMENT keeps ids from being reused after garbage collection, so an
// id names one item forever and the read-side caches never go stale.
const schema = `
CREATE TABLE meta (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE windows (
	id       INTEGER PRIMARY KEY AUTOINCREMENT,
	start    INTEGER NOT NULL,
	duration INTEGER NOT NULL,
	period   INTEGER NOT NULL,
	samples  INTEGER NOT NULL,
	type     INTEGER NOT NULL DEFAULT 0 -- version 4
);
CREATE INDEX windows_start ON windows (start);

CREATE TABLE samples (
	start  INTEGER NOT NULL,
	window INTEGER NOT NULL,
	labels INTEGER NOT NULL,
	total  INTEGER NOT NULL,
	stacks BLOB NOT NULL,
	PRIMARY KEY (start, window, labels)
) WITHOUT ROWID;

CREATE TABLE labelsets (
	id     INTEGER PRIMARY KEY AUTOINCREMENT,
	hash   INTEGER NOT NULL,
	first  INTEGER NOT NULL,
	last   INTEGER NOT NULL,
	labels BLOB NOT NULL
);
CREATE INDEX labelsets_hash ON labelsets (hash);

CREATE TABLE stacks (
	id        INTEGER PRIMARY KEY AUTOINCREMENT,
	hash      INTEGER NOT NULL,
	last      INTEGER NOT NULL,
	locations BLOB NOT NULL
);
CREATE INDEX stacks_hash ON stacks (hash);

CREATE TABLE locations (
	id      INTEGER PRIMARY KEY AUTOINCREMENT,
	hash    INTEGER NOT NULL,
	mapping INTEGER NOT NULL,
	address INTEGER NOT NULL,
	frames  BLOB NOT NULL
);
CREATE INDEX locations_hash ON locations (hash);

CREATE TABLE functions (
	id   INTEGER PRIMARY KEY AUTOINCREMENT,
	hash INTEGER NOT NULL,
	name TEXT NOT NULL,
	file TEXT NOT NULL,
	start_line INTEGER NOT NULL DEFAULT 0 -- version 3
);
CREATE INDEX functions_hash ON functions (hash);

CREATE TABLE mappings (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	hash        INTEGER NOT NULL,
	start_addr  INTEGER NOT NULL,
	limit_addr  INTEGER NOT NULL,
	file_offset INTEGER NOT NULL,
	file        TEXT NOT NULL,
	build_id    TEXT NOT NULL,
	kernel      INTEGER NOT NULL
);
CREATE INDEX mappings_hash ON mappings (hash);
` + findingsSchema

// findingsSchema is what version 2 added to version 1: the agent's doctor
// findings, each with the labels of its process and its JSON.
const findingsSchema = `
CREATE TABLE findings (
	id       INTEGER PRIMARY KEY AUTOINCREMENT,
	start    INTEGER NOT NULL,
	duration INTEGER NOT NULL,
	detector TEXT NOT NULL,
	severity TEXT NOT NULL,
	labels   BLOB NOT NULL,
	body     TEXT NOT NULL
);
CREATE INDEX findings_start ON findings (start);
`

// ErrNewerSchema reports a database written by a newer flint; this one
// cannot read it. errors.Is(err, ErrNewerSchema) holds for Open's error.
var ErrNewerSchema = errors.New("database written by a newer flint")

// migrate creates the schema in an empty database, or checks that an
// existing one has a version this code reads.
func migrate(ctx context.Context, db *sql.DB, path string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE name = 'meta'`).Scan(&n); err != nil {
		return fmt.Errorf("read schema: %w", err)
	}
	if n == 0 {
		var tables int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema`).Scan(&tables); err != nil {
			return fmt.Errorf("read schema: %w", err)
		}
		if tables > 0 {
			return fmt.Errorf("%s is an SQLite database but not flint's (no meta table)", path)
		}
		if _, err := tx.ExecContext(ctx, schema); err != nil {
			return fmt.Errorf("create schema: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO meta (key, value) VALUES ('schema_version', ?)`, strconv.Itoa(schemaVersion)); err != nil {
			return fmt.Errorf("write schema version: %w", err)
		}
		return tx.Commit()
	}
	var v string
	if err := tx.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'schema_version'`).Scan(&v); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	version, err := strconv.Atoi(v)
	switch {
	case err != nil || version < 1:
		return fmt.Errorf("%s has an invalid schema version %q", path, v)
	case version > schemaVersion:
		return fmt.Errorf("%w: %s has schema version %d, this flint reads up to %d: upgrade flint or use another directory",
			ErrNewerSchema, path, version, schemaVersion)
	case version == schemaVersion:
		return nil
	}
	// Each step brings the schema from the version before.
	for _, step := range []struct {
		to  int
		sql string
	}{
		{2, findingsSchema},
		{3, `ALTER TABLE functions ADD COLUMN start_line INTEGER NOT NULL DEFAULT 0`},
		{4, `ALTER TABLE windows ADD COLUMN type INTEGER NOT NULL DEFAULT 0`},
	} {
		if version >= step.to {
			continue
		}
		if _, err := tx.ExecContext(ctx, step.sql); err != nil {
			return fmt.Errorf("migrate schema %d to %d: %w", step.to-1, step.to, err)
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE meta SET value = ? WHERE key = 'schema_version'`, strconv.Itoa(schemaVersion)); err != nil {
		return fmt.Errorf("migrate schema %d to %d: %w", version, schemaVersion, err)
	}
	return tx.Commit()
}
