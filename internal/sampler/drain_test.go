package sampler

import (
	"encoding/binary"
	"slices"
	"testing"
)

func TestDecodeNewProc(t *testing.T) {
	raw := binary.NativeEndian.AppendUint32(binary.NativeEndian.AppendUint32(nil, 4242), 7)
	raw = binary.NativeEndian.AppendUint64(raw, 123_456_789_012) // ns after boot
	raw = binary.NativeEndian.AppendUint64(raw, 0x55d0c0a02000)  // start_code
	raw = append(raw, "python3.11\x00\x00\x00\x00\x00\x00"...)
	want := NewProc{PID: 4242, Generation: 7, Comm: "python3.11", StartTime: 12345, ExeText: 0x55d0c0a02000}
	if p, ok := decodeNewProc(raw); !ok || p != want {
		t.Errorf("decodeNewProc = %+v, %v; want %+v", p, ok, want)
	}
	if _, ok := decodeNewProc(raw[:len(raw)-1]); ok {
		t.Error("a short record decoded")
	}
}

// TestDecodePythonStack decodes python_young records: as many frames as
// the record says, none of a record shorter than it says or claiming more
// than the BPF program holds.
func TestDecodePythonStack(t *testing.T) {
	record := func(n uint32, frames ...uint64) []byte {
		raw := binary.NativeEndian.AppendUint32(binary.NativeEndian.AppendUint32(nil, 4242), 7)
		raw = binary.NativeEndian.AppendUint32(binary.NativeEndian.AppendUint32(raw, n), 0)
		for _, f := range frames {
			raw = binary.NativeEndian.AppendUint64(raw, f)
		}
		return raw
	}
	scratch := []uint64{99} // appended to from empty
	pid, gen, frames, ok := decodePythonStack(record(2, 1<<63|10, 1<<63|20), scratch[:0])
	if !ok || pid != 4242 || gen != 7 || !slices.Equal(frames, []uint64{1<<63 | 10, 1<<63 | 20}) {
		t.Errorf("decoded %d %d %#x %v", pid, gen, frames, ok)
	}
	for name, raw := range map[string][]byte{
		"short":    record(3, 1, 2),
		"too many": record(49, make([]uint64, 49)...),
		"no head":  record(0)[:12],
	} {
		if _, _, _, ok := decodePythonStack(raw, nil); ok {
			t.Errorf("%s: decoded", name)
		}
	}
}
