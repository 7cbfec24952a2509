package privilege

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestSet(t *testing.T) {
	s := Of(BPF, Perfmon, DACReadSearch)
	if !s.Has(BPF) || !s.Has(DACReadSearch) || s.Has(SysAdmin) || s.Has(63) || s.Has(200) {
		t.Errorf("Has: %b", s)
	}
	if got := s.String(); got != "cap_dac_read_search,cap_perfmon,cap_bpf" {
		t.Errorf("String() = %q", got)
	}
	if got := Of(0, 41).String(); got != "cap_0,cap_41" {
		t.Errorf("String() = %q", got)
	}
	if got := Set(0).String(); got != "none" {
		t.Errorf("String() = %q", got)
	}
	if Of(BPF) != 1<<39 {
		t.Errorf("Of(BPF) = %#x, want bit 39 as in CapEff", Of(BPF))
	}
}

func TestAdjust(t *testing.T) {
	for _, tc := range []struct {
		name string
		keep Set
		k    Kernel
		want Set
	}{
		{"6.5+", Agent, Kernel{Last: 40}, Agent},
		{"6.1, unprivileged BPF off", Record, Kernel{Last: 40, BPFCallsChecked: true}, Record | Of(BPF)},
		{"5.8: no CAP_CHECKPOINT_RESTORE", Agent, Kernel{Last: 39, BPFCallsChecked: true},
			Of(BPF, Perfmon, SysPtrace, DACReadSearch, SysAdmin, Syslog, SetUID, SetGID)},
		{"5.4: no CAP_BPF, CAP_PERFMON", Trace, Kernel{Last: 37, BPFCallsChecked: true}, Of(SysAdmin)},
		{"nothing to replace", Of(SysPtrace), Kernel{Last: 37}, Of(SysPtrace)},
		{"newer kernel, same set", Doctor, Kernel{Last: 45}, Doctor},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.k.Adjust(tc.keep); got != tc.want {
				t.Errorf("%+v.Adjust(%s) = %s, want %s", tc.k, tc.keep, got, tc.want)
			}
		})
	}
}

func TestMissingToLoad(t *testing.T) {
	for _, tc := range []struct {
		have Set
		want string
	}{
		{Of(BPF, Perfmon), ""},
		{Of(SysAdmin), ""}, // before 5.8, it stood for both
		{Of(BPF), "CAP_PERFMON"},
		{Of(Perfmon, SysPtrace), "CAP_BPF"},
		{0, "CAP_BPF,CAP_PERFMON"},
	} {
		if got := strings.Join(MissingToLoad(tc.have), ","); got != tc.want {
			t.Errorf("MissingToLoad(%v) = %q, want %q", tc.have, got, tc.want)
		}
	}
}

func TestEffective(t *testing.T) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip(err)
	}
	st, err := ParseStatus(string(b))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Effective(); err != nil || got != st.Effective {
		t.Errorf("Effective() = %v, %v; /proc/self/status says %v", got, err, st.Effective)
	}
}

func TestOlderThan(t *testing.T) {
	for release, want := range map[string]bool{
		"6.18.0": false, "6.5.0-rc1": false, "6.4.16": true, "5.15.0-91-generic": true, "7.0": false, "6": true, "": true,
	} {
		if got := olderThan(release, 6, 5); got != want {
			t.Errorf("olderThan(%q, 6.5) = %v", release, got)
		}
	}
}

func TestParseStatus(t *testing.T) {
	const status = "Name:\tflint\nUid:\t0\t0\t0\t0\nCapInh:\t0000000000000000\nCapPrm:\t000001c000080004\n" +
		"CapEff:\t000001c000080004\nCapBnd:\t000001c000080004\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t0\n"
	st, err := ParseStatus(status)
	want := Of(BPF, Perfmon, CheckpointRestore, SysPtrace, DACReadSearch)
	if err != nil || st.Effective != want || st.Permitted != want || st.Bounding != want || st.Ambient != 0 || !st.NoNewPrivs {
		t.Errorf("got %+v, %v; want %s and no_new_privs", st, err, want)
	}
	for _, bad := range []string{
		"",
		strings.Replace(status, "CapBnd", "CapXXX", 1),
		strings.Replace(status, "NoNewPrivs:\t1\n", "", 1),
		strings.Replace(status, "000001c000080004\nCapBnd", "zz\nCapBnd", 1),
	} {
		if _, err := ParseStatus(bad); err == nil {
			t.Errorf("parsed %q", bad)
		}
	}
}

func FuzzParseStatus(f *testing.F) {
	f.Add("CapEff:\t000001c000080004\nCapPrm:\t0\nCapBnd:\t1\nNoNewPrivs:\t0\n")
	f.Fuzz(func(t *testing.T, s string) { ParseStatus(s) })
}

// childEnv makes the test binary a child that drops to the set in it and
// prints every thread's status.
const childEnv = "FLINT_PRIVILEGE_TEST_KEEP"

func TestMain(m *testing.M) {
	if v := os.Getenv(childEnv); v != "" {
		os.Exit(child(v))
	}
	os.Exit(m.Run())
}

func child(keep string) int {
	n, err := strconv.ParseUint(keep, 16, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	kept, err := Drop(Set(n))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("kept %x\n", uint64(kept))
	tasks, _ := filepath.Glob("/proc/self/task/*/status")
	for _, task := range tasks {
		b, err := os.ReadFile(task)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Printf("task %s\n%s", task, b)
	}
	// What it runs gains nothing: a root shell still has only these.
	out, err := exec.Command("/bin/sh", "-c", "grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs)' /proc/self/status").CombinedOutput()
	if err != nil {
		fmt.Fprintln(os.Stderr, err, string(out))
		return 1
	}
	fmt.Printf("task exec\n%s", out)
	return 0
}

// TestDrop drops capabilities in a child process and checks every thread
// of it, and a program it runs, in /proc.
func TestDrop(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: an unprivileged process has no capabilities to drop")
	}
	k, err := Running()
	if err != nil {
		t.Fatal(err)
	}
	for name, keep := range map[string]Set{"agent": Agent, "record": Record, "doctor": Doctor, "trace": Trace, "none": 0} {
		t.Run(name, func(t *testing.T) {
			want := k.Adjust(keep)
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%x", childEnv, uint64(keep)))
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			text := string(out)
			if !strings.HasPrefix(text, fmt.Sprintf("kept %x\n", uint64(want))) {
				t.Errorf("child says %q, want kept %x (%s)", strings.SplitN(text, "\n", 2)[0], uint64(want), want)
			}
			tasks := strings.Split(text, "task ")[1:]
			if len(tasks) < 3 {
				t.Fatalf("want the statuses of the child's threads and of a program it ran, got %d:\n%s", len(tasks), text)
			}
			for _, task := range tasks {
				name, status, _ := strings.Cut(task, "\n")
				st, err := ParseStatus(status)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if st.Effective != want || st.Permitted != want || st.Bounding != want || st.Inheritable != 0 ||
					st.Ambient != 0 || !st.NoNewPrivs {
					t.Errorf("%s: effective %s, permitted %s, bounding %s, inheritable %s, ambient %s, no_new_privs %v; want %s and no_new_privs",
						name, st.Effective, st.Permitted, st.Bounding, st.Inheritable, st.Ambient, st.NoNewPrivs, want)
				}
			}
		})
	}
}
