package sampler

import (
	"encoding/binary"
	"testing"
)

func TestDecodeNewProc(t *testing.T) {
	raw := binary.NativeEndian.AppendUint32(binary.NativeEndian.AppendUint32(nil, 4242), 7)
	if pid, gen, ok := decodeNewProc(raw); !ok || pid != 4242 || gen != 7 {
		t.Errorf("decodeNewProc = %d, %d, %v; want 4242, 7, true", pid, gen, ok)
	}
	if _, _, ok := decodeNewProc(raw[:7]); ok {
		t.Error("a short record decoded")
	}
}
