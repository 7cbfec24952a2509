package sampler

import (
	"encoding/binary"
	"reflect"
	"slices"
	"testing"
	"unsafe"

	"github.com/flint-dev/flint/internal/python"
)

func TestDecodeNewProc(t *testing.T) {
	raw := binary.NativeEndian.AppendUint32(binary.NativeEndian.AppendUint32(nil, 4242), 7)
	raw = binary.NativeEndian.AppendUint64(raw, 123_456_789_012) // ns after boot
	raw = binary.NativeEndian.AppendUint64(raw, 0x55d0c0a02000)  // start_code
	raw = append(raw, "python3.11\x00\x00\x00\x00\x00\x00"...)
	want := NewProc{PID: 4242, Generation: 7, Comm: "python3.11", StartTime: 12345, Started: 123_456_789_012, ExeText: 0x55d0c0a02000}
	if p, ok := decodeNewProc(raw, nil); !ok || !reflect.DeepEqual(p, want) {
		t.Errorf("decodeNewProc = %+v, %v; want %+v", p, ok, want)
	}
	if _, ok := decodeNewProc(raw[:len(raw)-1], nil); ok {
		t.Error("a short record decoded")
	}

	// Listed: the same process with two mappings, a file's and the vDSO.
	mapping := func(b []byte, start, end, offset, inode uint64, dev, gen, flags uint32) []byte {
		for _, v := range []uint64{start, end, offset, inode} {
			b = binary.NativeEndian.AppendUint64(b, v)
		}
		for _, v := range []uint32{dev, gen, flags, 0} {
			b = binary.NativeEndian.AppendUint32(b, v)
		}
		return b
	}
	listed := func(flags profileListingFlags, n uint32) []byte {
		b := binary.NativeEndian.AppendUint32(slices.Clone(raw), uint32(flags))
		b = binary.NativeEndian.AppendUint32(b, n)
		return binary.NativeEndian.AppendUint64(b, 0xc6) // cgroups
	}
	two := mapping(listed(1, 2), 0x1000, 0x5000, 0x2000, 77, 0x800003, 9, uint32(profileListedMappingFlagsLISTED_DELETED))
	two = mapping(two, 0x7fff0000, 0x7fff2000, 0, 0, 0, 0, uint32(profileListedMappingFlagsLISTED_VDSO))
	wantListed := want
	wantListed.Listed, wantListed.Cgroups = true, 0xc6
	wantListed.Mappings = []ListedMapping{
		{Start: 0x1000, End: 0x5000, Offset: 0x2000, File: KernelFile{Inode: 77, Dev: 0x800003, Generation: 9}, Deleted: true},
		{Start: 0x7fff0000, End: 0x7fff2000, VDSO: true},
	}
	scratch := make([]ListedMapping, 0, 4)
	if p, ok := decodeNewProc(two, scratch); !ok || !reflect.DeepEqual(p, wantListed) || &p.Mappings[0] != &scratch[:1][0] {
		t.Errorf("decodeNewProc listed = %+v, %v; want %+v in the scratch given", p, ok, wantListed)
	}
	if _, ok := decodeNewProc(two[:len(two)-1], nil); ok {
		t.Error("a record shorter than its mappings decoded")
	}
	// Listed, its tables filled by the kernel.
	filled := slices.Clone(two)
	binary.NativeEndian.PutUint32(filled[len(raw):], uint32(profileListingFlagsLISTING_COMPLETE|profileListingFlagsLISTING_TABLES_FILLED))
	if p, ok := decodeNewProc(filled, nil); !ok || !p.Listed || !p.TablesFilled || len(p.Mappings) != 2 {
		t.Errorf("decodeNewProc of a listing filled = %+v, %v; want it listed, tables filled", p, ok)
	}
	if _, ok := decodeNewProc(listed(1, 65), nil); ok {
		t.Error("a record of more mappings than the BPF program holds decoded")
	}
	// Not listed whole: the header and cgroups only, for user space to
	// read /proc/PID/maps.
	want.Cgroups = 0xc6
	if p, ok := decodeNewProc(mapping(listed(0, 1), 1, 2, 0, 5, 1, 0, 0), nil); !ok || !reflect.DeepEqual(p, want) {
		t.Errorf("decodeNewProc of an incomplete listing = %+v, %v; want %+v", p, ok, want)
	}
}

// TestDecodePythonStack decodes python_young records: as many frames as
// the record says, none of a record shorter than it says or claiming more
// than the BPF program holds.
func TestDecodePythonStack(t *testing.T) {
	record := func(n uint32, frames ...uint64) []byte {
		raw := binary.NativeEndian.AppendUint32(binary.NativeEndian.AppendUint32(nil, 4242), 7)
		raw = binary.NativeEndian.AppendUint32(binary.NativeEndian.AppendUint32(raw, uint32(profilePythonRecordPY_RECORD_STACK)), n)
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

// TestDecodePythonCode decodes python_young records of copied code
// objects: the header and each object copied, back to back, none that was
// not; no record shorter than its objects say or claiming more than their
// room.
func TestDecodePythonCode(t *testing.T) {
	// record has the name, file and table copied with these lengths (0:
	// not copied), each object's data its first letter then zeros.
	record := func(name, file, table uint32) []byte {
		var ev profilePythonCode
		ev.Pid, ev.Generation, ev.Record, ev.Addr = 4242, 7, uint32(profilePythonRecordPY_RECORD_CODE), 0x7f00
		ev.Header[0] = 'h'
		at := uint32(0)
		for i, n := range []uint32{name, file, table} {
			ev.Objects[i].Addr, ev.Objects[i].Len, ev.Objects[i].Whole = 0x1000*uint64(i+1), n, uint32(i/2) // the table whole
			if n > 0 {
				ev.ObjectsData[at] = "nft"[i]
				at += n
			}
		}
		raw, err := binary.Append(nil, binary.NativeEndian, &ev)
		if err != nil {
			t.Fatal(err)
		}
		return raw[:int(unsafe.Offsetof(ev.ObjectsData))+int(at)]
	}
	var c python.Copy
	pid, gen, ok := decodePythonCode(record(60, 0, 40), &c)
	want := []python.Object{{Addr: 0x7f00, Data: []byte{'h'}}, {Addr: 0x1000, Data: []byte{'n'}}, {Addr: 0x3000, Data: []byte{'t'}}}
	if !ok || pid != 4242 || gen != 7 || c.Code != 0x7f00 || len(c.Objects) != len(want) {
		t.Fatalf("decoded %d %d %v %#x, %d objects", pid, gen, ok, c.Code, len(c.Objects))
	}
	for i, o := range c.Objects {
		if o.Addr != want[i].Addr || o.Data[0] != want[i].Data[0] || o.Whole != (o.Addr == 0x3000) {
			t.Errorf("object %d: %#x %q whole %v", i, o.Addr, o.Data[:1], o.Whole)
		}
	}
	if n := []int{256, 60, 40}; len(c.Objects[0].Data) != n[0] || len(c.Objects[1].Data) != n[1] || len(c.Objects[2].Data) != n[2] {
		t.Errorf("object sizes %d %d %d, want %v", len(c.Objects[0].Data), len(c.Objects[1].Data), len(c.Objects[2].Data), n)
	}
	if _, _, ok := decodePythonCode(record(48, 100, 0), &c); !ok || string(c.Objects[2].Data[:1]) != "f" || len(c.Objects[2].Data) != 100 {
		t.Errorf("the file after a name of 48 bytes: decoded %v, %d objects", ok, len(c.Objects))
	}
	dataAt := int(unsafe.Offsetof(profilePythonCode{}.ObjectsData))
	for name, raw := range map[string][]byte{
		"name past its room": record(513, 0, 0),
		"objects cut":        record(60, 60, 40)[:dataAt+140],
		"no header":          record(0, 0, 0)[:dataAt-1],
	} {
		if _, _, ok := decodePythonCode(raw, &c); ok {
			t.Errorf("%s: decoded", name)
		}
	}
}
