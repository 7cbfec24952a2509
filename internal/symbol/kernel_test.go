package symbol

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"
)

func TestReadKallsyms(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "kallsyms"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	k, err := ReadKallsyms(f)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name         string
		addr         uint64
		want, module string // want "" means not covered
	}{
		{"before the first symbol", 0xffffffff80000000, "", ""},
		{"a function beats the markers at its address", 0xffffffff81000000, "srso_alias_untrain_ret", ""},
		{"up to the next symbol", 0xffffffff8100000f, "srso_alias_untrain_ret", ""},
		{"marker as the only name", 0xffffffff81000010, "__entry_text_start", ""},
		{"inside", 0xffffffff81000090, "entry_SYSCALL_64", ""},
		{"weak", 0xffffffff81207610, "abort", ""},
		{"local", 0xffffffff81207700, "do_idle", ""},
		{"last function before _etext", 0xffffffff8220bb07, "__SCT__tp_func_ma_write", ""},
		{"_etext is not a function", 0xffffffff8220bb08, "", ""},
		{"past _etext", 0xffffffff8230bb08, "", ""},
		{"data", 0xffffffff82400100, "", ""},
		{"module", 0xffffffffc0a04100, "ext4_file_read_iter", "ext4"},
		{"module listed out of order", 0xffffffffc0a05010, "ext4_helper", "ext4"},
		{"module data bounds the function before it", 0xffffffffc0a04800, "", ""},
		{"ftrace trampoline", 0xffffffffc0201010, "ftrace_trampoline", "__builtin__ftrace"},
		{"BPF program", 0xffffffffc0b00010, "bpf_prog_6deef7357e7b4530_sd_devices", "bpf"},
		{"the last symbol does not extend forever", 0xffffffffc0b00000 + 2<<20, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fr, module, ok := k.Lookup(tt.addr)
			if ok != (tt.want != "") || fr.Function != tt.want || module != tt.module {
				t.Errorf("Lookup(%#x) = %q, %q, %v; want %q, %q", tt.addr, fr.Function, module, ok, tt.want, tt.module)
			}
		})
	}
}

func TestReadKallsymsInput(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		addr    uint64
		want    string
		wantErr error
	}{
		{"hidden addresses", "0000000000000000 T _text\n0000000000000000 t foo\n", 0, "", ErrKernelAddressesHidden},
		{"no newline at the end", "ffffffff81000000 T foo\nffffffff81000010 T bar", 0xffffffff81000012, "bar", nil},
		{"CRLF", "ffffffff81000000 T foo\r\nffffffff81000010 T bar\r\n", 0xffffffff81000001, "foo", nil},
		{"malformed lines skipped", "zz T bad\nffffffff81000000 T\nffffffff81000000\n\nffffffff81000000 T foo\nffffffff81000010 T bar\tnot-a-module\n", 0xffffffff81000010, "foo", nil},
		{"address too long", "1ffffffff81000000 T foo\n", 0xffffffff81000000, "", nil},
		{"uppercase hex", "FFFFFFFF81000000 T foo\n", 0xffffffff81000000, "foo", nil},
		{"empty", "", 0, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := ReadKallsyms(strings.NewReader(tt.in))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("ReadKallsyms error = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			fr, _, ok := k.Lookup(tt.addr)
			if ok != (tt.want != "") || fr.Function != tt.want {
				t.Errorf("Lookup(%#x) = %q, %v; want %q", tt.addr, fr.Function, ok, tt.want)
			}
		})
	}
}

// TestReadKallsymsLive reads this machine's /proc/kallsyms and checks that
// the kernel's own first function is found.
func TestReadKallsymsLive(t *testing.T) {
	data, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		t.Skipf("no /proc/kallsyms: %v", err)
	}
	k, err := ReadKallsyms(bytes.NewReader(data))
	if errors.Is(err, ErrKernelAddressesHidden) {
		t.Skip("kernel addresses hidden: run as root with kernel.kptr_restrict < 2")
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(k.addrs) == 0 {
		t.Fatal("no text symbols")
	}
	for i := 0; i < len(k.addrs); i += len(k.addrs)/100 + 1 {
		if _, _, ok := k.Lookup(k.addrs[i]); !ok && k.syms[i].size > 0 {
			t.Errorf("Lookup(%#x) not found at a symbol's address", k.addrs[i])
		}
	}
}

func FuzzKallsyms(f *testing.F) {
	if data, err := os.ReadFile(filepath.Join("testdata", "kallsyms")); err == nil {
		f.Add(data)
	}
	f.Add([]byte("0000000000000000 T _text\n"))
	f.Add([]byte("ffffffff81000000 t a\tb\nffffffff81000000 T c\t[m]\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := ReadKallsyms(bytes.NewReader(data))
		if err != nil {
			return
		}
		for i, addr := range k.addrs {
			if i > 0 && k.addrs[i-1] >= addr {
				t.Fatalf("addresses not sorted: %#x before %#x", k.addrs[i-1], addr)
			}
			_, _, ok := k.Lookup(addr)
			if ok != (k.syms[i].size > 0) {
				t.Fatalf("Lookup(%#x) ok = %v with size %d", addr, ok, k.syms[i].size)
			}
			k.Lookup(addr - 1)
		}
	})
}

// BenchmarkReadKallsyms parses this machine's /proc/kallsyms from memory;
// BenchmarkReadKallsymsLive includes the kernel's cost of producing it.
func BenchmarkReadKallsyms(b *testing.B) {
	data, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		b.Skip(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	var k *KernelTable
	loopCPU(b, func() {
		if k, err = ReadKallsyms(bytes.NewReader(data)); err != nil {
			b.Skip(err)
		}
	})
	b.ReportMetric(float64(bytes.Count(data, []byte{'\n'})), "lines")
	b.ReportMetric(float64(len(k.addrs)), "symbols")
	b.ReportMetric(float64(8*cap(k.addrs)+int(unsafe.Sizeof(kernelSym{}))*cap(k.syms)+len(k.blob)), "table-B")
}

func BenchmarkReadKallsymsLive(b *testing.B) {
	b.ReportAllocs()
	loopCPU(b, func() {
		f, err := os.Open("/proc/kallsyms")
		if err != nil {
			b.Skip(err)
		}
		defer f.Close()
		if _, err := ReadKallsyms(f); err != nil {
			b.Skip(err)
		}
	})
}

func BenchmarkKernelLookup(b *testing.B) {
	data, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		b.Skip(err)
	}
	k, err := ReadKallsyms(bytes.NewReader(data))
	if err != nil {
		b.Skip(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k.Lookup(k.addrs[i%len(k.addrs)] + 1)
		i += 7919
	}
}
