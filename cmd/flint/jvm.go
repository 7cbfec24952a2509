package main

import (
	"errors"
	"strconv"

	"github.com/flint-dev/flint/internal/jvm"
)

// jvmHelper is the command flint runs, as a JVM's user, to ask that JVM for
// its perf map (jvm.Dumper); not for people, so not in the usage.
const jvmHelper = "jvm-perfmap"

// jvmPerfMap is `flint jvm-perfmap PID NSPID`.
func jvmPerfMap(args []string) error {
	if len(args) != 2 {
		return usageError{errors.New(jvmHelper + ": want PID NSPID")}
	}
	pid, err1 := strconv.Atoi(args[0])
	nspid, err2 := strconv.Atoi(args[1])
	if err1 != nil || err2 != nil || pid <= 0 || nspid <= 0 {
		return usageError{errors.New(jvmHelper + ": want PID NSPID, two positive numbers")}
	}
	return jvm.PerfMap(pid, nspid)
}

// jvmDumper returns the Dumper that has JVMs write their JIT maps, running
// this flint as the helper. Through /proc/self/exe: the JVM's user may not
// reach flint's directory (and flint's file may be replaced since).
func jvmDumper(logf func(string, ...any)) *jvm.Dumper {
	return jvm.NewDumper(jvm.Options{Helper: []string{"/proc/self/exe", jvmHelper}, Logf: logf})
}
