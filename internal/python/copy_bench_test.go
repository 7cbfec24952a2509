package python

import (
	"encoding/binary"
	"fmt"
	"testing"
)

// BenchmarkRememberCopy names a young process's copied code objects, as
// the agent does for each python3 run: 20 code objects whole, at
// addresses of the process's own. Shared: processes of one interpreter
// file, which read a module's code objects once for all (the agent);
// alone: an interpreter of no file, read for each process.
//
//	go test -run '^$' -bench RememberCopy -benchmem ./internal/python
func BenchmarkRememberCopy(b *testing.B) {
	o := versions[12]
	table := make([]byte, 600) // a function's of some 60 lines
	for i := 0; i < len(table); i += 3 {
		table[i] = 0x80 | locOneLine1<<3
	}
	var copies []*Copy
	for i := range 20 {
		name := fmt.Sprintf("Handler.method_%d", i)
		img := codeImage(name, "/usr/lib/python3.12/http/server.py", table)
		// Each at its own address: its header points there.
		at := uint64(i) << 16
		for _, off := range []uint16{o.CodeQualname, o.CodeFilename, o.CodeLineTable} {
			binary.LittleEndian.PutUint64(img[0x100+int(off):], binary.LittleEndian.Uint64(img[0x100+int(off):])+at)
		}
		copies = append(copies, &Copy{Code: at + 0x100, Objects: []Object{
			{Addr: at + 0x100, Data: img[0x100 : 0x100+codeHeader]},
			{Addr: at + 0x400, Data: img[0x400 : 0x400+int(o.ASCIISize)+len(name)], Whole: true},
			{Addr: at + 0x600, Data: img[0x600 : 0x600+int(o.ASCIISize)+len("/usr/lib/python3.12/http/server.py")], Whole: true},
			{Addr: at + 0x800, Data: img[0x800 : 0x800+bytesData+len(table)], Whole: true},
		}})
	}
	for _, shared := range []bool{true, false} {
		in := &Interpreter{Minor: 12, Offsets: o}
		if shared {
			in = (&interpFile{minor: 12, offsets: o}).interpreter(0)
		}
		b.Run(map[bool]string{true: "shared", false: "alone"}[shared], func(b *testing.B) {
			for b.Loop() {
				p := &Process{interp: in, codes: map[uint64]*code{}}
				for _, c := range copies {
					p.RememberCopy(c)
				}
				if f := p.Frame(word(copies[19].Code, 0)); f.Function != "http.server.Handler.method_19" {
					b.Fatalf("Frame = %+v", f)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e3, "us/process")
		})
	}
}
