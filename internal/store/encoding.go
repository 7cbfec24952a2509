package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// The blob encodings below are documented byte by byte in docs/STORE.md.
// Decoders read bytes from disk, so they treat them as untrusted: they
// bound every length, reject what the encoders never write and never panic
// (FuzzDecode checks that every accepted blob re-encodes to itself).

var errCorrupt = errors.New("corrupt blob")

// stackCount is one (stack id, count) pair of a samples row.
type stackCount struct {
	stack int64
	count int64
}

// appendCounts encodes pairs sorted by strictly increasing stack id, each
// as uvarint(id - previous id) then uvarint(count); the first previous id
// is 0. Ids and counts are positive, so every delta and count is >= 1.
func appendCounts(b []byte, pairs []stackCount) []byte {
	var prev int64
	for _, p := range pairs {
		b = binary.AppendUvarint(b, uint64(p.stack-prev))
		b = binary.AppendUvarint(b, uint64(p.count))
		prev = p.stack
	}
	return b
}

// decodeCounts calls f for each pair of a samples blob, in stack id order.
func decodeCounts(b []byte, f func(stack, count int64)) error {
	var prev uint64
	for len(b) > 0 {
		d, n := binary.Uvarint(b)
		if n <= 0 || d == 0 || d > maxID-prev {
			return fmt.Errorf("%w: stack id delta", errCorrupt)
		}
		b = b[n:]
		c, n := binary.Uvarint(b)
		if n <= 0 || c == 0 || c > maxCount {
			return fmt.Errorf("%w: sample count", errCorrupt)
		}
		b = b[n:]
		prev += d
		f(int64(prev), int64(c))
	}
	return nil
}

// maxID and maxCount keep decoded values positive int64s.
const (
	maxID    = 1<<63 - 1
	maxCount = 1<<63 - 1
)

// appendStack encodes a stack's location ids leaf first, each as the
// zigzag varint of its difference from the previous id (0 before the
// first): a new stack's new locations get consecutive ids, so most take
// one byte.
func appendStack(b []byte, locs []int64) []byte {
	var prev int64
	for _, id := range locs {
		b = binary.AppendVarint(b, id-prev)
		prev = id
	}
	return b
}

// decodeStack appends the location ids of a stack blob to ids.
func decodeStack(b []byte, ids []int64) ([]int64, error) {
	var prev int64
	for len(b) > 0 {
		d, n := binary.Varint(b)
		if n <= 0 {
			return ids, fmt.Errorf("%w: location id", errCorrupt)
		}
		b = b[n:]
		id := prev + d
		// Overflow wraps around to a negative sum, which is not an id either.
		if id <= 0 || (d > 0 && id < prev) {
			return ids, fmt.Errorf("%w: location id %d", errCorrupt, id)
		}
		ids = append(ids, id)
		prev = id
	}
	return ids, nil
}

// frame is a stored frame: a function row and a line number.
type frame struct {
	function int64
	line     int64
}

// appendFrames encodes a location's frames innermost first, each as
// uvarint(function id) then uvarint(line); lines are >= 0 in practice and
// a negative one round-trips as its two's complement.
func appendFrames(b []byte, frames []frame) []byte {
	for _, f := range frames {
		b = binary.AppendUvarint(b, uint64(f.function))
		b = binary.AppendUvarint(b, uint64(f.line))
	}
	return b
}

// decodeFrames appends the frames of a frames blob to fs.
func decodeFrames(b []byte, fs []frame) ([]frame, error) {
	for len(b) > 0 {
		fn, n := binary.Uvarint(b)
		if n <= 0 || fn == 0 || fn > maxID {
			return fs, fmt.Errorf("%w: function id", errCorrupt)
		}
		b = b[n:]
		line, n := binary.Uvarint(b)
		if n <= 0 {
			return fs, fmt.Errorf("%w: line", errCorrupt)
		}
		b = b[n:]
		fs = append(fs, frame{function: int64(fn), line: int64(line)})
	}
	return fs, nil
}

// appendLabels encodes a label set sorted by name, each label as
// uvarint(len(name)) name uvarint(len(value)) value. names is scratch space.
func appendLabels(b []byte, labels map[string]string, names []string) ([]byte, []string) {
	names = names[:0]
	for k := range labels {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		b = appendString(b, k)
		b = appendString(b, labels[k])
	}
	return b, names
}

// decodeLabels returns the label set of a labels blob.
func decodeLabels(b []byte) (map[string]string, error) {
	m := map[string]string{}
	prev := ""
	for len(b) > 0 {
		var k, v string
		var err error
		if k, b, err = readString(b); err != nil {
			return nil, fmt.Errorf("%w: label name", err)
		}
		if v, b, err = readString(b); err != nil {
			return nil, fmt.Errorf("%w: label value", err)
		}
		// Names are strictly increasing: the encoding is canonical, so equal
		// sets have equal blobs (and equal hashes).
		if len(m) > 0 && strings.Compare(k, prev) <= 0 {
			return nil, fmt.Errorf("%w: label %q out of order", errCorrupt, k)
		}
		m[k] = v
		prev = k
	}
	return m, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func readString(b []byte) (string, []byte, error) {
	l, n := binary.Uvarint(b)
	if n <= 0 || l > uint64(len(b)-n) {
		return "", b, fmt.Errorf("%w: string length", errCorrupt)
	}
	b = b[n:]
	return string(b[:l]), b[l:], nil
}

// hash64 is FNV-1a over b: the stable hash stored in the hash columns of
// the dictionary tables. It is computed only for items missing from the
// in-memory caches, so its speed matters little; collisions are harmless
// because lookups also compare the content.
func hash64(b []byte) int64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return int64(h)
}
