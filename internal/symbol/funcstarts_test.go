package symbol

import (
	"os"
	"path/filepath"
	"testing"
)

// TestFuncStarts builds fixture.c, strips it, and checks that the code no
// symbol names any more is named by its function's start, the same for
// every address in it, as the unstripped file's symbols place them.
func TestFuncStarts(t *testing.T) {
	needFixtureTools(t, "gcc", "nm", "strip")
	for _, tt := range []struct {
		name  string
		flags []string
		// unnamed: functions stripped of their symbols; named: still
		// exported, which Lookup names.
		unnamed, named []string
	}{
		{"stripped non-PIE executable", []string{"-no-pie"}, []string{"static_helper", "exported_work", "main"}, nil},
		{"stripped shared library", []string{"-fPIC", "-shared"}, []string{"static_helper"}, []string{"exported_work"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "fixture")
			runFixtureCmd(t, "gcc", append([]string{"-O0", "-o", bin}, append(tt.flags, filepath.Join("testdata", "fixture.c"))...)...)
			syms := nmSymbols(t, bin)
			runFixtureCmd(t, "strip", bin)
			f, err := os.Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			b, err := OpenBinary(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range tt.unnamed {
				s := syms[name]
				if !s.hasSize || s.size < 2 {
					t.Fatalf("nm gives %s no size", name)
				}
				for _, addr := range []uint64{s.addr, s.addr + s.size/2, s.addr + s.size - 1} {
					if frames := b.Lookup(addr); frames != nil {
						t.Errorf("Lookup(%#x) in stripped %s = %v, want nil", addr, name, frames)
					}
					if start, ok := b.FuncStart(addr); !ok || start != s.addr {
						t.Errorf("FuncStart(%#x) = %#x, %v; want %s's start %#x", addr, start, ok, name, s.addr)
					}
				}
			}
			for _, name := range tt.named {
				if frames := b.Lookup(syms[name].addr + 1); len(frames) != 1 || frames[0].Function != name {
					t.Errorf("Lookup in %s = %v, want it named", name, frames)
				}
			}
			if start, ok := b.FuncStart(0); ok {
				t.Errorf("FuncStart(0) = %#x, want none: before every function", start)
			}
		})
	}
}
