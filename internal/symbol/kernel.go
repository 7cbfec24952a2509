package symbol

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// ErrKernelAddressesHidden reports that /proc/kallsyms shows every address
// as zero: the kernel hides them from readers without CAP_SYSLOG, and from
// everyone when kernel.kptr_restrict is 2.
var ErrKernelAddressesHidden = errors.New("kernel symbol addresses are hidden: run as root and set sysctl kernel.kptr_restrict=0 or 1")

// maxKernelSymbolSize bounds how far past its start a kernel symbol extends
// when the next symbol is far away or absent (the last function of a module,
// whose data kallsyms does not list); no kernel function is this long.
const maxKernelSymbolSize = 1 << 20

// KernelTable names kernel text addresses from /proc/kallsyms: the kernel
// image's and its modules' functions. It is safe for concurrent use.
type KernelTable struct {
	addrs   []uint64 // sorted, one symbol per address
	syms    []kernelSym
	blob    string // names, concatenated
	modules []string
}

type kernelSym struct {
	size    uint32 // up to the next symbol of any type, at most maxKernelSymbolSize
	nameOff uint32
	nameLen uint16 // KSYM_NAME_LEN is 512
	module  uint16 // index into modules; 0 is the kernel image
}

// ReadKallsyms parses /proc/kallsyms text ("ffffffff81000000 T _text", with
// "\t[module]" after module symbols). It keeps text symbols (types t, T, w
// and W); the others only bound the text symbols before them. Malformed
// lines are skipped. It returns ErrKernelAddressesHidden when every address
// is zero.
func ReadKallsyms(r io.Reader) (*KernelTable, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	k := &KernelTable{modules: []string{""}}
	moduleIndex := map[string]uint16{"": 0}
	var (
		blob    strings.Builder
		parsed  []kallsymsLine
		nonZero bool
		lineErr error
	)
	for lineErr == nil {
		var line []byte
		line, lineErr = br.ReadSlice('\n')
		if lineErr == bufio.ErrBufferFull {
			// No valid line is 64 KiB long: drop it and its continuation.
			for lineErr == bufio.ErrBufferFull {
				_, lineErr = br.ReadSlice('\n')
			}
			continue
		}
		if lineErr != nil && lineErr != io.EOF {
			return nil, fmt.Errorf("read kallsyms: %w", lineErr)
		}
		addr, typ, name, module, ok := parseKallsymsLine(line)
		if !ok {
			continue
		}
		nonZero = nonZero || addr != 0
		l := kallsymsLine{addr: addr, seq: uint32(len(parsed)), kind: kallsymsKind(typ, name)}
		if l.kind == ksymText {
			if len(name) > math.MaxUint16 || uint64(blob.Len())+uint64(len(name)) > math.MaxUint32 {
				continue
			}
			mi, ok := moduleIndex[string(module)]
			if !ok {
				if len(k.modules) > math.MaxUint16 {
					return nil, errors.New("read kallsyms: more than 65535 modules")
				}
				mi = uint16(len(k.modules))
				k.modules = append(k.modules, string(module))
				moduleIndex[string(module)] = mi
			}
			l.nameOff, l.nameLen, l.module = uint32(blob.Len()), uint16(len(name)), mi
			l.underscores = uint16(leadingUnderscores(name))
			if blob.Cap()-blob.Len() < len(name) {
				blob.Grow(len(name)) // doubles, where Write would grow by 1.25
			}
			blob.Write(name)
		}
		if len(parsed) == cap(parsed) {
			// Doubling: append's 1.25 growth for large slices allocates
			// five times the final 3 MB on a 200k-line file.
			parsed = slices.Grow(parsed, max(len(parsed), 1024))
		}
		parsed = append(parsed, l)
	}
	if len(parsed) > 0 && !nonZero {
		return nil, ErrKernelAddressesHidden
	}
	k.blob = blob.String()
	if blob.Cap() > len(k.blob)*9/8 {
		k.blob = strings.Clone(k.blob) // the string pins the builder's spare capacity
	}

	// The kernel image's symbols come sorted, modules' and BPF programs'
	// after them in load order.
	slices.SortFunc(parsed, func(a, b kallsymsLine) int {
		if a.addr != b.addr {
			return cmp.Compare(a.addr, b.addr)
		}
		return cmp.Or(
			cmp.Compare(a.kind, b.kind),
			cmp.Compare(a.underscores, b.underscores),
			cmp.Compare(a.seq, b.seq),
		)
	})
	n := 0
	for i, l := range parsed {
		if l.kind == ksymText && (i == 0 || parsed[i-1].addr != l.addr) {
			n++
		}
	}
	k.addrs = make([]uint64, 0, n)
	k.syms = make([]kernelSym, 0, n)
	next := 0 // first line with an address above the current one
	for i, l := range parsed {
		if l.kind != ksymText || (i > 0 && parsed[i-1].addr == l.addr) {
			continue
		}
		for next <= i || (next < len(parsed) && parsed[next].addr == l.addr) {
			next++
		}
		size := uint64(maxKernelSymbolSize)
		if next < len(parsed) {
			size = min(size, parsed[next].addr-l.addr)
		}
		k.addrs = append(k.addrs, l.addr)
		k.syms = append(k.syms, kernelSym{
			size:    uint32(size),
			nameOff: l.nameOff,
			nameLen: l.nameLen,
			module:  l.module,
		})
	}
	return k, nil
}

// Lookup returns the kernel function containing addr and the module it
// belongs to ("" for the kernel image), or ok false when no text symbol
// covers addr.
func (k *KernelTable) Lookup(addr uint64) (f Frame, module string, ok bool) {
	i, found := slices.BinarySearch(k.addrs, addr)
	if !found {
		i--
	}
	if i < 0 || addr-k.addrs[i] >= uint64(k.syms[i].size) {
		return Frame{}, "", false
	}
	s := k.syms[i]
	return Frame{Function: k.blob[s.nameOff : s.nameOff+uint32(s.nameLen)]}, k.modules[s.module], true
}

// kallsymsLine is one parsed line, before sorting.
type kallsymsLine struct {
	addr        uint64
	seq         uint32 // line order, to keep sorting deterministic
	nameOff     uint32
	nameLen     uint16
	module      uint16
	underscores uint16 // fewer wins among aliases: _text loses to a function
	kind        uint8
}

const (
	ksymText     = iota // named in Lookup
	ksymBoundary        // data, or the end of a text section: ends the symbol before it
)

func kallsymsKind(typ byte, name []byte) uint8 {
	switch typ {
	case 't', 'T', 'w', 'W':
		// These mark where the kernel image's text ends, not a function:
		// addresses past them are not code.
		if string(name) == "_etext" || string(name) == "_einittext" {
			return ksymBoundary
		}
		return ksymText
	}
	return ksymBoundary
}

// parseKallsymsLine splits "ADDR TYPE NAME[\t[MODULE]]\n" without
// allocating.
func parseKallsymsLine(line []byte) (addr uint64, typ byte, name, module []byte, ok bool) {
	line = trimLineEnd(line)
	i := 0
	for ; i < len(line) && line[i] != ' '; i++ {
		d, valid := hexValue(line[i])
		if !valid || i >= 16 {
			return 0, 0, nil, nil, false
		}
		addr = addr<<4 | uint64(d)
	}
	// i digits, then " T " at least, then a name.
	if i == 0 || len(line) < i+4 || line[i+2] != ' ' {
		return 0, 0, nil, nil, false
	}
	typ = line[i+1]
	name = line[i+3:]
	if j := bytes.IndexByte(name, '\t'); j >= 0 {
		module = name[j+1:]
		name = name[:j]
		if len(module) < 3 || module[0] != '[' || module[len(module)-1] != ']' {
			return 0, 0, nil, nil, false
		}
		module = module[1 : len(module)-1]
	}
	if len(name) == 0 {
		return 0, 0, nil, nil, false
	}
	return addr, typ, name, module, true
}

func hexValue(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// trimLineEnd removes a trailing "\n" or "\r\n".
func trimLineEnd(line []byte) []byte {
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
	}
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line
}
