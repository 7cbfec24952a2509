package python

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
)

// lineInterpreters are the pyenv builds whose compilers give the ground
// truth.
var lineInterpreters = []struct {
	minor int
	path  string
}{
	{9, "/root/.pyenv/versions/3.9.18/bin/python3.9"},
	{10, "/root/.pyenv/versions/3.10.13/bin/python3.10"},
	{11, "/root/.pyenv/versions/3.11.7/bin/python3.11"},
	{12, "/root/.pyenv/versions/3.12.1/bin/python3.12"},
	{13, "/root/.pyenv/versions/3.13.0/bin/python3.13"},
}

// lineCode is one code object as testdata/lines.py prints it.
type lineCode struct {
	Name      string
	FirstLine int `json:"firstlineno"`
	Table     []byte
	Lines     []int // the line of each code unit, 0 for none
}

// compileLines runs testdata/lines.py under python and returns its code
// objects.
func compileLines(python string) ([]lineCode, error) {
	out, err := exec.Command(python, "testdata/lines.py").Output()
	if err != nil {
		if e, ok := err.(*exec.ExitError); ok {
			return nil, fmt.Errorf("%s: %v: %s", python, err, e.Stderr)
		}
		return nil, err
	}
	var raw []struct {
		lineCode
		Table string
	}
	if err := json.Unmarshal(out, &raw); err != nil {
		return nil, err
	}
	codes := make([]lineCode, len(raw))
	for i, r := range raw {
		codes[i] = r.lineCode
		if codes[i].Table, err = hex.DecodeString(r.Table); err != nil {
			return nil, err
		}
	}
	return codes, nil
}

func TestLine(t *testing.T) {
	for _, py := range lineInterpreters {
		t.Run(fmt.Sprintf("3.%d", py.minor), func(t *testing.T) {
			if _, err := os.Stat(py.path); err != nil {
				t.Skipf("no interpreter at %s", py.path)
			}
			codes, err := compileLines(py.path)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range codes {
				for i, want := range c.Lines {
					if got := Line(py.minor, c.Table, c.FirstLine, uint32(i)); got != want {
						t.Errorf("%s (table %x): Line(%d) = %d, want %d", c.Name, c.Table, i, got, want)
						break
					}
				}
				// A code object's lines, found and then kept, read
				// back to front twice.
				kept := &code{firstLine: c.FirstLine, lineTable: c.Table}
				for pass := range 2 {
					for i := len(c.Lines) - 1; i >= 0; i-- {
						if got := kept.line(py.minor, uint32(i)); got != c.Lines[i] {
							t.Errorf("%s, pass %d: line(%d) = %d, want %d", c.Name, pass, i, got, c.Lines[i])
							break
						}
					}
				}
			}
		})
	}
}

func TestLineEdges(t *testing.T) {
	for _, tc := range []struct {
		name  string
		minor int
		table []byte
		lasti uint32
		want  int
	}{
		{"3.9 empty", 9, nil, 5, 100},
		{"3.9 past end keeps last line", 9, []byte{2, 3, 2, 0xff}, 50, 102},
		{"3.9 address increment is in bytes", 9, []byte{2, 3, 2, 0xff}, 1, 103},
		{"3.9 odd last byte ignored", 9, []byte{0, 5, 7}, 9, 105},
		{"3.10 empty", 10, nil, 0, 0},
		{"3.10 past end", 10, []byte{4, 1}, 2, 0},
		{"3.10 empty ranges move the line", 10, []byte{0, 127, 0, 127, 4, 46}, 1, 400},
		{"3.10 no line", 10, []byte{2, 1, 2, 0x80, 2, 1}, 1, 0},
		{"3.10 no line keeps the line", 10, []byte{2, 1, 2, 0x80, 2, 1}, 2, 102},
		{"3.10 lone last byte pairs with NUL", 10, []byte{2, 1, 4}, 2, 101},
		{"3.11 empty", 11, nil, 0, 0},
		{"3.11 past end", 11, []byte{0x80 | 10<<3 | 1, 0, 0}, 2, 0},
		{"3.11 short form length", 11, []byte{0x80 | 12<<3, 0, 0, 0x80 | 3<<3 | 7, 0}, 8, 102},
		{"3.11 no location", 13, []byte{0x80 | 11<<3, 0, 0, 0xf8, 0x80 | 10<<3, 0, 0}, 1, 0},
		{"3.11 no location keeps the line", 12, []byte{0x80 | 11<<3, 0, 0, 0xf8, 0x80 | 10<<3, 0, 0}, 2, 101},
		{"3.11 long form", 11, []byte{0x80 | 14<<3, 0x48, 0x03, 0, 1, 1}, 0, 200},
		{"3.11 negative varint", 11, []byte{0x80 | 13<<3, 0x45}, 0, 98},
		{"3.11 varint truncated by the table's NUL", 11, []byte{0x80 | 13<<3, 0x44}, 0, 102},
		{"3.11 varint read into the next entry", 11, []byte{0x80 | 13<<3, 0x42, 0x80 | 1<<3, 0}, 0, 100 + (2+8<<6)>>1},
		{"3.11 varint keeps 32 bits", 11, []byte{0x80 | 13<<3, 0x40, 0x40, 0x40, 0x40, 0x40, 0x7f}, 0, 100 + 3<<30>>1},
		{"3.11 hostile first byte without bit 7", 11, []byte{0x78, 0x80 | 13<<3, 2}, 1, 101},
		{"3.8 unsupported", 8, []byte{2, 1}, 0, 0},
		{"3.14 unsupported", 14, []byte{0x80, 0}, 0, 0},
	} {
		if got := Line(tc.minor, tc.table, 100, tc.lasti); got != tc.want {
			t.Errorf("%s: Line(%d, %x, 100, %d) = %d, want %d", tc.name, tc.minor, tc.table, tc.lasti, got, tc.want)
		}
	}
}

// lineSeeds are the real tables the fuzzer starts from, read once per process.
var lineSeeds = sync.OnceValue(func() map[int][]lineCode {
	seeds := map[int][]lineCode{}
	for _, py := range lineInterpreters {
		if codes, err := compileLines(py.path); err == nil {
			seeds[py.minor] = codes
		}
	}
	return seeds
})

func FuzzLine(f *testing.F) {
	for minor, codes := range lineSeeds() {
		for _, c := range codes {
			f.Add(minor, c.Table, int32(c.FirstLine), uint32(len(c.Lines)/2))
		}
	}
	f.Add(11, []byte{0x80 | 13<<3, 0x7f, 0x7f}, int32(1), uint32(0))
	f.Fuzz(func(t *testing.T, minor int, table []byte, firstLine int32, lasti uint32) {
		minor = 9 + (minor%5+5)%5
		got := Line(minor, table, int(firstLine), lasti)
		if got != int(int32(got)) {
			t.Fatalf("Line(%d, %x, %d, %d) = %d, beyond a C int", minor, table, firstLine, lasti, got)
		}
		// Up to 3.10 each entry moves the line by a signed byte, too little
		// for the fuzzer's tables to wrap a C int.
		if d := int(int32(got) - firstLine); minor <= 10 && got != 0 && (d > 128*len(table) || d < -128*len(table)) {
			t.Errorf("Line(%d, %x, %d, %d) = %d, beyond the table's reach", minor, table, firstLine, lasti, got)
		}
	})
}
