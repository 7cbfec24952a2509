package sampler

import (
	"encoding/binary"
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
