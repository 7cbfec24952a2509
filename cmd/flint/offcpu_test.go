package main

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	pprofile "github.com/google/pprof/profile"
)

// TestRecordOffCPU records the blocked-time fixtures, C and Go, whose
// waiting thread spends 60% of its time asleep in sleepy and 40% blocked
// in a second function: the shares within 5 points, that thread's blocked
// time within 10% of the recording's length, the kernel's reason at the
// leaf, and with --wall every thread's time within 10% of its length.
func TestRecordOffCPU(t *testing.T) {
	requireRoot(t)
	flint, _ := build(t)
	dir := t.TempDir()
	c, goFixture := filepath.Join(dir, "offcpu"), filepath.Join(dir, "offcpu-go")
	if out, err := exec.Command("gcc", "-O1", "-fno-omit-frame-pointer", "-pthread", "-o", c, "../../testdata/fixtures/offcpu.c").CombinedOutput(); err != nil {
		t.Fatalf("build fixture: %v\n%s", err, out)
	}
	if out, err := exec.Command("go", "build", "-o", goFixture, "../../testdata/fixtures/offcpu-go").CombinedOutput(); err != nil {
		t.Fatalf("build fixture: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		name, path   string
		waiter       string // a function only the waiting thread runs
		sleep, block string // its two functions: 60% and 40%
		reason       string // the kernel's frame where block waits
		threads      int
	}{
		{"c", c, "main", "sleepy", "contended", "futex", 2},
		{"go", goFixture, "main.main", "main.sleepy", "main.waitPipe", "pipe_read", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pid := startFixture(t, tc.path)
			p := recordTime(t, flint, pid, "--off-cpu")
			if p.SampleType[0].Type != "off_cpu" || p.SampleType[0].Unit != "nanoseconds" {
				t.Errorf("sample type %v, want off_cpu/nanoseconds", p.SampleType[0])
			}
			var waiter, sleep, block, reason int64
			for _, s := range p.Sample {
				if !hasFunc(s, tc.waiter) {
					continue
				}
				waiter += s.Value[0]
				switch {
				case hasFunc(s, tc.sleep):
					sleep += s.Value[0]
					if leaf := s.Location[0].Line[0].Function.Name; leaf != "do_nanosleep" {
						t.Errorf("%s waits in %s, want do_nanosleep at the leaf", tc.sleep, leaf)
					}
				case hasFunc(s, tc.block):
					block += s.Value[0]
					if strings.Contains(s.Location[0].Line[0].Function.Name, tc.reason) {
						reason += s.Value[0]
					}
				}
			}
			length := time.Duration(p.DurationNanos)
			t.Logf("waiting thread: %s blocked of %s; %s %s, %s %s", time.Duration(waiter), length,
				tc.sleep, time.Duration(sleep), tc.block, time.Duration(block))
			if d := math.Abs(float64(waiter)/float64(length) - 1); d > 0.1 {
				t.Errorf("the waiting thread blocked %s of %s, want within 10%%", time.Duration(waiter), length)
			}
			for _, share := range []struct {
				name string
				ns   int64
				want float64
			}{{tc.sleep, sleep, 60}, {tc.block, block, 40}} {
				if got := 100 * float64(share.ns) / float64(waiter); math.Abs(got-share.want) > 5 {
					t.Errorf("%s: %.1f%% of the waiting thread's blocked time, want %.0f%% within 5 points", share.name, got, share.want)
				}
			}
			if reason < block*9/10 {
				t.Errorf("%s of %s in %s waits in %s at the leaf, want 90%%", time.Duration(reason), time.Duration(block), tc.block, tc.reason)
			}
			if tc.threads == 0 {
				return // the Go runtime's threads come and go
			}
			p = recordTime(t, flint, pid, "--wall")
			var total int64
			for _, s := range p.Sample {
				total += s.Value[0]
			}
			want := int64(tc.threads) * p.DurationNanos
			if d := math.Abs(float64(total)/float64(want) - 1); d > 0.1 {
				t.Errorf("--wall: %s on and off the CPU for %d threads in %s, want within 10%% of %s",
					time.Duration(total), tc.threads, time.Duration(p.DurationNanos), time.Duration(want))
			}
		})
	}
}

// recordTime records process pid for 3 s with flag (--off-cpu, --wall)
// and returns the pprof profile.
func recordTime(t *testing.T, flint string, pid int, flag string) *pprofile.Profile {
	t.Helper()
	out := filepath.Join(t.TempDir(), "time.pb.gz")
	log, err := exec.Command(flint, "record", "-p", strconv.Itoa(pid), flag, "-d", "3s", "-o", out).CombinedOutput()
	if err != nil {
		t.Fatalf("record %s: %v\n%s", flag, err, log)
	}
	t.Logf("record %s said: %s", flag, log)
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	p, err := pprofile.ParseData(data)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// hasFunc reports whether a sample's stack holds function fn.
func hasFunc(s *pprofile.Sample, fn string) bool {
	for _, l := range s.Location {
		for _, line := range l.Line {
			if line.Function.Name == fn {
				return true
			}
		}
	}
	return false
}
