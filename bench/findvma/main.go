// Command findvma measures what finding a VMA costs in a cpu-clock
// perf_event BPF program, the sampler's context: bpf_find_vma on the
// sampled instruction, and walking every VMA with the task_vma iterator.
// Both take the process's mmap_lock with a trylock and, with interrupts
// off, release it from an irq_work. It samples one process at 99 Hz on
// every CPU for a few seconds and prints each one's mean time and
// failures; and the same walk in task context: in a BPF task work the
// sampler schedules (bpf_task_work_schedule_resume, Linux 6.18; how the
// sampler lists a new process's mappings), with the scheduling's cost and
// how soon the work runs, and as the process returns from system calls
// (its first thousand).
//
//	sudo go run ./bench/findvma -pid PID [-seconds 5]
//
// It compiles bpf/findvma.bpf.c with clang-19 first, against the running
// kernel's BTF (bpftool).
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

func main() {
	pid := flag.Int("pid", 0, "the process to sample")
	seconds := flag.Int("seconds", 5, "how long to sample")
	flag.Parse()
	if err := run(*pid, time.Duration(*seconds)*time.Second); err != nil {
		fmt.Fprintln(os.Stderr, "findvma:", err)
		os.Exit(1)
	}
}

func run(pid int, d time.Duration) error {
	if pid <= 0 {
		return fmt.Errorf("-pid: a process to sample")
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
		return fmt.Errorf("-pid %d: no such process", pid)
	}
	dir, err := os.MkdirTemp("", "findvma")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	obj, err := build(dir)
	if err != nil {
		return err
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return err
	}
	spec, err := ebpf.LoadCollectionSpec(obj)
	if err != nil {
		return err
	}
	if err := spec.Variables["target"].Set(uint32(pid)); err != nil {
		return err
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	defer coll.Close()
	for cpu := range runtime.NumCPU() {
		attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK,
			Size: uint32(unix.PERF_ATTR_SIZE_VER7), Sample: 99, Bits: unix.PerfBitFreq}
		fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			return fmt.Errorf("perf event on CPU %d: %w", cpu, err)
		}
		defer unix.Close(fd)
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, coll.Programs["sample"].FD()); err != nil {
			return fmt.Errorf("attach on CPU %d: %w", cpu, err)
		}
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
			return err
		}
	}
	exits, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sys_exit", Program: coll.Programs["syscall_exit"]})
	if err != nil {
		return fmt.Errorf("attach to sys_exit: %w", err)
	}
	defer exits.Close()
	time.Sleep(d)
	var worksRun int64
	for _, t := range []struct{ name, what string }{
		{"finds", "bpf_find_vma, in the sampler"},
		{"walks_in_sampler", "task_vma walk, in the sampler"},
		{"walks_in_task", "task_vma walk, at system call exits"},
		{"schedules", "bpf_task_work_schedule_resume, in the sampler"},
		{"walks_in_work", "task_vma walk, in the task work scheduled"},
	} {
		var v struct{ Calls, Failed, Ns, VMAs, Error int64 }
		if err := coll.Variables[t.name].Get(&v); err != nil {
			return err
		}
		fmt.Printf("%s: %d calls, %d failed (last error %d), %.0f ns a call", t.what, v.Calls, v.Failed, v.Error, per(v.Ns, v.Calls))
		if t.name == "walks_in_work" {
			worksRun = v.Calls
		}
		if t.name != "finds" && t.name != "schedules" {
			fmt.Printf(", %.0f VMAs a walk", per(v.VMAs, v.Calls-v.Failed))
		}
		fmt.Println()
	}
	var delay int64
	if err := coll.Variables["work_delay_ns"].Get(&delay); err != nil {
		return err
	}
	fmt.Printf("task work: %.0f ns from scheduling to running, on average\n", per(delay, worksRun))
	return nil
}

func per(total, n int64) float64 {
	if n == 0 {
		return 0
	}
	return float64(total) / float64(n)
}

// build compiles the BPF program beside this file into dir and returns
// the object's path.
func build(dir string) (string, error) {
	_, self, _, _ := runtime.Caller(0)
	btf, err := exec.Command("bpftool", "btf", "dump", "file", "/sys/kernel/btf/vmlinux", "format", "c").Output()
	if err != nil {
		return "", fmt.Errorf("bpftool btf dump: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "vmlinux.h"), btf, 0o644); err != nil {
		return "", err
	}
	obj := filepath.Join(dir, "findvma.o")
	cc := exec.Command("clang-19", "-O2", "-g", "-target", "bpfel", "-mcpu=v3", "-D__TARGET_ARCH_x86",
		"-I", dir, "-c", filepath.Join(filepath.Dir(self), "bpf", "findvma.bpf.c"), "-o", obj)
	if out, err := cc.CombinedOutput(); err != nil {
		return "", fmt.Errorf("clang-19: %v: %s", err, out)
	}
	return obj, nil
}
