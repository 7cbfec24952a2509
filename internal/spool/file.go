package spool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/store"
)

// A spool file holds one window and the findings of its examination:
//
//	magic "flintspl", format byte
//	uvarint length, profile.MarshalBinary bytes
//	uvarint finding count, then per finding:
//	  varint start (ns since the epoch), varint duration (ns),
//	  string detector, string severity,
//	  uvarint label count, then string name, string value per label,
//	  string body
//	CRC-32C of everything before it, 4 bytes little endian
//
// A string is a uvarint length and its bytes. The checksum catches a file
// damaged on disk; a torn write cannot happen (files appear by rename).

const (
	magic      = "flintspl"
	fileFormat = 1
	suffix     = ".window"
	tmpSuffix  = ".tmp"
	// Set-aside files keep their name with this appended, so an operator
	// can tell which window they were.
	corruptSuffix = ".corrupt"
)

// ErrCorrupt reports a spool file that is not a valid encoding.
var ErrCorrupt = errors.New("corrupt spool file")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// window is what one spool file holds.
type window struct {
	profile  *profile.Profile
	findings []store.Finding
}

func encode(p *profile.Profile, fs []store.Finding) ([]byte, error) {
	pb, err := p.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("encode window: %w", err)
	}
	b := make([]byte, 0, len(magic)+1+binary.MaxVarintLen64+len(pb)+64*len(fs)+4)
	b = append(b, magic...)
	b = append(b, fileFormat)
	b = appendBytes(b, pb)
	b = binary.AppendUvarint(b, uint64(len(fs)))
	for _, f := range fs {
		b = binary.AppendVarint(b, f.Start.UnixNano())
		b = binary.AppendVarint(b, int64(f.Duration))
		b = appendBytes(b, []byte(f.Detector))
		b = appendBytes(b, []byte(f.Severity))
		b = binary.AppendUvarint(b, uint64(len(f.Labels)))
		for _, k := range slices.Sorted(maps.Keys(f.Labels)) {
			b = appendBytes(b, []byte(k))
			b = appendBytes(b, []byte(f.Labels[k]))
		}
		b = appendBytes(b, f.Body)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli)), nil
}

func appendBytes(b, s []byte) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// decode reads an encode encoding; it takes untrusted bytes and never
// panics (FuzzDecode).
func decode(b []byte) (*window, error) {
	if len(b) < len(magic)+1+4 || string(b[:len(magic)]) != magic {
		return nil, fmt.Errorf("%w: no spool header", ErrCorrupt)
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	if f := body[len(magic)]; f != fileFormat {
		return nil, fmt.Errorf("%w: format %d, want %d", ErrCorrupt, f, fileFormat)
	}
	d := reader{b: body[len(magic)+1:]}
	w := &window{profile: new(profile.Profile)}
	if err := w.profile.UnmarshalBinary(d.bytes()); d.err == nil && err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	n := d.count(4) // a finding takes at least 4 bytes
	for i := uint64(0); i < n && d.err == nil; i++ {
		f := store.Finding{
			Start:    time.Unix(0, d.varint()),
			Duration: time.Duration(d.varint()),
			Detector: string(d.bytes()),
			Severity: string(d.bytes()),
		}
		if nl := d.count(2); nl > 0 {
			f.Labels = make(map[string]string, nl)
			for range nl {
				k := string(d.bytes())
				f.Labels[k] = string(d.bytes())
			}
		}
		f.Body = d.bytes()
		w.findings = append(w.findings, f)
	}
	if d.err == nil && len(d.b) > 0 {
		d.err = errors.New("trailing bytes")
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, d.err)
	}
	return w, nil
}

// reader decodes varints and length-prefixed bytes; after the first error
// every read returns zero and err keeps that error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errors.New("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// varint reads a zigzag-encoded varint, as binary.AppendVarint writes.
func (r *reader) varint() int64 {
	u := r.uvarint()
	return int64(u>>1) ^ -int64(u&1)
}

// count reads a count of items taking at least minSize bytes each, and
// refuses one the bytes left cannot hold: nothing is allocated for it.
func (r *reader) count(minSize uint64) uint64 {
	n := r.uvarint()
	if r.err == nil && n > uint64(len(r.b))/minSize {
		r.err = fmt.Errorf("count %d beyond the %d bytes left", n, len(r.b))
		return 0
	}
	return n
}

func (r *reader) bytes() []byte {
	n := r.count(1)
	if r.err != nil {
		return nil
	}
	s := r.b[:n:n]
	r.b = r.b[n:]
	return s
}

// fileName names a window's file so that lexical order is the order the
// windows were put: the sequence number first, then the window's start,
// for the oldest window's age and for an operator's eye.
func fileName(seq uint64, start time.Time) string {
	return fmt.Sprintf("%020d-%019d%s", seq, start.UnixNano(), suffix)
}

// parseName returns the sequence number and window start of a fileName;
// ok is false for any other name.
func parseName(name string) (seq uint64, start time.Time, ok bool) {
	base, found := strings.CutSuffix(name, suffix)
	s, ns, cut := strings.Cut(base, "-")
	if !found || !cut || len(s) != 20 || len(ns) != 19 {
		return 0, time.Time{}, false
	}
	seq, err1 := strconv.ParseUint(s, 10, 64)
	n, err2 := strconv.ParseInt(ns, 10, 64)
	if err1 != nil || err2 != nil {
		return 0, time.Time{}, false
	}
	return seq, time.Unix(0, n), true
}
