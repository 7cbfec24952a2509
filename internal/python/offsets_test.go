package python

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// TestOffsetsMatchHeaders compiles testdata/offsets.c against each
// installed interpreter's headers and compares what offsetof gives with
// the table: a field the program does not print must be 0 there.
func TestOffsetsMatchHeaders(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no gcc to compile testdata/offsets.c")
	}
	for _, py := range lineInterpreters {
		t.Run(fmt.Sprintf("3.%d", py.minor), func(t *testing.T) {
			include := filepath.Join(filepath.Dir(filepath.Dir(py.path)), "include", fmt.Sprintf("python3.%d", py.minor))
			if _, err := os.Stat(filepath.Join(include, "Python.h")); err != nil {
				t.Skipf("no headers at %s", include)
			}
			got := headerOffsets(t, include)
			want := reflect.ValueOf(versions[py.minor])
			for i := 0; i < want.NumField(); i++ {
				f := want.Type().Field(i)
				if f.Type.Kind() != reflect.Uint16 {
					continue
				}
				if v := want.Field(i).Uint(); v != got[f.Name] {
					t.Errorf("%s: table has %d, headers %d", f.Name, v, got[f.Name])
				}
				delete(got, f.Name)
			}
			for name := range got {
				t.Errorf("offsets.c prints %s, which Offsets lacks", name)
			}
		})
	}
}

// headerOffsets compiles and runs testdata/offsets.c with the headers in
// include and returns what it prints.
func headerOffsets(t *testing.T, include string) map[string]uint64 {
	bin := filepath.Join(t.TempDir(), "offsets")
	cc := exec.Command("gcc", "-I"+include, "-I"+filepath.Join(include, "internal"), "-o", bin, "testdata/offsets.c")
	if out, err := cc.CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), "=")
		n, err := strconv.ParseUint(value, 10, 16)
		if !ok || err != nil {
			t.Fatalf("offsets.c printed %q", sc.Text())
		}
		got[name] = n
	}
	return got
}
