package symbol

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readelfBuildID returns the build ID `readelf -n` prints for path, or "".
func readelfBuildID(t *testing.T, path string) string {
	t.Helper()
	out, err := exec.Command("readelf", "-n", path).Output()
	if err != nil {
		t.Fatalf("readelf -n %s: %v", path, err)
	}
	m := regexp.MustCompile(`Build ID: ([0-9a-f]+)`).FindSubmatch(out)
	if m == nil {
		return ""
	}
	return string(m[1])
}

func buildIDOf(t *testing.T, data []byte) string {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	return BuildID(f)
}

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestBuildIDFixtures(t *testing.T) {
	// The header fields zeroed below are at the same offsets in every
	// 64-bit little-endian ELF file.
	withoutSections := func(b []byte) []byte {
		b = bytes.Clone(b)
		binary.LittleEndian.PutUint64(b[0x28:], 0) // e_shoff
		binary.LittleEndian.PutUint16(b[0x3c:], 0) // e_shnum
		binary.LittleEndian.PutUint16(b[0x3e:], 0) // e_shstrndx
		return b
	}
	withoutProgs := func(b []byte) []byte {
		b = bytes.Clone(b)
		binary.LittleEndian.PutUint64(b[0x20:], 0) // e_phoff
		binary.LittleEndian.PutUint16(b[0x38:], 0) // e_phnum
		return b
	}
	tiny := readTestdata(t, "tiny-amd64.elf")
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"ELF64 GNU build ID", tiny, "0123456789abcdef"},
		{"ELF32 GNU build ID", readTestdata(t, "tiny-386.elf"), "feedface"},
		{"shared library", readTestdata(t, "tiny-amd64.so"), "0123456789abcdef"},
		{"Go build ID note only", readTestdata(t, "tiny-gonote-amd64.elf"), "flint-go-build-id/fixture"},
		{"program headers only", withoutSections(tiny), "0123456789abcdef"},
		{"sections only", withoutProgs(tiny), "0123456789abcdef"},
		{"neither", withoutProgs(withoutSections(tiny)), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := buildIDOf(t, tt.data); got != tt.want {
				t.Errorf("BuildID = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestBuildIDCompiled(t *testing.T) {
	needFixtureTools(t, "gcc", "readelf")
	dir := t.TempDir()
	src := filepath.Join("testdata", "fixture.c")
	tests := []struct {
		name  string
		flags []string
		want  string // "readelf" to compare with readelf -n
	}{
		{"linker default", nil, "readelf"},
		{"sha1", []string{"-Wl,--build-id=sha1"}, "readelf"},
		{"explicit", []string{"-Wl,--build-id=0xdeadbeef00112233"}, "deadbeef00112233"},
		{"shared library", []string{"-fPIC", "-shared", "-Wl,--build-id=0xabcdef"}, "abcdef"},
		{"none", []string{"-Wl,--build-id=none"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bin := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-"))
			runFixtureCmd(t, "gcc", append([]string{"-O0", "-o", bin, src}, tt.flags...)...)
			want := tt.want
			if want == "readelf" {
				if want = readelfBuildID(t, bin); want == "" {
					t.Skip("this linker writes no build ID by default")
				}
			}
			f, err := elf.Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if got := BuildID(f); got != want {
				t.Errorf("BuildID = %q, want %q", got, want)
			}
		})
	}
}

func TestBuildIDGo(t *testing.T) {
	needFixtureTools(t, "readelf")
	const id = "flint-fixture/abc/def/ghi"
	tests := []struct {
		name    string
		ldflags []string
		want    string // "readelf" to compare with readelf -n
	}{
		// Since Go 1.24 the linker derives a GNU build ID from the Go one.
		{"GNU build ID", nil, "readelf"},
		{"Go build ID only", []string{"-B=none"}, id},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bin := buildGoELF(t, id, tt.ldflags...)
			out, err := exec.Command("go", "tool", "buildid", bin).Output()
			if err != nil {
				t.Fatalf("go tool buildid: %v", err)
			}
			if got := strings.TrimSpace(string(out)); got != id {
				t.Fatalf("go tool buildid = %q, want %q", got, id)
			}
			want := tt.want
			if want == "readelf" {
				if want = readelfBuildID(t, bin); want == "" {
					t.Skip("this Go linker writes no GNU build ID")
				}
			}
			f, err := elf.Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if got := BuildID(f); got != want {
				t.Errorf("BuildID = %q, want %q", got, want)
			}
		})
	}
}

func TestFindBuildID(t *testing.T) {
	note := func(name string, typ uint32, desc []byte, pad int) []byte {
		var b []byte
		b = binary.LittleEndian.AppendUint32(b, uint32(len(name)))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(desc)))
		b = binary.LittleEndian.AppendUint32(b, typ)
		b = append(b, name...)
		for len(b)%pad != 0 {
			b = append(b, 0)
		}
		b = append(b, desc...)
		for len(b)%pad != 0 {
			b = append(b, 0)
		}
		return b
	}
	gnu := note("GNU\x00", noteGNUBuildID, []byte{0xca, 0xfe, 0xba, 0xbe, 0x01}, 4)
	goID := note("Go\x00\x00", noteGoBuildID, []byte("a/b\x00\x00"), 4)
	property := note("GNU\x00", 5, make([]byte, 16), 8) // NT_GNU_PROPERTY_TYPE_0
	tests := []struct {
		name  string
		data  []byte
		align uint64
		want  string
		isGo  bool
	}{
		{"GNU", gnu, 4, "cafebabe01", false},
		{"Go", goID, 4, "a/b", true},
		{"GNU after Go", append(bytes.Clone(goID), gnu...), 4, "cafebabe01", false},
		{"after an 8-aligned property note", append(property, note("GNU\x00", noteGNUBuildID, []byte{1, 2, 3}, 8)...), 8, "010203", false},
		{"other owner", note("XYZ\x00", noteGNUBuildID, []byte{1}, 4), 4, "", false},
		{"empty descriptor", note("GNU\x00", noteGNUBuildID, nil, 4), 4, "", false},
		{"truncated descriptor", gnu[:len(gnu)-4], 4, "", false},
		{"last note without padding", gnu[:len(gnu)-3], 4, "cafebabe01", false},
		{"huge sizes", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 3, 0, 0, 0}, 4, "", false},
		{"short header", gnu[:11], 4, "", false},
		{"empty", nil, 4, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, isGo := findBuildID(tt.data, binary.LittleEndian, tt.align)
			if got != tt.want || isGo != tt.isGo {
				t.Errorf("findBuildID = %q, %v; want %q, %v", got, isGo, tt.want, tt.isGo)
			}
		})
	}
}

func FuzzBuildID(f *testing.F) {
	fuzzELFSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		// The raw bytes as a note section, then as an ELF file.
		for _, align := range []uint64{4, 8} {
			findBuildID(data, binary.LittleEndian, align)
			findBuildID(data, binary.BigEndian, align)
		}
		ef, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			return
		}
		BuildID(ef)
	})
}
