package agent

import (
	"encoding/json"
	"maps"
	"strconv"
	"time"

	"github.com/flint-dev/flint/internal/collect"
	"github.com/flint-dev/flint/internal/doctor"
	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/sampler"
	"github.com/flint-dev/flint/internal/store"
)

// The agent runs flint doctor's detectors on one window in every
// Options.DoctorEvery: the syscall tracer runs for that window only, so its
// cost on traced syscalls (docs/BENCHMARKS.md) is paid for a fraction of
// the time, and the window's own samples are the CPU profile.

// beginExamination starts an examination of the window that starts now,
// when one is due. last is the window just written: its busy processes get
// exact CPU figures.
func (a *Agent) beginExamination(last *profile.Profile, now time.Time) {
	if a.o.DoctorEvery <= 0 || now.Sub(a.lastExam) < a.o.DoctorEvery {
		return
	}
	a.lastExam = now
	if a.tracer == nil {
		t, err := doctor.StartTracer(doctor.TracerOptions{Symbolizer: a.sym})
		if err != nil {
			a.metrics.examinationsFailed.Add(1)
			a.o.Logf("doctor: %v (next try in %s)", err, a.o.DoctorEvery)
			return
		}
		t.Stop()
		a.tracer = t
	}
	e, err := doctor.Begin(doctor.ExamOptions{Targets: doctor.ActivePIDs(last), Tracer: a.tracer})
	if err != nil {
		a.metrics.examinationsFailed.Add(1)
		a.o.Logf("doctor: %v (next try in %s)", err, a.o.DoctorEvery)
		return
	}
	a.exam = e
}

// endExamination analyses the examined window, whose samples are window and
// whose stored profile is stored, and returns its findings to store with it.
func (a *Agent) endExamination(window []sampler.Sample, stored *profile.Profile) []store.Finding {
	e := a.exam
	a.exam = nil
	defer e.Close()
	// The detectors look at threads: a profile with thread IDs, which the
	// stored one leaves out.
	prof := a.coll.Profile(window, collect.Options{
		Start: stored.Start, Duration: stored.Duration, Period: stored.Period, Round: a.round, ThreadIDs: true,
	})
	findings, _, err := e.End(prof, nil)
	if err != nil {
		a.metrics.examinationsFailed.Add(1)
		a.o.Logf("doctor: %v", err)
		return nil
	}
	a.metrics.examinations.Add(1)
	if len(findings) == 0 {
		return nil
	}
	recs := make([]store.Finding, 0, len(findings))
	for _, f := range findings {
		body, err := json.Marshal(f)
		if err != nil {
			continue
		}
		recs = append(recs, store.Finding{
			Start: stored.Start, Duration: stored.Duration, Detector: f.ID, Severity: string(f.Severity),
			Labels: processLabels(stored, f, a.o.Node), Body: body,
		})
	}
	return recs
}

// countFindings counts findings stored, or an examination whose findings
// could not be, with err the write's error.
func (a *Agent) countFindings(findings []store.Finding, err error) {
	if err != nil {
		a.metrics.examinationsFailed.Add(1)
		a.o.Logf("doctor: %v", err)
		return
	}
	a.metrics.findings.Add(int64(len(findings)))
}

// processLabels are the labels of the process a finding is about, as its
// samples in p carry them, less the thread's; the finding's own pid and
// comm when p has no sample of it.
func processLabels(p *profile.Profile, f doctor.Finding, node string) map[string]string {
	pid := strconv.Itoa(f.PID)
	for _, s := range p.Samples {
		if s.Labels[profile.LabelPID] == pid {
			l := maps.Clone(s.Labels)
			delete(l, profile.LabelThread)
			delete(l, profile.LabelTID)
			return l
		}
	}
	l := map[string]string{profile.LabelNode: node}
	if f.PID != 0 {
		l[profile.LabelPID], l[profile.LabelComm] = pid, f.Comm
	}
	return l
}
