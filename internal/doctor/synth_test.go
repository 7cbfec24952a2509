package doctor

import (
	"strconv"
	"time"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/symbol"
)

// sampleSpec is a synthetic sample: frames leaf first, kernel ones marked.
type sampleSpec struct {
	frames []Frame
	count  int64
	tid    int
}

// buildProfile makes a profile of pid's samples at freq Hz over d, for
// detector tests that need no kernel.
func buildProfile(d time.Duration, freq int, pid int, specs []*sampleSpec) *profile.Profile {
	p := &profile.Profile{Duration: d, Period: time.Second / time.Duration(freq)}
	kernel := &profile.Mapping{File: "[kernel.kallsyms]", Kernel: true}
	user := &profile.Mapping{File: "/bin/app"}
	for _, s := range specs {
		tid := s.tid
		if tid == 0 {
			tid = pid
		}
		ps := &profile.Sample{Count: s.count, Labels: map[string]string{
			profile.LabelPID: strconv.Itoa(pid), profile.LabelTID: strconv.Itoa(tid), profile.LabelComm: "app",
		}}
		for _, f := range s.frames {
			m := user
			if f.Kernel {
				m = kernel
			}
			ps.Stack = append(ps.Stack, &profile.Location{Mapping: m,
				Frames: []symbol.Frame{{Function: f.Function, File: f.File, Line: f.Line}}})
		}
		p.Samples = append(p.Samples, ps)
	}
	return p
}
