package sampler

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/flint-dev/flint/internal/unwind"
)

// MaxUnwindMappings is how many mappings of one process SetUnwind lists;
// code in the rest is walked with frame pointers.
const MaxUnwindMappings = len(profileUnwindProc{}.Mappings)

// UnwindRows is how many unwind rows the sampler holds (Options.UnwindRows).
func (s *Sampler) UnwindRows() int { return s.opts.UnwindRows }

// rowBatch bounds the rows converted at once, so loading a large table
// does not double its size in flint's memory.
const rowBatch = 1 << 16

// WriteRows stores rows at index first of the sampler's unwind rows, each
// PC as an offset from the first's (the caller checks they fit in 32 bits):
// copied into the map's memory, mapped at Start, no system call a row.
func (s *Sampler) WriteRows(first uint32, rows []unwind.Row) (err error) {
	if len(rows) == 0 {
		return nil
	}
	if uint64(first)+uint64(len(rows)) > uint64(s.opts.UnwindRows) {
		return fmt.Errorf("write unwind rows %d to %d: the sampler holds %d", first, uint64(first)+uint64(len(rows)), s.opts.UnwindRows)
	}
	defer func() {
		if e := s.forgetFoundRows(); err == nil {
			err = e
		}
	}()
	base := rows[0].PC
	values := make([]profileUnwindRow, min(len(rows), rowBatch))
	for start := 0; start < len(rows); start += rowBatch {
		batch := rows[start:min(start+rowBatch, len(rows))]
		for i, r := range batch {
			values[i] = profileUnwindRow{
				Pc: uint32(r.PC - base), CfaOffset: r.CFAOffset, RbpOffset: r.RBPOffset, Cfa: uint8(r.CFA),
			}
		}
		if _, err := s.rows.WriteAt(rowBytes(values[:len(batch)]), (int64(first)+int64(start))*int64(UnwindRowSize)); err != nil {
			return fmt.Errorf("write unwind rows at %d: %w", first+uint32(start), err)
		}
	}
	return nil
}

// rowBytes returns rows as unwind_rows' memory holds them, back to back
// (struct unwind_row is as large as an array's 8-byte aligned slot).
func rowBytes(rows []profileUnwindRow) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(rows))), len(rows)*UnwindRowSize)
}

// forgetFoundRows moves the program's unwind_epoch, after rows were
// written: rows its walker found before and keeps (row_cache) may have
// been overwritten, perhaps by another binary's.
func (s *Sampler) forgetFoundRows() error {
	return s.rowsEpoch.move(s.objs.UnwindEpoch, "unwind rows written")
}

// SetUnwind makes the sampler walk the user stacks of process pid's image
// generation with unwind rows: ms are its executable mappings sorted by
// address (at most MaxUnwindMappings), each naming its rows as WriteRows
// stored them. It clears the process's stale mark (Options.OnStale), or,
// when ms are partial (the process has more), sets it for good: code
// outside ms is then no sign of a library loaded since.
func (s *Sampler) SetUnwind(pid, generation uint32, ms []unwind.Mapping, partial bool) error {
	if len(ms) > MaxUnwindMappings {
		return fmt.Errorf("unwind mappings of process %d: %d, at most %d", pid, len(ms), MaxUnwindMappings)
	}
	s.unwindMu.Lock()
	p := &s.unwindProc
	*p = profileUnwindProc{Generation: generation, Len: uint32(len(ms))}
	if partial {
		p.Stale = 1
	}
	for i, m := range ms {
		e := &p.Mappings[i]
		e.Start, e.End, e.Base, e.First, e.Rows = m.Start, m.End, m.Base, m.First, m.Rows
	}
	// Pointers: the map's own sizes, neither marshalled by reflection nor
	// copied.
	err := putRaw(s.objs.UnwindProcs, unsafe.Pointer(&pid), unsafe.Pointer(p))
	s.unwindMu.Unlock()
	if err != nil {
		return fmt.Errorf("set unwind mappings of process %d: %w", pid, err)
	}
	s.unwindWritten.add(pid)
	return s.forgetLacks()
}

// DeleteUnwind forgets process pid's unwind mappings; its stacks go back
// to frame pointers. A process without them is no error. exited says the
// process has exited, and took with it the mappings the kernel listed
// (on_exit): only those SetUnwind wrote, perhaps after the exit, are
// deleted then.
func (s *Sampler) DeleteUnwind(pid uint32, exited bool) error {
	if !s.unwindWritten.take(pid) && exited {
		return nil
	}
	return deleteKey(s.objs.UnwindProcs, pid, "unwind mappings of process", pid)
}

// writtenPIDs are the processes whose entries of a map user space wrote
// and has not deleted.
type writtenPIDs struct {
	mu   sync.Mutex
	pids map[uint32]struct{}
}

func (w *writtenPIDs) add(pid uint32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pids == nil {
		w.pids = map[uint32]struct{}{}
	}
	w.pids[pid] = struct{}{}
}

// take removes pid, reporting whether it was there.
func (w *writtenPIDs) take(pid uint32) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.pids[pid]
	delete(w.pids, pid)
	return ok
}

// deleteKey deletes key's entry of m, what of whom (the error's words); one
// that is not there is no error.
func deleteKey(m *ebpf.Map, key any, what string, whom any) error {
	err := m.Delete(key)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete %s %v: %w", what, whom, err)
	}
	return nil
}

// UnwindRowSize is the kernel memory one unwind row takes, in bytes.
const UnwindRowSize = int(unsafe.Sizeof(profileUnwindRow{}))

// DefaultUnwindMemory is the kernel memory for unwind rows when the
// commands are not told otherwise: 2.1 million rows, the tables of a node's
// worth of native binaries (docs/UNWIND.md has their sizes).
const DefaultUnwindMemory = 32 << 20
